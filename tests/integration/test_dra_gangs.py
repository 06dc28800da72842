"""Pod gangs whose pods claim GPUs through DRA, on the real control plane: simulated nodes publish NVIDIA-style
ResourceSlices, kube-controller-manager makes each pod's claim from its ResourceClaimTemplate, and the operator
places the gang by its nodes' devices, allocates every claim on its pod's node and reserves it for the pod, then
binds — or binds nothing and says why."""

from __future__ import annotations

import uuid

from kubernetes import client

from superpod.api.podgang import GANG_SIZE, TOPOLOGY
from superpod.hardware.presets import SIM_LABEL
from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.test_pod_gangs import SCHEDULER, Pods, indexed_job
from tests.integration.wait import wait_for

GROUP, VERSION = "resource.k8s.io", "v1"
H100 = "NVIDIA H100 80GB HBM3"


def claim_template(custom: client.CustomObjectsApi, namespace: str, product: str, count: int) -> str:
    name = f"gpus-{uuid.uuid4().hex[:6]}"
    selector = {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{product}'"}}
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count,
                                           "selectors": [selector]}}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}}})
    return name


def claiming_pods(gang: str, size: int, sim: str, template: str) -> dict:
    return {"metadata": {"labels": {"superpod.dev/gang": gang},
                         "annotations": {GANG_SIZE: str(size), TOPOLOGY["required"]: "leaf"}},
            "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "nodeSelector": {SIM_LABEL: sim},
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": "trainer", "resources": {"claims": [{"name": "gpus"}]}}]}}


def claims_of(custom: client.CustomObjectsApi, pods: Pods, selector: str) -> dict[str, dict]:
    """pod name -> its claim as served."""
    out = {}
    for pod in pods.of(selector):
        made = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or ()}
        out[pod.metadata.name] = custom.get_namespaced_custom_object(GROUP, VERSION, pods.ns, "resourceclaims",
                                                                     made["gpus"])
    return out


def test_an_indexed_job_claiming_gpus_is_bound_in_one_leaf_with_every_claim_allocated(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 8, own_leaves=True, dra=True, nodes_per_unit=4)  # 2 leaves of 4
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    template = claim_template(custom, namespace, H100, 8)
    pods.batch.create_namespaced_job(namespace, indexed_job("claims", 3, claiming_pods("claims", 3, sim, template)))
    bound = wait_for(lambda: len(b := pods.bound("job-name=claims")) == 3 and b, 120, "3 pods of claims bound")
    assert len({pods.leaf(node) for node in bound.values()}) == 1, "one leaf"
    uids = {p.metadata.name: p.metadata.uid for p in pods.of("job-name=claims")}
    seen = set()
    print("\nIndexed Job claims (3 pods x a claim of 8 H100s, leaf required), pod -> node: devices")
    for name, claim in sorted(claims_of(custom, pods, "job-name=claims").items()):
        results = claim["status"]["allocation"]["devices"]["results"]
        print(f"  {name} -> {bound[name]}: {', '.join(r['device'] for r in results)}")
        assert len(results) == 8 and {(r["driver"], r["pool"]) for r in results} == {("gpu.nvidia.com", bound[name])}
        assert [(r["resource"], r["name"], r["uid"]) for r in claim["status"]["reservedFor"]] == [
            ("pods", name, uids[name])], "reserved for its own pod"
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
        seen.update((r["pool"], r["device"]) for r in results)
    assert len(seen) == 24, "no device given twice"
    wait_for(lambda: all(p.status.phase == "Running" for p in pods.of("job-name=claims")), 60, "all 3 Running")


