"""Placement semantics, table-driven on hand-built clusters."""

from __future__ import annotations

import pytest

from superpod.core.model import Pod, Topology
from superpod.core.placement import BEST_FIT, FIRST_FIT, Solver, place, solve, validate
from superpod.core.request import GPU, Requirement
from tests.unit.builders import TOPO, TOPO3, job, node, snapshot


def two_spines(per_leaf: int = 4, used: dict[str, int] | None = None):
    nodes = [
        node(f"s{s}l{lf}n{i}").gpus(8).spine(f"s{s}").leaf(f"s{s}l{lf}")
        for s in range(2)
        for lf in range(2)
        for i in range(per_leaf)
    ]
    return snapshot(nodes, TOPO, used)


def leaves_of(snap, placement) -> set[str]:
    return {snap.nodes[snap.index[n]].labels["superpod.dev/leaf"] for n in placement.assignments}


@pytest.mark.parametrize(
    ("replicas", "required", "leaves", "nodes"),
    [
        (1, None, 1, 1),
        (4, None, 1, 4),  # a whole leaf beats spreading
        (6, None, 2, 6),
        (6, "spine", 2, 6),
        (4, "leaf", 1, 4),
        (9, None, 3, 9),
    ],
)
def test_gang_uses_fewest_domains(replicas, required, leaves, nodes):
    snap = two_spines()
    j = job("j").gpus(8).replicas(replicas)
    if required:
        j.required(required)
    p = place(snap, j.build())
    assert p is not None
    assert p.counts[1:] == (leaves, nodes)
    if required == "spine" or replicas <= 8:
        assert p.counts[0] == 1


def test_required_leaf_is_all_or_nothing():
    snap = two_spines(used={"s0l0n0": 8, "s0l1n0": 8, "s1l0n0": 8, "s1l1n0": 8})  # every leaf has 3 free nodes
    assert place(snap, job("j").gpus(8).replicas(4).required("leaf").build()) is None
    assert place(snap, job("j").gpus(8).replicas(4).build()).counts == (1, 2, 4)


def test_preferred_never_makes_a_job_unplaceable():
    snap = two_spines(used={"s0l0n0": 8, "s0l1n0": 8, "s1l0n0": 8, "s1l1n0": 8})
    p = place(snap, job("j").gpus(8).replicas(5).preferred("leaf").build())
    assert p is not None and p.counts == (1, 2, 5)
    p = place(snap, job("j").gpus(8).replicas(3).preferred("leaf").build())
    assert p.counts == (1, 1, 3)


def test_best_fit_is_tightest_domain_coarsest_first():
    snap = two_spines(used={"s0l0n0": 6, "s0l0n1": 4, "s0l1n3": 7, "s1l1n3": 7})
    # spine s0 has the least free GPUs, in it leaf s0l0, in it node s0l0n0 (2 free)
    assert list(place(snap, job("small").gpus(1).build(), fit=BEST_FIT).assignments) == ["s0l0n0"]
    assert list(place(snap, job("two").gpus(2).build(), fit=BEST_FIT).assignments) == ["s0l0n0"]
    assert list(place(snap, job("four").gpus(4).build(), fit=BEST_FIT).assignments) == ["s0l0n1"]
    # a 3-node gang in one leaf: s0l0 has only 2 whole nodes; s0l1 is in the tighter spine
    p = place(snap, job("gang").gpus(8).replicas(3).required("leaf").build(), fit=BEST_FIT)
    assert leaves_of(snap, p) == {"s0l1"}
    # 4 whole nodes: only s1l0 has them
    p = place(snap, job("gang").gpus(8).replicas(4).required("leaf").build(), fit=BEST_FIT)
    assert leaves_of(snap, p) == {"s1l0"}


