"""Victim choice (core/preempt.py): on random small clusters with running gangs, the chosen set is the brute-force
lexicographic minimum (highest priority, gangs, GPUs, work lost), the preemptor fits once they are gone, and the
snapshot is given back unchanged; a gang that needs a whole leaf frees the cheapest leaf."""

from __future__ import annotations

from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from superpod.core.gang_key import GangKey
from superpod.core.model import Pod
from superpod.core.placement import Solver, solve
from superpod.core.preempt import Victim, choose, cost_of
from superpod.core.request import GPU
from tests.unit.builders import TOPO, TOPO3, job, node, snapshot


def cluster(leaves: int, per_leaf: int, gpus: int = 8, nvlink: int = 0):
    nodes = []
    for leaf in range(leaves):
        for i in range(per_leaf):
            built = node(f"l{leaf}n{i}").gpus(gpus).leaf(f"l{leaf}").spine("s0")
            if nvlink:
                built = built.nvlink(f"l{leaf}c{i // nvlink}")
            nodes.append(built)
    return snapshot(nodes, TOPO3 if nvlink else TOPO)


def run_gangs(snap, gangs, groups=None) -> list[Victim]:
    """Bind each gang's pods ({node: gpus}) into the snapshot; the gangs as candidates (in `groups`' groups)."""
    out = []
    for index, (name, priority, lost, pods) in enumerate(gangs):
        keys = []
        for i, (where, gpus) in enumerate(pods):
            key = f"ns/{name}-{i}"
            snap.add_pod(Pod(key, where, ((GPU, gpus),)))
            keys.append(key)
        group = groups[index % len(groups)] if groups else ""
        out.append(Victim(f"ns/{name}", priority, float(sum(g for _, g in pods)), float(lost), tuple(keys), group))
    return out


def fits_without(snap, preemptor, victims) -> bool:
    pods = [snap.pods[k] for v in victims for k in v.pods]
    for pod in pods:
        snap.remove_pod(pod.key)
    try:
        return solve(Solver(snap, preemptor)) is not None
    finally:
        for pod in pods:
            snap.add_pod(pod)


def within(chosen, limits) -> bool:
    given = {}
    for victim in chosen:
        given[victim.group] = given.get(victim.group, 0) + victim.gpus
    return all(given.get(group, 0) <= most for group, most in limits.items())


def brute_force(snap, preemptor, candidates, limits=None):
    best = None
    for size in range(1, len(candidates) + 1):
        for chosen in combinations(candidates, size):
            if not within(chosen, limits or {}):
                continue
            if fits_without(snap, preemptor, chosen) and (best is None or cost_of(chosen) < best):
                best = cost_of(chosen)
    return best


@st.composite
def scenarios(draw):
    leaves, per_leaf = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    nvlink = draw(st.sampled_from([0, 0, 2]))
    snap = cluster(leaves, per_leaf, nvlink=nvlink)
    names = [n.name for n in snap.nodes]
    free = {name: 8 for name in names}
    gangs = []
    for g in range(draw(st.integers(2, 8))):
        pods = []
        for _ in range(draw(st.integers(1, 3))):
            where = draw(st.sampled_from(names))
            if free[where] == 0:
                continue
            gpus = draw(st.sampled_from([free[where], free[where], 8, 4, 2, 1]))
            gpus = min(gpus, free[where])
            free[where] -= gpus
            pods.append((where, gpus))
        if pods:
            gangs.append((f"g{g}", draw(st.integers(0, 3)), draw(st.integers(0, 500)), pods))
    replicas = draw(st.integers(1, 6))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    preemptor = job("big").replicas(replicas).gpus(gpus).priority(10)
    level = draw(st.sampled_from([None, "leaf", "node"] + (["nvlink"] if nvlink else [])))
    if level:
        preemptor = preemptor.required(level)
    if nvlink and replicas % 2 == 0 and draw(st.booleans()):
        preemptor = preemptor.slices(2, "nvlink")
    limits = draw(st.sampled_from([{}, {}, {"q1": 8.0}, {"q1": 16.0, "q2": 4.0}]))
    return snap, gangs, preemptor.build(), limits


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_chosen_victims_are_the_brute_force_minimum_and_make_room(scenario):
    snap, gangs, preemptor, limits = scenario
    candidates = run_gangs(snap, gangs, ["", "q1", "q2"] if limits else None)
    free_before = [dict(f) for f in snap.free]
    found = choose(snap, preemptor, candidates, limits=limits)
    assert [dict(f) for f in snap.free] == free_before, "the snapshot is given back unchanged"
    if solve(Solver(snap, preemptor)) is not None:
        assert found is None, "a gang that fits evicts nobody"
        return
    expected = brute_force(snap, preemptor, candidates, limits)
    if expected is None:
        assert found is None
        return
    assert found is not None and found.exact
    assert found.cost == expected
    assert fits_without(snap, preemptor, found.victims) and within(found.victims, limits)
    assert sum(len(ranks) for ranks in found.placement.assignments.values()) == preemptor.replicas


