"""A node that advertises nvidia.com/gpu and publishes the same GPUs as DRA devices (a device plugin beside a DRA
driver, as the project's simulated nodes do) is one pool: what classic pods hold and what claims hold are booked
against each other. Found by review (M2): a classic 8-GPU job and an 8-GPU claiming gang both landed on one 8-GPU
node."""

from __future__ import annotations

from superpod.k8s.api import EVENTS, PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES
from tests.unit.dra.test_claims_past_admission import held, make_claims
from tests.unit.memory_cluster import run, training_job
from tests.unit.podgangs.test_pod_gang_claims import claiming, create_claiming, devices, dra_cluster
from tests.unit.podgangs.test_pod_gangs import create, pod, stored


def test_a_claiming_gang_is_not_placed_on_the_gpus_a_classic_job_holds():
    c = dra_cluster(1, nodes_per_unit=1)
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    [node] = [p["spec"].get("nodeName") for p in c.pods("classic")]
    assert node, "the dangerous moment: the classic job holds the node's 8 GPUs"
    create_claiming(c, claiming("d-0", "d", 1, 0))
    c.settle(4)
    assert not c.store.peek(PODS, "team-a/d-0")["spec"].get("nodeName"), "bound on GPUs the classic job holds"
    assert not devices(c, "d-0")


def test_a_classic_job_is_not_placed_on_the_gpus_claims_hold():
    c = dra_cluster(1, nodes_per_unit=1)
    create_claiming(c, claiming("d-0", "d", 1, 0))
    c.settle(4)
    assert len(devices(c, "d-0")) == 8, "the dangerous moment: the gang's claim holds the node's 8 GPUs"
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(4)
    assert c.decided("classic").get("phase") == "Queued", c.decided("classic")
    assert not any(p["spec"].get("nodeName") for p in c.pods("classic"))


def test_half_a_pooled_node_each_way_fits_both():
    c = dra_cluster(1, nodes_per_unit=1)
    c.submit(training_job("classic", 1, gpus=4))
    c.settle(3)
    body = claiming("d-0", "d", 1, 0)
    create_claiming(c, body)
    c.settle(4)
    assert c.decided("classic").get("phase") in ("Starting", "Running")
    assert not c.store.peek(PODS, "team-a/d-0")["spec"].get("nodeName"), "8 GPUs claimed where 4 are free"


def test_a_node_publishing_its_gpus_both_ways_is_warned_of_once():
    c = dra_cluster(2, nodes_per_unit=2)
    c.settle(3)
    warned = [(e["involvedObject"]["name"], e["message"]) for e in c.store.objects.get(EVENTS, {}).values()
              if e["reason"] == "GpusPublishedTwice"]
    assert sorted(name for name, _ in warned) == ["dgx-su01-n01", "dgx-su01-n02"], warned
    assert "advertises 8 nvidia.com/gpu and publishes its GPUs as DRA devices too" in warned[0][1]


FOUR = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}


def test_a_pod_asking_both_ways_counts_both_in_the_pool():
    """Found by review: the pool's bound divided a node's free nvidia.com/gpu by what a pod claims alone; two pods
    each asking 4 nvidia.com/gpu and claiming 4 GPUs went to one 8-GPU node (16 booked on 8)."""
    c = dra_cluster(1, nodes_per_unit=1)
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "four", "namespace": "team-a"},
                                                "spec": {"spec": FOUR}}))
    bodies = []
    for i in range(2):
        body = pod(f"m-{i}", "m", 2, gpus=4, index=i)
        body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
        bodies.append(body)
    create(c, *bodies)
    for body in bodies:
        name = body["metadata"]["name"]
        run(c.admin.create(RESOURCECLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-gpus", "namespace": "team-a", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": stored(c, name)["metadata"]["uid"]}]},
            "spec": FOUR}))
        run(c.admin.patch_status(PODS, name, {"status": {"resourceClaimStatuses": [
            {"name": "gpus", "resourceClaimName": f"{name}-gpus"}]}}, "team-a"))
    c.settle(4)
    assert not any(stored(c, f"m-{i}")["spec"].get("nodeName") for i in range(2)), "16 GPUs booked on 8"


