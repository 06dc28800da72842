"""One scheduling cycle over the pending jobs: order, place, assume, reserve for the blocked heads, backfill.

Order comes from a QueuePolicy (default: priority desc, then the job's turn: its submission time, or a turn pushed
back by its predicted service, core/estimates.py). A job that does not fit but could fit once running pods finish
may hold a reservation (see reservation_for: the domain predicted to hold it soonest at its required level, narrowed
to just enough child domains or nodes), if the policy's ReservationRule finds it worth protecting and its group
holds fewer than the rule allows. A reservation knows its predicted start when running gangs have predicted ends
(core/horizon.py); jobs behind it are placed outside it, or inside it when they are predicted to end before that
start (EASY backfilling), so big gangs are not starved by streams of small ones and the reserved capacity idles
only as long as it must. The cycle runs again on the next event, so reservations follow the cluster as it changes.
Tenant queues (core/queues.py) are another QueuePolicy: `order` decides who goes first, `admit` may hold a job
back, `group` and `blocking` make reservations per queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from types import MappingProxyType
from typing import Protocol

from superpod.core import spares
from superpod.core.estimates import LIMIT_GRACE, Ordering
from superpod.core.explain import explain_solver
from superpod.core.gang_key import GangKey
from superpod.core.horizon import Groups, Start, earliest_starts, predicted_start, slots_at, starts_and_members
from superpod.core.model import UNLABELLED, Snapshot
from superpod.core.phases import Cause, Reason
from superpod.core.placement import FIRST_FIT, Placement, Solver, could_ever_hold, solve, validate
from superpod.core.request import JobRequest, Shape


@dataclass(frozen=True)
class Decision:
    job: JobRequest
    placement: Placement | None
    cause: Cause | None  # why it waits; None when placed
    reserved: str | None = None  # what this job holds a reservation on, e.g. "leaf su-2"
    reserved_nodes: tuple[str, ...] = ()  # every node inside that reservation
    expected_start: float | None = None  # when the reservation is predicted to hold it (None: not predicted)
    blocked_by: tuple[GangKey, ...] = ()  # the jobs whose reservations it fits only inside
    error: str | None = None  # a bug met while deciding this job (the others were decided all the same)
    preempts: tuple[GangKey, ...] = ()  # the running gangs it evicts to start (core/preempt.py)

    @property
    def placed(self) -> bool:
        return self.placement is not None

    @property
    def reason(self) -> str | None:
        """Why it waits, for people."""
        return self.cause.message if self.cause else None


ESTIMATE, LIMIT = "estimate", "limit"
RESERVE_AFTER = 3600.0  # the operator's rule, chosen on the simulator: a blocked job reserves once it waited an hour
RESERVE_FROM_UNITS = 16.0  # or at once when it asks for two servers' worth of GPUs or more (docs/benchmarks.md)


@dataclass(frozen=True)
class ReservationRule:
    """Which blocked jobs hold a reservation: at most `per_group` at once in each group, each for a job that has
    waited `after` seconds or asks for `from_units` GPU units or more (0 and 0: every blocked job may). Which jobs
    run inside one (`backfill_by`): those whose limit, and the grace a stopped gang gets, end before its holder's
    predicted start (LIMIT: an enforced bound, so a job let in never delays the holder), or whose estimate does
    (ESTIMATE: more are let in, and one that outlives its estimate delays the holder)."""

    per_group: int = 1
    after: float = 0.0
    from_units: float = 0.0
    backfill_by: str = LIMIT

    def worth(self, job: JobRequest, now: float) -> bool:
        if not self.after or now - job.submitted >= self.after:
            return True
        return bool(self.from_units) and job.total_units >= self.from_units


class QueuePolicy(Protocol):
    reserves: bool  # blocked jobs that could fit later hold reservations (see reservation_for, `reserving`)
    reserving: ReservationRule
    ordering: Ordering  # jobs of one priority by arrival or by predicted service (the turns of their requests)
    fit: str  # which of equal domains placement takes: the first (placement.FIRST_FIT) or the fullest (BEST_FIT)
    # Jobs whose shape did not fit may be passed over (core/waiting.py): true when `admit`, `group` and `blocking`
    # read nothing of a job but its shape, and `order` is queue_key. A subclass that changes them sets it False.
    parks: bool
    preempts: bool  # the operator may run it under preemption (core/preempt.py's Preempting wraps it)
    shielded: Mapping[GangKey, str]  # job -> why the gangs it may evict are protected, when it found none to evict

    def preempt(self, snap: Snapshot, job: JobRequest, taken: Callable[[], frozenset[int]],
                head: bool) -> tuple[Decision, Reservation] | None:
        """A job that does not fit: (its decision, the nodes it holds) when it evicts gangs or waits for those it
        evicted; None when it does neither. `taken`: the nodes reservations hold; `head`: its group's first."""
        ...

    def nominated(self, snap: Snapshot, jobs: list[JobRequest]) -> list[Reservation]:
        """The nodes held from the start of the cycle for jobs waiting for the gangs they evicted."""
        ...

    def order(self, jobs: list[JobRequest]) -> list[JobRequest]: ...

    def place(self, solver: Solver) -> Placement | None:
        """Where the solver's job goes now, or None (superpod: placement.solve, exact)."""
        ...

    def admit(self, job: JobRequest, placed: list[Decision]) -> Cause | None:
        """None if the job may be placed now, else why not (e.g. its queue is over quota)."""
        ...

    def group(self, job: JobRequest) -> str:
        """Reservations are per group: the first blocked job of each group may hold one (one group: one)."""
        ...

    def blocking(self, job: JobRequest, held: Held) -> frozenset[Reservation]:
        """The reservations `job` keeps off (PriorityFifo: all of them)."""
        ...


