"""The GPU-seconds counter (`superpod_gpu_seconds_total{queue,namespace,flavor,class}`), growing while jobs run.
Each cycle a job's usage so far (its ended attempts from status, its running attempt from its pods) is compared
with what was already counted and the difference is added; a job deleted while running is counted up to its
deletion. Pods billed on their own (controller/podbills.py: pod gangs, orphans, other schedulers' pods in a queue's
namespace, a torn-down attempt's terminating pods) are counted the same way, each up to what its record bills.
After a restart, counting resumes from each job's usage at that moment: what ran while no operator watched is in
the GPUUsage records and the jobs' status.gpuSeconds (written when an attempt ends), not in the counter.
A job's labels are taken when it is first counted (its queue, the flavor it counts against, its service class)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from superpod.api import manifests
from superpod.api.convert import pod_usage_name, usage_name
from superpod.controller.held_claims import replica_units
from superpod.controller.jobs import JobView
from superpod.controller.state import ClusterState
from superpod.core.accounting import Run, gpu_seconds
from superpod.core.phases import ACTIVE
from superpod.core.queues import ANY, SPOT
from superpod.core.request import JobRequest

Labels = tuple[str, str, str, str]  # queue ("" outside queues), namespace, flavor, service class


class Meter:
    """Counts each job's usage again only when the job, its pods or its Service changed (`ClusterState.changes`);
    between changes a job's usage grows at its rate (GPUs of its running pods), added for all jobs of a label set at
    once: at fleet size, computing every job's usage each cycle was a fifth of the operator's CPU, and a pass over
    every job to find the changed ones an eighth (10,000 nodes, 5,000 jobs): only the touched are looked at."""

    def __init__(self, counter=None, labels: Callable[[JobView], Labels] | None = None) -> None:
        self.counter = counter  # a prometheus Counter with the four labels above, or None
        self.labels = labels or outside_queues
        self._counted: dict[str, Counted] = {}  # job uid -> what was counted of it
        self._uids: dict[str, str] = {}  # job key -> uid, of the jobs counted
        self._rates: dict[Labels, dict[str, float]] = {}  # labels -> job uid -> rate, of the jobs using GPUs now
        self._at: float | None = None  # the time counted up to
        self._whole = True  # the next observation looks at every job (the first, after a reset or an error)
        self._pods: dict[str, Counted] = {}  # pod uid -> what was counted of a pod billed on its own
        self._pod_rates: dict[Labels, float] = {}  # labels -> GPUs of those pods running now
        self._pods_at: float | None = None  # the time they were counted up to (None: from their next observation)

    def reset(self) -> None:
        """Count from each job's next observation on (a new Lease term: the last leader counted until now)."""
        self._counted.clear()
        self._uids.clear()
        self._rates.clear()
        self._at = None
        self._whole = True
        self._pods.clear()
        self._pod_rates.clear()
        self._pods_at = None

    def observe_pods(self, changed: Mapping[str, tuple[Labels, float, float] | None],
                     every: Callable[[], Mapping[str, tuple[Labels, float, float]]], now: float) -> None:
        """Count the pods billed on their own up to `now`. `changed`: pod uid -> (labels, GPU-seconds billed so far,
        GPUs running now) of the pods whose bill changed since the last observation (None: no longer billed here,
        its record written); between changes a pod grows at its rate. `every`: all of them, asked on the first
        observation after a reset (counted from then on)."""
        if self.counter is None:
            return
        if self._pods_at is None:  # counted from now on: what they used before is another term's
            for uid, (labels, total, rate) in every().items():
                self._pods[uid] = Counted(labels, total, rate, now, None)
                self._pod_rates[labels] = self._pod_rates.get(labels, 0.0) + rate
            self._pods_at = now
            return
        since, self._pods_at = self._pods_at, max(now, self._pods_at)
        if self._pods_at > since:
            for labels, rate in self._pod_rates.items():
                if rate > 1e-9:
                    self.counter.labels(*labels).inc(rate * (self._pods_at - since))
        for uid, bill in changed.items():
            before = self._pods.pop(uid, None)
            counted = 0.0
            if before is not None:
                self._pod_rates[before.labels] -= before.rate
                counted = before.total + before.rate * (self._pods_at - before.at)  # (its rate added above)
            if bill is None:
                continue
            labels, total, rate = bill
            if total > counted:
                self.counter.labels(*labels).inc(total - counted)
            self._pods[uid] = Counted(labels, max(total, counted), rate, self._pods_at, None)
            self._pod_rates[labels] = self._pod_rates.get(labels, 0.0) + rate

    def observe(self, state: ClusterState, views: Mapping[str, JobView], now: float,
                touched: Collection[str] | None = None) -> None:
        """Count up to `now`. `views`: every job by key; `touched`: the keys stamped since the last observation
        (`ClusterState.touched`), the only jobs whose usage is computed again (None: all of them)."""
        if self.counter is None:
            return  # nothing to count into (the simulator, `superpod plan`)
        whole, self._whole = self._whole or touched is None, True  # until this observation ends
        keys = views.keys() if whole else touched
        changed = []
        for key in keys:
            view = views.get(key)
            if view is None:
                continue
            before = self._counted.get(view.uid)
            stamp = state.changes.get(key)
            if before is not None:
                if before.stamp == stamp:
                    continue  # it grew at its rate
                self._rate(before.labels, view.uid, 0.0)  # counted on its own below
            changed.append((view, stamp, before))
        since, self._at = self._at, max(now, self._at or now)
        if since is not None:
            for labels, rates in self._rates.items():  # the jobs unchanged, and the deleted up to their deletion
                if rates and self._at > since:
                    self.counter.labels(*labels).inc(sum(rates.values()) * (self._at - since))
        for key in [key for key in (self._uids if whole else touched) if key in self._uids and (
                key not in views or views[key].uid != self._uids[key])]:  # deleted (perhaps made again)
            uid = self._uids.pop(key)
            self._rate(self._counted.pop(uid).labels, uid, 0.0)
        for view, stamp, before in changed:
            total, rate = usage(state, view, now)
            if before is None:
                counted = total  # counted from here on
                labels = self.labels(view)  # fixed for the job's life here
            else:
                counted = before.total + before.rate * ((since or before.at) - before.at)
                labels = before.labels
                if total > counted:
                    self.counter.labels(*labels).inc(total - counted)
            self._counted[view.uid] = Counted(labels, max(total, counted), rate, self._at, stamp)
            self._uids[view.key] = view.uid
            self._rate(labels, view.uid, rate)
        self._whole = False

    def _rate(self, labels: Labels, uid: str, rate: float) -> None:
        rates = self._rates.setdefault(labels, {})
        if rate:
            rates[uid] = rate
        else:
            rates.pop(uid, None)


