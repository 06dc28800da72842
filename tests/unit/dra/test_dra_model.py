import pytest

from superpod.core.dra.model import (
    ALL,
    UNSUPPORTED,
    DraError,
    allocated_devices,
    allocation_allows,
    node_pools,
    pod_claims,
    read_claim,
    read_claim_spec,
    read_classes,
    read_slices,
    read_template,
)

from .objects import claim_spec, device, device_class, exactly, first_available, gpu, resource_slice


def test_a_node_sees_its_own_slices_and_those_for_all_or_selected_nodes():
    slices, errors = read_slices([
        resource_slice("n1", [gpu(0), gpu(1)]),
        resource_slice("n2", [gpu(0, node="n2")]),
        resource_slice("fabric", [device("ch-0", type="channel")], driver="net.example.com", pool="fabric",
                       allNodes=True),
        resource_slice("rack", [device("link-0", type="link")], driver="rack.example.com", pool="rack-1",
                       nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [
                           {"key": "rack", "operator": "In", "values": ["1"]}]}]}),
    ])
    assert errors == []
    pools = node_pools(slices, "n1", {"rack": "1"})
    assert [(p.driver, p.name, len(p.devices)) for p in pools] == [
        ("gpu.nvidia.com", "n1", 2), ("net.example.com", "fabric", 1), ("rack.example.com", "rack-1", 1)]
    assert pools[0].node_name == "n1" and pools[0].devices[1].attribute("gpu.nvidia.com", "uuid") == "GPU-n1-1"
    assert [p.name for p in node_pools(slices, "n2", {"rack": "2"})] == ["n2", "fabric"]


def test_only_the_newest_generation_of_a_pool_counts_and_a_partial_one_is_incomplete():
    old = resource_slice("n1", [gpu(0), gpu(1)], generation=1, name="old")
    new_half = resource_slice("n1", [gpu(2)], generation=2, count=2, name="new-a")
    slices, _ = read_slices([old, new_half])
    (pool,) = node_pools(slices, "n1")
    assert pool.generation == 2 and [d.name for d in pool.devices] == ["gpu-2"] and pool.incomplete
    slices, _ = read_slices([old, new_half, resource_slice("n1", [gpu(3)], generation=2, count=2, name="new-b")])
    (pool,) = node_pools(slices, "n1")
    assert pool.usable and [d.name for d in pool.devices] == ["gpu-2", "gpu-3"]


def test_a_pool_spanning_nodes_is_complete_and_a_newer_generation_elsewhere_leaves_it_out():
    # kube-scheduler counts a pool's slices on other nodes before calling it incomplete
    here = resource_slice("n1", [gpu(0)], pool="shared", count=2, name="a")
    there = resource_slice("n2", [gpu(1)], pool="shared", count=2, name="b")
    slices, _ = read_slices([here, there])
    (pool,) = node_pools(slices, "n1")
    assert pool.usable and [d.name for d in pool.devices] == ["gpu-0"]
    newer = resource_slice("n2", [gpu(2)], pool="shared", generation=2, name="c")
    slices, _ = read_slices([here, there, newer])
    assert node_pools(slices, "n1") == []
    slices, _ = read_slices([resource_slice("n1", [gpu(0)], pool="shared", name="a"), newer])
    assert [p.generation for p in node_pools(slices, "n1")] == [1]  # complete on the node: nothing else is read


def test_a_pool_naming_a_device_twice_is_invalid():
    slices, _ = read_slices([resource_slice("n1", [gpu(0)], count=2, name="a"),
                             resource_slice("n1", [gpu(0)], count=2, name="b")])
    (pool,) = node_pools(slices, "n1")
    assert pool.invalid == "device name gpu-0 twice" and not pool.usable


