import pytest
from kubernetes.client.rest import ApiException

from superpod.core.dra.allocate import Allocator
from superpod.core.dra.model import node_pools, read_claim_spec, read_classes, read_slices, read_template
from superpod.hardware import nodes as sim_nodes
from superpod.hardware.dra_slices import compute_domain_claim_template, device_classes, node_slices, published_slices
from superpod.hardware.presets import SIM_LABEL, preset_nodes


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


def test_published_slices_are_owned_by_their_node_and_labelled_with_its_cluster():
    node = preset_nodes("gb200-nvl72", nodes=1, cluster="c1")[0]
    published = published_slices(node, "uid-1")
    assert [s["spec"] for s in published] == [s["spec"] for s in node_slices(node)]
    for body in published:
        assert body["metadata"]["labels"] == {SIM_LABEL: "c1"}
        assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "controller": True,
                                                        "name": node["metadata"]["name"], "uid": "uid-1"}]


class FakeCustom:
    """The few CustomObjectsApi calls `nodes._put` makes, on a dict of objects by name."""

    def __init__(self):
        self.objects, self.writes = {}, 0

    def create_cluster_custom_object(self, group, version, plural, body):
        if body["metadata"]["name"] in self.objects:
            raise ApiException(status=409)
        self._store(body, "1")

    def get_cluster_custom_object(self, group, version, plural, name):
        return self.objects[name]

    def replace_cluster_custom_object(self, group, version, plural, name, body):
        assert body["metadata"]["resourceVersion"] == self.objects[name]["metadata"]["resourceVersion"]
        self._store(body, str(int(body["metadata"]["resourceVersion"]) + 1))

    def _store(self, body, version):
        self.writes += 1
        self.objects[body["metadata"]["name"]] = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}


def test_publishing_creates_replaces_what_differs_and_leaves_the_same_alone():
    custom = FakeCustom()
    node = preset_nodes("dgx-h100", nodes=1, cluster="c1")[0]
    (body,) = published_slices(node, "uid-1")
    sim_nodes._put(custom, "resourceslices", body)
    sim_nodes._put(custom, "resourceslices", body)
    assert custom.writes == 1, "an unchanged slice is not written again"
    (newer,) = published_slices(node, "uid-2")  # the node made again
    sim_nodes._put(custom, "resourceslices", newer)
    served = custom.objects[body["metadata"]["name"]]
    assert custom.writes == 2 and served["metadata"]["ownerReferences"][0]["uid"] == "uid-2"
