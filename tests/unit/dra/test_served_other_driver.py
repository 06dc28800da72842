"""Found by review: a served node was pooled with *all* its GPU devices, though its
nvidia.com/gpu count is only what the serving class selects. Another vendor's GPUs on the same node are then booked
against nvidia.com/gpu too: each side's use shrinks the other's capacity (counted twice)."""

from __future__ import annotations

from superpod.k8s.api import DEVICECLASSES, RESOURCECLAIMTEMPLATES, RESOURCESLICES
from tests.unit.dra.test_claims_past_admission import template
from tests.unit.dra.test_served_gpus import gang_then_classic, served_cluster
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gang_claims import claiming, create_claiming
from tests.unit.podgangs.test_pod_gangs import stored

EXAMPLE = "gpu.example.com"
EX4 = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": EXAMPLE, "count": 4}}]}}


def with_example_gpus(c: MemoryCluster, node: str = "dgx-su01-n01", count: int = 4) -> None:
    """Another vendor's DRA driver publishing `count` GPUs of its own on the node, and its class (no
    extendedResourceName)."""
    run(c.admin.create(DEVICECLASSES, {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": EXAMPLE},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{EXAMPLE}'"}}]}}))
    run(c.admin.create(RESOURCESLICES, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{EXAMPLE}"},
        "spec": {"driver": EXAMPLE, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(count)]}}))
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("ex4", EX4)))


def test_another_vendors_gpus_claimed_on_a_served_node_do_not_take_its_nvidia_com_gpu():
    c = served_cluster()
    with_example_gpus(c)
    c.settle(2)
    status = gang_then_classic(c, "x", "ex4", 8)  # the gang holds the 4 example GPUs
    assert status["phase"] in ("Starting", "Running"), (
        f"8 NVIDIA GPUs are free for kube-scheduler's claim, but the job waits: {status.get('phase')} "
        f"{status.get('message')}")


def test_a_served_node_full_of_replicas_still_takes_a_gang_claiming_another_vendors_gpus():
    c = served_cluster()
    with_example_gpus(c)
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(4)
    assert c.decided("classic")["phase"] in ("Starting", "Running")
    gang = claiming("x-0", "x", 1, 0)
    gang["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "ex4"}]
    create_claiming(c, gang)
    c.settle(4)
    body = stored(c, "x-0")
    conditions = [x.get("message") for x in (body.get("status") or {}).get("conditions", ())]
    assert body["spec"].get("nodeName") == "dgx-su01-n01", (
        f"the 4 example GPUs are free but the gang waits: {conditions}")