class Unpreempting:
    """The preemption answers of a policy that evicts nothing (core/preempt.py's Preempting gives others)."""

    shielded: Mapping[str, str] = MappingProxyType({})

    def preempt(self, snap: Snapshot, job: JobRequest, taken: Callable[[], frozenset[int]],
                head: bool) -> tuple[Decision, Reservation] | None:
        return None

    def nominated(self, snap: Snapshot, jobs: list[JobRequest]) -> list[Reservation]:
        return []


class PriorityFifo(Unpreempting):
    """Priority descending, then submission time, then namespace/name. Admits everything; places exactly, among
    equal domains by `fit` (placement.FIRST_FIT or BEST_FIT)."""

    reserves = True
    preempts = True  # the operator may add preemption (core/preempt.py) to it
    reserving = ReservationRule()
    ordering = Ordering()  # by arrival, or by predicted service: the turn the controller gives each request
    fit = FIRST_FIT

    def __init__(self, reserving: ReservationRule | None = None, ordering: Ordering | None = None,
                 fit: str | None = None) -> None:
        if reserving is not None:
            self.reserving = reserving
        if ordering is not None:
            self.ordering = ordering
        if fit is not None:
            self.fit = fit

    @property
    def parks(self) -> bool:
        """The estimate is not in a job's shape: backfilling by estimate reads more of a job than its shape."""
        return self.reserving.backfill_by != ESTIMATE

    def order(self, jobs: list[JobRequest]) -> list[JobRequest]:
        return sorted(jobs, key=attrgetter("queue_key"))

    def admit(self, job: JobRequest, placed: list[Decision]) -> Cause | None:
        return None

    def place(self, solver: Solver) -> Placement | None:
        return solve(solver.refit(self.fit))

    def group(self, job: JobRequest) -> str:
        return ""

    def blocking(self, job: JobRequest, held: Held) -> frozenset[Reservation]:
        return held.all


@dataclass(frozen=True, eq=False)
class Reservation:
    """Capacity held for a blocked job: whole domains and/or single nodes (indexes into the snapshot). Equal when
    the same job holds the same capacity (compared often: it keys what did not fit, Snapshot.unfit)."""

    holder: JobRequest
    domains: frozenset[int] = frozenset()
    nodes: frozenset[int] = frozenset()
    label: str = ""
    pinned: bool = False  # held for a preemptor while its victims stop: every job keeps off it, whatever its group
    start: Start | None = None  # its holder's predicted start there (None: unknown, kept off by every job)

    @cached_property
    def identity(self) -> tuple:
        return (self.holder.key, self.holder.priority, self.domains, self.nodes, self.label, self.pinned, self.start)

    def lets(self, job: JobRequest, now: float, by: str = LIMIT) -> bool:
        """Whether `job` may run inside it: bound (`by` LIMIT) or predicted (ESTIMATE) to end before its holder is
        predicted to start (EASY)."""
        runtime = job.limit + LIMIT_GRACE if by == LIMIT and job.limit is not None else \
            job.estimate if by == ESTIMATE else None
        return self.start is not None and not self.pinned and runtime is not None and \
            now + runtime <= self.start.at

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reservation) and self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    def node_names(self, snap: Snapshot) -> tuple[str, ...]:
        idx = set(self.nodes) | {i for d in self.domains for i in snap.nodes_under(d)}
        return tuple(sorted(snap.nodes[i].name for i in idx))


