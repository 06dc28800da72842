"""Tenant queues (GPUQueue) as a QueuePolicy on the core cycle: guarantees, limits, lending, borrowing, weighted
fair share of the surplus, GPU-hour budgets. Pure: usage, capacity and time are passed in.

A *flavor* is what a quota counts: a GPU product (an `nvidia.com/gpu.product` value), a MIG profile (`1g.10gb`), a
DeviceClass (DRA), or "*" (any GPU). A job counts against the first of its queue's flavors that names its MIG
profile, its GPU product or the one class its claims may take GPUs of, else against "*"; in GPU units (a MIG slice
is g/7 of a GPU, as billed). Queues form a tree; only leaves take jobs; usage and limits count at every level,
guarantees at the leaf (a child's guarantees never exceed its parent's).

Admission (`admit`, on the usage at the start of the cycle plus what the cycle placed so far):
- a queue never goes over its `limit`, nor does any ancestor;
- inside its guarantee a job is admitted (capacity permitting); a `reserved` job only there;
- beyond it (`spot`, borrowing) only from the surplus: the flavor's capacity minus what runs minus what other queues
  keep — the part of their unused guarantee their waiting jobs need, and the part they do not lend (`lendingLimit`);
- a queue whose budget for the period is spent, or whose ancestor's is, admits nothing.
Order (`order`): demand inside guarantees first, then the surplus by priority, then lowest weighted dominant share,
then decayed past usage, then submission time. Reservations are per queue (`group`), and work inside a guarantee
does not keep off other queues' reservations (`blocking`): one tenant's giant gang never blocks another's guarantee.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from operator import attrgetter

from superpod.core.accounting import gpu_units
from superpod.core.cycle import Held, Reservation, ReservationRule, Unpreempting
from superpod.core.gang_key import GangKey
from superpod.core.model import Node
from superpod.core.phases import Cause, Reason
from superpod.core.placement import FIRST_FIT, Placement, Solver, solve
from superpod.core.request import GPU, MIG_PREFIX, PRODUCT_LABEL, JobRequest

ANY = "*"
RESERVED, SPOT = "reserved", "spot"
HOLD, HOLD_AND_DRAIN = "Hold", "HoldAndDrain"


@dataclass(frozen=True)
class Quota:
    flavor: str
    guaranteed: float = 0.0
    limit: float | None = None  # None: no cap
    lending_limit: float | None = None  # None: all of the unused guarantee may be lent


@dataclass(frozen=True)
class Budget:
    gpu_hours: float
    period: float  # seconds
    on_exhausted: str = HOLD


@dataclass(frozen=True)
class Queue:
    name: str
    parent: str | None = None
    namespaces: tuple[str, ...] = ()
    quotas: tuple[Quota, ...] = ()
    weight: float = 1.0
    budget: Budget | None = None
    min_runtime: float = 0.0  # seconds its gangs run before they may be preempted (a job may say otherwise)
    default_max_runtime: float | None = None  # seconds: the runtime limit of its jobs that ask for none
    max_runtime: float | None = None  # seconds: the most runtime any of its jobs gets (core/runtime_limit.py)

    def quota(self, flavor: str) -> Quota | None:
        return next((q for q in self.quotas if q.flavor == flavor), None)


@dataclass
class QueueTree:
    """The queues in force, and why the others are not (queue name -> problem)."""

    queues: dict[str, Queue] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    leaves: dict[str, list[str]] = field(default_factory=dict)  # queue -> the leaf queues under it (itself if leaf)
    by_namespace: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, queues: Iterable[Queue]) -> QueueTree:
        """Every queue is checked on its own, then as part of the tree; a refused queue takes its subtree with it.
        Queues are taken in name order, so which of two queues claiming a namespace is refused is stable."""
        tree = cls()
        given = {q.name: q for q in sorted(queues, key=lambda q: q.name)}
        tree.problems = {name: why for name, q in given.items() if (why := _problem(q, given))}
        while True:
            live = {name: q for name, q in given.items() if name not in tree.problems}
            children: dict[str, list[str]] = {name: [] for name in live}
            for queue in live.values():
                if queue.parent in children:
                    children[queue.parent].append(queue.name)
            owners: dict[str, str] = {}
            found = {}
            for queue in live.values():
                if queue.parent and queue.parent not in live:
                    found[queue.name] = f"its parent {queue.parent} is not in force: {tree.problems[queue.parent]}"
                elif children[queue.name] and queue.namespaces:
                    found[queue.name] = "a queue with child queues takes no jobs: it must name no namespaces"
                for namespace in queue.namespaces:
                    if owners.setdefault(namespace, queue.name) != queue.name:
                        found.setdefault(queue.name, f"namespace {namespace} belongs to queue {owners[namespace]}")
            if not found:
                break
            tree.problems.update(found)
        tree.queues, tree.children = live, children
        tree.by_namespace = owners
        for name in sorted(live, key=lambda n: -len(tree.ancestors(n))):  # deepest first
            tree.leaves[name] = [leaf for child in children[name] for leaf in tree.leaves[child]] or [name]
        return tree

    def leaf(self, job: JobRequest) -> tuple[str | None, str | None]:
        """The leaf queue a job lands in, or why none takes it."""
        return self.leaf_of(job.namespace, job.queue)

    def leaf_of(self, namespace: str, queue: str | None) -> tuple[str | None, str | None]:
        """The leaf queue a job of `namespace` naming `queue` (None: none) lands in, or why none takes it."""
        if queue:
            if queue not in self.queues:
                why = self.problems.get(queue)
                return None, f"queue {queue} {'is not in force: ' + why if why else 'does not exist'}"
            if self.children.get(queue):
                return None, f"queue {queue} has child queues; only leaf queues take jobs"
            if namespace not in self.queues[queue].namespaces:  # a tenant spends only its own quota
                return None, f"queue {queue} does not take jobs from namespace {namespace}"
            return queue, None
        if namespace in self.by_namespace:
            return self.by_namespace[namespace], None
        return None, f"namespace {namespace} belongs to no GPUQueue and its job names none in spec.queue"

    def classify(self, job: JobRequest) -> tuple[str | None, str | None, str | None]:
        """(leaf queue, flavor, None), or why no queue takes the job."""
        queue, problem = self.leaf(job)
        if queue is None:
            return None, None, problem
        flavor = self.flavor(queue, job)
        if flavor is None:
            flavors = ", ".join(q.flavor for q in self.queues[queue].quotas) or "none"
            return queue, None, (f"queue {queue} has no quota for {job.mig_profile or job.gpu_product or 'GPUs'} "
                                 f"(its flavors: {flavors})")
        return queue, flavor, None

    def counted(self, job: JobRequest) -> tuple[str | None, str | None, str | None]:
        """Where what a placed gang holds or ran is counted and billed: its queue, or its namespace's when that queue
        no longer takes it (deleted, or renamed where a tenant could): what runs never counts nowhere."""
        found = self.classify(job)
        return self.classify(replace(job, queue=None)) if found[2] and job.queue else found

    def running(self, jobs: Iterable[JobRequest]) -> dict[tuple[str, str], float]:
        """GPU units per (leaf queue, flavor) of these jobs (the placed gangs), where each is counted."""
        out: dict[tuple[str, str], float] = {}
        for job in jobs:
            queue, flavor, problem = self.counted(job)
            if not problem:
                out[(queue, flavor)] = out.get((queue, flavor), 0.0) + job.total_units
        return out

    def ancestors(self, name: str) -> list[str]:
        """The queue and its ancestors, leaf first."""
        out = []
        while name and name not in out:
            out.append(name)
            name = self.queues[name].parent or "" if name in self.queues else ""
        return out

    def flavor(self, name: str, job: JobRequest) -> str | None:
        """The flavor of the queue's quotas the job counts against, or None if it has none for this job."""
        flavors = [q.flavor for q in self.queues[name].quotas]
        classes = job.gpu_classes if len(job.gpu_classes) == 1 else ()  # (GPUs of several: none of them decides)
        for wanted in (job.mig_profile, job.gpu_product, *classes, ANY):
            if wanted in flavors:
                return wanted
        return None


