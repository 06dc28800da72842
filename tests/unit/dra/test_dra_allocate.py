import pytest

from superpod.core.dra.allocate import Allocator, Code, Shortfall
from superpod.core.dra.model import ALL, node_pools, read_claim_spec, read_classes, read_slices
from superpod.core.dra.selectors import Selectors

from .objects import (
    GPU_CLASS_EXPRESSION,
    MIG_CLASS_EXPRESSION,
    claim_spec,
    device,
    device_class,
    exactly,
    first_available,
    gpu,
    resource_slice,
)

H200 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"
CHANNEL_CLASS = ("device.driver == 'compute-domain.nvidia.com' && "
                 "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
                 "device.attributes['compute-domain.nvidia.com'].id == 0")


@pytest.fixture(scope="module")
def allocator():
    classes, errors = read_classes([
        device_class("gpu.nvidia.com", GPU_CLASS_EXPRESSION),
        device_class("mig.nvidia.com", MIG_CLASS_EXPRESSION),
        device_class("compute-domain-default-channel.nvidia.com", CHANNEL_CLASS,
                     config=[{"opaque": {"driver": "compute-domain.nvidia.com", "parameters": {"kind": "X"}}}]),
        device_class("broken", "device.attributes['gpu.nvidia.com'].nonesuch == 1"),
    ])
    assert not errors
    return Allocator(classes, Selectors())


def pools_of(*objs, node="n1"):
    slices, errors = read_slices(objs)
    assert not errors
    return node_pools(slices, node)


def claim(*requests, **kw):
    return read_claim_spec(claim_spec(*requests, **kw), "claim")


def devices_of(allocations):
    return [[device for _, (_, _, device) in a.results] for a in allocations]


def test_claims_get_distinct_free_devices_in_slice_order(allocator):
    pools = pools_of(resource_slice("n1", [gpu(i) for i in range(8)]))
    four = claim(exactly("gpus", "gpu.nvidia.com", 4, H200))
    taken = {("gpu.nvidia.com", "n1", "gpu-1")}
    allocations = allocator.allocate("n1", pools, taken, [four])
    assert devices_of(allocations) == [["gpu-0", "gpu-2", "gpu-3", "gpu-4"]]
    assert allocations[0].to_dict() == {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": d}
                                for d in ("gpu-0", "gpu-2", "gpu-3", "gpu-4")]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                 "values": ["n1"]}]}]}}
    shortfall = allocator.allocate("n1", pools, taken, [four, four])
    assert shortfall == Shortfall(Code.TOO_FEW_DEVICES, f"needs 8 free devices of class gpu.nvidia.com matching "
                                                        f"{H200}; node n1 has 7")


def test_a_pod_counts_how_many_of_its_shape_fit(allocator):
    pools = pools_of(resource_slice("n1", [gpu(i) for i in range(6)] + [gpu(6, product="NVIDIA H100")]))
    two = claim(exactly("gpus", "gpu.nvidia.com", 2, H200))
    assert allocator.count("n1", pools, set(), (two,)) == 3
    assert allocator.count("n1", pools, set(), (two, two)) == 1
    eight = claim(exactly("gpus", "gpu.nvidia.com", 8, H200))
    assert allocator.count("n1", pools, set(), (eight,)) == Shortfall(
        Code.TOO_FEW_DEVICES, f"needs 8 free devices of class gpu.nvidia.com matching {H200} per pod; node n1 has 6")


def test_overlapping_requests_are_counted_by_groups(allocator):
    # "any GPU" and "an H200": 2 pods fit only if the H100s serve the first request
    pools = pools_of(resource_slice("n1", [gpu(0), gpu(1), gpu(2, product="NVIDIA H100"),
                                           gpu(3, product="NVIDIA H100")]))
    pod = claim(exactly("any", "gpu.nvidia.com", 1), exactly("h200", "gpu.nvidia.com", 1, H200))
    assert allocator.count("n1", pools, set(), (pod,)) == 2
    assert len(allocator.allocate("n1", pools, set(), [pod, pod])) == 2


def test_first_available_takes_the_first_subrequest_that_can_be_had(allocator):
    pools = pools_of(resource_slice("n1", [gpu(0), gpu(1, product="NVIDIA H100")]))
    pod = claim(first_available("gpu", ("h200x2", "gpu.nvidia.com", 2, (H200,)),
                                ("anyx2", "gpu.nvidia.com", 2, ())))
    (allocation,) = allocator.allocate("n1", pools, set(), [pod])
    assert [request for request, _ in allocation.results] == ["gpu/anyx2", "gpu/anyx2"]
    assert allocator.count("n1", pools, set(), (pod,)) == 1