class Held:
    """A cycle's reservations by group. `all` and `only(group)` are one object until the next reservation, so the
    keys of what did not fit (Snapshot.unfit) hash them once however many jobs ask."""

    def __init__(self) -> None:
        self.by_group: dict[str, list[Reservation]] = {}
        self.all: frozenset[Reservation] = frozenset()
        self.pinned: frozenset[Reservation] = frozenset()
        self._only: dict[str, frozenset[Reservation]] = {}
        self.headed: set[str] = set()  # groups whose first blocked job was not worth a reservation (ReservationRule)

    def add(self, group: str, reservation: Reservation) -> None:
        """A reservation a blocked job of the group took; a pinned one (a preemptor's nodes) is kept off by every
        job, and takes one of the group's turns only when the group has none."""
        if not reservation.pinned or group not in self.by_group:
            self.by_group.setdefault(group, []).append(reservation)
        if reservation.pinned:
            self.pinned = self.pinned | {reservation}
        self._only = {}
        self.all = frozenset(r for held in self.by_group.values() for r in held) | self.pinned

    def count(self, group: str) -> int:
        return len(self.by_group.get(group, ()))

    def pin(self, reservation: Reservation) -> None:
        """A preemptor's nodes held from the start of the cycle (its nomination): no group's turn."""
        self.pinned = self.pinned | {reservation}
        self._only = {}
        self.all = frozenset(r for held in self.by_group.values() for r in held) | self.pinned

    def only(self, group: str) -> frozenset[Reservation]:
        """The group's own reservations and the pinned ones."""
        if group not in self._only:
            self._only[group] = frozenset(self.by_group.get(group, ())) | self.pinned
        return self._only[group]


def reservation_for(snap: Snapshot, job: JobRequest) -> Reservation | None:
    """What the blocked `job` should reserve; None if it could not fit anywhere even on an idle cluster.

    At the required level (else the finest level where one domain could ever hold the gang), take the domain with
    the most room now among those that could hold it when idle; then keep only as many of its children (domains,
    or nodes below the finest level; most room first) as could hold the gang when idle, so the rest of that domain
    stays open for backfill."""
    return _reservation(Solver(snap, job))


def _reservation(sv: Solver) -> Reservation | None:
    snap, job, replicas = sv.snap, sv.job, sv.job.replicas
    finest = sv.finest_level
    levels = [min(sv.required_level, finest)] if sv.required_level else range(finest, -1, -1)
    chosen = start = read = None
    for level in levels:
        domains = could_ever_hold(sv, level)
        if domains:
            chosen, start, read = _soonest(sv, domains)
            break
    if chosen is None:
        return None
    level = snap.domains[chosen].level
    whole = Reservation(job, domains=frozenset([chosen]), label=snap.domain_label(chosen), start=start)
    if sv.slice_level is not None and sv.slice_level <= level + 1:
        return whole  # slices must fit inside the children: keep the whole domain
    at = start.at if start is not None else None
    if level == finest:  # below the finest level: single nodes
        nodes = snap.child_nodes[chosen]
        if sv.required_level == sv.node_level:
            one = [i for i in nodes if sv.idle_slots(i) >= replicas]
            if at is None:
                i, node_start = max(one, key=sv.slots), None
            else:  # each node's predicted start, searched once
                node_start, i = min(((_start_on(sv, [i]), i) for i in one),
                                    key=lambda found: (_at(found[0]), -sv.slots(found[1]), found[1]))
            return Reservation(job, nodes=frozenset([i]), label=f"node {snap.nodes[i].name}", start=node_start)
        kids = [((_room_at(sv, [i], at, read), sv.slots(i), sv.node_free_primary(i)), i, sv.node_room(i, idle=True))
                for i in nodes]
        picked = _enough(kids, replicas, (lambda ids: sv.covers(sv.idle_capacity(ids))) if sv.others else None)
        if picked is None or len(picked) == len(kids):
            return whole
        narrowed = _start_on(sv, picked) if at is not None else None
        if at is not None and _at(narrowed) > at:
            return whole
        label = _many("node", [snap.nodes[i].name for i in sorted(picked)], snap.domain_label(chosen))
        return Reservation(job, nodes=frozenset(picked), label=label, start=narrowed)
    kids = [((_room_at(sv, snap.nodes_under(c), at, read), sv.room(c), sv.free_primary(c)), c, sv.room(c, idle=True))
            for c in snap.child_domains[chosen]]
    others = (lambda ids: sv.covers(sv.idle_capacity(i for c in ids for i in snap.nodes_under(c)))) if sv.others \
        else None
    picked = _enough(kids, replicas, others)
    if picked is None or len(picked) == len(kids):
        return whole
    narrowed = _start_on(sv, [i for c in picked for i in snap.nodes_under(c)]) if at is not None else None
    if at is not None and _at(narrowed) > at:
        return whole
    if len(picked) == 1:
        return Reservation(job, domains=frozenset(picked), label=snap.domain_label(picked[0]), start=narrowed)
    names = [snap.domains[c].name for c in sorted(picked)]
    if all(n.startswith(UNLABELLED) for n in names):  # nodes without this level's label: each its own domain
        label = _many("node", [n[len(UNLABELLED):] for n in names], snap.domain_label(chosen))
    else:
        label = _many(f"{snap.levels[level].name} domain", names, snap.domain_label(chosen))
    return Reservation(job, domains=frozenset(picked), label=label, start=narrowed)


