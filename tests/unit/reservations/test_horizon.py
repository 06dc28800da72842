"""The predicted start of a blocked gang on groups of nodes (core/horizon.py) against a search of every instant."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.horizon import Horizon, earliest_starts, slots_at
from superpod.core.request import GPU

NODES = [f"n{i}" for i in range(6)]


@st.composite
def horizons(draw):
    """Six 8-GPU nodes with some GPUs free, gangs holding the rest with predicted ends (some outlived, some capped by
    a limit), the nodes in up to three groups, and a gang of 1-8 GPU members."""
    now = 100.0
    horizon = Horizon(now)
    free = {}
    for name in NODES:
        held = draw(st.lists(st.integers(1, 4), max_size=3))
        free[name] = {GPU: 8 - sum(held)}
        for k, gpus in enumerate(held):
            start = draw(st.sampled_from([0.0, 50.0, 90.0]))
            estimate = draw(st.sampled_from([None, 20.0, 60.0, 200.0, 500.0]))
            limit = draw(st.sampled_from([None, None, 150.0, 400.0]))
            horizon.put(f"ns/{name}-{k}", start, estimate, limit, [(name, ((GPU, gpus),))])
    group = {name: draw(st.integers(0, 2)) for name in NODES}
    groups: dict[int, list] = {}
    for name in NODES:
        groups.setdefault(group[name], []).append((name, free[name]))
    gpus, replicas = draw(st.sampled_from([1, 2, 4, 8])), draw(st.integers(1, 8))
    return horizon, groups, ((GPU, gpus),), replicas


@settings(max_examples=300, deadline=None)
@given(horizons())
def test_the_earliest_start_is_the_first_instant_a_group_holds_the_gang(case):
    horizon, groups, requests, replicas = case
    found = earliest_starts(horizon, groups, requests, replicas)
    instants = sorted({horizon.now} | {max(end, horizon.now) for name in NODES for end, *_ in horizon.ends(name)})

    def holds(group: int, at: float) -> bool:
        return sum(slots_at(horizon, name, free, requests, replicas, at) for name, free in groups[group]) >= replicas

    first = next((at for at in instants if any(holds(g, at) for g in groups)), None)
    if first is None:
        assert found == {}
        return
    assert found.keys() == {g for g in groups if holds(g, first)}
    for group, start in found.items():
        assert start.at == first
        if start.after:  # the gang whose end completes the room ends by then, on one of the group's nodes
            assert any(holder == start.after and max(end, horizon.now) <= first
                       for name, _ in groups[group] for end, holder, *_ in horizon.ends(name))


def test_groups_that_free_at_the_same_instant_all_start_then():
    horizon = Horizon(100.0)
    for name in ("a", "b", "c"):
        horizon.put(f"ns/{name}", 0.0, 120.0 if name != "c" else 300.0, None, [(name, ((GPU, 8),))])
    found = earliest_starts(horizon, {1: [("a", {GPU: 0})], 2: [("b", {GPU: 0})], 3: [("c", {GPU: 0})]},
                            ((GPU, 8),), 1)
    assert {group: (start.at, start.after) for group, start in found.items()} == {1: (120.0, "ns/a"),
                                                                                  2: (120.0, "ns/b")}


@settings(max_examples=200, deadline=None)
@given(horizons(), st.lists(st.tuples(st.sampled_from([100.0, 110.0, 119.9, 120.0, 150.0, 260.0, 700.0, 2_000.0]),
                                      st.sampled_from(["", "drop", "put"])), min_size=1, max_size=6))
def test_ends_kept_while_the_clock_moves_are_the_ends_read_afresh(case, steps):
    """A node's ends, and all nodes' merged, are kept across cycles until a predicted end is reached or a gang is put
    or dropped: read at each later clock, they are what a horizon holding the same gangs reads for the first time."""
    horizon = case[0]
    for now, change in steps:
        horizon.now = now
        if change == "drop" and horizon.nodes_of:
            horizon.drop(sorted(horizon.nodes_of)[0])
        elif change == "put":
            horizon.put(f"ns/later-{now}", now - 30.0, 60.0, None, [(NODES[int(now) % len(NODES)], ((GPU, 1),))])
        fresh = Horizon(horizon.now)
        fresh.on = horizon.on
        for name in NODES:
            assert horizon.ends(name) == fresh.ends(name), (name, now)
        assert list(horizon.merged()) == sorted(end for name in NODES for end in fresh.ends(name)), now


@settings(max_examples=200, deadline=None)
@given(horizons(), st.sampled_from([100.0, 130.0, 260.0, 600.0]))
def test_a_few_nodes_own_ends_merged_start_the_gang_as_every_nodes_ends_read(case, now):
    """Found by review: with six nodes the merge of a few nodes' own ends (FEW_NODES) was never taken; both ways of
    reading the ends give every group the same start."""
    from superpod.core import horizon as module

    horizon, groups, requests, replicas = case
    horizon.now = now
    kept, module.FEW_NODES = module.FEW_NODES, 0  # any nodes count as few: their own ends are merged
    try:
        merged = earliest_starts(horizon, groups, requests, replicas)
        module.FEW_NODES = 10**9  # none do: every node's ends are read
        read = earliest_starts(horizon, groups, requests, replicas)
    finally:
        module.FEW_NODES = kept
    assert merged == read


@st.composite
def blocked_gangs(draw):
    """Three leaves of three 8-GPU nodes, some GPUs used and some nodes cordoned or left out of the search, gangs with
    predicted ends on them (some outlived, some capped), the clock somewhere, and a gang of 1-12 members."""
    from tests.unit.builders import job, node, snapshot

    names = [f"su{leaf}-n{i}" for leaf in range(3) for i in range(3)]
    nodes = [node(name).gpus(8).spine("spine-1").leaf(name.split("-")[0]) for name in names]
    for built in nodes:
        if draw(st.integers(0, 5)) == 0:
            built.cordoned()
    used = {name: draw(st.integers(0, 8)) for name in names}
    snap = snapshot(nodes, used=used)
    snap.horizon = Horizon(draw(st.sampled_from([100.0, 130.0, 260.0, 600.0])))
    for k, name in enumerate(names):
        if used[name]:
            snap.horizon.put(f"ns/g{k}", draw(st.sampled_from([0.0, 50.0, 90.0, 99.5])),
                             draw(st.sampled_from([None, 0.5, 20.0, 60.0, 200.0])),
                             draw(st.sampled_from([None, 1.0, 150.0, 400.0])), [(name, ((GPU, used[name]),))])
    gang = job("gang").gpus(draw(st.sampled_from([1, 2, 4, 8]))).replicas(draw(st.integers(1, 12)))
    if draw(st.booleans()):
        gang = gang.required("leaf")
    left_out = frozenset(draw(st.sets(st.integers(0, len(names) - 1), max_size=2)))
    return snap, gang.build(), left_out


@settings(max_examples=300, deadline=None)
@given(blocked_gangs())
def test_domains_read_node_by_node_as_ends_come_start_the_gang_as_every_node_listed(case):
    """A blocked head's soonest domain is found reading a node only when one of its ends is (its room now from the
    search's own counts): each level's domains start the gang as when every node is listed up front, and the
    members it read on each node of those domains are what the node is predicted to hold at that start."""
    from superpod.core.cycle import _groups, _open_free, _room_at
    from superpod.core.horizon import starts_and_members
    from superpod.core.placement import Solver, could_ever_hold

    snap, gang, left_out = case
    sv = Solver(snap, gang, exclude_nodes=left_out)
    for level in range(sv.node_level):
        domains = could_ever_hold(sv, level)
        if not domains:
            continue
        listed = earliest_starts(snap.horizon, {d: _open_free(sv, snap.nodes_under(d)) for d in domains},
                                 sv.requests, sv.replicas, sv.node_step)
        starts, read = starts_and_members(snap.horizon, _groups(sv, domains), sv.requests, sv.replicas, sv.node_step)
        assert starts == listed, level
        for domain, start in starts.items():
            if read is not None:
                for i in snap.nodes_under(domain):
                    assert _room_at(sv, [i], start.at, read) == _room_at(sv, [i], start.at), (level, i)