def claiming_job(name: str, priority: int) -> dict:
    body = training_job(name, 1, gpus=None, priority=priority)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    return body


def test_a_claiming_job_on_a_pooled_node_is_preempted_for_a_classic_one():
    """Found by review: evicting a victim freed its devices in the book but not the node's pooled nvidia.com/gpu, so
    nothing preempted a job whose claims held a pooled node."""
    c = dra_cluster(1, nodes_per_unit=1)
    c.submit(claiming_job("low", 0))
    c.settle(3)
    make_claims(c, True, "low")
    c.settle(4)
    assert c.decided("low")["phase"] in ("Starting", "Running") and held(c, "low") == 8, "the victim holds the node"
    c.tick(300)
    c.submit(training_job("urgent", 1, 8, priority=100))
    c.settle(3)
    assert c.decided("low")["phase"] == "Queued", c.decided("low")
    assert c.decided("urgent")["phase"] in ("Starting", "Running"), c.decided("urgent")


def test_a_claiming_pod_gang_is_preempted_by_priority():
    """Found by review: a bound pod gang is read without its claims, so it was a victim that freed no device."""
    c = dra_cluster(1, nodes_per_unit=1)
    c.update_node("dgx-su01-n01", lambda n: [n["status"][k].pop("nvidia.com/gpu") for k in ("allocatable", "capacity")])
    create_claiming(c, claiming("d-0", "d", 1, 0))
    c.settle(4)
    assert len(devices(c, "d-0")) == 8, "the victim's claim holds the node's devices"
    c.tick(300)
    c.submit(claiming_job("urgent", 100))
    c.settle(6)
    low = c.store.peek(PODS, "team-a/d-0")
    assert low is None or low["metadata"].get("deletionTimestamp"), "the priority-0 gang is evicted"
    assert c.decided("urgent")["reason"] != "NoRoom", c.decided("urgent")


def test_the_class_serving_an_extended_resource_is_the_newest_naming_it():
    from superpod.controller.state.dra import DraStore

    dra = DraStore(lambda key: None)
    store = dra.kind_store("deviceclasses")
    for name, created in (("b", "2026-01-02T00:00:00Z"), ("c", "2026-01-02T00:00:00Z"), ("a", "2026-01-01T00:00:00Z")):
        store.store(name, {"metadata": {"name": name, "creationTimestamp": created},
                           "spec": {"extendedResourceName": "nvidia.com/gpu"}}, 0)
    assert dra.serving("nvidia.com/gpu") == "b"  # the newest, the lower name of two
    store.forget("b", "", None, 0)
    assert dra.serving("nvidia.com/gpu") == "c"
    assert dra.serving("example.com/fpga") is None


def test_only_nvidias_driver_pools_with_nvidia_com_gpu():
    """Another vendor's GPU driver beside NVIDIA's device plugin publishes GPUs of its own: no pool there (kind's
    workers run the DRA example driver, gpu.example.com, beside a stand-in of NVIDIA's device plugin)."""
    from dataclasses import replace as replaced

    from superpod.api.convert import node_from_k8s
    from superpod.core.dra.book import DeviceBook
    from superpod.core.dra.model import read_classes, read_slices
    from superpod.core.model import Snapshot
    from superpod.hardware import dra_slices, presets

    [node] = presets.preset_nodes("dgx-h100", 1)
    objs = dra_slices.node_slices(node)
    classes, _ = read_classes(dra_slices.device_classes())
    pooled = {}
    for driver in ("gpu.nvidia.com", "gpu.example.com"):
        bodies = [{**body, "spec": {**body["spec"], "driver": driver}} for body in objs]
        slices, _ = read_slices(bodies)
        snap = Snapshot([replaced(node_from_k8s(node), ready=True)])
        snap.set_devices(DeviceBook(slices, classes, {(driver, node["metadata"]["name"], "gpu-0")}, {}))
        pooled[driver] = (sorted(snap.pooled), snap.free[0].get("nvidia.com/gpu"))
    assert pooled == {"gpu.nvidia.com": ([0], 7), "gpu.example.com": ([], 8)}, pooled
