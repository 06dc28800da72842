"""Placement by DRA devices (core/dra/book.DeviceBook in the snapshot): a gang whose pods claim 8 GPUs is placed
on nodes whose free devices take its claims, inside one leaf, its claims allocated when it is assumed; the devices
it holds are not given again, and a gang with no room says which nodes lack the devices."""

from __future__ import annotations

from dataclasses import replace

from superpod.api.convert import node_from_k8s
from superpod.core.dra.book import DeviceBook
from superpod.core.dra.model import read_claim_spec, read_classes, read_slices
from superpod.core.explain import explain
from superpod.core.model import Snapshot
from superpod.core.placement import place
from superpod.core.preempt import Victim, choose
from superpod.core.request import make_request
from superpod.hardware import dra_slices, presets
from tests.unit.builders import TOPO

H100 = "NVIDIA H100 80GB HBM3"


def cluster(count: int) -> tuple[Snapshot, list[dict]]:
    objs = presets.preset_nodes("dgx-h100", count, "d", nodes_per_unit=2)
    for obj in objs:  # the devices are published through DRA only
        obj["status"]["allocatable"].pop("nvidia.com/gpu")
    slices, errors = read_slices([s for obj in objs for s in dra_slices.node_slices(obj)])
    classes, class_errors = read_classes(dra_slices.device_classes())
    assert not errors and not class_errors
    snap = Snapshot([replace(node_from_k8s(obj), ready=True) for obj in objs], TOPO)
    snap.set_devices(DeviceBook(slices, classes, set(), {o["metadata"]["name"]: o["metadata"]["labels"] for o in objs}))
    return snap, objs


def gang(name: str, pods: int, product: str = H100, count: int = 8):
    selector = [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{product}'"}}]
    claim = read_claim_spec({"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": count, "selectors": selector}}]}}, "template")
    return make_request("ns", name, pods, {"pods": 1}, required="leaf", claims=(claim,), claimed_gpus=count)


def test_a_claiming_gang_is_placed_in_one_leaf_and_its_devices_are_not_given_again():
    snap, _ = cluster(4)  # two leaves of two nodes
    first = gang("first", 2)
    assert first.total_units == 16
    placed = place(snap, first)
    assert placed is not None and len(placed.assignments) == 2
    assert len({snap.nodes[snap.index[n]].labels["superpod.dev/leaf"] for n in placed.assignments}) == 1
    snap.assume(first, placed.assignments)
    booked = snap.devices.booked["ns/first"]
    assert sorted(booked) == sorted(placed.assignments)
    for node, pods in booked.items():
        [[allocation]] = pods
        assert len(allocation.devices) == 8 and {pool for _, pool, _ in allocation.devices} == {node}
    second = place(snap, gang("second", 2))
    assert second is not None and not set(second.assignments) & set(placed.assignments), "the other leaf"
    snap.assume(gang("second", 2), second.assignments)
    assert place(snap, gang("third", 1)) is None
    why = explain(snap, gang("third", 1)).message
    assert "claiming 8 devices of class gpu.nvidia.com" in why and "4 nodes lack the free devices" in why, why
    snap.forget(gang("second", 2))
    assert place(snap, gang("third", 1)) is not None, "devices freed with the gang forgotten"


def test_a_claim_no_node_can_serve_says_so_even_when_idle():
    snap, _ = cluster(2)
    why = explain(snap, gang("b200", 1, product="NVIDIA B200", count=1)).message
    assert "2 nodes lack the devices its claims need, even when idle" in why, why
    assert place(snap, gang("nine", 1, count=9)) is None, "9 GPUs on nodes of 8"


def test_preemption_counts_the_devices_its_victims_free():
    snap, _ = cluster(2)  # one leaf of two nodes
    low = replace(gang("low", 2), priority=0)
    placed = place(snap, low)
    snap.assume(low, placed.assignments)
    held = frozenset(d for pods in snap.devices.booked["ns/low"].values() for allocations in pods
                     for allocation in allocations for d in allocation.devices)
    urgent = replace(gang("urgent", 2), priority=100)
    assert place(snap, urgent) is None
    pods = tuple(key for key in snap.pods if key.startswith("ns/low#"))
    blind = Victim(low.key, 0, 16, 0.0, pods)
    assert choose(snap, urgent, [blind]) is None, "without its devices, evicting the gang frees nothing it needs"
    found = choose(snap, urgent, [replace(blind, devices=held)])
    assert found is not None and [v.key for v in found.victims] == [low.key]
    assert sorted(found.placement.assignments) == sorted(placed.assignments)
    assert snap.devices.taken >= held, "the snapshot's devices given back after the search"


def test_a_claim_naming_a_class_that_does_not_exist_says_so():
    snap, _ = cluster(2)
    claim = read_claim_spec({"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.example.org", "count": 1}}]}}, "template")
    job = make_request("ns", "typo", 1, {"pods": 1}, claims=(claim,))
    cause = explain(snap, job)
    assert cause.code == "NoNodeQualifies" and "DeviceClass gpu.example.org, which does not exist" in cause.message, \
        cause.message


class Source:
    """Templates by a function; a device of class gpu.nvidia.com is a GPU, of other classes none."""

    def __init__(self, template) -> None:
        self.template = template

    def worth(self, request) -> float:
        return 1.0 if request.class_name == "gpu.nvidia.com" else 0.0


def test_a_trainingjob_claiming_gpus_counts_and_bills_them_as_gpus():
    from superpod.controller.jobs import _view
    from superpod.core.gang_key import GangKey

    template = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                     "count": 8}}]}}
    job = {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "llm", "namespace": "ns", "uid": "u1", "creationTimestamp": "2026-12-05T00:00:00Z"},
           "spec": {"replicas": 4, "resources": {}, "template": {"spec": {
               "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight"}],
               "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}]}}}}
    view = _view(GangKey("ns", "llm"), job, None, Source(lambda namespace, name: read_claim_spec(template, name)))
    assert view.request.claimed_gpus == 8 and view.request.total_units == 32
    assert view.units == 8 and view.gang_units == 32, "its usage records bill 32 GPUs"
    assert view.holdings() == "32 GPUs"
    missing = _view(GangKey("ns", "llm"), job, None, Source(lambda namespace, name: (_ for _ in ()).throw(
        LookupError(f"ResourceClaimTemplate {namespace}/{name} does not exist"))))
    assert "ResourceClaimTemplate ns/eight does not exist" in str(missing.request)


def test_gpus_are_counted_at_the_most_an_alternative_asks_and_all_of_a_gpu_class_is_refused():
    from superpod.api.claims import claims_of
    from superpod.api.resources import ConvertError
    from superpod.core.dra.units import claimed_gpus

    first_available = read_claim_spec({"devices": {"requests": [{"name": "gpus", "firstAvailable": [
        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
        {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8}]}]}}, "t")
    assert claimed_gpus((first_available,), Source(None).worth) == 8
    every = read_claim_spec({"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]}}, "t")
    spec = {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "all"}]}
    try:
        claims_of("pod ns/p", "ns", spec, "spec", Source(lambda namespace, name: every))
        raise AssertionError("a claim for every GPU was accepted")
    except ConvertError as error:
        assert "asks for all devices of class gpu.nvidia.com it selects, and they are GPUs" in str(error)
