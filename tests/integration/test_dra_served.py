"""GPUs published through DRA only, on the real control plane: simulated nodes that advertise no nvidia.com/gpu, whose
DeviceClass gpu.nvidia.com names nvidia.com/gpu its extendedResourceName (Kubernetes' DRA extended resources, GA in
1.37), so kube-scheduler serves a pod's nvidia.com/gpu from the devices through a claim it makes. Classic
TrainingJobs (handed to kube-scheduler pinned to their nodes), a claiming TrainingJob and a claiming pod gang (whose
claims the operator allocates) share the nodes: no device is held by two claims, no node gives out more than it
has, the queue counts the devices the pods hold and each GPU-second is billed once."""

from __future__ import annotations

from collections import Counter

from kubernetes import client

from superpod.api.times import timestamp
from superpod.controller.state.dra import EXTENDED_CLAIM
from superpod.hardware.kubelet import RUN_FOR
from superpod.hardware.presets import SIM_LABEL
from tests.integration.operator_env import GROUP as SUPERPOD
from tests.integration.operator_env import VERSION as SUPERPOD_VERSION
from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.test_dra_gangs import GROUP, VERSION, claim_template, claiming_pods
from tests.integration.test_dra_one_pool import H100, RUN, claiming_for, namespace_queue, records
from tests.integration.test_pod_gangs import Pods, indexed_job
from tests.integration.wait import wait_for


def devices_per_claim(custom: client.CustomObjectsApi, namespace: str) -> dict[str, list[tuple[str, str]]]:
    """claim name -> the (node, device) its allocation holds."""
    out = {}
    for claim in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results", ())
        out[claim["metadata"]["name"]] = [(r["pool"], r["device"]) for r in results]
    return out


def test_classic_claiming_and_gang_pods_share_gpus_published_through_dra_only(cluster, operator, jobs, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 5, own_leaves=True, dra_only=True, nodes_per_unit=5)
    core, custom, pods = client.CoreV1Api(cluster.api), client.CustomObjectsApi(cluster.api), Pods(cluster.api,
                                                                                                     namespace)
    namespace_queue(custom, namespace)
    try:
        template = claim_template(custom, namespace, H100, 8)
        jobs.create(training_job("classic", sim, 2, gpus=8, annotations={RUN_FOR: RUN}))
        jobs.create(training_job("half", sim, 2, gpus=4, annotations={RUN_FOR: RUN}, topology={"required": "node"}))
        jobs.create(claiming_for(sim, template))
        jobs.wait_phase("classic", "Running", 120)
        jobs.wait_phase("half", "Running", 120)
        jobs.wait_phase("claiming", "Running", 120)
        classic = pods.of("superpod.dev/job-name=classic")
        assert all(p.spec.scheduler_name == "default-scheduler" and p.status.extended_resource_claim_status
                   for p in classic), "kube-scheduler bound the classic replicas, with a claim for their GPUs"
        gang = claiming_pods("gang", 1, sim, template)
        gang["metadata"]["annotations"][RUN_FOR] = RUN
        pods.batch.create_namespaced_job(namespace, indexed_job("gang", 1, gang))
        wait_for(lambda: len(pods.bound("job-name=gang")) == 1, 120, "the claiming gang bound on the last free node")
        jobs.create(training_job("late", sim, 1, gpus=8))
        late = claiming_pods("late-gang", 1, sim, template)
        pods.batch.create_namespaced_job(namespace, indexed_job("late-gang", 1, late))
        asking = claiming_pods("asking", 1, sim, template)
        del asking["spec"]["resourceClaims"]
        asking["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"},
                                                        "limits": {"nvidia.com/gpu": "1"}}
        pods.batch.create_namespaced_job(namespace, indexed_job("asking", 1, asking))
        jobs.wait_message("late", "GPU")
        held = devices_per_claim(custom, namespace)
        print(f"\nthrough DRA only, claim -> devices: { {k: len(v) for k, v in sorted(held.items())} }")
        twice = [d for d, n in Counter(d for devices in held.values() for d in devices).items() if n > 1]
        assert not twice, f"devices held by two claims: {twice}"
        per_node = Counter(node for devices in held.values() for node, _ in devices)
        nodes = {n.metadata.name for n in core.list_node(label_selector=f"{SIM_LABEL}={sim}").items}
        assert set(per_node) <= nodes and all(count <= 8 for count in per_node.values()), per_node
        assert sum(per_node.values()) == 40, f"the 40 GPUs of the 5 nodes held: {per_node}"
        assert jobs.phase("late") == "Queued" and not pods.bound("job-name=late-gang"), "no GPU left for them"
        queue = custom.get_cluster_custom_object(SUPERPOD, SUPERPOD_VERSION, "gpuqueues", namespace)
        [flavor] = queue["status"]["flavors"]
        assert flavor["allocated"] == 40, f"the queue counts {flavor['allocated']}, its pods hold 40"
        [waiting] = pods.of("job-name=asking")
        said = next(c.message for c in waiting.status.conditions or () if c.type == "PodScheduled")
        assert not waiting.spec.node_name and "only to pods kube-scheduler binds" in said, said
        extended = [c for c in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")[
            "items"] if (c["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM) == "true"]
        assert len(extended) == 4, "a claim made by kube-scheduler for each classic replica"
        for name in ("classic", "half", "claiming"):
            jobs.wait_phase(name, "Succeeded", 120)
        wait_for(lambda: any(r["spec"].get("pod", "").startswith("gang-") for r in records(custom, namespace)), 120,
                 "the gang's pod billed")
        billed = {(r["spec"]["job"], r["spec"].get("pod")): r["spec"] for r in records(custom, namespace)
                  if r["spec"]["job"] in ("classic", "half", "claiming") or r["spec"].get("pod", "").startswith(
                      "gang-")}
        gpus = sorted((key[0], spec["gpus"]) for key, spec in billed.items())
        assert gpus == [("claiming", 8), ("classic", 16), ("gang", 8), ("half", 8)], gpus
        for spec in billed.values():  # every GPU-second once: the record's seconds are its GPUs times its run
            run = timestamp(spec["end"]) - timestamp(spec["start"])
            assert abs(spec["gpuSeconds"] - spec["gpus"] * run) <= spec["gpus"] * 1.0, spec
    finally:
        custom.delete_cluster_custom_object(SUPERPOD, SUPERPOD_VERSION, "gpuqueues", namespace)
