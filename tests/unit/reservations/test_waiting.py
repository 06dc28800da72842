"""The waiting line: a cycle that passes over jobs whose shape did not fit decides as one that visits them all."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.baselines import POLICIES
from superpod.core.cycle import schedule
from superpod.core.gang_key import GangKey
from superpod.core.horizon import Horizon
from superpod.core.request import GPU
from superpod.core.waiting import WaitingLine, schedule_waiting
from tests.unit.builders import TOPO, job, node, snapshot

SIZES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (6, 8)]


def cluster(used: dict[str, int], ends: dict[str, float] | None = None):
    """Three leaves of four 8-GPU nodes, `used` GPUs taken on each; `ends`: when those are predicted to free."""
    nodes = [node(f"l{leaf}-n{i}").gpus(8).spine("spine-1").leaf(f"l{leaf}") for leaf in range(3) for i in range(4)]
    snap = snapshot(nodes, TOPO, used)
    snap.horizon = Horizon(0.0)
    for name, end in (ends or {}).items():
        if used.get(name):
            snap.horizon.put(f"other/{name}", 0.0, end, None, [(name, ((GPU, used[name]),))])
    return snap


def workload(draw, runtimes: bool = False) -> tuple[dict[str, int], list, dict[str, float]]:
    """`runtimes`: the used GPUs have predicted ends and the jobs limits and estimates (reservations then know
    their start, and jobs bound to end before it run inside them)."""
    used = {f"l{leaf}-n{i}": draw(st.sampled_from([0, 0, 2, 4, 7, 8])) for leaf in range(3) for i in range(4)}
    ends = {name: float(draw(st.sampled_from([100, 1_000, 10_000]))) for name in used} if runtimes else {}
    jobs = []
    for index in range(draw(st.integers(1, 60))):
        replicas, gpus = draw(st.sampled_from(SIZES))
        built = job(f"j{index:02d}").gpus(gpus).replicas(replicas)
        if replicas > 1 and draw(st.booleans()):
            built = built.required("leaf")
        request = built.priority(draw(st.sampled_from([0, 0, 0, 5])), float(draw(st.integers(0, 30)))).build()
        if runtimes:
            request = replace(request, limit=draw(st.sampled_from([None, 50.0, 500.0, 50_000.0])),
                              estimate=draw(st.sampled_from([None, 20.0, 200.0, 5_000.0])))
        jobs.append(request)
    return used, jobs, ends


def both(used: dict[str, int], jobs: list, policy_name: str, cycles: int = 2, ends: dict[str, float] | None = None):
    """Decisions per job of both, over `cycles` cycles on one snapshot each (what did not fit carries over; the
    jobs placed leave the queue, as in the controller)."""
    full_snap, line_snap = cluster(used, ends), cluster(used, ends)
    waiting = WaitingLine()
    for request in jobs:
        waiting.add(request)
    out = []
    for _ in range(cycles):
        full = {d.job.key: d for d in schedule(full_snap, jobs, POLICIES[policy_name](0))}
        visited, parked = schedule_waiting(line_snap, waiting, POLICIES[policy_name](0))
        passed = {d.job.key: d for run in parked for d in run.decisions()}
        out.append((full, {d.job.key: d for d in visited}, passed))
        jobs = [request for request in jobs if not full[request.key].placed]
        for decision in visited:
            if decision.placed:
                waiting.discard(decision.job.key)
    return out


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_passing_over_a_shape_that_did_not_fit_changes_no_decision(data):
    runtimes = data.draw(st.booleans())
    used, jobs, ends = workload(data.draw, runtimes)
    policy = data.draw(st.sampled_from(["superpod", "superpod-nobackfill", "gang-firstfit", "gang-spread"]))
    for full, visited, passed in both(used, jobs, policy, ends=ends):
        assert not visited.keys() & passed.keys()
        assert visited.keys() | passed.keys() == full.keys()
        for key, decision in {**visited, **passed}.items():
            expected = full[key]
            assert (decision.placement and decision.placement.assignments) == \
                (expected.placement and expected.placement.assignments), key
            assert (decision.reason, decision.reserved) == (expected.reason, expected.reserved), key


def test_a_policy_that_backfills_by_estimate_visits_every_job():
    """The estimate is not in a job's shape: jobs of one shape may differ in which reservations they may use."""
    assert not POLICIES["superpod-estimate-backfill"](0).parks and POLICIES["superpod"](0).parks


def test_a_long_queue_of_one_shape_is_visited_once():
    used = {f"l{leaf}-n{i}": 8 for leaf in range(3) for i in range(4)}
    jobs = [job(f"w{index:03d}").gpus(8).priority(0, float(index)).build() for index in range(200)]
    [(full, visited, passed)] = both(used, jobs, "superpod-nobackfill", cycles=1)
    assert len(visited) == 1 and len(passed) == 199
    assert {d.reason for d in full.values()} == {d.reason for d in passed.values()}


def test_a_shape_passed_over_before_a_reservation_is_searched_again_behind_it():
    used = {"l0-n0": 8, "l1-n0": 8, **{f"l2-n{i}": 8 for i in range(4)}}
    too_big = job("a-never").gpus(8).replicas(6).required("leaf")
    jobs = [too_big.priority(9, 1.0).build(), job("b-big").gpus(8).replicas(4).required("leaf").priority(5, 2.0)
            .build(), job("c-never").gpus(8).replicas(6).required("leaf").priority(0, 3.0).build(),
            job("d-small").gpus(8).priority(0, 4.0).build(), job("e-small").gpus(8).priority(0, 5.0).build()]
    [(full, visited, passed)] = both(used, jobs, "superpod", cycles=1)
    big = full[GangKey("default", "b-big")]
    assert big.reserved == "leaf l0" or big.reserved.endswith("(leaf l0)")
    assert {GangKey("default", name) for name in ("a-never", "b-big", "c-never")} <= visited.keys(), \
        "searched again behind it"
    assert full[GangKey("default", "d-small")].placed and full[GangKey("default", "e-small")].placed
    decided = {**visited, **passed}
    assert [(decided[k].reason, decided[k].reserved) for k in sorted(full)] == \
        [(full[k].reason, full[k].reserved) for k in sorted(full)]


def test_the_jobs_passed_over_stay_as_they_were_while_their_line_changes():
    """A run passed over reads its line's jobs without copying them; the line copies them before it changes (a
    job placed, another come), so the run still says the jobs it passed over."""
    used = {f"l{leaf}-n{i}": 8 for leaf in range(3) for i in range(4)}
    waiting = WaitingLine()
    jobs = [job(f"w{index:03d}").gpus(8).priority(0, float(index)).build() for index in range(20)]
    for request in jobs:
        waiting.add(request)
    _, [run] = schedule_waiting(cluster(used), waiting, POLICIES["superpod-nobackfill"](0))
    line = waiting.lines[jobs[0].shape()]
    assert run.source is line.jobs, "the run reads the line's own list"
    waiting.discard(jobs[5].key)
    waiting.add(job("w100").gpus(8).priority(0, 0.5).build())
    assert run.jobs == jobs[1:] and (run.head, run.last) == (jobs[1], jobs[-1])
    assert run.source is not line.jobs and len(line.jobs) == 20
