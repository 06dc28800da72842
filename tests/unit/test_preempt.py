"""Victim choice (core/preempt.py): on random small clusters with running gangs, the chosen set is the brute-force
lexicographic minimum (highest priority, gangs, GPUs, work lost), the preemptor fits once they are gone, and the
snapshot is given back unchanged; a gang that needs a whole leaf frees the cheapest leaf."""

from __future__ import annotations

from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


def run_gangs(snap, gangs) -> list[Victim]:
    """Bind each gang's pods ({node: gpus}) into the snapshot; the gangs as candidates."""
    out = []
    for name, priority, lost, pods in gangs:
        keys = []
        for i, (where, gpus) in enumerate(pods):
            key = f"ns/{name}-{i}"
            snap.add_pod(Pod(key, where, ((GPU, gpus),)))
            keys.append(key)
        out.append(Victim(f"ns/{name}", priority, float(sum(g for _, g in pods)), float(lost), tuple(keys)))
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


def brute_force(snap, preemptor, candidates):
    best = None
    for size in range(1, len(candidates) + 1):
        for chosen in combinations(candidates, size):
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
    return snap, gangs, preemptor.build()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_chosen_victims_are_the_brute_force_minimum_and_make_room(scenario):
    snap, gangs, preemptor = scenario
    candidates = run_gangs(snap, gangs)
    free_before = [dict(f) for f in snap.free]
    found = choose(snap, preemptor, candidates)
    assert [dict(f) for f in snap.free] == free_before, "the snapshot is given back unchanged"
    if solve(Solver(snap, preemptor)) is not None:
        assert found is None, "a gang that fits evicts nobody"
        return
    expected = brute_force(snap, preemptor, candidates)
    if expected is None:
        assert found is None
        return
    assert found is not None and found.exact
    assert found.cost == expected
    assert fits_without(snap, preemptor, found.victims)
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