def test_a_gang_that_needs_a_whole_leaf_frees_the_cheapest_leaf():
    snap = cluster(3, 4)
    candidates = run_gangs(snap, [
        ("a1", 0, 100, [("l0n0", 8), ("l0n1", 8)]), ("a2", 0, 100, [("l0n2", 8)]),  # leaf 0: two gangs
        ("b1", 0, 900, [("l1n0", 8), ("l1n1", 8), ("l1n2", 8)]),  # leaf 1: one gang, more work lost
        ("c1", 0, 10, [("l2n0", 8)]), ("c2", 2, 10, [("l2n1", 8)]),  # leaf 2: one of priority 2
    ])
    preemptor = job("big").replicas(4).gpus(8).required("leaf").priority(10).build()
    found = choose(snap, preemptor, candidates)
    assert [v.key for v in found.victims] == ["ns/b1"], "one gang of priority 0 beats two, and any of priority 2"
    assert set(found.placement.assignments) == {f"l1n{i}" for i in range(4)}


def test_a_queue_gives_back_only_what_it_holds_beyond_its_guarantee():
    """Queue a holds 24 GPUs with a guarantee of 16: a reclaim may take 8 of them, not two 8-GPU gangs."""
    from superpod.core.cycle import schedule
    from superpod.core.preempt import Preempting, Running
    from superpod.core.queues import ANY, FairQueues, Queue, QueueTree, Quota, Usage, capacity

    snap = snapshot([node(f"n{i}").gpus(8).spine("s").leaf(f"l{i // 2}") for i in range(4)], TOPO)
    tree = QueueTree.of([Queue(name, None, (name,), (Quota(ANY, 16),)) for name in ("a", "b")])
    gangs = []
    for name, where, gpus, priority in (("a1", "n0", 8, 0), ("a2", "n1", 8, 0), ("a3", "n2", 4, 5),
                                        ("a4", "n3", 4, 5)):
        snap.add_pod(Pod(f"a/{name}#0", where, ((GPU, gpus),)))
        gangs.append(Running(job(name, "a").gpus(gpus).priority(priority).build(), float(gpus), 100.0,
                             (f"a/{name}#0",)))
    fair = FairQueues(tree, Usage(tree.running([g.request for g in gangs])), capacity(snap.nodes, [ANY]))
    policy = Preempting(fair, lambda allowed: [g for g in gangs if allowed(g.request)], {}, fair.may_evict,
                        bound=fair.reclaim_bound)
    whole_leaf = job("b1", "b").replicas(2).gpus(8).required("leaf").build()
    [decision] = schedule(snap, [whole_leaf], policy)
    assert decision.preempts == (GangKey("a", "a3"), GangKey("a", "a4")), \
        "a1 and a2 (priority 0) would take 16 of the 8 a may give back"
    one = job("b2", "b").gpus(8).build()
    [decision] = schedule(snap, [one], Preempting(fair, lambda allowed: [g for g in gangs if allowed(g.request)],
                                                  {}, fair.may_evict, bound=fair.reclaim_bound))
    assert len(decision.preempts) == 1 and decision.preempts[0] in (GangKey("a", "a1"), GangKey("a", "a2"))


def test_a_search_cut_short_by_its_budget_says_it_is_not_exact():
    snap = cluster(1, 2)
    candidates = run_gangs(snap, [(f"g{i}", 0, 100 + i, [(f"l0n{i // 8}", 1)]) for i in range(16)])
    preemptor = job("four").gpus(4).priority(10).build()
    full = choose(snap, preemptor, candidates)
    assert full.exact and full.cost[1] == 4 and full.cost[3] == 100 + 101 + 102 + 103, "the four least lost"
    cut = choose(snap, preemptor, candidates, budget=3)
    assert cut is None or not cut.exact