def test_one_bad_object_never_stops_the_rest():
    bad_value = resource_slice("n2", [{"name": "gpu-0", "attributes": {"x": {}}}])
    slices, errors = read_slices([{"metadata": {"name": "broken"}}, bad_value, resource_slice("n1", [gpu(0)])])
    assert [s.name for s in slices] == ["n1-gpu.nvidia.com-1"]
    assert errors == ["ResourceSlice broken: missing field 'spec'",
                      "ResourceSlice n2-gpu.nvidia.com-1: attribute x: no value"]
    classes, errors = read_classes([device_class("gpu.nvidia.com", "true"),
                                    {"metadata": {"name": "odd"}, "spec": {"selectors": [{"future": {}}]}}])
    assert list(classes) == ["gpu.nvidia.com"] and errors == ["DeviceClass odd: a selector of an unknown kind: "
                                                              "['future']"]


def test_attributes_of_kinds_not_read_here_match_nothing():
    future = device("gpu-0", type="gpu")
    future["attributes"]["names"] = {"strings": ["a", "b"]}
    slices, errors = read_slices([resource_slice("n1", [future])])
    assert not errors and slices[0].devices[0].attribute("gpu.nvidia.com", "names") is UNSUPPORTED


def test_claims_and_templates_read_requests_constraints_and_config():
    spec = claim_spec(exactly("gpus", "gpu.nvidia.com", 8, "device.attributes['gpu.nvidia.com'].productName == 'X'"),
                      first_available("mig", ("small", "mig.nvidia.com", 2, ()), ("whole", "gpu.nvidia.com", 1, ())),
                      exactly("channel", "compute-domain-default-channel.nvidia.com", mode=ALL),
                      constraints=[{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/clique"}],
                      config=[{"requests": ["channel"], "opaque": {"driver": "compute-domain.nvidia.com",
                                                                   "parameters": {"domainID": "uid-1"}}}])
    claim = read_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": spec})
    gpus, mig, channel = claim.requests
    assert gpus.alternatives[0].count == 8 and not gpus.first_available
    assert [r.name for r in mig.alternatives] == ["mig/small", "mig/whole"] and mig.first_available
    assert channel.alternatives[0].mode == ALL and not claim.simple
    assert claim.constraints[0].attribute == "gpu.nvidia.com/clique"
    assert claim == read_template({"metadata": {"name": "t"}, "spec": {"spec": spec}})
    assert hash(claim) == hash(read_claim_spec(spec, "again"))


@pytest.mark.parametrize("spec, message", [
    ({"devices": {"requests": []}}, "claim x: no device requests"),
    (claim_spec({"name": "r"}), "claim x: request r: neither exactly nor firstAvailable"),
    (claim_spec(exactly("r", count=0)), "claim x: request r: count 0 is not positive"),
    (claim_spec({"name": "r", "exactly": {"deviceClassName": "c", "adminAccess": True}}),
     "claim x: request r: adminAccess is not supported"),
    (claim_spec(exactly("r"), constraints=[{"distinctAttribute": "a/b"}]),
     "claim x: a constraint of an unsupported kind: ['distinctAttribute']"),
])
def test_claims_that_cannot_be_allocated_as_written_say_why(spec, message):
    with pytest.raises(DraError) as raised:
        read_claim_spec(spec, "claim x")
    assert str(raised.value) == message


def test_devices_held_by_claims_and_the_claims_a_pod_names():
    held = {"status": {"allocation": {"devices": {"results": [
        {"request": "r", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
        {"request": "r", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1", "adminAccess": True}]}}}}
    assert allocated_devices([held, {"status": {}}]) == {("gpu.nvidia.com", "n1", "gpu-0")}
    refs = pod_claims({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"},
                                          {"name": "shared", "resourceClaimName": "c"}]})
    assert [(r.name, r.claim, r.template) for r in refs] == [("gpu", "", "t"), ("shared", "c", "")]


def test_an_allocated_claim_binds_its_pods_to_the_nodes_it_selects():
    on_n1 = {"status": {"allocation": {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}
    assert allocation_allows(on_n1, "n1", {}) and not allocation_allows(on_n1, "n2", {})
    assert allocation_allows({"status": {}}, "n2", {})
