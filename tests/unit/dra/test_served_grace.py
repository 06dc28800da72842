"""Found by review: NodeStore.serve re-stores a node whose served count moved with `now` = 0.0 (or its
not_ready_since), so NodeEntry.gpus_since becomes the epoch and judge._node_failures' grace for a node whose GPUs dip
("a kubelet restart zeroes them for seconds") is skipped: a DRA driver's slice withdrawn for a moment (driver
restart / upgrade, kubelet plugin re-registration) tears a running job on a served node down at once."""

from __future__ import annotations

from superpod.k8s.api import RESOURCESLICES
from tests.unit.dra.test_served_gpus import kube_scheduler_binds, served_cluster
from tests.unit.memory_cluster import MemoryCluster, run, training_job


def running_on_a_served_node() -> MemoryCluster:
    c = served_cluster()
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    kube_scheduler_binds(c, "classic")
    c.settle(3)
    assert c.decided("classic")["phase"] == "Running"
    return c


def test_a_served_node_whose_slice_is_withdrawn_for_a_moment_keeps_its_job_within_the_grace():
    c = running_on_a_served_node()
    [body] = [s for s in c.store.items(RESOURCESLICES) if s["spec"]["driver"] == "gpu.nvidia.com"]
    run(c.admin.delete(RESOURCESLICES, body["metadata"]["name"]))
    c.settle(3)  # 3 s of a 300 s grace (Settings(not_ready_grace=300))
    status = c.decided("classic")
    assert status["phase"] == "Running", f"torn down within the grace: {status['phase']}: {status.get('message')}"


def test_control_an_advertising_node_whose_gpus_dip_keeps_its_job_within_the_grace():
    c = MemoryCluster(nodes=1, nodes_per_unit=1)
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(4)
    assert c.decided("classic")["phase"] == "Running"
    c.update_node("dgx-su01-n01", lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "0"}))
    c.settle(3)
    assert c.decided("classic")["phase"] == "Running", c.decided("classic")
