"""Explanations and the scheduling cycle (order, reservation, backfill)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.cycle import Decision, PriorityFifo, reservation_for, schedule
from superpod.core.explain import explain
from superpod.core.phases import Cause, Reason
from superpod.core.request import GPU, JobRequest
from tests.unit.builders import TOPO, job, node, snapshot


def superpod(leaves: int = 4, per_leaf: int = 4, used: dict[str, int] | None = None, extra=()):
    nodes = [
        node(f"su{lf}-n{i}").gpus(8).spine("spine-1").leaf(f"su-{lf}")
        for lf in range(1, leaves + 1)
        for i in range(per_leaf)
    ]
    return snapshot(nodes + list(extra), TOPO, used)


def test_explanation_names_the_best_domain_and_the_filtered_nodes():
    used = {"su1-n0": 8, "su2-n0": 8, "su2-n1": 8, "su3-n0": 4, "su4-n0": 8}
    extra = [node("bad1").gpus(8).spine("spine-1").leaf("su-1").cordoned(), node("bad2").gpus(8).not_ready()]
    snap = superpod(used=used, extra=extra)
    j = job("big").gpus(8, "NVIDIA-H100-80GB-HBM3").replicas(4).required("leaf").build()
    cause = explain(snap, j)
    assert cause.code == Reason.NO_ROOM and cause.message == (
        "needs 4 nodes with 8 free NVIDIA-H100-80GB-HBM3 GPUs inside one leaf; the best leaf has room for 3 "
        "(leaf su-1); 5 nodes lack 8 free GPUs; 2 nodes cordoned or not ready"
    )


def test_explanation_when_the_job_can_never_fit():
    snap = superpod()
    cause = explain(snap, job("huge").gpus(8).replicas(5).required("leaf").build())
    assert cause.code == Reason.TOO_LARGE and cause.message.startswith(
        "needs 5 nodes with 8 free NVIDIA-H100-80GB-HBM3 GPUs inside one leaf; "
        "the largest leaf (leaf su-1) holds only 4 even when idle"
    )
    cause = explain(snap, job("x").gpus(8, "NVIDIA-H200").build())
    assert cause == (Reason.NO_NODE_QUALIFIES,
                     "needs 1 replica of 8 free NVIDIA-H200 GPUs; no node qualifies: 16 nodes of another GPU product")


def test_explanation_with_slices_and_mig():
    snap = superpod(used={f"su{lf}-n{i}": 4 for lf in range(1, 5) for i in range(4)})
    text = explain(snap, job("tp").gpus(2).replicas(6).slices(3, "node").build()).message
    assert "in slices of 3 per node" in text and "the cluster has room for 0" in text
    text = explain(snap, job("m").mig("1g.10gb").build()).message
    assert "a free MIG 1g.10gb slice" in text and "16 nodes have too little mig-1g.10gb" in text


def test_cycle_orders_by_priority_then_submission():
    snap = superpod()
    jobs = [
        job("late").gpus(8).priority(1, 20.0).build(),
        job("early").gpus(8).priority(1, 10.0).build(),
        job("urgent").gpus(8).priority(9, 30.0).build(),
    ]
    assert [d.job.name for d in schedule(snap, jobs)] == ["urgent", "early", "late"]


def test_blocked_head_reserves_and_small_jobs_backfill_elsewhere():
    # su-1 and su-2 are half busy; su-3 and su-4 are full. The 4-node leaf job must wait for a leaf.
    used = {f"su{lf}-n{i}": 8 for lf in (3, 4) for i in range(4)} | {"su1-n0": 8, "su1-n1": 8, "su2-n0": 8}
    snap = superpod(used=used)
    jobs = [
        job("big").gpus(8).replicas(4).required("leaf").priority(5).build(),
        job("s1").gpus(8).priority(1, 1.0).build(),
        job("s2").gpus(8).priority(1, 2.0).build(),
        job("s3").gpus(8).priority(1, 3.0).build(),
        job("s4").gpus(8).priority(1, 4.0).build(),
    ]
    out = schedule(snap, jobs)
    big = out[0]
    # su-2 is closest to fitting (3 of 4 nodes free): its nodes are reserved
    assert not big.placed and big.reserved == "leaf su-2"
    assert big.reason.endswith("; leaf su-2 is reserved for it")
    assert big.reserved_nodes == ("su2-n0", "su2-n1", "su2-n2", "su2-n3")
    assert [d.placed for d in out[1:]] == [True, True, False, False]
    assert all(n.startswith("su1-") for d in out[1:3] for n in d.placement.assignments)
    assert out[3].reason.startswith("fits only inside leaf su-2, reserved for default/big (priority 5)")


def test_never_fitting_job_reserves_nothing():
    snap = superpod()
    out = schedule(snap, [job("huge").gpus(8).replicas(99).priority(9).build(), job("s").gpus(8).build()])
    assert out[0].reserved is None and "even when idle" in out[0].reason
    assert out[1].placed


def test_reservation_keeps_only_the_children_it_needs():
    nodes = [
        node(f"s{s}l{lf}n{i}").gpus(8).spine(f"s{s}").leaf(f"s{s}l{lf}")
        for s in range(2)
        for lf in range(4)
        for i in range(2)
    ]
    used = {n.n.name: 8 for n in nodes}
    snap = snapshot(nodes, TOPO, used)
    j = job("j").gpus(8).replicas(4).required("spine").build()
    r = reservation_for(snap, j)
    assert len(r.domains) == 2 and all(snap.domains[d].level == 2 for d in r.domains) and not r.nodes
    assert r.label.startswith("leaf domains s")
    # a 1-node job needs one node of a leaf; a 2-node job both nodes of a leaf: the leaf itself
    r = reservation_for(snap, job("k").gpus(8).build())
    assert len(r.nodes) == 1 and not r.domains
    r = reservation_for(snap, job("k").gpus(8).replicas(2).build())
    assert not r.nodes and r.label == "leaf s0l0"


def test_small_blocked_job_reserves_single_nodes_not_a_leaf():
    snap = superpod(used={f"su{lf}-n{i}": 6 for lf in range(1, 5) for i in range(4)} | {"su3-n2": 5})
    out = schedule(snap, [job("wide").gpus(4).priority(9).build(), job("s").gpus(2).build(), job("t").gpus(2).build()])
    assert out[0].reserved == "node su3-n2 (leaf su-3)"  # 3 of 4 GPUs free: closest to fitting
    assert out[0].reserved_nodes == ("su3-n2",)
    assert (
        out[1].placed
        and out[2].placed
        and "su3-n2" not in {*out[1].placement.assignments, *out[2].placement.assignments}
    )


def test_queue_policy_seam():
    class Quota(PriorityFifo):
        parks = False  # admit reads what the cycle placed

        def admit(self, job: JobRequest, placed: list[Decision]) -> Cause | None:
            used = sum(d.job.gpus * d.job.replicas for d in placed)
            full = used + job.gpus * job.replicas > 16
            return Cause(Reason.QUEUE_AT_LIMIT, "queue team-a is at its quota of 16 GPUs") if full else None

    snap = superpod()
    out = schedule(snap, [job(f"j{k}").gpus(8).priority(0, float(k)).build() for k in range(3)], Quota())
    assert [d.placed for d in out] == [True, True, False]
    assert out[2].reason == "queue team-a is at its quota of 16 GPUs"


JOBS = st.lists(
    st.tuples(
        st.integers(1, 6),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from([None, "leaf", "spine"]),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(JOBS, st.lists(st.integers(0, 8), min_size=16, max_size=16))
def test_cycle_never_overcommits_and_respects_the_reservation(specs, used):
    snap = superpod(used={f"su{1 + i // 4}-n{i % 4}": u for i, u in enumerate(used)})
    jobs = []
    for k, (replicas, gpus, required, prio) in enumerate(specs):
        j = job(f"j{k}").gpus(gpus).replicas(replicas).priority(prio, float(k))
        if required:
            j.required(required)
        jobs.append(j.build())
    out = schedule(snap, jobs)
    assert [d.job for d in out] == PriorityFifo().order(jobs)
    assert all(f[GPU] >= 0 for f in snap.free), "overcommitted"
    assert snap.recount_ok()
    held: set[str] = set()
    for d in out:
        if d.placed:
            assert not held.intersection(d.placement.assignments), "backfilled into the reservation"
            assert sorted(r for rs in d.placement.assignments.values() for r in rs) == list(range(d.job.replicas))
        else:
            assert d.reason and "insufficient" not in d.reason
        if d.reserved:
            assert not held, "one reservation per cycle"
            held = set(d.reserved_nodes)
            assert held


def test_a_queue_of_one_shape_is_searched_once_per_snapshot(monkeypatch):
    """Found by the simulator: under overload every waiting job was searched and explained anew each cycle (80 %
    of a replay's time); jobs of one shape get one answer on one snapshot, and a new search once it changed."""
    from superpod.core import cycle

    searches = []
    real = cycle._search
    monkeypatch.setattr(cycle, "_search", lambda *args: searches.append(args[1].name) or real(*args))
    snap = superpod(leaves=1, per_leaf=2)
    waiting = [job(f"w{i:03d}").gpus(8).priority(0, i).build() for i in range(100)]
    decisions = schedule(snap, waiting)
    assert [d.placed for d in decisions[:3]] == [True, True, False]
    assert searches == ["w000", "w001", "w002", "w003"], "one search per placement, then one for the rest"
    assert len({d.reason for d in decisions[3:]}) == 1 and "room for 0" in decisions[3].reason
    assert "reserved for it" in decisions[2].reason


def test_a_shape_that_did_not_fit_is_searched_again_only_once_capacity_is_freed(monkeypatch):
    """The snapshot outlives a cycle (controller/snapshot.py): while capacity is only taken, a shape that did not
    fit still does not, so it is told the same without a search; once capacity is freed it is searched and placed.
    An assumed replica replaced by its pod frees nothing."""
    from superpod.core import cycle
    from superpod.core.model import Pod

    searches = []
    real = cycle._search
    monkeypatch.setattr(cycle, "_search", lambda *args: searches.append(args[1].name) or real(*args))

    class NoReservation(PriorityFifo):
        reserves = False

    snap = superpod(leaves=1, per_leaf=2, used={"su1-n0": 8})
    first, second = job("a").gpus(8).priority(0, 1).build(), job("b").gpus(8).priority(0, 2).build()
    decisions = schedule(snap, [first, second], NoReservation())
    assert [d.placed for d in decisions] == [True, False] and searches == ["a", "b"]
    assert schedule(snap, [second], NoReservation())[0].reason == decisions[1].reason
    snap.update([], [Pod("other/x", "su1-n1", (("cpu", 1000),))])  # more taken
    snap.update(["default/a#0"], [Pod("default/a-0", "su1-n1", ((GPU, 8),))])  # the assumed replica's pod
    assert not schedule(snap, [second], NoReservation())[0].placed
    assert searches == ["a", "b"], "capacity was only taken: no new search"
    snap.remove_pod("other/su1-n0")
    assert schedule(snap, [second], NoReservation())[0].placed
    assert searches == ["a", "b", "b"]
