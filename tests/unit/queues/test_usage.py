"""Recorded usage in the core: a record's share of a window, pod runs in a window, budget periods, and the ledger's
running sums against sums from scratch."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.accounting import Run
from superpod.core.usage import Ledger, Record, decay, period_of, runs_within, summarize


def record(queue="a", start=100.0, end=200.0, seconds=800.0, job="j", flavor="*") -> Record:
    return Record(queue, f"ns-{queue}", job, flavor, "spot", 1, 8.0, start, end, seconds)


def test_a_record_counts_its_share_of_a_window():
    r = record()
    assert r.within(0, 1000) == 800
    assert r.within(150, 1000) == 400
    assert r.within(120, 130) == 80
    assert r.within(200, 300) == 0
    assert Record("a", "n", "j", "*", "spot", 1, 8, 50, 50, 3).within(0, 100) == 3, "an instant counts where it is"


def test_runs_in_a_window_cut_each_pod_and_run_on_until_the_window_ends():
    runs = [Run(10, 20), Run(15, None), Run(None)]
    assert runs_within(runs, 2.0, 0, 30) == 2 * (10 + 15)
    assert runs_within(runs, 2.0, 18, 25) == 2 * (2 + 7)


def test_budget_periods_count_from_the_anchor():
    assert period_of(100, 50, 100) == (100, 150)
    assert period_of(100, 50, 149.9) == (100, 150)
    assert period_of(100, 50, 260) == (250, 300)


def test_summarize_groups_and_counts_attempts():
    amounts = [(record("a", job="x"), 10.0), (record("a", job="y"), 5.0), (record("b"), 1.0), (record("c"), 0.0)]
    assert summarize(amounts, "queue") == {("a",): (15.0, 2), ("b",): (1.0, 1)}
    assert summarize(amounts, "job") == {("ns-a", "x"): (10.0, 1), ("ns-a", "y"): (5.0, 1), ("ns-b", "j"): (1.0, 1)}


events = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b"]), st.floats(0, 1000), st.floats(0, 500),
                            st.floats(0, 1e5), st.booleans()), max_size=30)


@settings(max_examples=80, deadline=None)
@given(events, st.floats(0, 1000))
def test_the_ledgers_running_sums_equal_sums_from_scratch(steps, since):
    """Records come and go between reads; the kept sums stay what a full recount gives."""
    ledger, live, now = Ledger(), {}, 0.0
    for name, queue, start, length, seconds, remove in steps:
        now += 100
        key = f"r{name}"
        ledger.spent("a", since), ledger.past("a", now, 3600)  # sums kept before the change
        if remove:
            if key in live:
                ledger.remove(key)
                live.pop(key)
        else:
            live[key] = record(queue, start, start + length, seconds)
            ledger.add(key, live[key])
    now += 100
    for queue in ("a", "b"):
        mine = [r for r in live.values() if r.queue == queue]
        assert math.isclose(ledger.spent(queue, since), sum(r.within(since, math.inf) for r in mine), abs_tol=1e-6)
        assert math.isclose(ledger.past(queue, now, 3600), sum(r.gpu_seconds * decay(now - r.end, 3600)
                                                                for r in mine), rel_tol=1e-9, abs_tol=1e-6)


def test_the_ledger_finds_an_attempts_record_by_namespace_job_attempt_and_a_pods_start():
    """Where a pod an attempt left behind starts to be billed on its own: the end of its attempt's record (a job
    made again under the same name counts attempts from 1 again; a pod's own record is not an attempt's)."""
    ledger = Ledger()
    ledger.add("old-a1", record(start=100, end=200))
    ledger.add("new-a1", record(start=500, end=900))
    ledger.add("p-pod", Record("a", "ns-a", "j", "*", "spot", 1, 8.0, 900, 950, 400, pod="j-a1-0"))
    assert ledger.attempt("ns-a", "j", 1, 600).end == 900
    assert ledger.attempt("ns-a", "j", 1, 150).end == 200
    assert ledger.attempt("ns-a", "j", 1, 920) is None and ledger.attempt("ns-a", "j", 2, 600) is None
    ledger.remove("new-a1")
    assert ledger.attempt("ns-a", "j", 1, 600) is None and ledger.by_attempt == {("ns-a", "j", 1): {"old-a1"}}
