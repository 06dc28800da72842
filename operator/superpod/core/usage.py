"""Recorded usage: one Record per ended attempt of a TrainingJob, and one per pod billed on its own (a pod gang's, an
orphaned or a foreign pod's, the terminating tail of a closed attempt's pod) — GPUUsage objects, what tenants are
billed from — and the sums the queues need of them: GPU-seconds in a budget period, and past usage decayed with a
half-life. Pure: times are passed in.

A record holds the attempt's GPU-seconds and its span (first pod start to last pod finish). A window that cuts the
span counts the share of the span inside it (the GPUs are taken as held evenly over the span): exact for a window
that holds the whole attempt, off by at most the pods' start skew otherwise."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from superpod.core.accounting import Run
from superpod.core.estimates import RUNS
from superpod.core.phases import Phase


@dataclass(frozen=True)
class Record:
    queue: str  # "" outside queues
    namespace: str
    job: str
    flavor: str
    service_class: str
    attempt: int
    gpus: float  # GPU units the gang held
    start: float
    end: float
    gpu_seconds: float
    pod: str = ""  # the pod's name, for a pod's own record ("" for a TrainingJob attempt's)
    estimate_key: str = ""  # what its runtime teaches the estimator about (api.convert.estimate_key)
    outcome: str = ""  # how the attempt ended: the job's phase after it (Succeeded, Failed, Queued), "" unknown
    limit: float | None = None  # the runtime limit the attempt ran under (None: none, or not recorded)
    job_uid: str = ""  # the uid of the TrainingJob it bills ("" for pods of no TrainingJob, or whose job is gone)

    @property
    def teaches(self) -> bool:
        """Whether its span is a runtime the estimator learns from: an attempt that ran to its end."""
        return bool(self.estimate_key) and not self.pod and self.outcome == Phase.SUCCEEDED and self.end > self.start

    def within(self, since: float, until: float) -> float:
        """Its GPU-seconds inside [since, until)."""
        if self.end <= self.start:  # an instant: counted where it happened
            return self.gpu_seconds if since <= self.start < until else 0.0
        overlap = min(until, self.end) - max(since, self.start)
        return self.gpu_seconds * max(0.0, overlap) / (self.end - self.start)


def _taught_entry(name: str, record: Record) -> tuple[float, float, str, float]:
    return record.end, record.end - record.start, name, record.limit or 0.0


def runs_within(runs: Iterable[Run], units: float, since: float, until: float) -> float:
    """GPU-seconds of pod runs inside [since, until) (a run without an end runs until `until`)."""
    total = 0.0
    for run in runs:
        if run.start is not None:
            end = until if run.end is None else min(run.end, until)
            total += max(0.0, end - max(run.start, since))
    return units * total


def period_of(anchor: float, length: float, now: float) -> tuple[float, float]:
    """(start, end) of the budget period holding `now`: periods of `length` seconds counted from `anchor`."""
    start = anchor + math.floor((now - anchor) / length) * length
    return start, start + length


def decay(elapsed: float, half_life: float) -> float:
    """What is left of an amount after `elapsed` seconds (negative: what it was that long before)."""
    return math.pow(0.5, elapsed / half_life) if half_life > 0 else 1.0


COLUMNS = {"queue": ("queue",), "namespace": ("namespace",), "job": ("namespace", "job"),
           "flavor": ("flavor", "service_class")}  # what `summarize` may group by -> the fields of a group


def summarize(amounts: Iterable[tuple[Record, float]], by: str) -> dict[tuple[str, ...], tuple[float, int]]:
    """GPU-seconds and attempts per group (`by`: a key of COLUMNS), of records with the amount each counts."""
    fields = COLUMNS[by]
    out: dict[tuple[str, ...], tuple[float, int]] = {}
    for record, amount in amounts:
        if amount > 0:
            key = tuple(getattr(record, name) for name in fields)
            seconds, attempts = out.get(key, (0.0, 0))
            out[key] = (seconds + amount, attempts + 1)
    return out


@dataclass
class Ledger:
    """The records by queue, with the sums the queues read every cycle kept up to date as records come and go:
    GPU-seconds since a period start (per queue and start asked for), and decayed past usage."""

    by_queue: dict[str, dict[str, Record]] = field(default_factory=dict)  # queue -> record name -> record
    queue_of: dict[str, str] = field(default_factory=dict)  # record name -> its queue
    # (namespace, job, attempt) -> names of the TrainingJob attempt records (a job made again under its name starts
    # at attempt 1 again): where the pods an attempt left behind start to be billed on their own
    by_attempt: dict[tuple[str, str, int], set[str]] = field(default_factory=dict)
    # (job uid, attempt) -> names of the records of its pods billed on their own (replaced, left behind): by uid, as
    # a job made again under its name has pods of the same names and attempts as the one before
    pods_by_attempt: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    totals: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (queue, flavor, class) -> all time
    _spent: dict[tuple[str, float], float] = field(default_factory=dict)  # (queue, since) -> GPU-seconds after it
    _past: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # queue -> (half-life, value, at)
    # (namespace, estimate key, GPU units) -> (end, runtime, record name, limit or 0) of the attempts that teach, by
    # end: the history the runtime estimator reads (rebuilt from the records, so it survives restarts)
    taught: dict[tuple[str, str, float], list[tuple[float, float, str, float]]] = field(default_factory=dict)

    def add(self, name: str, record: Record) -> None:
        self.remove(name)
        self.by_queue.setdefault(record.queue, {})[name] = record
        self.queue_of[name] = record.queue
        index, key = self._index(record)
        index.setdefault(key, set()).add(name)
        if record.teaches:
            bisect.insort(self.taught.setdefault((record.namespace, record.estimate_key, record.gpus), []),
                          _taught_entry(name, record))
        self._count(record, 1.0)

    def get(self, name: str) -> Record | None:
        queue = self.queue_of.get(name)
        return None if queue is None else self.by_queue[queue][name]

    def remove(self, name: str) -> None:
        if name in self.queue_of:
            record = self.by_queue[self.queue_of.pop(name)].pop(name)
            index, key = self._index(record)
            names = index.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del index[key]
            if record.teaches:
                key = (record.namespace, record.estimate_key, record.gpus)
                entry = _taught_entry(name, record)
                taught = self.taught[key]
                at = bisect.bisect_left(taught, entry)
                if at < len(taught) and taught[at] == entry:
                    del taught[at]
                if not taught:
                    del self.taught[key]
            self._count(record, -1.0)

    def runs(self, namespace: str, estimate_key: str, gpus: float,
             last: int = RUNS) -> list[tuple[float, float | None]]:
        """The last runs recorded under an estimate key by gangs of `gpus` GPU units (Record.gpus), oldest first, as
        (runtime, the limit it ran under or None): the runs of one size teach only that size (a tenant cannot lend a
        big job the runtimes of cheap small runs)."""
        return [(runtime, limit or None) for _, runtime, _, limit in
                self.taught.get((namespace, estimate_key, gpus), [])[-last:]]

    def _index(self, record: Record) -> tuple[dict, tuple]:
        """The index a record is found by, and its key there."""
        if record.pod:
            return self.pods_by_attempt, (record.job_uid, record.attempt)
        return self.by_attempt, (record.namespace, record.job, record.attempt)

    def pods_of(self, job_uid: str, attempt: int) -> list[Record]:
        """The records of a TrainingJob attempt's pods billed on their own."""
        return [record for name in self.pods_by_attempt.get((job_uid, attempt), ())
                if (record := self.get(name)) is not None]

    def attempt(self, namespace: str, job: str, attempt: int, started: float) -> Record | None:
        """The record of a TrainingJob's attempt whose span holds `started` (the start of one of its pods)."""
        found = [self.get(name) for name in self.by_attempt.get((namespace, job, attempt), ())]
        return max((r for r in found if r is not None and r.start <= started <= r.end), key=lambda r: r.end,
                   default=None)

    def _count(self, record: Record, sign: float) -> None:
        key = (record.queue, record.flavor, record.service_class)
        self.totals[key] = self.totals.get(key, 0.0) + sign * record.gpu_seconds
        for (queue, since) in self._spent:
            if queue == record.queue:
                self._spent[(queue, since)] += sign * record.within(since, math.inf)
        if record.queue in self._past:
            half_life, value, at = self._past[record.queue]
            self._past[record.queue] = (half_life, value + sign * record.gpu_seconds
                                        * decay(at - record.end, half_life), at)

    def spent(self, queue: str, since: float) -> float:
        """Recorded GPU-seconds of a queue after `since` (a budget period's start)."""
        key = (queue, since)
        if key not in self._spent:
            for old in [k for k in self._spent if k[0] == queue]:  # a period that ended is not asked again
                del self._spent[old]
            self._spent[key] = sum(r.within(since, math.inf) for r in self.by_queue.get(queue, {}).values())
        return self._spent[key]

    def past(self, queue: str, now: float, half_life: float) -> float:
        """Recorded GPU-seconds of a queue, each halving every `half_life` since its attempt ended."""
        known = self._past.get(queue)
        if known is None or known[0] != half_life or now < known[2]:
            value = sum(r.gpu_seconds * decay(now - r.end, half_life) for r in self.by_queue.get(queue, {}).values())
        else:
            value = known[1] * decay(now - known[2], half_life)
        self._past[queue] = (half_life, value, now)
        return value