def test_match_attribute_keeps_a_claims_devices_on_one_value(allocator):
    mig = [device(f"gpu-{parent}-mig-1g{i}", type="mig", profile="1g.18gb", parentUUID=f"GPU-{parent}")
           for parent in (0, 1) for i in range(2)]
    pools = pools_of(resource_slice("n1", mig))
    pair = claim(exactly("mig", "mig.nvidia.com", 2),
                 constraints=[{"requests": ["mig"], "matchAttribute": "gpu.nvidia.com/parentUUID"}])
    taken = {("gpu.nvidia.com", "n1", "gpu-0-mig-1g0")}
    assert devices_of(allocator.allocate("n1", pools, taken, [pair])) == [["gpu-1-mig-1g0", "gpu-1-mig-1g1"]]
    assert allocator.count("n1", pools, taken, (pair,)) == 1
    shortfall = allocator.allocate("n1", pools, {taken.pop(), ("gpu.nvidia.com", "n1", "gpu-1-mig-1g0")}, [pair])
    assert shortfall.code == Code.CONSTRAINT_UNMET and "gpu.nvidia.com/parentUUID" in shortfall.message


def test_all_takes_every_matching_device_or_none(allocator):
    channel = device("channel-0", type="channel", id=0)
    pools = pools_of(resource_slice("n1", [gpu(0), gpu(1)]),
                     resource_slice("n1", [channel], driver="compute-domain.nvidia.com"))
    pod = claim(exactly("gpus", "gpu.nvidia.com", mode=ALL), exactly("channel",
                                                                      "compute-domain-default-channel.nvidia.com"))
    (allocation,) = allocator.allocate("n1", pools, set(), [pod])
    assert devices_of([allocation]) == [["gpu-0", "gpu-1", "channel-0"]]
    assert allocation.config == ({"source": "FromClass", "requests": ["channel"],
                                  "opaque": {"driver": "compute-domain.nvidia.com", "parameters": {"kind": "X"}}},)
    taken = allocator.allocate("n1", pools, {("gpu.nvidia.com", "n1", "gpu-1")}, [pod])
    assert taken == Shortfall(Code.ALL_DEVICES_TAKEN, "needs all devices of class gpu.nvidia.com; node n1 has 2, "
                                                      "1 of them taken")
    updating = pools_of(resource_slice("n1", [gpu(0)], count=2))
    assert allocator.allocate("n1", updating, set(), [pod]).code == Code.POOL_UPDATING


def test_match_attribute_tells_versions_apart_by_build_metadata(allocator):
    # kube-scheduler compares version attributes as strings: 1.0.0 and 1.0.0+build.7 differ
    versions = ("1.0.0", "1.0.0+build.7", "1.0.0")
    pools = pools_of(resource_slice("n1", [gpu(i, driverVersion={"version": v}) for i, v in enumerate(versions)]))
    same = [{"matchAttribute": "gpu.nvidia.com/driverVersion"}]
    assert devices_of(allocator.allocate("n1", pools, set(), [claim(exactly("g", count=2), constraints=same)])) == \
        [["gpu-0", "gpu-2"]]
    three = claim(exactly("g", count=3), constraints=same)
    assert allocator.allocate("n1", pools, set(), [three]).code == Code.CONSTRAINT_UNMET
    assert allocator.count("n1", pools, set(), (claim(exactly("g", count=2), constraints=same),)) == 1


