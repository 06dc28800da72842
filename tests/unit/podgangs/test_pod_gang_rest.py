"""The rest of a partly bound pod gang: bound as lost replicas are replaced only in the shape its bound part was
admitted with, only for the pods it lacks, and only when a node was lost; the rest waits in the line (queue
admission). The spares freed for replacements are its too."""

from __future__ import annotations

from types import SimpleNamespace

from superpod.controller.controller import Turn
from superpod.controller.judge import Settings
from superpod.k8s.api import GPUQUEUES, NODES, PODS
from tests.unit.memory_cluster import MemoryCluster, run
from tests.unit.podgangs.test_pod_gangs import create, pod, pod_group, scheduled, stored
from tests.unit.queues.test_controller_queues import gpu_queue


def _bound_gpus(c: MemoryCluster) -> int:
    total = 0
    for body in c.store.objects[PODS].values():
        if body["spec"].get("nodeName") and not body["metadata"].get("deletionTimestamp") and \
                (body.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            total += int(body["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0))
    return total


def _bound_gang_of_two(c: MemoryCluster) -> None:
    """Gang g of 2 x 4 GPUs in queue a (limit 8), bound."""
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    create(c, *[pod(f"g-{i}", "g", 2, gpus=4, index=i) for i in range(2)])
    c.settle(3)
    assert all(stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(2))


def test_a_member_made_again_asking_more_than_was_admitted_waits_for_its_queue():
    """The tenant deletes a member and makes it again asking 8 GPUs: a tie of the gang's requests goes to the larger,
    but the slot's shape is what the bound part was admitted with (4), so it waits in the line, where queue a (4 of 8
    held) cannot admit it."""
    c = MemoryCluster(nodes=4)
    _bound_gang_of_two(c)
    c.store.delete_now(PODS, "team-a/g-1")
    c.settle(1)
    create(c, pod("g-1-big", "g", 2, gpus=8, index=1))
    c.settle(3)
    assert not stored(c, "g-1-big")["spec"].get("nodeName"), (_bound_gpus(c), scheduled(c, "g-1-big"))
    assert _bound_gpus(c) == 4


def test_a_member_its_tenant_deleted_on_a_healthy_node_waits_for_its_queue():
    """No node was lost: the member made again is a new pod of the gang's, admitted by queue a, which another gang
    filled meanwhile."""
    c = MemoryCluster(nodes=4)
    _bound_gang_of_two(c)
    c.store.delete_now(PODS, "team-a/g-1")
    c.settle(1)
    create(c, pod("h-0", "h", 1, gpus=4, index=0))
    c.settle(3)
    assert stored(c, "h-0")["spec"].get("nodeName"), scheduled(c, "h-0")
    create(c, pod("g-1", "g", 2, gpus=4, index=1))
    c.settle(3)
    assert not stored(c, "g-1")["spec"].get("nodeName"), (_bound_gpus(c), scheduled(c, "g-1"))
    assert _bound_gpus(c) == 8


def test_a_member_made_again_after_its_node_was_lost_is_bound_at_once():
    c = MemoryCluster(nodes=4)
    create(c, *[pod(f"g-{i}", "g", 2, index=i) for i in range(2)])
    c.settle(3)
    c.store.delete_now(NODES, stored(c, "g-1")["spec"]["nodeName"])
    c.store.delete_now(PODS, "team-a/g-1")
    c.settle(1)
    create(c, pod("g-1", "g", 2, index=1))
    c.settle(3)
    assert stored(c, "g-1")["spec"].get("nodeName"), scheduled(c, "g-1")


def test_pod_group_members_past_min_member_wait_for_their_queue():
    """PodGroup minMember 2, bound (16 GPUs of queue a's limit of 16): 2 more pods of the group are extras, admitted
    by the queue, not the bound part's missing members."""
    c = MemoryCluster(nodes=8)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=16)))
    member = pod_group(c, "pg", 2)
    create(c, member("pg-0"), member("pg-1"))
    c.settle(3)
    assert all(stored(c, f"pg-{i}")["spec"].get("nodeName") for i in range(2))
    create(c, member("pg-2"), member("pg-3"))
    c.settle(3)
    extra = [n for n in ("pg-2", "pg-3") if stored(c, n)["spec"].get("nodeName")]
    assert not extra, (extra, _bound_gpus(c), scheduled(c, "pg-2"))


def test_a_pod_gangs_member_made_again_takes_the_leafs_spare():
    """Leaf of 5 nodes, one spare: the gang of 4 runs on the other 4, loses one; the spare is the only free node of
    the leaf, and the member made again takes it."""
    c = MemoryCluster(nodes=10, nodes_per_unit=5, settings=Settings(not_ready_grace=300, spares=("leaf", 1)))
    create(c, *[pod(f"g-{i}", "g", 4, index=i, required="leaf") for i in range(4)])
    c.settle(3)
    assert all(stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(4))
    c.store.delete_now(NODES, stored(c, "g-1")["spec"]["nodeName"])
    c.store.delete_now(PODS, "team-a/g-1")
    c.settle(1)
    create(c, pod("g-1-x", "g", 4, index=1, required="leaf"))
    c.settle(3)
    assert stored(c, "g-1-x")["spec"].get("nodeName"), scheduled(c, "g-1-x")


def test_the_rest_of_a_pod_gang_is_not_bound_onto_the_nodes_this_cycles_replacements_nominated(monkeypatch):
    """Step 5c holds the nodes step 5b's preemptions nominated this cycle (`holds`), not only those cached, and
    passes on the spares freed for replacements."""
    c = MemoryCluster(nodes=2)
    controller = c.controller
    seen: dict = {}

    def replace(state, snap, now, held=(), spares=()):
        seen.update(held=set(held), spares=list(spares))
        return []
    monkeypatch.setattr(controller.room, "replace", replace)
    controller.room.replacing.add("team-a/g")
    found = SimpleNamespace(placement=SimpleNamespace(assignments={"node-5b": [0]}))
    controller.holds = {"team-a/job": (None, found)}
    controller._replace_pods(Turn(0.0, set(), spares=["spare-node"]))
    assert seen == {"held": {"node-5b"}, "spares": ["spare-node"]}
