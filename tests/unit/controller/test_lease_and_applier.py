"""One writer: the Lease judged by local observed time, a renew deadline shorter than the lease, leadership checked
before every write, status replaced (never merged) with its resourceVersion, and no write left running after apply."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from superpod.api.times import rfc3339
from superpod.controller.actions import CreatePods, Plan, WriteStatus
from superpod.controller.applier import Applier
from superpod.controller.state import ClusterState
from superpod.core.gang_key import GangKey
from superpod.k8s.api import LEASES, PODS, TRAININGJOBS, ApiError
from superpod.k8s.lease import TERM, LeaderLease
from superpod.k8s.memory import MemoryAPI
from tests.unit.memory_cluster import MemoryCluster, run, training_job


class Clocks:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def lease(store: MemoryAPI, identity: str, clock, wall=None) -> LeaderLease:
    return LeaderLease(store.client(identity), "ns", "superpod-scheduler", identity, 15, 10, 2, clock=clock,
                       wall=wall or clock)


def test_one_leader_and_takeover_only_after_the_record_stood_still_for_a_lease_duration():
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    a, b = lease(store, "a", clock), lease(store, "b", clock)
    assert run(a.step()) and not run(b.step())
    clock.now += 14
    assert not run(b.step()), "a has not renewed, but b first saw this record only 14s ago"
    clock.now += 2
    assert run(b.step()) and b.term == 1
    assert not a.is_leading(), "a's renew deadline passed long ago"
    assert not run(a.step())


def test_a_take_whose_answer_was_lost_begins_a_term_at_the_next_renewal():
    """The taking write lands but its answer is lost: the next step finds this replica the holder. Counted as a mere
    renewal, the new term began without its fresh list, and writes of the old term passed the term check."""
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    a, b = lease(store, "a", clock), lease(store, "b", clock)
    assert run(a.step()) and a.acquisitions == 1 and not run(b.step())
    clock.now += 16
    assert run(b.step()) and not run(a.step())  # b took it; a saw the new record only now
    clock.now += 16
    lost = []

    def lose(verb, kind, obj, writer):
        if writer == "a" and kind is LEASES and verb == "update" and not lost:
            lost.append(1)
            return "lose-answer"
        return None
    store.fault = lose
    with pytest.raises(ApiError):
        run(a.step())  # takes the Lease from b; the answer never comes
    assert lost and store.peek(LEASES, "ns/superpod-scheduler")["spec"]["holderIdentity"] == "a"
    assert a.acquisitions == 1, "the take was not seen"
    assert run(a.step())
    spec = store.peek(LEASES, "ns/superpod-scheduler")["spec"]
    assert a.acquisitions == 2 and a.term == spec["leaseTransitions"] == 2, "a new term, with its own fresh list"


def test_clock_skew_cannot_steal_the_lease():
    """Defect: expiry compared the remote renewTime with the local clock, so a holder whose clock is behind lost the
    lease to a standby while it was renewing every period."""
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    behind = lease(store, "a", clock, wall=lambda: clock.now - 3600)  # its wall clock is an hour late
    standby = lease(store, "b", clock)
    for _ in range(20):
        assert run(behind.step())
        assert not run(standby.step())
        clock.now += 2


def test_a_write_held_back_across_a_lost_and_retaken_lease_is_refused():
    """Throttling holds a cycle's write for a minute: meanwhile a loses the Lease, b takes it (and may place gangs),
    loses it, and a takes it again. a leads when the write is finally asked, but in another term: refused."""
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    a, b = lease(store, "a", clock), lease(store, "b", clock)
    assert run(a.step())
    TERM.set(a.acquisitions)  # the cycle begins; its write waits
    assert a.may_write()
    for taker in (b, a):
        assert not run(taker.step())  # the one to take over observes the record ...
        clock.now += 16  # ... which stands still for a lease duration (its holder cannot renew)
        assert run(taker.step())
    assert a.is_leading() and a.acquisitions == 2
    assert not a.may_write(), "a decision of term 1 written in term 2"
    TERM.set(a.acquisitions)  # the next cycle, in the new term
    assert a.may_write()
    TERM.set(None)


def test_a_holder_that_cannot_renew_stops_leading_before_anyone_may_take_over():
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    a, b = lease(store, "a", clock), lease(store, "b", clock)
    run(a.step())
    run(b.step())  # b observes the record now
    store.fault = lambda verb, kind, obj, writer: (_ for _ in ()).throw(ApiError(0, "Unavailable", "x")) \
        if writer == "a" else None
    while a.is_leading():
        with pytest.raises(ApiError):
            run(a.step())
        assert not run(b.step())
        clock.now += 2
    stopped = clock.now
    while not run(b.step()):
        clock.now += 1
    assert clock.now - stopped >= 15 - 10 - 2, "the margin between a stopping and b starting"


def test_writes_stop_the_moment_leadership_is_lost_mid_gang():
    """Defect: the Lease was renewed only between cycles and writes were not fenced, so a long cycle let the standby
    lead while the old leader still wrote."""
    c = MemoryCluster(nodes=16, nodes_per_unit=16)
    written = []

    def fault(verb, kind, obj, writer):
        if kind is PODS and verb == "create":
            written.append(obj["metadata"]["name"])
            if len(written) == 5:
                c.leading = False  # the Lease runs out while the gang is being written
        return None

    c.store.fault = fault
    c.submit(training_job("big", 16, 8))
    c.controller.applier.concurrency = 1
    c.deliver()
    outcome = run(c.controller.applier.apply(c.controller.plan(c.now)))
    assert outcome.stopped and len(written) == 5, "the dangerous moment was reached and writing stopped there"
    after = len(c.store.writes)
    c.cycle()
    assert len(c.store.writes) == after, "a replica that is not leading writes nothing"
    c.leading = True
    c.settle(3)
    assert len(c.pods("big")) == 16 and c.status("big")["attempt"] == 1, "the next leader finished the same gang"


def test_status_is_replaced_with_its_version_so_two_writers_never_merge_placements():
    """Defect: placement was written as a JSON merge patch, so two writers unioned their node maps."""
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    job = run(store.client("admin").create(TRAININGJOBS, training_job("j", 2)))
    state = ClusterState()
    state.apply(TRAININGJOBS, "ADDED", job, 0)
    first = Applier(store.client("a"), state, lambda: True, clock=clock)
    stale = Applier(store.client("b"), ClusterState(), lambda: True, clock=clock)
    stale.state.apply(TRAININGJOBS, "ADDED", job, 0)
    rv, key = job["metadata"]["resourceVersion"], GangKey("team-a", "j")
    out = run(first.apply([Plan("a", [WriteStatus(key, rv, {"placement": {"n1": [0], "n2": [1]}})])]))
    assert out.done == ["a"]
    out = run(stale.apply([Plan("b", [WriteStatus(key, rv, {"placement": {"n3": [0], "n4": [1]}})])]))
    assert "modified" in out.failed["b"], "the stale writer is refused"
    out = run(stale.apply([Plan("b", [WriteStatus(key, "", {"placement": {"n3": [0, 1]}})])]))
    assert store.peek(TRAININGJOBS, "team-a/j")["status"]["placement"] == {"n3": [0, 1]}, "replaced, not merged"


def test_apply_returns_only_when_every_write_it_started_has_finished_and_a_bug_stays_in_its_plan():
    """Defect: gather without exception handling left orphaned writes running into the next cycle."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("ok", 1, 8))
    c.deliver()
    plans = c.controller.plan(c.now)
    plans.append(Plan("bug", [CreatePods("team-a/x", ({"metadata": "not a mapping"},))]))

    async def main():
        outcome = await c.controller.applier.apply(plans)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return outcome, others

    outcome, others = run(main())
    assert others == [] and "internal error" in outcome.failed["bug"] and GangKey("team-a", "ok") in outcome.done


