"""What a claim counts in queues and bills is read from the devices it may be given, never from the name of the class
a tenant picks: whole GPUs of any class that hands them out (passthrough included), MIG instances at their share of
a GPU, devices that are no GPU (IMEX channels) at nothing."""

from __future__ import annotations

import copy

import pytest

from superpod.api.claims import claims_of
from superpod.api.resources import ConvertError
from superpod.controller.state.dra import DraStore
from superpod.core.dra.model import read_claim_spec
from superpod.core.dra.units import claimed_gpus
from superpod.hardware import dra_slices
from superpod.hardware.presets import preset_nodes

MIG = {0: [("3g.40gb", 0), ("3g.40gb", 4)], 1: [("1g.10gb", s) for s in range(7)]}  # two GPUs of an H100 node


def store(passthrough: bool = False) -> DraStore:
    """An H100 node (GPUs 0 and 1 in MIG mode), a GB200 tray; and, if `passthrough`, a node whose GPUs are
    published for VFIO passthrough, with an admin's own class for them that is not named gpu.*."""
    dra = DraStore(lambda key: None)
    classes = dra_slices.device_classes()
    h100, tray = preset_nodes("dgx-h100", nodes=1)[0], preset_nodes("gb200-nvl72", nodes=1)[0]
    bodies = dra_slices.node_slices(h100, MIG) + dra_slices.node_slices(tray)
    if passthrough:
        node = copy.deepcopy(h100)
        node["metadata"]["name"] = "vfio-node"
        [vfio] = dra_slices.node_slices(node)
        for device in vfio["spec"]["devices"]:
            device["attributes"]["type"] = {"string": "vfio"}
        bodies.append(vfio)
        classes.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "h100-vm"},
                        "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == "
                                                                      "'vfio'"}}]}})
    for body in classes:
        dra.kind_store("deviceclasses").store(body["metadata"]["name"], body, 0)
    for body in bodies:
        dra.kind_store("resourceslices").store(body["metadata"]["name"], body, 0)
    return dra


def claim(class_name: str, count: int = 1, *expressions: str, mode: str = "ExactCount"):
    exactly = {"deviceClassName": class_name, "allocationMode": mode,
               "selectors": [{"cel": {"expression": e}} for e in expressions]}
    if mode == "ExactCount":
        exactly["count"] = count
    return read_claim_spec({"devices": {"requests": [{"name": "r", "exactly": exactly}]}}, "c")


def test_whole_gpus_count_one_each_and_devices_that_are_no_gpu_count_nothing():
    dra = store()
    assert claimed_gpus((claim("gpu.nvidia.com", 8),), dra.worth) == 8
    assert claimed_gpus((claim("compute-domain-default-channel.nvidia.com"),), dra.worth) == 0
    assert claimed_gpus((claim("no-such-class", 8),), dra.worth) == 0, "nothing can be given to it"


def test_mig_instances_count_their_share_of_a_gpu_by_what_the_request_may_be_given():
    dra = store()
    small = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    assert claimed_gpus((claim("mig.nvidia.com", 7, small),), dra.worth) == pytest.approx(1.0)
    assert claimed_gpus((claim("mig.nvidia.com", 2),), dra.worth) == pytest.approx(6 / 7), \
        "a request any instance may serve counts at the largest it may be given"


def test_gpus_given_through_a_class_not_named_gpu_are_counted_and_all_of_them_is_refused():
    """Found by review: GPUs were counted only for classes named gpu.*, so a claim of 8 passthrough GPUs (class
    vfio.gpu.nvidia.com, or an admin's h100-vm) or of MIG instances ran unbilled and outside every queue limit."""
    dra = store(passthrough=True)
    assert claimed_gpus((claim("vfio.gpu.nvidia.com", 8),), dra.worth) == 8
    assert claimed_gpus((claim("h100-vm", 8),), dra.worth) == 8
    every = claim("mig.nvidia.com", mode="All")
    with pytest.raises(ConvertError, match="asks for all devices of class mig.nvidia.com it selects, and they are"):
        claims_of("pod ns/p", "ns", {"resourceClaims": [{"name": "r", "resourceClaimTemplateName": "t"}]}, "spec",
                  _With(every, dra))


