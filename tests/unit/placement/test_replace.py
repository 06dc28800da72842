"""core/replace.py: nodes for the replicas of lost nodes that keep every rule the gang was placed under, closest to
the replicas that survive, booked on the snapshot."""

from __future__ import annotations

from superpod.core.replace import choose, preempting
from tests.unit.builders import TOPO, TOPO3, job, node, snapshot


def _nodes(*specs: tuple[str, str, str]) -> list:
    """8-GPU nodes: (name, leaf, nvlink clique)."""
    return [node(name).gpus(8).spine("s1").leaf(leaf).nvlink(clique) for name, leaf, clique in specs]


def test_the_replacement_stays_in_the_gangs_required_leaf_or_there_is_none():
    nodes = _nodes(("a1", "la", "a1"), ("a2", "la", "a2"), ("a3", "la", "a3"), ("a4", "la", "a4"),
                   ("b1", "lb", "b1"), ("b2", "lb", "b2"))
    gang = job("g").replicas(3).gpus(8).required("leaf").build()
    placement = {0: "a1", 1: "a2", 2: "a3"}
    snap = snapshot(nodes, TOPO, used={"a1": 8, "a2": 8, "a3": 8})
    assert choose(snap, gang, placement, [1]) == {1: "a4"}
    snap = snapshot(nodes, TOPO, used={"a1": 8, "a2": 8, "a3": 8, "a4": 8})  # lb is free, la is not
    assert choose(snap, gang, placement, [1]) is None


def test_the_lost_node_itself_is_never_chosen_even_with_room():
    nodes = [*_nodes(("a1", "la", "a1"), ("a3", "la", "a3")), node("a2").gpus(8).spine("s1").leaf("la")]
    gang = job("g").replicas(2).gpus(4).required("leaf").build()
    snap = snapshot(nodes, TOPO, used={"a1": 4, "a2": 4})  # a2 lost, still listed with room (not ready: its grace)
    assert choose(snap, gang, {0: "a1", 1: "a2"}, [1]) == {1: "a1"}, "the survivor's own node first: tightest"


def test_the_surviving_replicas_leaf_comes_before_a_first_fit_elsewhere_in_the_required_spine():
    """Without the preference the solver's first fit took leaf la, away from the replicas that run on in lb."""
    nodes = _nodes(("a1", "la", "a1"), ("a2", "la", "a2"), ("b1", "lb", "b1"), ("b2", "lb", "b2"),
                   ("b3", "lb", "b3"))
    gang = job("g").replicas(2).gpus(8).required("spine").build()
    snap = snapshot(nodes, TOPO, used={"b1": 8, "b2": 8})
    assert choose(snap, gang, {0: "b1", 1: "b2"}, [1]) == {1: "b3"}
    snap = snapshot(nodes, TOPO, used={"b1": 8, "b2": 8, "b3": 8})
    assert choose(snap, gang, {0: "b1", 1: "b2"}, [1]) == {1: "a1"}, "then the rest of the required spine"


def test_a_replica_goes_where_the_rest_of_its_slice_runs():
    nodes = _nodes(("n1", "l1", "c1"), ("n2", "l1", "c1"), ("n3", "l1", "c2"), ("n4", "l1", "c2"),
                   ("n5", "l1", "c3"), ("n6", "l1", "c3"))
    gang = job("g").replicas(4).gpus(8).required("leaf").slices(2, "nvlink").build()
    placement = {0: "n1", 1: "n2", 2: "n3", 3: "n4"}
    used = {"n1": 8, "n2": 8, "n3": 8, "n4": 8}
    assert choose(snapshot(nodes, TOPO3, used), gang, placement, [2]) is None, "clique c2 has no room; c3 would " \
        "split the slice"
    more = [*nodes, *_nodes(("n7", "l1", "c2"))]
    assert choose(snapshot(more, TOPO3, used), gang, placement, [2]) == {2: "n7"}


def test_a_slice_lost_whole_goes_whole_to_one_clique_of_the_leaf():
    nodes = _nodes(("n1", "l1", "c1"), ("n2", "l1", "c1"), ("n3", "l1", "c2"), ("n4", "l1", "c2"),
                   ("n5", "l1", "c3"), ("n6", "l1", "c3"), ("n7", "l1", "c4"), ("n8", "l1", "c4"),
                   ("m1", "l2", "d1"), ("m2", "l2", "d1"))
    gang = job("g").replicas(4).gpus(8).required("leaf").slices(2, "nvlink").build()
    placement = {0: "n1", 1: "n2", 2: "n3", 3: "n4"}
    snap = snapshot(nodes, TOPO3, used={"n1": 8, "n2": 8, "n3": 8, "n4": 8, "n5": 8})  # c3 has one node free
    assert choose(snap, gang, placement, [2, 3]) == {2: "n7", 3: "n8"}


def test_the_choice_is_booked_and_nothing_is_when_there_is_none():
    nodes = _nodes(("a1", "la", "a1"), ("a2", "la", "a2"), ("a3", "la", "a3"), ("a4", "la", "a4"))
    gang = job("g").replicas(3).gpus(8).required("leaf").build()
    snap = snapshot(nodes, TOPO, used={"a1": 8, "a2": 8, "a3": 8})
    assert choose(snap, gang, {0: "a1", 1: "a2", 2: "a3"}, [1]) == {1: "a4"}
    assert snap.free[snap.index["a4"]]["nvidia.com/gpu"] == 0 and snap.recount_ok()
    assert choose(snap, gang, {0: "a1", 1: "a2", 2: "a3"}, [2]) is None, "a4 is taken now"
    free = [dict(f) for f in snap.free]
    assert choose(snap, gang, {0: "a1", 1: "a2", 2: "a3"}, [0, 1, 2]) is None, "no replica survives: restart"
    assert [dict(f) for f in snap.free] == free


def test_with_no_node_free_the_cheapest_victims_inside_the_gangs_leaf_make_room_and_no_more():
    from tests.unit.preemption.test_preempt import cluster, run_gangs
    snap = cluster(2, 3)  # leaves l0, l1 of three 8-GPU nodes
    gang = job("g").replicas(2).gpus(4).required("leaf").build()
    placement = {0: "l0n0", 1: "l0n1"}  # l0n1 is lost (still listed)
    candidates = run_gangs(snap, [("g-pods", 99, 0, [("l0n0", 4), ("l0n1", 4)]),
                                  ("a", 0, 100, [("l0n0", 4)]), ("b", 0, 50, [("l0n2", 4)]),
                                  ("d", 5, 1, [("l0n2", 4)]), ("c", -1, 1, [("l1n0", 8)]),
                                  ("e", -1, 1, [("l1n1", 8)]), ("f", -1, 1, [("l1n2", 8)])])[1:]
    found = preempting(snap, gang, placement, [1], candidates)
    assert [victim.key for victim in found.victims] == ["ns/b"], "the lowest priority, then the least work lost: " \
        "one gang of the leaf, none of leaf l1 though cheaper"
    assert found.placement.assignments == {"l0n2": [0]}
    assert preempting(snap, gang, placement, [1], [v for v in candidates if v.key in ("ns/c", "ns/e", "ns/f")]) \
        is None, "never outside the leaf"