def test_the_lease_record_written_is_a_real_lease():
    clock = Clocks()
    store = MemoryAPI(clock=clock)
    run(lease(store, "a", clock).step())
    spec = store.peek(LEASES, "ns/superpod-scheduler")["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"] == rfc3339(clock.now, micro=True)


def test_a_standby_waits_for_events_instead_of_spinning():
    """A standby never cycles; an event that wakes it must not leave it awake (it spun at full CPU on kind)."""
    from superpod.controller.metrics import Metrics
    from superpod.controller.operator import Operator

    operator = Operator(MemoryAPI(clock=time.time), MemoryAPI(clock=time.time), "superpod-system", Metrics())
    asked = []
    operator.lease.is_leading = lambda: asked.append(1) and False

    async def go():
        stop = asyncio.Event()
        loop = asyncio.create_task(operator.schedule_loop(stop))
        operator.wake.set()  # a watch event
        await asyncio.sleep(0.3)
        stop.set()
        operator.wake.set()
        await loop

    asyncio.run(go())
    assert len(asked) <= 3, f"the standby's loop ran {len(asked)} times in 0.3 s"


def test_the_lease_thread_releases_the_lease_then_closes_its_connections():
    """The Lease thread's loop is its own: its client's connections are closed on that loop, after the release."""
    from superpod.controller.metrics import Metrics
    from superpod.controller.operator import Operator

    store = MemoryAPI(clock=time.time)
    lease_api = store.client("lease")
    closed = []

    async def close() -> None:
        closed.append(store.peek(LEASES, "superpod-system/superpod-scheduler")["spec"].get("holderIdentity"))
    lease_api.close = close
    operator = Operator(store.client("op"), lease_api, "superpod-system", Metrics(), identity="me")
    stop = threading.Event()
    thread = threading.Thread(target=operator.lease_thread, args=(stop, lambda: None))
    thread.start()
    deadline = time.monotonic() + 5
    while not operator.lease.is_leading() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert operator.lease.is_leading()
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and closed == [None], "closed once, after the Lease was given up"