def test_all_needs_every_matching_device_tolerated(allocator):
    # kube-scheduler counts a tainted device among "all" and then cannot take it: the request fails
    tainted = gpu(1)
    tainted["taints"] = [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]
    pools = pools_of(resource_slice("n1", [gpu(0), tainted]))
    every = exactly("gpus", "gpu.nvidia.com", mode=ALL)
    assert allocator.allocate("n1", pools, set(), [claim(every)]) == Shortfall(
        Code.ALL_DEVICES_TAKEN, "needs all devices of class gpu.nvidia.com; node n1 has 2, 0 of them taken, 1 tainted "
                                "and not tolerated")
    every["exactly"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    assert devices_of(allocator.allocate("n1", pools, set(), [claim(every)])) == [["gpu-0", "gpu-1"]]
    assert devices_of(allocator.allocate("n1", pools, set(), [claim(exactly("one"))])) == [["gpu-0"]]


def test_all_devices_that_break_a_constraint_stop_the_claim(allocator):
    # kube-scheduler treats it as an error of the claim, and does not fall back to the next subrequest
    pools = pools_of(resource_slice("n1", [gpu(0, numa=0), gpu(1, numa=1)]))
    spec = claim_spec(exactly("one"))
    spec["devices"]["requests"] = [{"name": "gpus", "firstAvailable": [
        {"name": "all", "deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1}]}]
    spec["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/numa"}]
    shortfall = allocator.allocate("n1", pools, set(), [read_claim_spec(spec, "claim")])
    assert shortfall.fatal and shortfall.code == Code.ALL_CONSTRAINT_UNMET
    assert shortfall.message == "request gpus/all asks for all devices of class gpu.nvidia.com, but device " \
                                "gpu.nvidia.com/n1/gpu-1 breaks a constraint"


def test_a_selector_error_stops_the_claim_only_where_the_search_meets_it(allocator):
    # kube-scheduler evaluates selectors as its search comes to each free device: gpu-1 has no numa attribute
    pools = pools_of(resource_slice("n1", [gpu(0, numa=0), gpu(1)]))
    numa = "device.attributes['gpu.nvidia.com'].numa == 0"
    one, two = claim(exactly("g", "gpu.nvidia.com", 1, numa)), claim(exactly("g", "gpu.nvidia.com", 2, numa))
    assert devices_of(allocator.allocate("n1", pools, set(), [one])) == [["gpu-0"]]
    failed = allocator.allocate("n1", pools, set(), [two])
    assert failed.fatal and failed.message.startswith("request g: CEL runtime error on device gpu.nvidia.com/n1/gpu-1")
    assert allocator.allocate("n1", pools, {("gpu.nvidia.com", "n1", "gpu-1")}, [two]).code == Code.TOO_FEW_DEVICES
    assert allocator.count("n1", pools, set(), (one,)) == 1


def test_incomplete_pools_are_passed_over_for_exact_counts(allocator):
    pools = pools_of(resource_slice("n1", [gpu(0)], pool="a", count=2, name="a"),
                     resource_slice("n1", [gpu(1)], pool="b", name="b"))
    assert devices_of(allocator.allocate("n1", pools, set(), [claim(exactly("g"))])) == [["gpu-1"]]
    shortfall = allocator.allocate("n1", pools, set(), [claim(exactly("g", count=2))])
    assert shortfall.message.endswith("node n1 has 1 (pools being updated or invalid: gpu.nvidia.com/a)")


def test_claims_no_node_can_take_are_fatal(allocator):
    pools = pools_of(resource_slice("n1", [gpu(0)]))
    unknown = allocator.allocate("n1", pools, set(), [claim(exactly("g", "nonesuch"))])
    assert unknown.fatal and unknown.code == Code.UNKNOWN_CLASS
    failing = allocator.allocate("n1", pools, set(), [claim(exactly("g", "broken"))])
    assert failing.fatal and failing.message.startswith("DeviceClass broken: CEL runtime error on device "
                                                        "gpu.nvidia.com/n1/gpu-0")
    assert allocator.count("n1", pools, set(), (claim(exactly("g", "broken")),)).fatal


def test_claim_config_is_passed_on_for_the_requests_allocated(allocator):
    pools = pools_of(resource_slice("n1", [gpu(0), gpu(1)]))
    opaque = {"opaque": {"driver": "gpu.nvidia.com", "parameters": {"sharing": "TimeSlicing"}}}
    spec = claim(exactly("a"), exactly("b"), config=[{"requests": ["a"], **opaque}, opaque])
    (allocation,) = allocator.allocate("n1", pools, set(), [spec])
    assert allocation.config == ({"source": "FromClaim", "requests": ["a"], **opaque}, {"source": "FromClaim",
                                                                                         **opaque})


def test_a_claim_gets_at_most_32_devices(allocator):
    pools = pools_of(resource_slice("n1", [gpu(i) for i in range(40)]))
    assert len(allocator.allocate("n1", pools, set(), [claim(exactly("g", count=32))])[0].results) == 32
    too_large = allocator.allocate("n1", pools, set(), [claim(exactly("g", count=33))])
    assert too_large.fatal and too_large.message == ("a claim asks for 33 devices; at most 32 may be allocated to "
                                                     "one claim")
    assert allocator.count("n1", pools, set(), (claim(exactly("g", count=33)),)).code == Code.CLAIM_TOO_LARGE
    assert allocator.count("n1", pools, set(), (claim(exactly("g", count=16)),)) == 2


def test_shortfalls_are_waiting_causes(allocator):
    pools = pools_of(resource_slice("n1", [gpu(0)]))
    assert allocator.allocate("n1", pools, set(), [claim(exactly("g", count=2))]).cause().code == "NoRoom"
    assert allocator.allocate("n1", pools, set(), [claim(exactly("g", "nonesuch"))]).cause().code == "Invalid"
