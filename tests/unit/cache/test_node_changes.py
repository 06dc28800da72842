"""A node that changed costs what it touches: taken into the kept snapshot in place (Snapshot.replace_node),
leaving it exactly as a fresh build would be (free capacity, every view's aggregates and filter counts, every
placement decision and its words), and only the gangs on it judged again."""

from __future__ import annotations

import random
from dataclasses import replace

from superpod.core.explain import explain
from superpod.core.gang_key import GangKey
from superpod.core.model import Pod, Snapshot
from superpod.core.placement import place
from superpod.core.request import GPU, Taint
from superpod.k8s.api import NODES
from tests.unit.builders import TOPO, job, node
from tests.unit.memory_cluster import MemoryCluster, run, training_job

JOBS = [job("one").gpus(1).build(), job("pair").replicas(2).gpus(8).required("leaf").build(),
        job("four").replicas(4).gpus(4).preferred("leaf").build(),
        job("tolerant").replicas(2).gpus(8).tolerate("maintenance").build(),
        job("cpu-heavy").replicas(12).gpus(2).cpu(48000).build()]  # never fits: explained every time


def fleet() -> tuple[list, list[Pod]]:
    nodes = [node(f"n{i:02d}").gpus(8).spine(f"s{i // 8}").leaf(f"l{i // 4}").build() for i in range(16)]
    pods = [Pod(f"ns/p{i}", f"n{i * 3 % 16:02d}", ((GPU, 1 + i % 8),)) for i in range(12)]
    return nodes, pods


def changed(rng: random.Random, old):
    kind = rng.choice(["cordon", "ready", "taint", "gpus", "cpu", "hold", "label"])
    if kind == "cordon":
        return replace(old, unschedulable=not old.unschedulable)
    if kind == "ready":
        return replace(old, ready=not old.ready)
    if kind == "taint":
        return replace(old, taints=() if old.taints else (Taint("maintenance", "", "NoSchedule"),))
    if kind == "gpus":
        return replace(old, allocatable={**old.allocatable, GPU: rng.choice([4, 6, 8])})
    if kind == "cpu":
        return replace(old, allocatable={**old.allocatable, "cpu": rng.choice([32000, 64000])})
    if kind == "hold":
        return replace(old, held="" if old.held else "being repartitioned for MIG")
    return replace(old, labels={**old.labels, "example.com/pool": rng.choice(["a", "b"])})


def same(kept: Snapshot, fresh: Snapshot) -> None:
    assert kept.free == fresh.free and kept.recount_ok()
    for one in JOBS:
        mine, theirs = kept.view(one), fresh.view(one)
        assert mine.eligible == theirs.eligible and +mine.reasons == +theirs.reasons
        assert mine.gpu_histogram == theirs.gpu_histogram and mine.node_count == theirs.node_count
        assert place(kept, one) == place(fresh, one), one.name
        assert explain(kept, one) == explain(fresh, one), one.name  # the words too (their counts are kept)


def test_nodes_changed_in_place_match_a_fresh_build():
    rng = random.Random(7)
    nodes, pods = fleet()
    kept = Snapshot(nodes, TOPO, pods)
    for one in JOBS:
        kept.view(one)  # views exist before the changes: they are what must follow
    for _ in range(60):
        i = rng.randrange(len(nodes))
        nodes[i] = changed(rng, nodes[i])
        assert kept.replace_node(nodes[i])
        same(kept, Snapshot(nodes, TOPO, pods))


def test_what_moves_a_node_in_the_tree_asks_for_a_new_build():
    nodes, pods = fleet()
    kept = Snapshot(nodes, TOPO, pods)
    assert not kept.replace_node(replace(nodes[0], labels={**nodes[0].labels, "superpod.dev/leaf": "l3"}))
    assert not kept.replace_node(replace(nodes[0], allocatable={**nodes[0].allocatable, GPU: 16}))
    assert not kept.replace_node(node("new").gpus(8).build())


def test_the_controller_follows_a_cordon_without_building_the_snapshot_again():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("first", 1, 8))
    c.settle(2)
    builds = c.controller.snapshots.rebuilds
    free = sorted(set(c.store.objects[NODES]) - {c.pods("first")[0]["spec"]["nodeName"]})
    for name in free[:2]:
        c.update_node(name, lambda obj: obj["spec"].update(unschedulable=True))
    c.submit(training_job("second", 2, 8))
    c.settle(2)
    assert c.status("second")["phase"] == "Queued" and "cordoned" in c.status("second")["message"]
    c.update_node(free[0], lambda obj: obj["spec"].update(unschedulable=False))
    c.settle(2)
    nodes = sorted(p["spec"]["nodeName"] for p in c.pods("second"))
    assert nodes == sorted([free[0], free[2]])
    assert c.controller.snapshots.rebuilds == builds, "cordons were taken in place"


def test_a_node_change_judges_only_the_gangs_on_that_node():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    for name in ("a", "b", "c", "d"):
        c.submit(training_job(name, 1, 8))
    c.settle(3)
    judged = []
    judge = c.controller._judge
    c.controller._judge = lambda view, now, limit: judged.append(view.key) or judge(view, now, limit)
    c.cycle()
    assert judged == [], "running gangs are steady"
    node = c.pods("b")[0]["spec"]["nodeName"]
    c.update_node(node, lambda obj: obj["metadata"]["labels"].update({"example.com/pool": "blue"}))
    c.cycle()
    assert judged == [GangKey("team-a", "b")]


def test_a_deleted_node_leaves_no_stamp_and_its_gang_is_judged():
    """A node deleted is forgotten (no stamp kept for every node that ever was); the gang on it is still judged:
    it is gone from the nodes, although the other node of the gang changed later than it."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("pair", 2, 8))
    c.settle(3)
    stamps = c.controller.state.node_stamps
    first, second = sorted({p["spec"]["nodeName"] for p in c.pods("pair")}, key=stamps.__getitem__)
    c.update_node(second, lambda obj: obj["metadata"]["labels"].update({"example.com/pool": "blue"}))
    c.settle(1)
    judged = []
    judge = c.controller._judge
    c.controller._judge = lambda view, now, limit: judged.append(view.key) or judge(view, now, limit)
    run(c.admin.delete(NODES, first))
    c.cycle()
    assert first not in stamps and len(stamps) == 3
    assert judged == [GangKey("team-a", "pair")]


def test_an_unreadable_node_is_warned_about_left_out_and_taken_back_once_readable():
    """Unreadable nodes are kept as they are stored (ClusterState.unreadable), not found by a scan of every node at
    each node change (a quarter of the operator's CPU at 10,000 nodes)."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    bad, other = sorted(c.store.objects[NODES])[:2]
    c.update_node(bad, lambda obj: obj["status"]["allocatable"].update({"nvidia.com/gpu": "eight"}))
    c.update_node(other, lambda obj: obj["status"]["allocatable"].update({"nvidia.com/gpu": "-"}))
    c.cycle()
    assert c.state.unreadable == {bad, other}
    assert [reason for reason, _ in c.events(bad)] == ["NodeUnreadable"]
    c.submit(training_job("wide", 3, 8))  # needs three nodes: two are left out
    c.settle(2)
    assert c.status("wide")["phase"] == "Queued"
    c.update_node(bad, lambda obj: obj["status"]["allocatable"].update({"nvidia.com/gpu": "8"}))
    run(c.admin.delete(NODES, other))
    c.settle(2)
    assert c.state.unreadable == set() and c.status("wide")["phase"] == "Running"
