"""Placement against exhaustive search on small clusters (hypothesis)."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from superpod.core.model import Pod, Snapshot, Topology, filter_reason
from superpod.core.placement import BEST_FIT, FIRST_FIT, Solver, solve
from superpod.core.request import GPU, PODS, JobRequest
from tests.unit.builders import LEAF, NODE, NVLINK, SPINE, job, node, snapshot

TOPOS = [Topology((LEAF, NODE)), Topology((SPINE, LEAF, NODE)), Topology((SPINE, LEAF, NVLINK, NODE))]


@st.composite
def scenarios(draw, multi: bool = False):
    """Small clusters with mixed free GPUs; `multi` biases towards gangs that need several nodes."""
    topo = draw(st.sampled_from(TOPOS))
    levels = topo.domain_levels
    n = draw(st.integers(6 if multi else 1, 16))
    nodes, used = [], {}
    mig = not multi and draw(st.integers(0, 5)) == 0  # a MIG job: one 1g.10gb slice per replica
    cpu_bound = draw(st.booleans())
    for i in range(n):
        b = node(f"n{i:02d}").gpus(8)
        if mig:
            b.mig("1g.10gb", draw(st.integers(0, 7)))
        if cpu_bound:
            b.cpu(draw(st.sampled_from([8000, 16000, 64000])))
        path = ""
        for lv in levels:
            path += str(draw(st.integers(0, 2)))
            b.label(lv.label, path)
        if draw(st.integers(0, 9)) == 0:
            b.cordoned()
        nodes.append(b)
        used[b.n.name] = draw(st.sampled_from([0, 0, 0, 4, 8, 2] if multi else [0, 0, 2, 4, 6, 8, 1, 3]))
    names = [lv.name for lv in topo.levels]
    g = draw(st.sampled_from([4, 8] if multi else [1, 2, 4, 8, 8]))
    jb = job("j").mig("1g.10gb") if mig else job("j").gpus(g)
    if cpu_bound:
        jb.cpu(4000)
    if draw(st.booleans()):
        size = draw(st.sampled_from([2, 3]))
        jb.slices(size, draw(st.sampled_from(names)))
        jb.replicas(size * draw(st.integers(1, 3)))
    else:
        jb.replicas(draw(st.integers(2 if multi else 1, 8)))
    req = draw(st.sampled_from([None] * 4 + names[:-1] if multi else [None, *names]))
    if req:
        jb.required(req)
    snap = snapshot(nodes, topo, used)
    exclude = frozenset(
        draw(st.sets(st.integers(1, len(snap.domains) - 1), max_size=1)) if len(snap.domains) > 1 else ()
    )
    nodes_out = (
        frozenset(draw(st.sets(st.integers(0, n - 1), max_size=3))) if draw(st.integers(0, 3)) == 0 else frozenset()
    )
    return snap, jb.build(), exclude if draw(st.integers(0, 3)) == 0 else frozenset(), nodes_out


EXCLUDED: set[str] = set()  # nodes excluded (reserved) in the current example


def _slots(snap: Snapshot, job: JobRequest, name: str) -> int:
    n = snap.nodes[snap.index[name]]
    if filter_reason(n, job) is not None or name in EXCLUDED:
        return 0
    free = snap.free[snap.index[name]]
    return min(max(free.get(r, 0), 0) // q for r, q in job.requests if q)


def _paths(snap: Snapshot, name: str) -> list[tuple[str, ...]]:
    labels = snap.nodes[snap.index[name]].labels
    out, key = [], ()
    for lv in snap.levels:
        key = key + (labels[lv.label],)
        out.append(key)
    return out + [(*key, name)]


def _places(snap: Snapshot, lvl: int) -> dict[tuple[str, ...], int]:
    """Each domain of level `lvl` (its path) -> its place: the domains in the order of their first node's name."""
    order: dict[tuple[str, ...], int] = {}
    for name in sorted(n.name for n in snap.nodes):
        order.setdefault(_paths(snap, name)[lvl], len(order))
    return order


def _cost(snap: Snapshot, job: JobRequest, names: list[str], fit: str = FIRST_FIT) -> tuple:
    """(domains per level..., nodes, then per level the fit term of the chosen domains..., of the chosen nodes) from
    scratch. The fit term: free GPUs summed (best fit; always at the node level) or places summed (first fit)."""
    eligible = [n.name for n in snap.nodes if filter_reason(n, job) is None]
    free = {x: max(snap.free[snap.index[x]].get(job.primary, 0), 0) for x in eligible}
    depth = len(snap.levels) + 1
    counts, fits = [], []
    for lvl in range(depth):
        chosen = {_paths(snap, x)[lvl] for x in names}
        counts.append(len(chosen))
        if fit == FIRST_FIT and lvl < depth - 1:
            places = _places(snap, lvl)
            fits.append(sum(places[path] for path in chosen))
        else:
            fits.append(sum(free[x] for x in eligible if _paths(snap, x)[lvl] in chosen))
    return tuple(counts + fits)