def _soonest(sv: Solver, domains: list[int]) -> tuple[int, Start | None, dict[str, int] | None]:
    """The domain predicted to hold the gang soonest, that start, and (if known) the members of the nodes whose
    ends were read by then (as starts_and_members); without predicted ends (or with none that frees enough), the
    one closest to fitting: most room now, then most free GPUs (or the job's primary resource)."""
    snap = sv.snap
    if snap.horizon.on:
        read = None
        if sv.claiming or sv.slice_level not in (None, sv.node_level):  # room counted otherwise than node by node
            groups = {d: _open_free(sv, snap.nodes_under(d)) for d in domains}
            starts = earliest_starts(snap.horizon, groups, sv.requests, sv.replicas, sv.node_step)
        else:
            starts, read = starts_and_members(snap.horizon, _groups(sv, domains), sv.requests, sv.replicas,
                                              sv.node_step)
        if starts:
            soonest = min(starts, key=lambda d: (-sv.room(d), -sv.free_primary(d), d))
            return soonest, starts[soonest], read
    return max(domains, key=lambda d: (sv.room(d), sv.free_primary(d), -d)), None, None


def _groups(sv: Solver, domains: list[int]) -> Groups[int]:
    """`domains` (of one level) as groups of the nodes the gang may use, read as the search needs them: their members
    now are their room (which counts node by node here, as the horizon does: no DRA devices, no slices across
    nodes)."""
    snap = sv.snap
    level, wanted = snap.domains[domains[0]].level, set(domains)

    def member(name: str) -> tuple[int, dict[str, int], int] | None:
        i = snap.index.get(name)
        if i is None or (d := snap.ancestors[i][level]) not in wanted or not sv.is_open(i):
            return None
        return d, snap.free[i], sv.node_room(i)

    return Groups({d: sv.room(d) for d in domains}, member,
                  lambda: [snap.nodes[i].name for d in domains for i in snap.nodes_under(d) if sv.is_open(i)],
                  sum(sv.view.node_count[d] for d in domains))


def _open_free(sv: Solver, nodes) -> list[tuple[str, dict[str, int]]]:
    """(name, free now) of those of `nodes` the gang may use."""
    snap = sv.snap
    return [(snap.nodes[i].name, snap.free[i]) for i in nodes if sv.is_open(i)]


def _start_on(sv: Solver, nodes) -> Start | None:
    """The gang's predicted start on `nodes` (those it may use), counting replicas per node."""
    return predicted_start(sv.snap.horizon, _open_free(sv, nodes), sv.requests, sv.replicas, sv.node_step)


def _room_at(sv: Solver, nodes, at: float | None, read: dict[str, int] | None = None) -> int:
    """Replicas `nodes` are predicted to hold at `at` (0 when no start is predicted: the order falls to room now);
    `read`: their members at `at` where the search for that start read them (the others hold their room now)."""
    if at is None:
        return 0
    snap = sv.snap
    if read is not None:
        return sum(read.get(snap.nodes[i].name, sv.node_room(i)) for i in nodes if sv.is_open(i))
    return sum(slots_at(snap.horizon, snap.nodes[i].name, snap.free[i], sv.requests, sv.replicas, at, sv.node_step)
               for i in nodes if sv.is_open(i))


def _at(start: Start | None) -> float:
    return start.at if start is not None else float("inf")


