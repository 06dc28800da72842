"""GPUQueues in the cycle: the queue tree read from the cache (again only when a GPUQueue changed), the admission
policy for one cycle (core/queues.py) on what the placed gangs hold and what the queues used (the GPUUsage records
of ended attempts and pods, plus the running attempts from their pods and the pods billed on their own,
controller/podbills.py), and each queue's status. A cluster without GPUQueues
keeps the configured policy: single-tenant clusters work unchanged.

A budget's periods are counted from the GPUQueue's creation. The status's figures that grow with time (GPU-seconds,
budget left) are taken as of the last whole minute, so a queue's status is rewritten at most once a minute for them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from superpod.api.convert import queue_from_k8s, usage_name
from superpod.api.resources import ConvertError
from superpod.api.status import condition
from superpod.api.times import rfc3339, timestamp
from superpod.controller.actions import Emit, Plan, WriteQueueStatus
from superpod.controller.jobs import JobView
from superpod.controller.metering import Labels, attempt_runs, outside_labels, outside_queues
from superpod.controller.state import ClusterState
from superpod.core.accounting import Run, gpu_seconds
from superpod.core.cycle import Decision
from superpod.core.model import Snapshot
from superpod.core.phases import ACTIVE, Condition, Reason
from superpod.core.queues import HOLD_AND_DRAIN, FairQueues, Queue, QueueTree, Usage, capacity
from superpod.core.request import JobRequest
from superpod.core.runtime_limit import RuntimeLimit, effective_limit
from superpod.core.usage import period_of, runs_within

STATUS_GRAIN = 60.0  # seconds: the status's usage figures are as of the last multiple of this


@dataclass(frozen=True)
class Open:
    """A running attempt's usage so far: its leaf queue, flavor and class, its pods' runs and GPU units per pod."""

    queue: str
    flavor: str
    service_class: str
    runs: tuple[Run, ...]
    units: float
    record: str = ""  # the GPUUsage record that will bill it, for a TrainingJob's attempt ("" for a pod's own bill)


class QueueBook:
    def __init__(self, state: ClusterState, half_life: float, metrics=None) -> None:
        self.state, self.half_life, self.metrics = state, half_life, metrics
        self._exported: set[tuple[str, str]] = set()  # (queue, flavor) of the superpod_queue_gpus series set
        self.draining: set[str] = set()  # leaf queues whose running jobs stop: a HoldAndDrain budget is spent
        self.open: list[Open] = []  # the running attempts in queues, as of the last policy()
        self._tree: tuple[int, QueueTree, dict[str, str]] | None = None  # (queue edits, tree, unreadable -> why)
        self._labels: dict[tuple, Labels] = {}  # what request_labels reads of a request -> its labels, in this tree

    def tree(self) -> tuple[QueueTree, dict[str, str]]:
        """The queues in force, and the GPUQueues that cannot be read (name -> why)."""
        if self._tree is None or self._tree[0] != self.state.queue_edits:
            queues, unreadable = [], {}
            for name, obj in sorted(self.state.queues.items()):
                try:
                    queues.append(queue_from_k8s(obj))
                except (ConvertError, ValueError) as e:
                    unreadable[name] = str(e)
            self._tree = (self.state.queue_edits, QueueTree.of(queues), unreadable)
            self._labels = {}
        return self._tree[1], self._tree[2]

    def policy(self, snap: Snapshot, placed: Callable[[], list[JobRequest]], active: Iterable[JobView], now: float,
               inner=None, pods: Callable[[], list[Open]] = list) -> FairQueues | None:
        """The admission policy for this cycle, or None when the cluster has no GPUQueue. `placed`: the requests of
        the placed gangs, asked only when there are queues (no cycle without queues lists every placed gang);
        `active`: the placed jobs' views (their running attempts count as used);
        `inner`: the configured policy, whose placement runs under the queues; `pods`: the usage of the pods billed
        on their own and not recorded yet (asked only when there are queues)."""
        self.draining, self.open = set(), []
        if not self.state.queues:
            return None
        tree, _ = self.tree()
        running = self.open = self.running(tree, active) + [bill for bill in pods() if bill.queue in tree.queues]
        spent, renews = self.spent(tree, running, now)
        past = {leaf: self.state.ledger.past(leaf, now, self.half_life) for leaf in tree.queues
                if not tree.children[leaf]}
        for attempt in running:
            past[attempt.queue] += gpu_seconds(attempt.runs, attempt.units, now)
        flavors = {quota.flavor for queue in tree.queues.values() for quota in queue.quotas}
        usage = Usage(tree.running(placed()), past, spent, renews)
        devices = self.state.dra.node_units if self.state.dra.slices else None
        fair = FairQueues(tree, usage, capacity(snap.nodes, flavors, devices), inner, snap.largest)
        for name, queue in tree.queues.items():
            if queue.budget and queue.budget.on_exhausted == HOLD_AND_DRAIN and fair.exhausted(name) == name:
                self.draining.update(tree.leaves[name])
        return fair

    def running(self, tree: QueueTree, active: Iterable[JobView]) -> list[Open]:
        """The running attempts of the jobs in queues, not yet recorded."""
        out = []
        recorded = self.state.ledger.queue_of
        for view in active:
            status = view.status
            if status.accountedAttempts >= status.attempt or not isinstance(view.request, JobRequest) \
                    or usage_name(view.uid, status.attempt) in recorded:  # its close was recorded, not written
                continue
            queue, flavor, problem = tree.counted(view.request)
            if not problem:
                out.append(Open(queue, flavor, view.request.service_class,
                                tuple(attempt_runs(self.state, view, status.attempt)), view.units,
                                usage_name(view.uid, status.attempt)))
        return out

    def spent(self, tree: QueueTree, running: list[Open], now: float) -> tuple[dict[str, float], dict[str, float]]:
        """Per queue with a budget: GPU-seconds of its subtree in the current period, and when the period ends."""
        spent, starts, renews = {}, {}, {}
        for name, queue in tree.queues.items():
            if queue.budget is None:
                continue
            created = (self.state.queues[name].get("metadata") or {}).get("creationTimestamp")
            starts[name], renews[name] = period_of(timestamp(created) if created else 0.0, queue.budget.period, now)
            spent[name] = sum(self.state.ledger.spent(leaf, starts[name]) for leaf in tree.leaves[name])
        if starts:
            for attempt in running:
                for name in tree.ancestors(attempt.queue):
                    if name in starts:
                        spent[name] += runs_within(attempt.runs, attempt.units, starts[name], now)
        return spent, renews

    def min_runtime(self, view: JobView) -> int:
        """Seconds a job's gang runs before it may be preempted: its queue's minRuntimeSeconds, or less if the job
        asks for less (the queue's owner decides protection, not the tenant); its own without GPUQueues."""
        own = view.min_runtime
        if not self.state.queues or not isinstance(view.request, JobRequest):
            return int(own or 0)
        queue = self.queue_min_runtime(view.request)
        return queue if own is None else min(int(own), queue)

    def queue_min_runtime(self, request: JobRequest) -> int:
        """The minRuntimeSeconds of the queue a request runs in (0 without one)."""
        if not self.state.queues:
            return 0
        queue = self.tree()[0].counted(request)[0]
        return int(self.tree()[0].queues[queue].min_runtime) if queue else 0

    def max_runtime(self, view: JobView) -> float | None:
        """The runtime limit in force of a TrainingJob, in seconds from its attempt's placement
        (status.attemptStartTime); None: no limit. The one answer for enforcement and estimates alike."""
        limit = self.job_limit(view)
        return limit.seconds if limit is not None else None

    def job_limit(self, view: JobView) -> RuntimeLimit | None:
        """A TrainingJob's limit in force, with what set it: its spec.maxRuntimeSeconds (as admitted while it is
        placed), else its queue's default, never more than its queue's cap."""
        asked = view.max_runtime_asked
        if not isinstance(view.request, JobRequest):  # an unreadable spec: the queue it was admitted under still caps
            admitted = view.status.admitted if view.phase in ACTIVE else None
            queue = self._queue_of(view.key.namespace, admitted.queue if admitted is not None else None)
            return effective_limit(asked, "spec.maxRuntimeSeconds", queue)
        return self.runtime_limit(view.request, asked, "spec.maxRuntimeSeconds")

    def runtime_limit(self, request: JobRequest, asked: float | None, asked_by: str) -> RuntimeLimit | None:
        """The limit in force of a gang (a TrainingJob's or a pod gang's) that asks for `asked` seconds (None: it
        asks for none), in the queue it counts in: core/runtime_limit.py's rule."""
        queue = None
        if self.state.queues:
            tree = self.tree()[0]
            name = tree.counted(request)[0]
            queue = tree.queues.get(name) if name else None
        return effective_limit(asked, asked_by, queue)

    def _queue_of(self, namespace: str, named: str | None) -> Queue | None:
        """The queue a gang of `namespace` that named `named` counts in, as QueueTree.counted finds it, without its
        request: that queue if it takes the namespace, else the namespace's."""
        if not self.state.queues:
            return None
        tree = self.tree()[0]
        name, problem = tree.leaf_of(namespace, named)
        if problem and named:
            name, problem = tree.leaf_of(namespace, None)
        return tree.queues.get(name) if name and not problem else None

    def labels(self, view: JobView) -> Labels:
        """The GPU-seconds counter's labels of a job: its queue and the flavor it counts against, when it has one."""
        if not isinstance(view.request, JobRequest):
            return outside_queues(view)
        return self.request_labels(view.request)

    def request_labels(self, request: JobRequest) -> Labels:
        """The labels (queue, namespace, flavor, class) a request is counted and billed under: its queue and the
        flavor it counts against, when a queue takes it; else outside queues (queue "")."""
        if not self.state.queues:
            return outside_labels(request)
        tree = self.tree()[0]
        read = (request.namespace, request.queue, request.gpu_product, request.requests, request.service_class)
        known = self._labels.get(read)
        if known is None:  # (many pods billed on their own ask the same)
            if len(self._labels) >= 10_000:
                self._labels = {}
            outside = outside_labels(request)
            queue, flavor, problem = tree.counted(request)
            known = self._labels[read] = (queue or "", outside[1], flavor or outside[2], outside[3]) if not problem \
                else outside
        return known

    def status_plans(self, fair: FairQueues | None, decisions: list[Decision], now: float) -> list[Plan]:
        """Each GPUQueue's status, written when it changed; a Warning on a queue that is not in force."""
        if not self.state.queues:
            self._unexport(set())
            return []
        tree, unreadable = self.tree()
        usage = self._usage_figures(tree, math.floor(now / STATUS_GRAIN) * STATUS_GRAIN)
        pending: dict[str, int] = {}
        if fair is not None:
            fair.count([d for d in decisions if d.placed])  # what the cycle placed after its last admission
            for decision in decisions:
                queue = fair.where_of(decision.job)[0]
                if queue and not decision.placed:
                    pending[queue] = pending.get(queue, 0) + 1
        plans, exported = [], set()
        for name, obj in sorted(self.state.queues.items()):
            problem = unreadable.get(name) or tree.problems.get(name)
            status = dict(obj.get("status") or {})
            if problem:
                new = {**status, "conditions": condition(status.get("conditions") or [], Condition.ACTIVE, "False",
                                                         Reason.QUEUE_REFUSED, problem, now)}
            else:
                new = {**_figures(tree, fair, name, pending), **usage.get(name, {}), "conditions": condition(
                    status.get("conditions") or [], Condition.ACTIVE, "True", Reason.QUEUE_ACTIVE, "in force", now)}
            exported |= self._export(name, new.get("flavors") or [])
            if new != status:
                plan = Plan(f"queue:{name}", [WriteQueueStatus(name, new)])
                if problem:
                    plan.then(Emit(_ref(obj), "Warning", Reason.QUEUE_REFUSED, f"not in force: {problem}"))
                plans.append(plan)
        self._unexport(exported)
        return plans

    def held_plans(self, why: str, now: float) -> list[Plan]:
        """While admission is held (the policy failed): each GPUQueue's Active condition says why, with a Warning
        when the words change."""
        plans = []
        for name, obj in sorted(self.state.queues.items()):
            status = dict(obj.get("status") or {})
            conditions = condition(status.get("conditions") or [], Condition.ACTIVE, "False", Reason.QUEUES_HELD, why,
                                   now)
            if conditions != status.get("conditions"):
                plans.append(Plan(f"queue:{name}", [WriteQueueStatus(name, {**status, "conditions": conditions}),
                                                    Emit(_ref(obj), "Warning", Reason.QUEUES_HELD, why)]))
        return plans

    def _export(self, queue: str, flavors: list[dict]) -> set[tuple[str, str]]:
        """The queue's figures per flavor as gauges; the (queue, flavor) series set."""
        if self.metrics is None:
            return set()
        for figures in flavors:
            for kind in ("guaranteed", "allocated", "borrowed"):
                self.metrics.queue_gpus.labels(queue, figures["flavor"], kind).set(figures[kind])
        return {(queue, figures["flavor"]) for figures in flavors}

    def _unexport(self, exported: set[tuple[str, str]]) -> None:
        """Series of queues or flavors that are gone are removed."""
        for queue, flavor in self._exported - exported:
            for kind in ("guaranteed", "allocated", "borrowed"):
                self.metrics.queue_gpus.remove(queue, flavor, kind)
        self._exported = exported


    def _usage_figures(self, tree: QueueTree, at: float) -> dict[str, dict]:
        """Per queue: GPU-seconds per flavor and class, all time, and what is left of its budget, as of `at`."""
        running = self.open
        spent, renews = self.spent(tree, running, at)
        used: dict[tuple[str, str, str], float] = dict(self.state.ledger.totals)
        for attempt in running:
            key = (attempt.queue, attempt.flavor, attempt.service_class)
            used[key] = used.get(key, 0.0) + runs_within(attempt.runs, attempt.units, -math.inf, at)
        mine: dict[str, dict[tuple[str, str], float]] = {name: {} for name in tree.queues}
        for (leaf, flavor, service_class), seconds in used.items():
            for name in tree.ancestors(leaf) if leaf in tree.queues else ():
                mine[name][(flavor, service_class)] = mine[name].get((flavor, service_class), 0.0) + seconds
        out = {}
        for name, queue in tree.queues.items():
            figures: dict = {"gpuSeconds": [{"flavor": flavor, "serviceClass": service_class,
                                             "gpuSeconds": round(seconds, 1)}
                                            for (flavor, service_class), seconds in sorted(mine[name].items())]}
            if queue.budget:
                figures["budgetRemaining"] = round(queue.budget.gpu_hours - spent[name] / 3600, 2)
                figures["budgetRenews"] = rfc3339(renews[name])
            out[name] = figures
        return out


def _figures(tree: QueueTree, fair: FairQueues | None, name: str, pending: dict[str, int]) -> dict:
    queue = tree.queues[name]
    flavors = []
    for quota in queue.quotas:
        allocated = fair.subtree.get((name, quota.flavor), 0.0) if fair else 0.0
        flavors.append({"flavor": quota.flavor, "guaranteed": quota.guaranteed, "allocated": _round(allocated),
                        "borrowed": _round(max(0.0, allocated - quota.guaranteed))})
    return {"guaranteed": _round(sum(f["guaranteed"] for f in flavors)),
            "allocated": _round(sum(f["allocated"] for f in flavors)),
            "borrowed": _round(sum(f["borrowed"] for f in flavors)),
            "pending": sum(pending.get(leaf, 0) for leaf in tree.leaves[name]),
            "fairShare": _round(fair.shares.get(name, 0.0)) if fair else 0.0,
            "flavors": flavors}


def _round(value: float) -> float:
    return round(value, 4)


def _ref(obj: dict) -> dict:
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "name": obj["metadata"]["name"],
            "uid": obj["metadata"].get("uid")}