def _feasible(snap: Snapshot, job: JobRequest, names: tuple[str, ...]) -> bool:
    topo = snap.topology
    if len(names) > job.replicas:
        return False
    if job.required:
        q = topo.index(job.required) - 1
        if len({_paths(snap, x)[q] for x in names}) != 1:
            return False
    u = job.slice_size or 1
    s = topo.index(job.slice_required) - 1 if job.slice_required else None
    if s is None or u == 1:
        return sum(_slots(snap, job, x) for x in names) >= job.replicas
    groups: dict = {}
    for x in names:
        groups.setdefault(_paths(snap, x)[s], []).append(x)
    lo = hi = 0
    node_level = s == len(snap.levels)
    for members in groups.values():
        if node_level:
            top = (_slots(snap, job, members[0]) // u) * u
            low = u
        else:
            top = (sum(_slots(snap, job, x) for x in members) // u) * u
            low = -(-len(members) // u) * u
        if top < low:
            return False
        lo, hi = lo + low, hi + top
    return lo <= job.replicas <= hi


def _check_feasible(snap: Snapshot, job: JobRequest, assign: dict[str, list[int]]) -> None:
    ranks = sorted(r for rs in assign.values() for r in rs)
    assert ranks == list(range(job.replicas))
    for name, rs in assign.items():
        assert 0 < len(rs) <= _slots(snap, job, name), "overcommits a node"
    topo = snap.topology
    owner = {r: name for name, rs in assign.items() for r in rs}
    if job.required:
        q = topo.index(job.required) - 1
        assert len({_paths(snap, x)[q] for x in assign}) == 1
    if job.slice_required:
        s = topo.index(job.slice_required) - 1
        for start in range(0, job.replicas, job.slice_size):
            group = {_paths(snap, owner[r])[s] for r in range(start, start + job.slice_size)}
            assert len(group) == 1, f"slice at {start} spans domains"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_placement_matches_exhaustive_search(sc):
    _check_against_exhaustive(*sc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(multi=True))
def test_multi_node_gangs_match_exhaustive_search(sc):
    _check_against_exhaustive(*sc)


def _check_against_exhaustive(
    snap: Snapshot, job: JobRequest, exclude: frozenset[int], exclude_nodes: frozenset[int]
) -> None:
    EXCLUDED.clear()
    EXCLUDED.update(snap.nodes[i].name for d in exclude for i in snap.nodes_under(d))
    EXCLUDED.update(snap.nodes[i].name for i in exclude_nodes)
    candidates = [n.name for n in snap.nodes if _slots(snap, job, n.name) > 0]
    feasible = [list(names) for k in range(1, min(job.replicas, len(candidates)) + 1)
                for names in combinations(candidates, k) if _feasible(snap, job, names)]
    for fit in (FIRST_FIT, BEST_FIT):
        best = min((_cost(snap, job, names, fit) for names in feasible), default=None)
        got = solve(Solver(snap, job, exclude, exclude_nodes=exclude_nodes, fit=fit))
        if best is None:
            assert got is None
            continue
        assert got is not None, f"exhaustive search found {best}"
        _check_feasible(snap, job, got.assignments)
        assert _cost(snap, job, list(got.assignments), fit) == best, fit
        assert got.counts == best[: len(snap.levels) + 1]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(multi=True), st.sampled_from([FIRST_FIT, BEST_FIT]))
def test_the_search_bounds_never_exceed_the_best_cost_below_a_domain(sc, fit):
    """_lower_bound and _floor prune a domain only if they are at most what its best placement costs."""
    snap, job, exclude, exclude_nodes = sc
    sv = Solver(snap, job, exclude, exclude_nodes=exclude_nodes, fit=fit)
    for domain in range(1, len(snap.domains)):
        for amount in range(1, job.replicas + 1):
            found = sv._best_in(domain, amount) if sv._capacity_bound(domain) >= amount else None
            if found is not None:
                best = sv._domain_cost(domain) + found[0]
                assert sv._lower_bound(domain, amount) <= best
                assert sv._domain_cost(domain) + sv._floor(snap.domains[domain].level, amount) <= best


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_a_domains_room_read_from_the_aggregates_is_the_room_its_nodes_give(sc, data):
    """Solver.room answers a gang asking only for GPUs (and a pod slot) from the view's free-GPU aggregates where no
    node is short of pod slots: the same as summing its nodes. Nodes get 1-110 pod slots, some already taken."""
    snap, job, exclude, exclude_nodes = sc
    nodes = [replace(n, allocatable={**n.allocatable, PODS: data.draw(st.sampled_from([1, 3, 110, 110]))})
             for n in snap.nodes]
    taken = [Pod(f"other/{n.name}-{k}", n.name, ((PODS, 1),)) for n in nodes
             for k in range(data.draw(st.integers(0, 2)))]
    snap = Snapshot(nodes, snap.topology, [*snap.pods.values(), *taken])
    job = replace(job, requests=(*job.requests, (PODS, 1)))
    sv = Solver(snap, job, exclude, exclude_nodes=exclude_nodes)
    walked = Solver(snap, job, exclude, exclude_nodes=exclude_nodes)
    walked.room_by_gpus = False
    assert [sv.room(d) for d in range(len(snap.domains))] == [walked.room(d) for d in range(len(snap.domains))]
    if {r for r, _ in job.requests} == {GPU, PODS} and not job.slice_required and not (exclude or exclude_nodes):
        assert sv.room_by_gpus  # the examples reach the aggregates
