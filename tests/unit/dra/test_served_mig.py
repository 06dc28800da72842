"""Found by review: a served node with a GPU in MIG mode. Its nvidia.com/gpu is the 7 whole GPUs the serving class
selects; a claim of one MIG slice (on the 8th GPU, which no whole-GPU device stands for) is booked as a whole
nvidia.com/gpu of the 7, so a replica asking all 7 waits."""

from __future__ import annotations

from superpod.hardware import dra_slices
from superpod.k8s.api import DEVICECLASSES, NODES, RESOURCECLAIMTEMPLATES, RESOURCESLICES
from tests.unit.dra.test_claims_past_admission import template
from tests.unit.dra.test_served_gpus import gang_then_classic
from tests.unit.memory_cluster import MemoryCluster, run

MIG1 = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 1}}]}}


def served_mig_cluster() -> MemoryCluster:
    c = MemoryCluster(nodes=1, nodes_per_unit=1)
    for body in dra_slices.device_classes():
        run(c.admin.create(DEVICECLASSES, body))
    [node] = c.store.items(NODES)
    for body in dra_slices.node_slices(node, mig={0: [("1g.10gb", i) for i in range(7)]}):
        run(c.admin.create(RESOURCESLICES, body))
    c.update_node(node["metadata"]["name"],
                  lambda n: [n["status"][k].pop("nvidia.com/gpu") for k in ("allocatable", "capacity")])
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("mig1", MIG1)))
    return c


def test_a_mig_slice_claimed_on_a_served_node_leaves_its_whole_gpus_to_replicas():
    c = served_mig_cluster()
    c.settle(2)
    node = c.state.nodes["dgx-su01-n01"].node
    assert node.served and node.allocatable["nvidia.com/gpu"] == 7, node.allocatable
    status = gang_then_classic(c, "m", "mig1", 7)  # the gang holds one 1g slice of GPU 0
    assert status["phase"] in ("Starting", "Running"), (
        f"the 7 whole GPUs kube-scheduler serves are free, yet: {status.get('phase')} {status.get('message')}")