def test_a_pods_gpus_are_what_the_claims_reserved_for_it_hold_a_shared_claim_at_its_share():
    """Found by review: a pod's GPUs were found through the claims that name it as owner, so a pod using a claim by
    name (or a claim whose owner a tenant edited) was billed nothing."""
    dra = store()
    node = preset_nodes("dgx-h100", nodes=1)[0]["metadata"]["name"]
    claims = {"c0": (["gpu-0-mig-3g40gb-9-0", "gpu-1-mig-1g10gb-19-0", "gpu-3"], ["uid-a"]),
              "c1": (["gpu-4"], ["uid-b"]),
              "shared": (["gpu-5", "gpu-6"], ["uid-a", "uid-b"])}  # used by name: no owner
    for name, (devices, consumers) in claims.items():
        dra.kind_store("resourceclaims").store(f"ns/{name}", {"metadata": {"name": name, "namespace": "ns"}, "status": {
            "allocation": {"devices": {"results": [{"request": "r", "driver": "gpu.nvidia.com", "pool": node,
                                                    "device": device} for device in devices]}},
            "reservedFor": [{"resource": "pods", "name": uid, "uid": uid} for uid in consumers]}}, 0)
    assert dra.gpus_of(["uid-a"]) == pytest.approx(3 / 7 + 1 / 7 + 1 + 1)
    assert dra.gpus_of(["uid-a", "uid-b"]) == pytest.approx(3 / 7 + 1 / 7 + 2 + 2)


class _With:
    """A source whose every template is `spec`, worth as `dra` says."""

    def __init__(self, spec, dra: DraStore) -> None:
        self.spec, self.worth = spec, dra.worth

    def template(self, namespace: str, name: str):
        return self.spec


def test_a_selector_on_what_tells_devices_of_a_shape_apart_counts_at_the_most_the_rest_may_give():
    """Found by review: shapes leave out uuids and bus ids, so a selector on them was asked of one device of each
    shape: `pciBusID != <that device's>` made a claim of 7 GPUs worth 0, and 21 GPUs ran in a queue of 8."""
    dra = store()
    node = preset_nodes("dgx-h100", nodes=1)[0]
    last = dra_slices.node_slices(node, MIG)[0]["spec"]["devices"][-1]["attributes"][dra_slices.PCI_BUS_ID]["string"]
    not_that_one = f"device.attributes['resource.kubernetes.io'].pciBusID != '{last}'"
    assert claimed_gpus((claim("gpu.nvidia.com", 7, not_that_one),), dra.worth) == 7
    assert claimed_gpus((claim("gpu.nvidia.com", 7, "device.attributes['gpu.nvidia.com'].index < 7"),),
                        dra.worth) == 7
    with pytest.raises(ConvertError, match="they are GPUs"):
        claims_of("pod ns/p", "ns", {"resourceClaims": [{"name": "r", "resourceClaimTemplateName": "t"}]}, "spec",
                  _With(claim("gpu.nvidia.com", 1, not_that_one, mode="All"), dra))


def test_a_nodes_gpus_count_its_pools_newest_generation_and_no_partitionable_device():
    """Found by review: a pool being republished was counted twice, and partitionable devices (never handed out by
    this operator) were counted as GPUs."""
    dra = store()
    node = preset_nodes("dgx-h100", nodes=1)[0]
    name = node["metadata"]["name"]
    assert dra.node_units(name)["*"] == pytest.approx(6 + 6 / 7 + 1)  # GPUs 2-7, two 3g and seven 1g instances
    [newer] = dra_slices.node_slices(node, generation=2)  # whole again, under another slice name
    newer["metadata"]["name"] += "-2"
    newer["spec"]["devices"][0]["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {}}]
    dra.kind_store("resourceslices").store(newer["metadata"]["name"], newer, 0)
    assert dra.node_units(name)["*"] == 7
