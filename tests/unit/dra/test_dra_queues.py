"""GPUQueues over GPUs published through DRA: the capacity a spot job may borrow from counts the nodes' devices (a
DRA-only node advertises no nvidia.com/gpu), and a queue's flavor may name a DeviceClass."""

from __future__ import annotations

from superpod.controller.judge import Settings
from superpod.hardware import dra_slices
from superpod.k8s.api import DEVICECLASSES, GPUQUEUES, NODES, RESOURCECLAIMTEMPLATES, RESOURCESLICES
from tests.unit.memory_cluster import MemoryCluster, run, training_job

EIGHT = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]}}


def dra_only(nodes: int = 4, settings: Settings | None = None, advertised: bool = False) -> MemoryCluster:
    """One leaf of H100 nodes whose GPUs only DRA hands out (no nvidia.com/gpu in their allocatable; `advertised`:
    nvidia.com/gpu advertises them too), a template of 8 GPUs."""
    c = MemoryCluster(nodes=nodes, nodes_per_unit=nodes, settings=settings)
    for node in c.store.items(NODES):
        if not advertised:
            c.update_node(node["metadata"]["name"], lambda n: [n["status"][k].pop("nvidia.com/gpu")
                                                               for k in ("allocatable", "capacity")])
        for body in dra_slices.node_slices(node):
            run(c.admin.create(RESOURCESLICES, body))
    for body in dra_slices.device_classes():
        run(c.admin.create(DEVICECLASSES, body))
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "eight", "namespace": "team-a"},
                                                "spec": {"spec": EIGHT}}))
    return c


def queue(name: str, namespace: str, flavor: str, guaranteed: float, limit: float | None = None) -> dict:
    resource = {"flavor": flavor, "guaranteed": guaranteed, **({"limit": limit} if limit is not None else {})}
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name},
            "spec": {"namespaces": [namespace], "resources": [resource]}}


def claiming(name: str, replicas: int) -> dict:
    body = training_job(name, replicas, gpus=None)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    return body


def test_a_spot_job_borrows_gpus_that_only_dra_publishes():
    """Found on the way: capacity counted nvidia.com/gpu alone, so on nodes whose GPUs only DRA hands out there was
    nothing to borrow and a spot job beyond its guarantee waited forever."""
    c = dra_only()
    run(c.admin.create(GPUQUEUES, queue("a", "team-a", "*", 0)))
    c.submit(claiming("spot", 2))
    c.settle(8)
    assert c.status("spot").get("phase") == "Starting", c.status("spot")
    flavors = c.store.peek(GPUQUEUES, "a")["status"]["flavors"]
    assert [(f["flavor"], f["allocated"]) for f in flavors] == [("*", 16)]


def test_a_queue_flavor_may_name_a_device_class():
    c = dra_only()
    run(c.admin.create(GPUQUEUES, queue("a", "team-a", "gpu.nvidia.com", 16, 16)))
    c.submit(claiming("first", 2))
    c.submit(claiming("second", 1))
    c.settle(8)
    assert c.status("first").get("phase") == "Starting", c.status("first")
    assert c.status("second").get("phase") == "Queued" and c.status("second")["reason"] == "QueueAtLimit"
    flavors = c.store.peek(GPUQUEUES, "a")["status"]["flavors"]
    assert [(f["flavor"], f["allocated"]) for f in flavors] == [("gpu.nvidia.com", 16)]


def test_an_alternative_that_can_never_be_used_does_not_choose_the_flavor():
    """Found by review: firstAvailable [mig.nvidia.com selecting nothing, 8 of gpu.nvidia.com] counted 8 whole GPUs
    against the queue's MIG flavor, and 24 GPUs ran where gpu.nvidia.com allowed 8."""
    c = dra_only()
    run(c.admin.create(GPUQUEUES, {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue",
                                   "metadata": {"name": "a"}, "spec": {"namespaces": ["team-a"], "resources": [
                                       {"flavor": "gpu.nvidia.com", "guaranteed": 8, "limit": 8},
                                       {"flavor": "mig.nvidia.com", "guaranteed": 16, "limit": 16}]}}))
    never = {"name": "never", "deviceClassName": "mig.nvidia.com", "count": 1,
             "selectors": [{"cel": {"expression": "false"}}]}
    spec = {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
        never, {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8}]}]}}
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "sly", "namespace": "team-a"},
                                                "spec": {"spec": spec}}))
    for name in ("one", "two", "three"):
        body = claiming(name, 1)
        body["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "sly"
        c.submit(body)
    c.settle(8)
    running = [name for name in ("one", "two", "three") if c.status(name).get("phase") == "Starting"]
    assert len(running) == 1, {name: c.status(name).get("message") for name in ("one", "two", "three")}


def test_a_bound_claiming_gang_counts_what_it_was_bound_with_when_a_new_leader_cannot_read_its_devices():
    """Found by review: what a bound pod gang's claims were worth was kept in the leader's memory alone; a new leader
    that starts while the gang's ResourceSlices are being published again counted it at 0 and admitted past the
    queue's limit. Its binding records it (superpod.dev/bound-with), which the chart's policy keeps from tenants."""
    from superpod.k8s.api import PODS
    from tests.unit.podgangs.test_pod_gang_claims import claiming as member
    from tests.unit.podgangs.test_pod_gang_claims import create_claiming

    c = dra_only(2)
    run(c.admin.create(GPUQUEUES, queue("a", "team-a", "*", 16, 16)))
    create_claiming(c, *[member(f"q-{i}", "q", 2, i) for i in range(2)])
    c.settle(4)
    nodes = {c.store.peek(PODS, f"team-a/q-{i}")["spec"].get("nodeName") for i in range(2)}
    assert all(nodes), "the gang is bound"
    for body in c.store.items(RESOURCESLICES):
        if body["spec"].get("nodeName") in nodes:
            run(c.admin.delete(RESOURCESLICES, body["metadata"]["name"]))
    c.start("op-2")
    c.settle(3)
    [flavor] = c.store.peek(GPUQUEUES, "a")["status"]["flavors"]
    assert flavor["allocated"] == 16, f"the new leader counts {flavor['allocated']} of the gang's 16 GPUs"
