import pytest

from superpod.core.dra.allocate import Allocator
from superpod.core.dra.model import node_pools, read_claim_spec, read_classes, read_slices, read_template
from superpod.hardware.dra_slices import compute_domain_claim_template, device_classes, node_slices
from superpod.hardware.presets import preset_nodes


def classes():
    found, errors = read_classes(device_classes())
    assert not errors and len(found) == 5
    return found


def claim(class_name, count, *expressions, constraints=()):
    return read_claim_spec({"devices": {"requests": [{"name": "r", "exactly": {
        "deviceClassName": class_name, "count": count,
        "selectors": [{"cel": {"expression": e}} for e in expressions]}}], "constraints": list(constraints)}}, "c")


def test_an_hgx_node_publishes_eight_gpus_with_the_drivers_attributes():
    node = preset_nodes("dgx-h100", nodes=1)[0]
    (gpu_slice,) = node_slices(node)
    spec = gpu_slice["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == ("gpu.nvidia.com", node["metadata"]["name"],
                                                                         node["metadata"]["name"])
    first = spec["devices"][0]
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert first["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert first["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert first["attributes"]["uuid"]["string"].startswith("GPU-")
    assert first["capacity"]["memory"] == {"value": str(81559 * 2 ** 20)}
    assert node_slices(node) == node_slices(node), "made-up values are deterministic"


def test_simulated_slices_serve_the_nvidia_device_classes():
    nodes = preset_nodes("gb200-nvl72", nodes=2)
    slices, errors = read_slices([s for node in nodes for s in node_slices(node)])
    assert not errors
    name = nodes[0]["metadata"]["name"]
    pools = node_pools(slices, name)
    assert [(p.driver, len(p.devices)) for p in pools] == [("compute-domain.nvidia.com", 2), ("gpu.nvidia.com", 4)]
    allocator = Allocator(classes())
    gpus = claim("gpu.nvidia.com", 4, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'",
                 "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('180Gi')) >= 0")
    channel = read_template(compute_domain_claim_template("train", "imex", "cd-uid-1"))
    allocations = allocator.allocate(name, pools, set(), [gpus, channel])
    assert [len(a.results) for a in allocations] == [4, 1]
    assert allocations[1].to_dict()["devices"]["config"] == [{
        "source": "FromClaim", "opaque": {"driver": "compute-domain.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig", "domainID": "cd-uid-1",
            "allocationMode": "Single"}}}]
    assert allocator.count(name, pools, set(), (gpus,)) == 1
    small = claim("gpu.nvidia.com", 1)
    assert allocator.count(name, pools, set(), (small,)) == 4
    assert allocator.count(name, pools, set(), (small, channel)) == 1, "one IMEX channel device per node"


def test_mig_instances_replace_their_gpu_and_share_its_uuid():
    node = preset_nodes("rental-mixed", nodes=1)[0]  # an H100 80GB server
    (gpu_slice,) = node_slices(node, mig={0: [("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]})
    devices = gpu_slice["spec"]["devices"]
    assert [d["name"] for d in devices[:4]] == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-2g20gb-14-4",
                                                "gpu-0-mig-1g10gb-19-6", "gpu-1"]
    assert devices[0]["capacity"]["memorySlice3"] == {"value": "1"} and "memorySlice4" not in devices[0]["capacity"]
    slices, _ = read_slices([gpu_slice])
    pools = node_pools(slices, node["metadata"]["name"])
    pair = claim("mig.nvidia.com", 2, constraints=[{"matchAttribute": "gpu.nvidia.com/parentUUID"}])
    assert len(Allocator(classes()).allocate(node["metadata"]["name"], pools, set(), [pair])[0].results) == 2
    with pytest.raises(ValueError, match="cannot start at memory slice 1"):
        node_slices(node, mig={0: [("3g.40gb", 1)]})
