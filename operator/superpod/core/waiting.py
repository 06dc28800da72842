"""The waiting line, kept between cycles: the jobs that wait, by shape, each shape's jobs in queue order.

A cycle over a long queue need not visit every waiting job. While a cycle only takes capacity, a shape that did
not fit under some reservations does not fit later in the cycle either (Snapshot.unfit): so once one job of a
shape got that answer, the jobs of that shape behind it get the same one, until the reservations change.
`schedule_waiting` merges the shapes' lines in queue order and stops visiting a shape at that point; the jobs
passed over come back as `Parked` runs, each with the answer all its jobs got. The decisions are those of
`cycle.schedule` over the same jobs (a test compares them), for a policy that `parks` (QueuePolicy); the cost
follows the jobs placed and the shapes waiting, not the length of the queue.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from superpod.core.cycle import Decision, Held, QueuePolicy, decide_isolated, unfit_key
from superpod.core.gang_key import GangKey
from superpod.core.model import Snapshot
from superpod.core.phases import Cause
from superpod.core.request import JobRequest, Shape


class Line:
    """The waiting jobs of one shape, in queue order (queue_key)."""

    __slots__ = ("keys", "jobs", "lent")

    def __init__(self) -> None:
        self.keys: list[tuple] = []
        self.jobs: list[JobRequest] = []
        self.lent = False  # `jobs` is read by a Parked run: copied before it changes

    def lend(self) -> list[JobRequest]:
        """The jobs as they are, for a Parked run to keep: not copied now (a long line is passed over every cycle)
        but before the line next changes."""
        self.lent = True
        return self.jobs

    def add(self, job: JobRequest) -> None:
        at = bisect_left(self.keys, job.queue_key)
        self.keys.insert(at, job.queue_key)
        self._own().insert(at, job)

    def remove(self, job: JobRequest) -> None:
        at, end = bisect_left(self.keys, job.queue_key), bisect_right(self.keys, job.queue_key)
        for i in range(at, end):
            if self.jobs[i] is job:
                del self.keys[i], self._own()[i]
                return

    def _own(self) -> list[JobRequest]:
        if self.lent:
            self.jobs, self.lent = self.jobs[:], False
        return self.jobs


class WaitingLine:
    """Every waiting job, in one Line per shape. Jobs are added and removed as they start and stop waiting."""

    def __init__(self) -> None:
        self.lines: dict[Shape, Line] = {}
        self.jobs: dict[GangKey, JobRequest] = {}  # the requests in its line

    def add(self, job: JobRequest) -> None:
        self.discard(job.key)
        self.jobs[job.key] = job
        self.lines.setdefault(job.shape(), Line()).add(job)

    def discard(self, key: GangKey) -> None:
        job = self.jobs.pop(key, None)
        if job is not None:
            line = self.lines[job.shape()]
            line.remove(job)
            if not line.jobs:
                del self.lines[job.shape()]

    def all(self) -> list[JobRequest]:
        return sorted(self.jobs.values(), key=lambda job: job.queue_key)


@dataclass(frozen=True)
class Parked:
    """Jobs of one shape a cycle passed over, in queue order (`source[first:until]`, their line's jobs as they were
    then: Line.lend): each got the decision of the visited job before them (`cause`, `blocked_by`)."""

    source: list[JobRequest]
    first: int
    until: int
    cause: Cause
    blocked_by: tuple[GangKey, ...] = ()

    @property
    def jobs(self) -> list[JobRequest]:
        return self.source[self.first : self.until]

    @property
    def head(self) -> JobRequest:
        return self.source[self.first]

    @property
    def last(self) -> JobRequest:
        return self.source[self.until - 1]

    def decision(self, job: JobRequest) -> Decision:
        return Decision(job, None, self.cause, blocked_by=self.blocked_by)

    def decisions(self) -> list[Decision]:
        return [self.decision(job) for job in self.jobs]


def schedule_waiting(snap: Snapshot, waiting: WaitingLine,
                     policy: QueuePolicy) -> tuple[list[Decision], list[Parked]]:
    """The decisions of the jobs visited (in queue order), and the runs of jobs passed over. `policy.parks` must
    hold; placed gangs are assumed into `snap`, as cycle.schedule does."""
    assert policy.parks, "a policy that reads more of a job than its shape cannot pass jobs over"
    lines = list(waiting.lines.values())
    heap = [(line.keys[0], index, 0) for index, line in enumerate(lines)]
    heapq.heapify(heap)
    visited: list[Decision] = []
    parked: list[Parked] = []
    placed: list[Decision] = []
    held = Held()
    failed: dict[Shape, str] = {}
    stopped: dict[int, tuple[int, Decision]] = {}  # line -> (the first job passed over, the decision it repeats)
    while heap:
        key, index, position = heapq.heappop(heap)
        line = lines[index]
        job = line.jobs[position]
        decision, taken = decide_isolated(snap, job, policy, placed, held, failed)
        visited.append(decision)
        if decision.placement is not None:
            placed.append(decision)
        if taken is not None:  # the jobs behind it are searched under new reservations: lines stopped go on
            held.add(policy.group(job), taken)
            for other, (first, repeated) in stopped.items():
                until = bisect_right(lines[other].keys, key)
                _park(parked, lines[other], first, until, repeated)
                if until < len(lines[other].keys):
                    heapq.heappush(heap, (lines[other].keys[until], other, until))
            stopped.clear()
        following = position + 1
        if following == len(line.keys):
            continue
        if decision.placement is None and taken is None and not decision.error \
                and (known := snap.unfit.get(unfit_key(job, policy, held, snap.horizon.now))) is not None \
                and known.cause == decision.cause:
            stopped[index] = (following, decision)
        else:
            heapq.heappush(heap, (line.keys[following], index, following))
    for index, (first, repeated) in stopped.items():
        _park(parked, lines[index], first, len(lines[index].keys), repeated)
    return visited, parked


def _park(parked: list[Parked], line: Line, first: int, until: int, repeated: Decision) -> None:
    if until > first:
        parked.append(Parked(line.lend(), first, until, repeated.cause, repeated.blocked_by))