def _problem(queue: Queue, given: dict[str, Queue]) -> str | None:
    if queue.weight <= 0:
        return f"weight must be above 0, not {queue.weight:g}"
    if queue.budget is not None and not queue.budget.period > 0:  # a GPUQueue written before the CRD refused it
        return f"budget.period must be longer than 0, not {queue.budget.period:g}s: the budget renews every period"
    seen, parent = {queue.name}, queue.parent
    while parent:
        if parent not in given:
            return f"parent {parent} does not exist"
        if parent in seen:
            return f"the parent chain loops through {parent}"
        seen.add(parent)
        parent = given[parent].parent
    flavors = [q.flavor for q in queue.quotas]
    if len(set(flavors)) != len(flavors):
        return "a flavor is listed twice in resources"
    for quota in queue.quotas:
        if quota.guaranteed < 0:
            return f"{quota.flavor}: guaranteed must not be negative"
        if quota.limit is not None and quota.limit < quota.guaranteed:
            return f"{quota.flavor}: limit {quota.limit:g} is below the guarantee {quota.guaranteed:g}"
        if quota.lending_limit is not None and not 0 <= quota.lending_limit <= quota.guaranteed:
            return f"{quota.flavor}: lendingLimit must be between 0 and the guarantee {quota.guaranteed:g}"
    if queue.parent:
        parent = given[queue.parent]
        for quota in queue.quotas:
            siblings = sum((s.quota(quota.flavor) or Quota(quota.flavor)).guaranteed
                           for s in given.values() if s.parent == queue.parent)
            over = parent.quota(quota.flavor)
            if siblings > (over.guaranteed if over else 0.0):
                return (f"{quota.flavor}: the guarantees of {queue.parent}'s children ({siblings:g}) exceed "
                        f"{queue.parent}'s ({over.guaranteed if over else 0:g})")
    return None


