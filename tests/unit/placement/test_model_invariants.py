"""Aggregates stay equal to a from-scratch recount over random sequences of assume/forget/add/remove."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.model import Pod, Snapshot
from superpod.core.placement import BEST_FIT, FIRST_FIT, place
from superpod.core.request import GPU
from tests.unit.builders import TOPO3, job, node, snapshot

PROBES = [
    job("p1").gpus(8).replicas(3).required("leaf").build(),
    job("p2").gpus(2).replicas(5).build(),
    job("p3").gpus(4).replicas(4).slices(2, "nvlink").build(),
]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(1, 6), st.sampled_from([1, 2, 4, 8]), st.sampled_from([None, "leaf"])),
        st.tuples(st.just("forget"), st.integers(0, 20)),
        st.tuples(st.just("pod"), st.integers(0, 11), st.integers(0, 8)),
        st.tuples(st.just("unpod"), st.integers(0, 30)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(0, 3))
def test_aggregates_match_recount(ops, product_views):
    nodes = [
        node(f"n{i:02d}").gpus(8).spine(f"s{i // 6}").leaf(f"l{i // 3}").nvlink(f"c{i // 2}").cpu(64000)
        for i in range(12)
    ]
    snap = snapshot(nodes, TOPO3)
    for k in range(product_views):  # several filter views that must all stay current
        snap.view(
            job(f"v{k}")
            .gpus(1, "NVIDIA-H100-80GB-HBM3" if k % 2 else None)
            .selector(**({"x": "y"} if k == 3 else {}))
            .build()
        )
    placed, pods = [], []
    for n, op in enumerate(ops):
        if op[0] == "place":
            j = job(f"j{n}").gpus(op[2]).replicas(op[1]).cpu(1000)
            if op[3]:
                j.required(op[3])
            j = j.build()
            p = place(snap, j)
            if p is not None:
                snap.assume(j, p.assignments)
                placed.append(j)
        elif op[0] == "forget" and placed:
            snap.forget(placed.pop(op[1] % len(placed)))
        elif op[0] == "pod":
            key = f"other/p{n}"
            snap.add_pod(Pod(key, snap.nodes[op[1]].name, ((GPU, op[2]),)))
            pods.append(key)
        elif op[0] == "unpod" and pods:
            snap.remove_pod(pods.pop(op[1] % len(pods)))
        assert snap.recount_ok()
        # memoised bounds and views give the same decisions as a snapshot built from scratch
        fresh = Snapshot(snap.nodes, snap.topology, list(snap.pods.values()))
        for probe in PROBES:
            for fit in (FIRST_FIT, BEST_FIT):
                a, b = place(snap, probe, fit=fit), place(fresh, probe, fit=fit)
                assert (a and a.assignments) == (b and b.assignments)
        # placements never overcommit: free GPUs go negative only through foreign pods
        if not pods:
            assert all(f.get(GPU, 0) >= 0 and f.get("cpu", 0) >= 0 for f in snap.free)
    for j in placed:
        snap.forget(j)
    for key in pods:
        snap.remove_pod(key)
    assert all(f[GPU] == 8 and f["cpu"] == 64000 for f in snap.free)
    assert snap.recount_ok()