def test_first_fit_takes_the_first_of_equal_domains_and_the_tightest_node_inside():
    # leaves in the order of their first node's name: "z" (nodes a0, a1), then "b" (b0, b1)
    nodes = [node(f"{n}").gpus(8).spine("s").leaf(leaf) for n, leaf in
             (("a0", "z"), ("a1", "z"), ("b0", "b"), ("b1", "b"))]
    two = job("two").gpus(2).build()
    idle = snapshot(nodes, TOPO)
    assert list(place(idle, two, fit=FIRST_FIT).assignments) == ["a0"]  # equal leaves: the first
    # leaf b is fuller (8 free against 14) but comes later: the first leaf, and in it the tightest node (a1, 6 free)
    snap = snapshot(nodes, TOPO, used={"a1": 2, "b0": 6, "b1": 2})
    assert list(place(snap, two, fit=FIRST_FIT).assignments) == ["a1"]
    assert list(place(snap, two, fit=BEST_FIT).assignments) == ["b0"]  # the old objective: the fuller leaf
    assert place(snap, two).assignments == place(snap, two, fit=FIRST_FIT).assignments  # the default
    # fewer nodes still come first: 2 x 4 GPUs take two nodes of leaf z (4 and 6 free), one of leaf b (b1, 8 free)
    snap = snapshot(nodes, TOPO, used={"a0": 4, "a1": 2, "b0": 6})
    assert place(snap, job("gang").gpus(4).replicas(2).build(), fit=FIRST_FIT).assignments == {"b1": [0, 1]}


def test_ranks_follow_topology():
    snap = two_spines(per_leaf=2)
    p = place(snap, job("j").gpus(4).replicas(12).build())
    order = sorted((r, n) for n, rs in p.assignments.items() for r in rs)
    leaf_seq = [snap.nodes[snap.index[n]].labels["superpod.dev/leaf"] for _, n in order]
    node_seq = [n for _, n in order]
    assert all(rs == list(range(rs[0], rs[0] + len(rs))) for rs in p.assignments.values()), (
        "ranks per node are contiguous"
    )
    assert (
        len(leaf_seq) == 12
        and sum(a != b for a, b in zip(leaf_seq, leaf_seq[1:], strict=False)) == len(set(leaf_seq)) - 1
    )
    assert sum(a != b for a, b in zip(node_seq, node_seq[1:], strict=False)) == len(set(node_seq)) - 1


def test_slices_each_inside_one_nvlink_domain():
    # two racks (cliques) of 3 nodes x 4 GPUs, one leaf; slices of 4 replicas x 2 GPUs need 2 nodes each
    nodes = [node(f"r{r}t{t}").gpus(4).spine("s").leaf("l").nvlink(f"c{r}") for r in range(2) for t in range(3)]
    snap = snapshot(nodes, TOPO3, used={"r0t0": 2, "r1t0": 2})
    j = job("tp").gpus(2).replicas(8).slices(4, "nvlink").build()
    p = place(snap, j)
    assert p is not None
    clique = {n: snap.nodes[snap.index[n]].labels["nvidia.com/gpu.clique"] for n in p.assignments}
    owner = {r: n for n, rs in p.assignments.items() for r in rs}
    for start in (0, 4):
        assert len({clique[owner[r]] for r in range(start, start + 4)}) == 1
    # 12 replicas: each clique has room for 5 -> only 4 per clique in slices: impossible
    assert place(snap, job("tp").gpus(2).replicas(12).slices(4, "nvlink").build()) is None
    assert place(snap, job("tp").gpus(2).replicas(10).build()) is not None


def test_node_level_slices_keep_groups_on_one_node():
    snap = two_spines(per_leaf=1, used={"s0l0n0": 2})
    p = place(snap, job("j").gpus(2).replicas(8).slices(4, "node").build())
    assert sorted(len(v) for v in p.assignments.values()) == [4, 4]
    assert "s0l0n0" not in p.assignments  # 6 free GPUs hold only 3 replicas


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        (lambda n: n.cordoned(), 0),
        (lambda n: n.not_ready(), 0),
        (lambda n: n.taint("dedicated", "team-a"), 0),
        (lambda n: n.label("pool", "b"), 1),
    ],
)
def test_filters(builder, expected):
    nodes = [builder(node("a").gpus(8).spine("s").leaf("l")), node("b").gpus(8).spine("s").leaf("l")]
    snap = snapshot(nodes)
    p = place(snap, job("j").gpus(8).replicas(2).build())
    assert (p is not None) == bool(expected)