@dataclass(frozen=True)
class Counted:
    labels: Labels
    total: float  # GPU-seconds counted of the job up to `at`
    rate: float  # GPU-seconds per second it used from `at` on
    at: float
    stamp: int | None  # ClusterState.changes of the job when it was counted


def outside_queues(view: JobView) -> Labels:
    """The labels of a job when the cluster has no GPUQueue: its flavor is its MIG profile, GPU product, or *."""
    request = view.request
    if not isinstance(request, JobRequest):
        return "", view.key.namespace, ANY, SPOT
    return outside_labels(request)


def outside_labels(request: JobRequest) -> Labels:
    """The labels of a request no queue takes: its flavor is its MIG profile, GPU product, or *."""
    return "", request.namespace, request.mig_profile or request.gpu_product or ANY, request.service_class


def usage(state: ClusterState, view: JobView, now: float) -> tuple[float, float]:
    """(GPU-seconds so far, GPU-seconds per second now)."""
    st = view.status
    total = st.finishedGpuSeconds
    rate = 0.0
    if view.phase in ACTIVE and st.accountedAttempts < st.attempt:
        total += attempt_usage(state, view, st.attempt, now)
        rate = sum(replica_units(state, view, p.uid) for p in state.pods_of(view.key) if p.owner == view.uid
                   and p.attempt == st.attempt and p.run.start is not None and p.run.end is None)
    return total, rate


def attempt_runs(state: ClusterState, view: JobView, attempt: int) -> list[Run]:
    """The runs one attempt's own record bills (`attempt_pod_runs`)."""
    return [run for _, run in attempt_pod_runs(state, view, attempt)]


def attempt_pod_runs(state: ClusterState, view: JobView, attempt: int) -> list[tuple[str, Run]]:
    """(pod uid, run) of the runs one attempt's own record bills: observed pods, and pods already gone (their
    recorded runs) — both for a replica whose pod is gone and was made again under its name — but of a pod billed on
    its own (a replaced replica's pod: `apart_usage`) only what it ran past its record."""
    runs: list[tuple[str, Run]] = []
    prefix = f"{view.key.namespace}/"
    for i in range(view.replicas):
        key = prefix + manifests.pod_name(view.obj["metadata"]["name"], attempt, i)
        pod = state.pods.get(key)
        if pod is not None and pod.owner == view.uid:
            runs += ((pod.uid, run) for run in _unbilled(state, pod.uid, pod.run))
        ended = state.ended.get(key)
        if ended is not None and ended[:2] == (view.uid, attempt):
            runs += ((ended[3], run) for run in _unbilled(state, ended[3], ended[2]))
    return runs


def _unbilled(state: ClusterState, pod_uid: str, run: Run) -> list[Run]:
    """A pod's run, or the part of it after its own record ends (a replaced pod that outlived the decision)."""
    record = state.ledger.get(pod_usage_name(pod_uid)) if state.ledger.queue_of else None
    if record is None:
        return [run]
    if run.start is None or (run.end is not None and run.end <= record.end):
        return []
    return [Run(max(run.start, record.end), run.end)]


def apart_usage(state: ClusterState, view: JobView, attempt: int) -> float:
    """GPU-seconds of the pods of an open attempt billed on their own records (replaced replicas' pods, billed when
    they were replaced): the attempt's usage, not its record's. Not the tail of the pods left after it closed (they
    start where its record ends)."""
    own = state.ledger.get(usage_name(view.uid, attempt))
    return sum(r.gpu_seconds for r in state.ledger.pods_of(view.uid, attempt) if own is None or r.start < own.end)


def attempt_usage(state: ClusterState, view: JobView, attempt: int, now: float) -> float:
    """GPU-seconds of one attempt's pods so far, those billed apart included; a replica whose DRA claims hold more
    than it was admitted with at what they hold (held_claims.replica_units)."""
    return sum(gpu_seconds((run,), replica_units(state, view, uid), now)
               for uid, run in attempt_pod_runs(state, view, attempt)) + apart_usage(state, view, attempt)


def attempt_bill(state: ClusterState, view: JobView, attempt: int, now: float) -> float:
    """What closing an attempt bills, its pods billed apart included: its GPUUsage record's amount once that is
    written (a close retried after its record, perhaps by another replica that saw less of its pods, closes at the
    amount billed), else its usage."""
    record = state.ledger.get(usage_name(view.uid, attempt))
    if record is None:
        return attempt_usage(state, view, attempt, now)
    return record.gpu_seconds + apart_usage(state, view, attempt)
