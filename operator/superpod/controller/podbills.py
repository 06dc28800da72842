"""Pods billed on their own, so that every GPU-second a pod holds is billed to exactly one queue. A TrainingJob's open
attempt bills its own pods up to the attempt's close (judge.py); every other GPU-second of a bound pod is billed
here, per pod, by a GPUUsage record named after the pod (`<pod uid>-pod`: uids are never reused, so it is written
once whoever writes it, AlreadyExists meaning done) written once the pod ended — finished, or gone:
- a pod gang's pods (other controllers' pods this scheduler binds), from their start, to the queue the gang counts
  against in the queue policy (`gang_labels`);
- the pods a TrainingJob left behind: orphaned (deleted with --cascade=orphan, they lost their owner reference and
  became pod gangs) or still terminating after their attempt closed (torn down, preempted, drained, the job
  deleted), from where their attempt's record ends, to the job's queue — never twice for the same seconds;
- GPU pods another scheduler or spec.nodeName placed in a namespace a GPUQueue owns, from their start, to that
  queue (they also count in its allocation, so its limits see them).
A TrainingJob replica's pod replaced on another node has its record written by the replacement itself
(judge.replacement), up to then; its attempt's record leaves it out (metering.attempt_runs).
Each is billed until its GPUs were freed (`state.removed_run`: its finish, or its removal). Until its record is in
the ledger its usage counts in its queue's budget, past usage and status (`opens`), and in the GPU-seconds counter.

A record per pod rather than per gang: its identity (the pod's uid) and its end (the pod's) need no bookkeeping
across restarts, and a gang whose owner replaces pods one by one has no clear "incarnation"; it costs one write per
pod that ran, when it ends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from superpod.api.convert import pod_usage_name, usage_name, usage_object
from superpod.controller.actions import Plan, RecordUsage
from superpod.controller.jobs import JobReader
from superpod.controller.metering import Labels
from superpod.controller.podgangs import PodGangs
from superpod.controller.queues import Open, QueueBook
from superpod.controller.state import ClusterState, PodInfo
from superpod.core.accounting import Run
from superpod.core.dra.units import claimed_gpus
from superpod.core.gang_key import GangKey
from superpod.core.request import PRODUCT_LABEL, JobRequest
from superpod.core.usage import Record


@dataclass(frozen=True)
class PodBill:
    """A pod's GPU time billed on its own: from `since` (its start, or where its attempt's record ends) until its
    GPUs were freed (still held while its run has no end)."""

    pod: PodInfo
    labels: Labels  # queue ("" outside queues), namespace, flavor, service class
    job: str  # the record's job: its TrainingJob's name, its gang's, or the pod's own
    job_uid: str  # its TrainingJob's uid, when known
    since: float
    settled: bool = True  # False: `since` may still move (a deleted job's record is not written yet)
    request: JobRequest | None = None  # another scheduler's (or spec.nodeName's) pod: what it counts in its queue's
    # allocation
    claimed: float = 0.0  # GPUs its DRA claims held, the most seen (PodBills.claimed)

    @property
    def run(self) -> Run:
        start = self.pod.run.start
        return Run(None if start is None else max(start, self.since), self.pod.run.end)

    @property
    def units(self) -> float:
        return (self.pod.gpus.units if self.pod.gpus else 0.0) + self.claimed

    def seconds(self, now: float) -> float:
        return self.units * self.run.seconds(now)

    def amount(self, now: float) -> tuple[Labels, float, float]:
        """For the GPU-seconds counter: (labels, GPU-seconds so far, GPUs held now); nothing until it is settled (the
        counter counted its deleted job up to the deletion, and never goes back)."""
        if not self.settled:
            return self.labels, 0.0, 0.0
        running = self.run.start is not None and self.run.end is None
        return self.labels, self.seconds(now), self.units if running else 0.0

    def open(self) -> Open:
        """Its usage for the queues until its record is in the ledger."""
        return Open(self.labels[0], self.labels[2], self.labels[3], (self.run,), self.units)

    @property
    def nothing_due(self) -> bool:
        """Settled, and not one GPU-second to record (a pod that ended with its attempt's record): it is done."""
        return self.settled and self.record().gpu_seconds <= 0

    def record(self) -> Record:
        queue, namespace, flavor, service_class = self.labels
        run = self.run
        return Record(queue, namespace, self.job, flavor, service_class, self.pod.attempt or 1, round(self.units, 4),
                      run.start or 0.0, run.end if run.end is not None else run.start or 0.0,
                      round(self.seconds(run.end or 0.0), 3), self.pod.key.split("/", 1)[1])


def _templates_worth(state: ClusterState, pod: PodInfo) -> float:
    """GPUs the claims a pod makes from templates may hold, as its templates say now (those that read)."""
    namespace = pod.key.split("/", 1)[0]
    specs = []
    for template in pod.gpus.claims if pod.gpus else ():
        if template:  # ("": a claim used by name, whose share is known only while it is reserved)
            with contextlib.suppress(LookupError, ValueError):
                specs.append(state.dra.template(namespace, template))
    return claimed_gpus(tuple(specs), state.dra.worth)


def own_request(pod: PodInfo, product: str | None = None) -> JobRequest:
    """A pod's own GPUs as a one-replica request (its queue label, namespace and GPU product — its nodeSelector's,
    else `product` — what classify reads)."""
    namespace, name = pod.key.split("/", 1)
    gpus = pod.gpus
    return JobRequest(namespace, name, 1, gpus.requests if gpus else (),
                      gpu_product=(gpus.product if gpus else None) or product, queue=gpus.queue if gpus else None)


def gang_labels(book: QueueBook, key: GangKey, request: JobRequest) -> Labels:
    """The queue (and flavor) a pod gang is billed and drained under: the queue it counts against in the queue
    policy — `request`, the gang's placed request (PodGangs.placed: its first bound pod's superpod.dev/queue label,
    else its namespace's queue). The one place a pod gang's queue is looked up for billing and draining."""
    return book.request_labels(request)


class PodBills:
    def __init__(self, book: QueueBook) -> None:
        self.book = book
        self.live: dict[str, PodBill] = {}  # pod key -> bill, of the pods billed on their own that hold GPUs now
        self.ended: dict[str, PodBill] = {}  # pod uid -> bill, of those that ended and whose record is due
        self.changed: dict[str, PodBill | None] = {}  # pod uid -> its new bill (None: none) since the meter took them
        self._again: set[str] = set()  # pod keys whose bill may change though the pod does not (see `bill_of`)
        self._foreign: dict[str, JobRequest] = {}  # pod key -> request, of the live bills of other schedulers' pods
        self._opens: dict[str, Open] = {}  # pod uid -> its usage for the queues, of the live and ended bills
        self._queues: tuple | None = None  # the queues in force the live bills were made under
        self._plans: dict[str, str] = {}  # plan key -> pod uid, of the records planned last
        self._claimed: dict[str, float] = {}  # pod uid -> the most GPUs its DRA claims were seen to hold
        self._claiming: set[str] = set()  # pod keys of the live bills whose pods claim devices
        self._claims_seen = (-1, -1)  # the DRA store's generation and reservations their bills were made at

    def update(self, state: ClusterState, reader: JobReader, gangs: PodGangs, pending: bool) -> None:
        """Bring the bills up to date with the cache: the billable pods that changed (all of them when the queues
        changed), those whose bill depends on something else, and every ended pod not recorded. `pending`: some
        deleted job's record is not written yet."""
        changed = state.take_billable_changes()
        tree = self.book.tree()[0]
        queues = (tree.queues, tree.by_namespace)  # what the labels read (not the queues' status)
        if changed is None or self._queues != queues:
            changed, self._queues = set(self.live) | set(state.billable), queues
        changed |= self._again
        seen = (state.dra.generation, state.dra.reservations)
        if self._claiming and seen != self._claims_seen:  # what claims hold, or whose share, may have changed
            changed |= self._claiming
        self._claims_seen = seen
        placed: dict[str, JobRequest] | None = None

        def gang_request(key: GangKey) -> JobRequest | None:
            nonlocal placed
            if placed is None:  # once per update, and only when a gang's pod is billed anew
                placed = {request.key: request for request in gangs.placed(state)}
            return placed.get(key)

        for key in changed:
            self._again.discard(key)
            info = state.billable.get(key)
            bill, again = bill_of(state, reader, self.book, gang_request, pending, info) if info else (None, False)
            self._claiming.discard(key)
            if bill is not None and bill.pod.gpus and bill.pod.gpus.claims:
                bill = self.claimed(state, bill)
                self._claiming.add(key)  # (looked at again when what claims hold changes, not the pod)
            if again:
                self._again.add(key)
            old = self.live.pop(key, None)
            self._foreign.pop(key, None)
            if bill is not None:
                self.live[key] = bill
                if bill.request is not None:
                    self._foreign[key] = bill.request
            if old is not None and (bill is None or old.pod.uid != bill.pod.uid):
                self._change(old.pod.uid, None)
            if bill is not None and bill != old:
                self._change(bill.pod.uid, bill)
        for uid in [uid for uid in self.ended if uid not in state.unbilled]:  # recorded (or dropped)
            del self.ended[uid]
            self._change(uid, None)
        for uid, info in list(state.unbilled.items()):
            bill, again = bill_of(state, reader, self.book, gang_request, pending, info)
            if bill is not None and bill.pod.gpus and bill.pod.gpus.claims:
                bill = self.claimed(state, bill)
            if (bill is None and not again) or (bill is not None and bill.nothing_due):  # its attempt bills it,
                del state.unbilled[uid]  # no queue takes it, or nothing is left to bill
                self.ended.pop(uid, None)
                self._change(uid, None)
            elif bill is not None and self.ended.get(uid) != bill:
                self.ended[uid] = bill
                self._change(uid, bill)
        if self._claimed:  # (of the pods billed no more)
            for uid in self._claimed.keys() - {bill.pod.uid for bill in self.live.values()} - self.ended.keys():
                del self._claimed[uid]

    def claimed(self, state: ClusterState, bill: PodBill) -> PodBill:
        """`bill` with the GPUs its pod's DRA claims hold, the most seen while it lived: a claim may be released
        before the pod's record is written, never billed less for that. Seen holding none (its claims released
        while no operator looked: a restart), what its templates' claims are worth now."""
        uid = bill.pod.uid
        held = self._claimed[uid] = max(self._claimed.get(uid, 0.0), state.dra.gpus_of([uid]))
        if not held:
            held = _templates_worth(state, bill.pod)
        request = replace(bill.request, claimed_gpus=held) if bill.request is not None else None
        return replace(bill, claimed=held, request=request)

    def _change(self, uid: str, bill: PodBill | None) -> None:
        self.changed[uid] = bill
        if bill is None:
            self._opens.pop(uid, None)
        else:
            self._opens[uid] = bill.open()

    def plans(self) -> list[Plan]:
        """The records of the ended pods (retried each cycle until written)."""
        self._plans = {}
        out = []
        for uid, bill in self.ended.items():
            record = bill.record()
            if not bill.settled or record.gpu_seconds <= 0:  # settles later (nothing due leaves at `update`)
                continue
            plan = Plan(f"usage:{pod_usage_name(uid)}", [RecordUsage(usage_object(record, bill.job_uid, uid))])
            self._plans[plan.key] = uid
            out.append(plan)
        return out

    def written(self, state: ClusterState, done: Iterable[str]) -> None:
        """Records whose plans went through (written, already there, or refused as invalid) are not planned again."""
        for key in done:
            uid = self._plans.get(key)
            if uid is not None:
                state.unbilled.pop(uid, None)

    def opens(self) -> list[Open]:
        """The usage of the pods billed on their own and not recorded yet, for the queues."""
        return list(self._opens.values())

    def foreign(self) -> list[JobRequest]:
        """The GPUs other schedulers' pods hold in the queues' namespaces, as requests (the queues count them)."""
        return list(self._foreign.values())

    def take_changes(self, now: float) -> dict[str, tuple[Labels, float, float] | None]:
        changed, self.changed = self.changed, {}
        return {uid: None if bill is None else bill.amount(now) for uid, bill in changed.items()}

    def every(self, now: float) -> dict[str, tuple[Labels, float, float]]:
        return {bill.pod.uid: bill.amount(now) for bills in (self.live.values(), self.ended.values())
                for bill in bills}


def bill_of(state: ClusterState, reader: JobReader, book: QueueBook, gang_request: Callable[[str], JobRequest | None],
            pending: bool, pod: PodInfo) -> tuple[PodBill | None, bool]:
    """A pod's own bill, or None (its TrainingJob's open attempt bills it; no queue takes a foreign pod); and whether
    to look at it again though the pod does not change (its attempt open, a deleted job's record not written yet)."""
    namespace, name = pod.key.split("/", 1)
    start = pod.run.start
    gpus = pod.gpus
    if gpus is None:
        return None, False
    if pod.owner is not None or (gpus.job and pod.attempt is not None):  # a TrainingJob's pod, or one it left behind
        view = reader.by_uid.get(pod.owner) if pod.owner else None
        if view is not None and pod.attempt is not None and pod.attempt > view.status.accountedAttempts:
            return None, True  # its attempt is open: the attempt's close bills it
        job = gpus.job or name
        if pod.owner is not None and pod.attempt is not None:
            record = state.ledger.get(usage_name(pod.owner, pod.attempt))
        else:  # orphaned: its job's uid is gone with the owner reference
            record = state.ledger.attempt(namespace, job, pod.attempt, start) if start is not None else None
        if record is not None:  # billed by its attempt until the record's end, by itself after
            return PodBill(pod, (record.queue, namespace, record.flavor, record.service_class), job, pod.owner or "",
                           record.end), False
        if view is not None:  # its attempt closed without a record (none of its pods had started): all of it
            return PodBill(pod, book.labels(view), job, pod.owner or "", start or 0.0), False
        # Its job is gone and no record of its attempt is known: all of it, unless that record is on its way (to
        # its namespace's queue; an orphan, a pod gang now, to its gang's).
        labels = gang_labels(book, pod.job, gang_request(pod.job) or own_request(pod)) if pod.owner is None and \
            pod.job else book.request_labels(own_request(pod))
        return PodBill(pod, labels, job, pod.owner or "", start or 0.0, settled=not pending), pending
    if pod.job:  # a pod gang's
        request = gang_request(pod.job) or own_request(pod)
        return PodBill(pod, gang_labels(book, pod.job, request), pod.job.name, "",
                       start or 0.0), False
    node = state.nodes.get(pod.node or "")  # (bound by someone else: its GPUs are its node's product)
    request = own_request(pod, node.node.labels.get(PRODUCT_LABEL) if node and node.node else None)
    labels = book.request_labels(request)
    if not labels[0]:
        return None, False  # another scheduler's pod outside every queue: not billed here
    return PodBill(pod, labels, name, "", start or 0.0, request=request), False