@pytest.mark.parametrize("free", [True, False])
def test_a_free_lease_is_taken_before_the_first_list_which_then_serves_the_term(free):
    """Listing everything at start, then again at the first acquisition, doubled the time to the first cycle at
    10,000 nodes and 50,000 pods. A Lease taken before the first list began needs no second list; one taken after
    it (here: held by another replica until the list is over) still gets its fresh list before any decision."""
    from superpod.controller.metrics import Metrics
    from superpod.controller.operator import Operator
    from superpod.k8s.api import WATCHED

    store = MemoryAPI(clock=time.time)
    client = store.client("op")
    listed = []
    pages = client.pages

    def counted(kind):
        listed.append(kind)
        return pages(kind)
    client.pages = counted
    operator = Operator(client, store.client("lease"), "superpod-system", Metrics(), identity="me",
                        lease_seconds=3)
    other = LeaderLease(store.client("other"), "superpod-system", operator.lease.name, "other", 3, 2, 0.2)
    if not free:
        run(other.step())

    async def go():
        stop, stop_lease = asyncio.Event(), threading.Event()
        lease = await operator.start(stop_lease)
        at_start = len(listed)
        if not free:
            await other.release()
        loop = asyncio.create_task(operator.schedule_loop(stop))
        deadline = time.monotonic() + 10
        while operator.synced_for != operator.lease.acquisitions and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        stop.set()
        operator.wake.set()
        await loop
        stop_lease.set()
        await asyncio.to_thread(lease.join, 5)
        return at_start

    at_start = run(go())
    assert at_start == len(WATCHED), "one list of every kind at start"
    assert operator.synced_for == operator.lease.acquisitions == 1
    assert len(listed) == (len(WATCHED) if free else 2 * len(WATCHED)), listed


def test_a_periodic_relist_waits_a_hundred_times_as_long_as_the_last_took(monkeypatch):
    """At 10,000 nodes and 50,000 pods a full list took a minute: relisting every five minutes was a fifth of the
    operator's time. The heap is still collected every period."""
    from superpod.controller import operator as module
    from superpod.controller.metrics import Metrics

    operator = module.Operator(MemoryAPI(clock=time.time), MemoryAPI(clock=time.time), "superpod-system", Metrics(),
                               resync_seconds=0.02)
    listed, collections = [], []

    async def slow_list(kind):
        listed.append(kind)
        await asyncio.sleep(0.02 / len(operator.kinds))  # a relist of 20 ms: the next may start 2 s after it began
        return operator.state.relist(kind, "1")  # an empty cluster
    operator._list = slow_list
    monkeypatch.setattr(module, "settle_heap", lambda: collections.append(1))

    async def go():
        stop = asyncio.Event()
        task = asyncio.create_task(operator.resync_loop(stop))
        await asyncio.sleep(1.0)
        stop.set()
        await task

    run(go())
    relists = len(listed) / len(operator.kinds)
    assert relists == 1, f"{relists} relists in a second, each taking 20 ms"
    assert len(collections) >= 10, "the heap is collected every period whether or not it relists"


def test_a_pod_whose_create_answer_was_lost_and_that_is_gone_before_it_was_seen_holds_its_gang_no_longer():
    """Found by the two-tenant machine's guarantee invariant: a pod whose create answer was lost was deleted (its node
    went) before the cache saw it: the cache saw it come and go between two cycles, never *in* the cache at a check,
    and the gang waited out the whole expectation (300 s) for a pod long gone."""
    c = MemoryCluster(nodes=4)
    c.submit(training_job("j", 2, 4))
    lost: list[str] = []

    def lose_first_create(verb, kind, obj, writer):
        if verb == "create" and kind is PODS and not lost:
            lost.append(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
            return "lose-answer"
        return None
    c.store.fault = lose_first_create
    c.deliver()
    run(c.controller.cycle(c.now))
    c.store.fault = None
    assert lost and lost[0] in c.store.objects[PODS] and lost[0] not in c.state.pods, "the moment: made, not seen"
    c.store.delete_now(PODS, lost[0])  # its node went; the pod garbage collector took it
    c.settle(3)
    assert c.status("j").get("phase") == "Running", c.status("j")