def _many(what: str, names: list[str], where: str) -> str:
    if len(names) > 3:
        return f"{len(names)} {what}s of {where}"
    return f"{what}{'s' if len(names) > 1 else ''} {', '.join(names)} ({where})"


def _enough(kids: list[tuple[tuple[int, ...], int, int]], need: int,
            others: Callable[[list[int]], bool] | None = None) -> list[int] | None:
    """((room at the predicted start, room now, free), id, room when idle): ids closest to fitting first, until
    their idle room reaches `need` identical members and, for a gang with other members, `others(ids)` says their
    capacity holds the whole gang."""
    out, acc = [], 0
    for _, k, idle in sorted(kids, key=lambda x: (tuple(-v for v in x[0]), x[1])):
        if idle <= 0:
            continue
        out.append(k)
        acc += idle
        if acc >= need and (others is None or others(out)):
            return out
    return None


def _decide(snap: Snapshot, job: JobRequest, policy: QueuePolicy, placed: list[Decision],
            held: Held, failed: dict[Shape, str]) -> tuple[Decision, Reservation | None]:
    """One job's decision, and the reservation it took (None if none). `held`: the reservations so far.
    `failed`: validation per shape this cycle. A shape that did not fit under these reservations (snap.unfit) does
    not fit until capacity is freed: a job of that shape is told the same without a search (its message keeps the
    counts of that search). `unfit_key` says what such an answer is filed under."""
    shape = job.shape()
    invalid = failed.get(shape)
    if invalid is None:  # validation reads only the topology: once per shape and cycle
        invalid = failed[shape] = validate(snap, job) or ""
    why = Cause(Reason.INVALID, invalid) if invalid else policy.admit(job, placed)
    if why:
        return Decision(job, None, why), None
    seen = unfit_key(job, policy, held, snap.horizon.now)
    head = seen[2][1]
    known = snap.unfit.get(seen)
    if known is not None:
        return Decision(job, None, known.cause, blocked_by=known.blocked_by), None
    decision, taken = _search(snap, job, policy, seen[1], seen[2][0], head)
    blocked = decision.placement is None and taken is None
    # no node could take it even idle: neither a reservation nor a preemption can help it (so it is not searched again
    # until capacity or the nodes change, like a job behind the head)
    hopeless = blocked and decision.cause is not None and (decision.cause.code == Reason.TOO_LARGE or (
        decision.cause.code == Reason.NO_NODE_QUALIFIES and not any(snap.view(job).eligible)))
    if head and not seen[2][0] and blocked and not hopeless:  # the group's first job blocked for room, not worth a
        held.headed.add(policy.group(job))  # reservation: its turn is used all the same (not by a job placed, nor by
        # a hopeless one: the jobs behind it would be left no reservation, for nothing)
    if blocked and (not head or hopeless):  # a head searches each cycle: its victims' protection may have run out
        snap.unfit[seen] = decision
        if hopeless:  # the same answer whether it may reserve and is its group's first or not
            snap.unfit[(seen[0], seen[1], (False, False))] = decision
    return decision, taken


def decide_isolated(snap: Snapshot, job: JobRequest, policy: QueuePolicy, placed: list[Decision], held: Held,
                    failed: dict[Shape, str]) -> tuple[Decision, Reservation | None]:
    """_decide, with a bug met on this job said in its decision: one job must not stop the cycle."""
    try:
        return _decide(snap, job, policy, placed, held, failed)
    except Exception as e:  # noqa: BLE001 - isolated to this job; its snapshot is unchanged
        return Decision(job, None, Cause(Reason.INTERNAL_ERROR, f"internal error while placing this job: {e!r}"),
                        error=repr(e)), None


def unfit_key(job: JobRequest, policy: QueuePolicy, held: Held,
              now: float) -> tuple[Shape, frozenset[Reservation], tuple[bool, bool]]:
    """What a search for `job` reads besides the snapshot: its shape, the reservations it keeps off (never its own
    pinned nodes, nor those it is bound to leave before their holders start), and (whether it may take one, whether
    it is its group's head: the first blocked job, which may preempt)."""
    blocking = policy.blocking(job, held)
    if held.pinned and any(r.holder.key == job.key for r in held.pinned):
        blocking = frozenset(r for r in blocking if r.holder.key != job.key)
    rule = policy.reserving
    if (job.limit or job.estimate) is not None and any(r.start is not None for r in blocking):
        blocking = frozenset(r for r in blocking if not r.lets(job, now, rule.backfill_by))
    group = policy.group(job)
    head = policy.reserves and held.count(group) < rule.per_group and group not in held.headed
    return job.shape(), blocking, (head and rule.worth(job, now), head)