def test_tolerations_selector_affinity_and_product():
    nodes = [
        node("a").gpus(8).spine("s").leaf("l").taint("dedicated", "x").label("pool", "train"),
        node("b").gpus(8, "NVIDIA-H200").spine("s").leaf("l").label("pool", "train"),
        node("c").gpus(8).spine("s").leaf("l").label("pool", "infer"),
    ]
    snap = snapshot(nodes)
    assert list(place(snap, job("j").gpus(8).selector(pool="train").build()).assignments) == ["b"]
    j = job("j").gpus(8, "NVIDIA-H100-80GB-HBM3").selector(pool="train").tolerate("dedicated").build()
    assert list(place(snap, j).assignments) == ["a"]
    aff = job("j").gpus(8).build()
    aff = type(aff)(**{**aff.__dict__, "affinity": ((Requirement("pool", "In", ("infer",)),),)})
    assert list(place(snap, aff).assignments) == ["c"]


def test_foreign_pods_and_cpu_count_against_capacity():
    nodes = [node("a").gpus(8).cpu(32000).spine("s").leaf("l"), node("b").gpus(8).cpu(32000).spine("s").leaf("l")]
    snap = snapshot(nodes)
    snap.add_pod(Pod("kube-system/x", "a", (("cpu", 30000),)))
    p = place(snap, job("j").gpus(2).cpu(4000).replicas(4).build())
    assert p.assignments == {"b": [0, 1, 2, 3]}, "a has GPUs but no cpu left"
    snap.remove_pod("kube-system/x")
    assert place(snap, job("j").gpus(2).cpu(4000).replicas(8).build()).counts == (1, 1, 2)


def test_mig_slices_are_one_per_replica():
    nodes = [
        node("m1").gpus(0).mig("3g.40gb", 2).spine("s").leaf("l"),
        node("m2").mig("3g.40gb", 4).spine("s").leaf("l"),
    ]
    snap = snapshot(nodes)
    p = place(snap, job("j").mig("3g.40gb").replicas(3).build())
    assert p.assignments == {"m2": [0, 1, 2]}
    assert place(snap, job("j").mig("3g.40gb").replicas(7).build()) is None
    assert place(snap, job("j").mig("1g.10gb").build()) is None


def test_assume_then_place_never_overcommits():
    snap = two_spines()
    for k in range(16):
        p = place(snap, job(f"j{k}").gpus(8).build())
        assert p is not None
        snap.assume(job(f"j{k}").gpus(8).build(), p.assignments)
    assert place(snap, job("more").gpus(1).build()) is None
    assert all(f[GPU] == 0 for f in snap.free)
    snap.forget(job("j3").gpus(8).build())
    assert place(snap, job("more").gpus(8).build()) is not None


def test_required_node_and_flat_topology():
    snap = snapshot([node("a").gpus(8), node("b").gpus(8)], Topology())
    assert place(snap, job("j").gpus(4).replicas(2).required("node").build()).counts == (1,)
    assert place(snap, job("j").gpus(4).replicas(3).required("node").build()) is None
    assert place(snap, job("j").gpus(4).replicas(3).build()).counts == (2,)


def test_exclusion_keeps_reserved_domains_untouched():
    snap = two_spines()
    reserved = snap.domains_by_level[1][0]  # spine s0
    p = solve(Solver(snap, job("j").gpus(8).replicas(8).build(), frozenset([reserved])))
    assert all(n.startswith("s1") for n in p.assignments)
    assert solve(Solver(snap, job("j").gpus(8).replicas(9).build(), frozenset([reserved]))) is None


@pytest.mark.parametrize(
    ("j", "words"),
    [
        (job("j").gpus(8).replicas(3).slices(2, "leaf"), "multiple of topology.sliceSize"),
        (job("j").gpus(8).required("rack"), "level 'rack'"),
        (job("j").gpus(8).replicas(0), "at least 1"),
    ],
)
def test_invalid_requests_are_explained(j, words):
    snap = two_spines()
    assert words in validate(snap, j.build())
    assert place(snap, j.build()) is None


def test_over_budget_search_stays_feasible_and_says_so():
    nodes = [node(f"l{lf}n{i}").gpus(8).spine("s").leaf(f"l{lf}") for lf in range(8) for i in range(2)]
    snap = snapshot(nodes, TOPO, used={"l0n0": 8, "l3n1": 4})
    j = job("j").gpus(8).replicas(4).build()
    exact = solve(Solver(snap, j))
    rough = solve(Solver(snap, j, budget=1))
    assert exact.exact and not rough.exact
    assert sum(len(r) for r in rough.assignments.values()) == 4
    assert all(snap.free[snap.index[n]][GPU] >= 8 * len(r) for n, r in rough.assignments.items())
    assert rough.counts >= exact.counts
