"""One pool of GPUs on the real control plane: simulated nodes that advertise 8 `nvidia.com/gpu` (a device plugin)
and publish the same 8 GPUs as DRA devices (a DRA driver beside it). Classic TrainingJobs (bound by the operator),
claiming TrainingJobs (whose claims kube-scheduler allocates) and a claiming pod gang (whose claims the operator
allocates) run side by side: no node hands out more GPUs than it has, the queue counts what the pods hold, and each
GPU-second is billed once."""

from __future__ import annotations

from kubernetes import client

from superpod.api.times import timestamp
from superpod.hardware.kubelet import RUN_FOR
from superpod.hardware.presets import SIM_LABEL
from tests.integration.operator_env import GROUP as SUPERPOD
from tests.integration.operator_env import VERSION as SUPERPOD_VERSION
from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.test_dra_gangs import GROUP, VERSION, claim_template, claiming_job, claiming_pods
from tests.integration.test_pod_gangs import Pods, indexed_job
from tests.integration.wait import wait_for

H100 = "NVIDIA H100 80GB HBM3"
RUN = "40s"


def held_per_node(api: client.ApiClient, namespace: str, sim: str) -> dict[str, tuple[int, int]]:
    """node -> (nvidia.com/gpu its live pods request, devices the claims allocated there hold)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = {n.metadata.name for n in core.list_node(label_selector=f"{SIM_LABEL}={sim}").items}
    classic = dict.fromkeys(nodes, 0)
    for pod in core.list_namespaced_pod(namespace).items:
        if pod.spec.node_name in nodes and pod.status.phase not in ("Succeeded", "Failed"):
            classic[pod.spec.node_name] += sum(int((c.resources.requests or {}).get("nvidia.com/gpu", 0))
                                               for c in pod.spec.containers)
    claimed = dict.fromkeys(nodes, 0)
    for claim in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]:
        for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results", ()):
            if result["pool"] in nodes:
                claimed[result["pool"]] += 1
    return {node: (classic[node], claimed[node]) for node in sorted(nodes)}


def namespace_queue(custom: client.CustomObjectsApi, namespace: str) -> None:
    """A GPUQueue of the namespace's own (64 GPUs guaranteed): its status counts what the pods hold."""
    custom.create_cluster_custom_object(SUPERPOD, SUPERPOD_VERSION, "gpuqueues", {
        "apiVersion": f"{SUPERPOD}/{SUPERPOD_VERSION}", "kind": "GPUQueue", "metadata": {"name": namespace},
        "spec": {"namespaces": [namespace], "resources": [{"flavor": "*", "guaranteed": 64}]}})


def claiming_for(sim: str, template: str) -> dict:
    """TrainingJob `claiming`: one replica claiming from `template`, running for RUN."""
    claiming = claiming_job("claiming", sim, 1, template)
    claiming["spec"]["template"]["metadata"] = {"annotations": {RUN_FOR: RUN}}
    return claiming


def test_classic_jobs_claiming_jobs_and_a_claiming_gang_share_one_pool_of_gpus(cluster, operator, jobs, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, own_leaves=True, dra=True, nodes_per_unit=4)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    namespace_queue(custom, namespace)
    try:
        template = claim_template(custom, namespace, H100, 8)
        jobs.create(training_job("classic", sim, 2, gpus=8, annotations={RUN_FOR: RUN}))
        jobs.create(claiming_for(sim, template))
        gang = claiming_pods("gang", 1, sim, template)
        gang["metadata"]["annotations"][RUN_FOR] = RUN
        pods.batch.create_namespaced_job(namespace, indexed_job("gang", 1, gang))
        jobs.wait_phase("classic", "Running", 120)
        jobs.wait_phase("claiming", "Running", 120)
        wait_for(lambda: len(pods.bound("job-name=gang")) == 1, 120, "the claiming gang bound")
        jobs.create(training_job("late", sim, 1, gpus=8))
        late = claiming_pods("late-gang", 1, sim, template)
        pods.batch.create_namespaced_job(namespace, indexed_job("late-gang", 1, late))
        jobs.wait_message("late", "GPU")
        held = held_per_node(cluster.api, namespace, sim)
        print(f"\none pool, node -> (nvidia.com/gpu requested, devices claimed): {held}")
        assert all(classic + claimed <= 8 for classic, claimed in held.values()), f"a GPU handed out twice: {held}"
        assert sum(classic for classic, _ in held.values()) == 16 and sum(c for _, c in held.values()) == 16
        assert jobs.phase("late") == "Queued" and not pods.bound("job-name=late-gang"), "no GPU left for them"
        queue = custom.get_cluster_custom_object(SUPERPOD, SUPERPOD_VERSION, "gpuqueues", namespace)
        [flavor] = queue["status"]["flavors"]
        assert flavor["allocated"] == 32, f"the queue counts {flavor['allocated']}, its pods hold 32"
        node = next(iter(held))
        warned = client.CoreV1Api(cluster.api).list_event_for_all_namespaces(
            field_selector=f"involvedObject.name={node},reason=GpusPublishedTwice").items
        assert warned, f"no GpusPublishedTwice Warning on {node}"
        for name in ("classic", "claiming"):
            jobs.wait_phase(name, "Succeeded", 120)
        wait_for(lambda: any(r["spec"].get("pod", "").startswith("gang-") for r in records(custom, namespace)), 120,
                 "the gang's pod billed")
        billed = {(r["spec"]["job"], r["spec"].get("pod")): r["spec"] for r in records(custom, namespace)
                  if r["spec"]["job"] in ("classic", "claiming") or r["spec"].get("pod", "").startswith("gang-")}
        print("records:", {key: (spec["gpus"], spec["gpuSeconds"]) for key, spec in sorted(billed.items(), key=str)})
        gpus = sorted((key[0], spec["gpus"]) for key, spec in billed.items())
        assert gpus == [("claiming", 8), ("classic", 16), ("gang", 8)], gpus
        for spec in billed.values():  # every GPU-second once: the record's seconds are its GPUs times its run
            run = timestamp(spec["end"]) - timestamp(spec["start"])
            assert abs(spec["gpuSeconds"] - spec["gpus"] * run) <= spec["gpus"] * 1.0, spec
    finally:
        custom.delete_cluster_custom_object(SUPERPOD, SUPERPOD_VERSION, "gpuqueues", namespace)


def records(custom: client.CustomObjectsApi, namespace: str) -> list[dict]:
    every = custom.list_cluster_custom_object(SUPERPOD, SUPERPOD_VERSION, "gpuusages")["items"]
    return [r for r in every if r["spec"]["namespace"] == namespace]