def _search(snap: Snapshot, job: JobRequest, policy: QueuePolicy, blocking: frozenset[Reservation],
            may_reserve: bool, head: bool) -> tuple[Decision, Reservation | None]:
    """`head`: the first blocked job of its group this cycle, which may preempt (core/preempt.py); `may_reserve`:
    that, and worth a reservation by the policy's ReservationRule."""
    sv = _solver(snap, job, policy, blocking)
    p = policy.place(sv)
    if p is None and spares.lends_to(snap, job):
        p = spares.lend(snap, lambda: policy.place(_solver(snap, job, policy, blocking)))
    if p is not None:
        snap.assume(job, p.assignments)
        if job.estimate is not None:  # placed now: predicted to end an estimate from now
            snap.horizon.put(job.key, snap.horizon.now, job.estimate, None, (
                (node, job.member_requests(rank)) for node, ranks in p.assignments.items() for rank in ranks))
        return Decision(job, p, None), None
    found = policy.preempt(snap, job, lambda: frozenset(sv.excluded_nodes).union(
        *(snap.child_nodes[d] for d in sv.excluded_domains)), head)
    if found is not None:
        return found
    anywhere = Solver(snap, job, fit=policy.fit) if blocking else sv
    blocked_by: tuple[GangKey, ...] = ()
    if blocking and policy.place(anywhere) is not None:
        holders = sorted(blocking, key=lambda r: r.holder.queue_key)
        blocked_by = tuple(r.holder.key for r in holders)
        said = "; ".join(f"{r.label}, reserved for {r.holder.key} (priority {r.holder.priority})" for r in holders)
        after = "that job starts" if len(blocking) == 1 else "they start"
        cause = Cause(Reason.RESERVED_FOR_OTHERS, f"fits only inside {said}; it runs after {after}")
    else:
        cause = explain_solver(anywhere)
    if shielded := policy.shielded.get(job.key):
        cause = cause._replace(message=f"{cause.message}; {shielded}")
    taken = _reservation(sv) if may_reserve else None
    if taken is None:
        return Decision(job, None, cause, blocked_by=blocked_by), None
    verb = "are" if len(taken.domains) > 1 or len(taken.nodes) > 1 else "is"
    text = cause.message
    if taken.start is not None:
        after = f", when {taken.start.after} ends" if taken.start.after else ""
        text = f"{text}; expected to start in about {about(taken.start.at - snap.horizon.now)}{after}"
    cause = cause._replace(message=f"{text}; {taken.label} {verb} reserved for it")
    return Decision(job, None, cause, reserved=taken.label, reserved_nodes=taken.node_names(snap),
                    expected_start=taken.start.at if taken.start is not None else None,
                    blocked_by=blocked_by), taken


def _solver(snap: Snapshot, job: JobRequest, policy: QueuePolicy, blocking: frozenset[Reservation]) -> Solver:
    """A search for `job` that keeps off the `blocking` reservations."""
    if blocking:
        return Solver(snap, job, frozenset().union(*(r.domains for r in blocking)),
                      exclude_nodes=frozenset().union(*(r.nodes for r in blocking)), fit=policy.fit)
    return Solver(snap, job, fit=policy.fit)


def about(seconds: float) -> str:
    """A duration as people say it: 40 s, 12 min, 3 h, 2 d."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 1.5 * size or (unit == "min" and seconds >= size):
            return f"{round(seconds / size)} {unit}"
    return f"{max(round(seconds), 0)} s"


def schedule(snap: Snapshot, jobs: list[JobRequest], policy: QueuePolicy | None = None) -> list[Decision]:
    """Decide every pending job in order; placed gangs are assumed into `snap` (the caller writes them)."""
    policy = policy or PriorityFifo()
    out: list[Decision] = []
    placed: list[Decision] = []
    held = Held()  # group -> the reservation its first blocked job holds
    for reservation in policy.nominated(snap, jobs):
        held.pin(reservation)
    failed: dict[Shape, str] = {}  # shape -> why it is invalid, or ""
    for job in policy.order(jobs):
        decision, taken = decide_isolated(snap, job, policy, placed, held, failed)
        if taken is not None:
            held.add(policy.group(job), taken)
        if decision.placement is not None:
            placed.append(decision)
        out.append(decision)
    return out