def capacity(nodes: Iterable[Node], flavors: Iterable[str],
             devices: Callable[[str], dict[str, float]] | None = None) -> dict[str, float]:
    """GPU units per flavor on the nodes that take pods now (ready, not cordoned, not held): "*" every GPU, a product
    its nodes' GPUs, a MIG profile its slices, a DeviceClass the GPUs its devices are. `devices(node)`: the GPUs the
    node publishes through DRA, in all ("*") and per class (core/dra/units.py); a node's GPUs are the more of those
    and its nvidia.com/gpu (a driver may serve one through the other)."""
    nodes = [node for node in nodes if node.ready and not node.unschedulable and not node.held]
    published = {node.name: devices(node.name) for node in nodes} if devices is not None else {}

    def gpus(node: Node) -> float:
        return max(float(node.allocatable.get(GPU, 0)), published.get(node.name, {}).get(ANY, 0.0))
    out = {}
    for flavor in set(flavors):
        if flavor == ANY:
            out[flavor] = sum(gpus(n) for n in nodes)
        elif "g." in flavor and flavor[0].isdigit():
            slices = sum(n.allocatable.get(MIG_PREFIX + flavor, 0) for n in nodes)
            out[flavor] = gpu_units([(MIG_PREFIX + flavor, slices)])
        elif any(flavor in units for units in published.values()):
            out[flavor] = sum(units.get(flavor, 0.0) for units in published.values())
        else:
            out[flavor] = sum(gpus(n) for n in nodes if n.labels.get(PRODUCT_LABEL) == flavor)
    return out


@dataclass
class Usage:
    """What the queues hold and have held, at the start of a cycle."""

    running: dict[tuple[str, str], float] = field(default_factory=dict)  # (leaf queue, flavor) -> GPU units
    past: dict[str, float] = field(default_factory=dict)  # leaf queue -> decayed GPU-seconds
    spent: dict[str, float] = field(default_factory=dict)  # queue with a budget -> GPU-seconds (its subtree's) in
    # the budget's current period
    renews: dict[str, float] = field(default_factory=dict)  # queue -> when its budget period ends