def test_a_gang_whose_claims_cannot_all_be_satisfied_binds_nothing_and_says_why(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, own_leaves=True, dra=True)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    eight, b200 = claim_template(custom, namespace, H100, 8), claim_template(custom, namespace, "NVIDIA B200", 1)
    pods.batch.create_namespaced_job(namespace, indexed_job("three", 3, claiming_pods("three", 3, sim, eight)))
    pods.batch.create_namespaced_job(namespace, indexed_job("other", 2, claiming_pods("other", 2, sim, b200)))
    first = wait_for(lambda: len(p := pods.of("job-name=three")) == 3 and sorted(x.metadata.name for x in p)[0], 60,
                     "the pods of three")
    said = pods.wait_said(first, "claiming 8 devices of class gpu.nvidia.com matching")
    print(f"\n{first}: {said}")
    other = sorted(p.metadata.name for p in pods.of("job-name=other"))[0]
    print(f"{other}: {pods.wait_said(other, 'lack the devices its claims need, even when idle')}")
    assert not pods.bound("job-name=three") and not pods.bound("job-name=other"), "nothing bound"
    claims = claims_of(custom, pods, "job-name=three")
    assert not any((c.get("status") or {}).get("allocation") for c in claims.values()), "no claim allocated"


def test_a_trainingjob_claiming_gpus_is_placed_in_one_leaf_and_kube_scheduler_allocates_on_the_nodes_chosen(
        cluster, operator, jobs, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 8, own_leaves=True, dra=True, nodes_per_unit=4)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    template = claim_template(custom, namespace, H100, 8)
    job = training_job("claiming", sim, 3, topology={"required": "leaf"})
    job["spec"]["resources"] = {}
    job["spec"]["template"]["spec"].update({
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        "containers": [{"name": "main", "image": "trainer", "resources": {"claims": [{"name": "gpus"}]}}]})
    jobs.create(job)
    status = jobs.wait_phase("claiming", "Running", 120)
    placement = status["placement"]  # node -> its replicas
    bound = {p.metadata.name: p.spec.node_name for p in pods.of("superpod.dev/job-name=claiming")}
    print(f"\nTrainingJob claiming (3 x a claim of 8 H100s, leaf required): placement {placement}, bound {bound}")
    assert len({pods.leaf(node) for node in bound.values()}) == 1, "one leaf"
    assert set(bound.values()) == set(placement), "kube-scheduler bound each pod on the node the operator chose"
    uids = {p.metadata.name: p.metadata.uid for p in pods.of("superpod.dev/job-name=claiming")}
    seen = set()
    for name, claim in claims_of(custom, pods, "superpod.dev/job-name=claiming").items():
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 8 and {r["pool"] for r in results} == {bound[name]}, "allocated on its pod's node"
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uids[name]]
        seen.update((r["pool"], r["device"]) for r in results)
    assert len(seen) == 24


def claiming_job(name: str, sim: str, replicas: int, template: str, **spec) -> dict:
    job = training_job(name, sim, replicas, **spec)
    job["spec"]["resources"] = {}
    job["spec"]["template"]["spec"].update({
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        "containers": [{"name": "main", "image": "trainer", "resources": {"claims": [{"name": "gpus"}]}}]})
    return job


def test_preemption_frees_the_devices_its_victims_claimed(cluster, operator, jobs, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, own_leaves=True, dra=True)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    template = claim_template(custom, namespace, H100, 8)
    jobs.create(claiming_job("low", sim, 2, template))
    jobs.wait_phase("low", "Running", 120)
    held = {(r["pool"], r["device"]) for claim in claims_of(custom, pods, "superpod.dev/job-name=low").values()
            for r in claim["status"]["allocation"]["devices"]["results"]}
    assert len(held) == 16, "every device of the two nodes claimed"
    jobs.create(claiming_job("urgent", sim, 2, template, priority=100))
    status = jobs.wait_phase("urgent", "Running", 180)
    print(f"\nurgent Running on {sorted(status['placement'])}; low: {jobs.status('low').get('message')}")
    got = {(r["pool"], r["device"]) for claim in claims_of(custom, pods, "superpod.dev/job-name=urgent").values()
           for r in claim["status"]["allocation"]["devices"]["results"]}
    assert got == held, "the preemptor's claims hold the devices its victims' claims held"
    assert jobs.phase("low") != "Running"