class FairQueues(Unpreempting):
    """The QueuePolicy of a cluster with GPUQueues, built for one cycle (usage and capacity at its start). What the
    cycle places is counted as `admit` sees it (`placed` only grows within a cycle)."""

    def __init__(self, tree: QueueTree, usage: Usage, capacity_by_flavor: dict[str, float], inner=None,
                 largest_node: dict[str, int] | None = None) -> None:
        """`inner`: the policy whose placement and reservations run under the queues (default: exact placement)."""
        self.tree, self.usage, self.capacity, self.inner = tree, usage, capacity_by_flavor, inner
        self.largest_node = largest_node  # Snapshot.largest: a job with a member no node could hold claims no guarantee
        self.reserves = inner.reserves if inner is not None else True
        self.reserving = inner.reserving if inner is not None else ReservationRule()
        self.preempts = inner.preempts if inner is not None else True
        self.fit = inner.fit if inner is not None else FIRST_FIT
        self.parks = False  # admit reads each job's queue and what the cycle placed
        self.used = dict(usage.running)  # (leaf queue, flavor) -> units, with what this cycle placed
        self.total: dict[str, float] = {}  # flavor -> units of all queues
        self.subtree: dict[tuple[str, str], float] = {}  # (queue, flavor) -> units of it and the queues below it
        for (leaf, flavor), amount in self.used.items():
            self._add(leaf, flavor, amount)
        self.inside: dict[GangKey, bool] = {}  # job -> inside its queue's guarantee when the cycle began
        self.where: dict[GangKey, tuple[str | None, str | None, str | None]] = {}  # job -> (queue, flavor, problem)
        self.wanted: dict[tuple[str, str], float] = {}  # (leaf, flavor) -> units its waiting jobs want inside it
        self.kept: dict[str, float] = {}  # flavor -> units the leaf queues keep from borrowers (see `_keeps`)
        self.shares: dict[str, float] = {}
        self._counted = 0  # how many of the cycle's placed decisions are in `used`
        self.asked: dict[str, int] = {}  # queue -> its jobs admission was asked about this cycle
        self.placed: dict[str, int] = {}  # queue -> its jobs the cycle placed

    # ---- order ----------------------------------------------------------------------------------------------------
    def order(self, jobs: list[JobRequest]) -> list[JobRequest]:
        claimed = dict(self.used)
        for job in sorted(jobs, key=lambda j: j.queue_key):
            queue, flavor, problem = self.where_of(job)
            inside = False
            if not problem and self._could_be_held(job):
                after = claimed.get((queue, flavor), 0.0) + job.total_units
                if after <= self.tree.queues[queue].quota(flavor).guaranteed:
                    claimed[(queue, flavor)], inside = after, True
                    self.wanted[(queue, flavor)] = self.wanted.get((queue, flavor), 0.0) + job.total_units
            self.inside[job.key] = inside
        for name, queue in self.tree.queues.items():
            if self.tree.children[name]:
                continue
            for quota in queue.quotas:
                self.kept[quota.flavor] = self.kept.get(quota.flavor, 0.0) + self._keeps(name, quota)
        self.shares = {name: self._share(name) for name in self.tree.queues}

        inside = sorted((job for job in jobs if self.inside[job.key]), key=attrgetter("queue_key"))
        unqueued = sorted((job for job in jobs if self.where[job.key][0] is None), key=attrgetter("queue_key"))
        surplus = [job for job in jobs if not self.inside[job.key] and self.where[job.key][0] is not None]
        return inside + self._progressive(surplus) + unqueued

    def _could_be_held(self, job: JobRequest) -> bool:
        """Whether some node could hold each member of the job: one that never could (a forged 16-GPU pod on 8-GPU
        nodes) would take its queue's guarantee from the queue's jobs that can run. MIG slices are left out: the
        planner makes them where there are none yet."""
        if self.largest_node is None:
            return True
        return all(amount <= self.largest_node.get(resource, 0) for requests in (job.requests, *job.others)
                   for resource, amount in requests if not resource.startswith(MIG_PREFIX))

    def _progressive(self, jobs: list[JobRequest]) -> list[JobRequest]:
        """The surplus order: by priority; within one, the queue with the lowest weighted share goes next, its
        share growing by each job it is given (progressive filling), then decayed past usage, then submission."""
        out: list[JobRequest] = []
        levels: dict[int, dict[str, list[JobRequest]]] = {}
        for job in sorted(jobs, key=attrgetter("queue_key"), reverse=True):  # each queue's list: next job last
            levels.setdefault(job.priority, {}).setdefault(self.where[job.key][0], []).append(job)
        for priority in sorted(levels, reverse=True):
            lists = levels[priority]
            share = {queue: self.shares[queue] for queue in lists}
            heads = [(share[queue], self.usage.past.get(queue, 0.0), todo[-1].queue_key, queue)
                     for queue, todo in lists.items()]
            heapq.heapify(heads)
            while heads:
                _, past, _, queue = heapq.heappop(heads)
                job = lists[queue].pop()
                out.append(job)
                flavor = self.where[job.key][1]
                share[queue] += job.total_units / (self.capacity.get(flavor) or 1.0) / self.tree.queues[queue].weight
                if lists[queue]:
                    heapq.heappush(heads, (share[queue], past, lists[queue][-1].queue_key, queue))
        return out

    def _share(self, queue: str) -> float:
        """Weighted dominant share of the surplus: the most it borrows of any flavor's capacity, over its weight."""
        spec = self.tree.queues[queue]
        borrowed = [max(0.0, self.used.get((queue, q.flavor), 0.0) - q.guaranteed) / self.capacity[q.flavor]
                    for q in spec.quotas if self.capacity.get(q.flavor)]
        return max(borrowed, default=0.0) / spec.weight

    def _keeps(self, leaf: str, quota: Quota) -> float:
        """What a leaf keeps from borrowers: the unused guarantee its waiting jobs want, and what it does not lend."""
        unused = max(0.0, quota.guaranteed - self.used.get((leaf, quota.flavor), 0.0))
        lendable = max(0.0, unused - self.wanted.get((leaf, quota.flavor), 0.0))
        if quota.lending_limit is not None:
            lendable = min(lendable, quota.lending_limit)
        return unused - lendable

    # ---- admission ------------------------------------------------------------------------------------------------
    def admit(self, job: JobRequest, placed: list) -> Cause | None:
        self.count(placed)
        queue, flavor, problem = self.where_of(job)
        if problem:
            return Cause(Reason.NO_QUEUE, problem)
        ahead = self.asked.get(queue, 0) - self.placed.get(queue, 0)  # its queue's jobs before it, not placed
        self.asked[queue] = self.asked.get(queue, 0) + 1
        why = self._refusal(job, queue, flavor)
        return why._replace(message=f"{why.message}; {ahead} of its jobs ahead") if why and ahead else why

    def _refusal(self, job: JobRequest, queue: str, flavor: str) -> Cause | None:
        spec = self.tree.queues[queue]
        if (spent := self.exhausted(queue)) is not None:
            budget = self.tree.queues[spent].budget
            return Cause(Reason.BUDGET_EXHAUSTED, f"queue {spent} has spent its budget of {budget.gpu_hours:g} "
                         f"GPU-hours for this period{_renewal(self.usage.renews.get(spent))}")
        need = job.total_units
        for name in self.tree.ancestors(queue):
            quota = self.tree.queues[name].quota(flavor)
            if quota is None or quota.limit is None:
                continue
            total = self.subtree.get((name, flavor), 0.0)
            if total + need > quota.limit:
                return Cause(Reason.QUEUE_AT_LIMIT,
                             f"queue {name} is at its limit of {quota.limit:g} {_gpus(flavor)} ({total:g} in use)")
        quota = spec.quota(flavor)
        mine = self.used.get((queue, flavor), 0.0)
        if mine + need <= quota.guaranteed:
            return None
        if job.service_class == RESERVED:
            return Cause(Reason.GUARANTEE_USED, f"reserved jobs run only inside queue {queue}'s guarantee of "
                         f"{quota.guaranteed:g} {_gpus(flavor)} ({mine:g} in use)")
        surplus = self.surplus(flavor, queue)
        if need > surplus:
            return Cause(Reason.BORROWING_LIMITED, f"queue {queue} is beyond its guarantee of {quota.guaranteed:g} "
                         f"{_gpus(flavor)} and may borrow {max(surplus, 0.0):g} now (the rest runs or is kept for "
                         "other queues' guarantees)")
        return None

    def may_evict(self, job: JobRequest, victim: JobRequest) -> bool:
        """Who may preempt whom under queues: in its own queue, a gang of strictly lower priority; across queues
        (reclaim), a job inside its guarantee takes back what another queue borrows, never pushing that queue below
        its own guarantee. Never a reserved gang."""
        if victim.service_class == RESERVED:
            return False
        queue, flavor, problem = self.where_of(job)
        theirs, their_flavor, their_problem = self.tree.counted(victim)
        if problem or their_problem:
            return False
        if theirs == queue:
            return victim.priority < job.priority
        if not self.inside.get(job.key) or their_flavor != flavor:
            return False
        return victim.total_units <= self.reclaim_bound(job, victim)[1]

    def reclaim_bound(self, job: JobRequest, victim: JobRequest) -> tuple[str, float] | None:
        """For a gang of another queue: (that queue and flavor, the GPUs it holds beyond its guarantee), which its
        victims may give back at most, together (core/preempt.py); None for a gang of the job's own queue."""
        queue = self.where_of(job)[0]
        theirs, flavor, _ = self.tree.counted(victim)
        if theirs is None or theirs == queue:
            return None
        quota = self.tree.queues[theirs].quota(flavor)
        return f"{theirs}/{flavor}", self.used.get((theirs, flavor), 0.0) - quota.guaranteed

    def exhausted(self, queue: str) -> str | None:
        """The queue or ancestor whose budget for the period is spent, if one is."""
        for name in self.tree.ancestors(queue):
            budget = self.tree.queues[name].budget
            if budget and self.usage.spent.get(name, 0.0) >= budget.gpu_hours * 3600:
                return name
        return None

    def surplus(self, flavor: str, borrower: str) -> float:
        """Units of `flavor` a queue beyond its guarantee may take: capacity, minus what runs, minus what the other
        leaf queues keep."""
        quota = self.tree.queues[borrower].quota(flavor)
        own = self._keeps(borrower, quota) if quota else 0.0
        return self.capacity.get(flavor, 0.0) - self.total.get(flavor, 0.0) - (self.kept.get(flavor, 0.0) - own)

    def count(self, placed: list) -> None:
        """Add the decisions placed since the last call to the queues' usage (and to what they keep)."""
        for decision in placed[self._counted:]:
            queue, flavor, _ = self.where_of(decision.job)
            if not queue:
                continue
            quota = self.tree.queues[queue].quota(flavor)
            before = self._keeps(queue, quota)
            amount = decision.job.total_units
            self.placed[queue] = self.placed.get(queue, 0) + 1
            self.used[(queue, flavor)] = self.used.get((queue, flavor), 0.0) + amount
            self._add(queue, flavor, amount)
            if self.inside.get(decision.job.key):
                self.wanted[(queue, flavor)] = self.wanted.get((queue, flavor), 0.0) - amount
            self.kept[flavor] = self.kept.get(flavor, 0.0) + self._keeps(queue, quota) - before
        self._counted = len(placed)

    def _add(self, leaf: str, flavor: str, amount: float) -> None:
        """Count `amount` units of a leaf queue in the totals: the flavor's, and its subtree's at every ancestor."""
        self.total[flavor] = self.total.get(flavor, 0.0) + amount
        for name in self.tree.ancestors(leaf):
            self.subtree[(name, flavor)] = self.subtree.get((name, flavor), 0.0) + amount

    # ---- placement and reservations -------------------------------------------------------------------------------
    def place(self, solver: Solver) -> Placement | None:
        return self.inner.place(solver) if self.inner is not None else solve(solver)

    def group(self, job: JobRequest) -> str:
        """Reservations are per queue."""
        return self.where_of(job)[0] or ""

    def blocking(self, job: JobRequest, held: Held) -> frozenset[Reservation]:
        """Work inside its guarantee keeps off its own queue's reservation only, the rest off all of them."""
        return held.only(self.group(job)) if self.inside.get(job.key, False) else held.all

    def where_of(self, job: JobRequest) -> tuple[str | None, str | None, str | None]:
        known = self.where.get(job.key)
        if known is None:
            known = self.where[job.key] = self.tree.classify(job)
        return known


def _gpus(flavor: str) -> str:
    return "GPUs" if flavor == ANY else f"{flavor} GPUs"


def _renewal(when: float | None) -> str:
    if when is None:
        return ""
    return f"; it renews at {datetime.fromtimestamp(when, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


class Closed(Unpreempting):
    """The policy when GPUQueues exist but their policy could not be computed (a bug, an object it cannot read):
    nothing is admitted, since admitting without it could overspend a limit, a guarantee or a budget. What runs
    keeps running; placement resumes the first cycle the policy is whole again."""

    reserves = False
    reserving = ReservationRule()
    parks = False
    preempts = False
    fit = FIRST_FIT

    def __init__(self, why: str) -> None:
        self.why = Cause(Reason.QUEUES_HELD, why)

    def order(self, jobs: list[JobRequest]) -> list[JobRequest]:
        return sorted(jobs, key=attrgetter("queue_key"))

    def admit(self, job: JobRequest, placed: list) -> Cause | None:
        return self.why

    def place(self, solver: Solver) -> Placement | None:
        return None

    def group(self, job: JobRequest) -> str:
        return ""

    def blocking(self, job: JobRequest, held: Held) -> frozenset[Reservation]:
        return held.all
