"""Exact victim choice for a gang that does not fit: the running gangs to evict so that it can be placed.

Among the sets of candidate gangs after whose eviction the preemptor can be placed (its required domain, slices,
product and every request respected), the chosen set is the lexicographic minimum of (1) the highest priority among
its gangs, (2) how many gangs, (3) GPUs evicted, (4) GPU-seconds of work lost; ties go to the set whose gang keys
sort first. Victims are whole gangs. Who may be a candidate (lower priority, borrowed GPUs, not reserved, ...) is
the caller's rule; this module only chooses among them. Pure: the snapshot is changed only for the final placement
and given back as it was.

A gang whose members differ (JobRequest.others) is searched for its identical members; when its other members then
find no room (placement.solve), it is searched again with every member at the largest request (today's booking), so
it frees what that booking would and no more than it must when the others fit beside the identical ones.

How. The preemptor lands inside one domain of its required level (the whole cluster when it requires none), so each
such domain is searched on its own, with only the candidates that have pods on its eligible nodes; the best domain
wins. Inside a domain, `Room` says how many replicas fit given a set of evicted gangs — the same count as
`Solver.room` (per-node slots by every request, slices rounded per slice domain), kept up to date as gangs are
added and removed — and it only grows as gangs are added. The search:
- the highest priority: the lowest candidate priority p such that evicting every candidate of priority <= p makes
  room (monotone, so no smaller set of lower priority can);
- then the count: for k from a lower bound up (the fewest gangs whose freed primary resource covers the shortfall),
  a depth-first search over the candidates of priority <= p for a set of exactly k that makes room, with the GPUs
  and work lost of the best set found as a bound, and the shortfall that the k - chosen largest remaining gangs
  could cover as a second one.
A search that visits more than `budget` sets stops with the best found and says `exact=False`. The placement is then
computed by `placement.solve` on the snapshot without the victims' pods: exactly as a gang is placed on free
capacity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from superpod.core.cycle import Decision, Reservation
from superpod.core.dra.model import DeviceID
from superpod.core.gang_key import GangKey
from superpod.core.model import Snapshot
from superpod.core.phases import Cause, Reason
from superpod.core.placement import Placement, Solver, could_ever_hold, solve
from superpod.core.queues import RESERVED
from superpod.core.request import GPU, JobRequest

BUDGET = 200_000  # sets visited per domain before the search settles for the best found


@dataclass(frozen=True)
class Victim:
    key: GangKey
    priority: int
    gpus: float  # GPUs it holds (MIG slices count g/7)
    lost: float  # GPU-seconds of work lost if it is evicted now (since its attempt started)
    pods: tuple[str, ...]  # keys of its pods in the snapshot
    group: str = ""  # victims of one group give back at most `limits[group]` GPUs together ("" : no bound)
    devices: frozenset[DeviceID] = frozenset()  # the DRA devices its pods' claims hold


@dataclass(frozen=True)
class Preemption:
    victims: tuple[Victim, ...]
    placement: Placement
    exact: bool = True

    @property
    def cost(self) -> tuple:
        return cost_of(self.victims)


def cost_of(victims) -> tuple:
    """The order victim sets are chosen in: highest priority, gangs, GPUs, work lost, then their keys."""
    victims = list(victims)
    return (max((v.priority for v in victims), default=None), len(victims), round(sum(v.gpus for v in victims), 6),
            round(sum(v.lost for v in victims), 6), tuple(sorted(v.key for v in victims)))


def choose(snap: Snapshot, job: JobRequest, candidates: list[Victim], exclude_nodes: frozenset[int] = frozenset(),
           budget: int = BUDGET, limits: dict[str, float] | None = None,
           place: Callable[[Solver], Placement | None] = solve) -> Preemption | None:
    """The victims to evict and where the preemptor then goes (by `place`, the policy's); None if it fits already, or
    no candidate set makes room (or it could not fit even on an idle cluster). `limits`: group -> the most GPUs its
    victims may hold together (a queue gives back only what it holds beyond its guarantee)."""
    solver = Solver(snap, job, exclude_nodes=exclude_nodes)
    if solve(solver) is not None:
        return None
    usable = _Usable(solver)
    domains = _domains(solver)
    on_node: dict[int, list[tuple[Victim, tuple, int]]] = {}  # node -> (candidate, a pod's requests, its primary)
    pods, index, primary, amounts = snap.pods, snap.index, solver.primary, {}
    for victim in candidates:
        pooled = _pooled_gpus(snap, victim) if primary == GPU else {}
        for key in victim.pods:
            if (pod := pods.get(key)) is not None and (i := index.get(pod.node)) is not None:
                amount = amounts.get(pod.requests)
                if amount is None:
                    amount = amounts[pod.requests] = dict(pod.requests).get(primary, 0)
                entries = on_node.get(i)
                if entries is None:
                    entries = on_node[i] = []
                entries.append((victim, pod.requests, amount + pooled.pop(i, 0)))
    best: tuple[tuple, list[Victim]] | None = None
    exact = True  # every domain searched to the end
    for bound, domain in _ranked(solver, domains, on_node, usable):
        if best is not None and bound > best[0][:4]:
            break  # ranked by bound: no domain left can do better
        room = Room(solver, domain, on_node, usable, limits or {})
        found = room.search(best[0] if best else None, budget) if room.victims else None
        exact = exact and room.complete
        if found is not None and (best is None or cost_of(found) < best[0]):
            best = (cost_of(found), found)
    if best is None:
        return None
    placement = _place_without(snap, job, best[1], exclude_nodes, place)
    if placement is None and job.others:  # its other members found no room: free room as if each took the largest
        return choose(snap, job.at_largest(), candidates, exclude_nodes, budget, limits, place)
    return Preemption(tuple(sorted(best[1], key=lambda v: v.key)), placement, exact) if placement else None


def _pooled_gpus(snap: Snapshot, victim: Victim) -> dict[int, int]:
    """Node -> GPUs the victim's claims hold there, on the nodes whose nvidia.com/gpu they are too (Snapshot._pool):
    what evicting it frees of their nvidia.com/gpu."""
    if not victim.devices or snap.devices is None or not snap.pooled:
        return {}
    out = {}
    for name in {device[1] for device in victim.devices}:
        if (i := snap.index.get(name)) in snap.pooled:
            out[i] = int(snap.devices.pool_gpus(name, victim.devices, snap.nodes[i].served) + 1e-9)
    return out


def _domains(solver: Solver) -> list[int]:
    """The domains the preemptor may land in whole: of its required level (nodes when it requires one), else the
    cluster; only those that could hold it with no pod running."""
    snap, level = solver.snap, solver.required_level
    if level == 0:
        return [0] if solver.could_ever_hold(0) else []
    if level == solver.node_level:
        return [i for i in range(len(snap.nodes)) if solver.idle_slots(i) >= solver.replicas]
    return could_ever_hold(solver, level)


class _Usable:
    """Whether a node could hold a replica of the preemptor with no pod running (asked once per node)."""

    def __init__(self, solver: Solver) -> None:
        self.solver = solver
        self.known: dict[int, bool] = {}

    def __call__(self, node: int) -> bool:
        known = self.known.get(node)
        if known is None:
            known = self.known[node] = self.solver.idle_slots(node) > 0
        return known


def _ranked(solver: Solver, domains: list[int], on_node: dict[int, list[tuple[Victim, tuple, int]]],
            usable: _Usable) -> list[tuple]:
    """The domains with candidates, each with a lower bound on the cost of its best set — (highest priority, gangs,
    GPUs, work lost): from what the candidates' freed primary resource must cover at least — best bound first."""
    snap, level, primary = solver.snap, solver.required_level, solver.primary
    wanted = set(domains)
    freed: dict[int, dict[str, list]] = {}  # domain -> victim key -> [victim, primary units freed there]
    ancestors, node_level = snap.ancestors, solver.node_level
    for i, entries in on_node.items():
        domain = i if level == node_level else ancestors[i][level] if level else 0
        if domain not in wanted or not usable(i):
            continue
        mine = freed.get(domain)
        if mine is None:
            mine = freed[domain] = {}
        for victim, _, amount in entries:
            known = mine.get(victim.key)
            if known is None:
                mine[victim.key] = [victim, amount]
            else:
                known[1] += amount
    need = solver.replicas * dict(solver.requests).get(primary, 0)
    out = []
    for domain, units in freed.items():
        free = solver.node_free_primary(domain) if level == node_level else solver.free_primary(domain)
        shortfall = need - free
        covered, priority = 0, None
        for victim, amount in sorted(units.values(), key=lambda entry: entry[0].priority):
            if covered >= shortfall:
                break
            covered += amount
            priority = victim.priority
        if covered < shortfall:
            continue  # even every candidate there could not make room
        fewest, covered = 0, 0
        for amount in sorted((entry[1] for entry in units.values()), reverse=True):
            if covered >= shortfall:
                break
            covered += amount
            fewest += 1
        fewest = max(fewest, 1)
        victims = [entry[0] for entry in units.values()]
        low = min(v.priority for v in victims) if priority is None else priority
        if fewest == 1:  # one gang alone: it must cover the shortfall, at a priority no higher than the bound's
            victims = [v for v, amount in units.values() if amount >= shortfall and v.priority <= low]
        gpus = max(max(shortfall, 0) if primary == GPU else 0, sum(sorted(v.gpus for v in victims)[:fewest]))
        lost = sum(sorted(v.lost for v in victims)[:fewest])
        out.append(((low, fewest, round(gpus, 6), round(lost, 6)), domain))
    return sorted(out)


def _place_without(snap: Snapshot, job: JobRequest, victims: list[Victim], exclude_nodes: frozenset[int],
                   place: Callable[[Solver], Placement | None]) -> Placement | None:
    """Where the preemptor goes once the victims' pods are gone; the snapshot is given back unchanged."""
    pods = [snap.pods[key] for victim in victims for key in victim.pods if key in snap.pods]
    for pod in pods:
        snap.remove_pod(pod.key)
    freed = frozenset().union(*(victim.devices for victim in victims)) if snap.devices is not None else frozenset()
    pools = {device[1] for device in freed}  # (a node's own devices are in the pool named after it)
    if freed:
        snap.devices.free(freed)
        snap.repool(pools)
    try:
        return place(Solver(snap, job, exclude_nodes=exclude_nodes))
    finally:
        if freed:
            snap.devices.take(freed)
            snap.repool(pools)
        for pod in pods:
            snap.add_pod(pod)


@dataclass
class Room:
    """Replicas of the preemptor that fit inside one domain (`node` index when the domain is a node), as gangs are
    evicted and given back."""

    solver: Solver
    domain: int
    on_node: dict[int, list[tuple[Victim, tuple, int]]]  # node -> (candidate, a pod's requests, its primary)
    usable: _Usable
    limits: dict[str, float] = field(default_factory=dict)  # group -> GPUs its victims may hold together
    victims: list[Victim] = field(default_factory=list)  # the candidates with pods on the domain's usable nodes
    complete: bool = True  # False once a search ran out of budget: the answer may not be the minimum

    def __post_init__(self) -> None:
        sv, snap = self.solver, self.solver.snap
        nodes = [self.domain] if sv.required_level == sv.node_level else snap.nodes_under(self.domain)
        usable = [i for i in nodes if self.usable(i)]
        self.requests, primary = sv.requests, sv.primary
        self.free: dict[int, dict[str, int]] = {}  # node -> free of each request, once a victim there is evicted
        self.freed: dict[GangKey, list[tuple[int, tuple[tuple[str, int], ...]]]] = {}  # victim -> (node, requests)
        self.units: dict[GangKey, int] = {}  # victim -> primary resource it frees here
        for i in usable:
            for victim, requests, amount in self.on_node.get(i, ()):
                if victim.key not in self.freed:
                    self.freed[victim.key], self.units[victim.key] = [], 0
                    self.victims.append(victim)
                self.freed[victim.key].append((i, requests))
                self.units[victim.key] += amount
        self.slots = {i: sv.slots(i) for i in usable}
        self.devices_freed: dict[int, set[DeviceID]] = {}  # node -> the devices evicted victims there free
        self.per_group: Counter = Counter()
        for i, k in self.slots.items():
            if k:
                self.per_group[self._group(i)] += k
        self.need = sv.replicas * dict(self.requests).get(primary, 0)
        self.base = sum(max(snap.free[i].get(primary, 0), 0) for i in usable)

    def _group(self, node: int):
        """The slice group of a node: None without slices, the node itself, or its domain at the slice level."""
        sv = self.solver
        if sv.slice_level is None:
            return None
        if sv.slice_level == sv.node_level:
            return ("node", node)
        return sv.snap.ancestors[node][sv.slice_level]

    def _slots(self, node: int) -> int:
        free, k, snap = self.free[node], self.solver.replicas, self.solver.snap
        book = snap.devices
        pooled = node in snap.pooled and book is not None
        for r, v in self.requests:
            if not (pooled and r == GPU):
                k = min(k, max(free.get(r, 0), 0) // v)
        if pooled and (share := self.solver.pooled_share):  # the pool's GPUs: free ones and those the victims' give
            gpus = free.get(GPU, 0) + book.pool_gpus(snap.nodes[node].name, self.devices_freed.get(node, set()),
                                                     snap.nodes[node].served)
            k = min(k, int(max(gpus, 0) / share + 1e-9))
        if self.solver.claiming and k and book is not None:
            k = book.slots_freeing(self.solver.snap.nodes[node].name, self.solver.claims, k,
                                   self.devices_freed.get(node, set()), self.solver.shared)
        return k

    def room(self) -> int:
        size = self.solver.slice_size
        if self.solver.slice_level is None:
            total = self.per_group[None]
        else:
            total = sum(count // size * size for count in self.per_group.values())
        return min(total, self.solver.replicas)

    def fits(self) -> bool:
        return self.room() >= self.solver.replicas

    def evict(self, victim: Victim, sign: int = 1) -> None:
        """Count the victim's pods as gone (sign 1) or back (sign -1)."""
        for node, requests in self.freed[victim.key]:
            free = self.free.get(node)
            if free is None:
                snap_free = self.solver.snap.free[node]
                free = self.free[node] = {r: snap_free.get(r, 0) for r, _ in self.requests}
                if node in self.solver.snap.pooled:
                    free[GPU] = snap_free.get(GPU, 0)
            for r, amount in requests:
                if r in free:
                    free[r] += sign * amount
            if victim.devices:
                freed = self.devices_freed.setdefault(node, set())
                (freed.update if sign > 0 else freed.difference_update)(victim.devices)
            before, self.slots[node] = self.slots[node], self._slots(node)
            if self.slots[node] != before:
                self.per_group[self._group(node)] += self.slots[node] - before

    # ---- the search -----------------------------------------------------------------------------------------------
    def search(self, bound: tuple | None, budget: int) -> list[Victim] | None:
        """The best set inside this domain, unless none beats `bound` (`complete` says whether the search
        finished). The lowest priority threshold at which evicting every candidate up to it makes room is where the
        minimum lies, unless the limits forbid every such set: then the next threshold."""
        self.budget = budget
        evicted: list[Victim] = []
        by_priority = sorted(self.victims, key=lambda v: v.priority)
        for priority in sorted({v.priority for v in self.victims}):
            if bound is not None and priority > bound[0]:
                break
            for victim in by_priority[len(evicted):]:
                if victim.priority > priority:
                    break
                self.evict(victim)
                evicted.append(victim)
            if self.fits():
                for victim in evicted:
                    self.evict(victim, -1)
                found = self._fewest(list(evicted), bound)
                if found is not None or not self.limits:
                    return found
                for victim in evicted:
                    self.evict(victim)
        for victim in evicted:
            self.evict(victim, -1)
        return None

    def _fewest(self, allowed: list[Victim], bound: tuple | None) -> list[Victim] | None:
        order = sorted(allowed, key=lambda v: (-self.units[v.key], v.gpus, v.lost, v.key))
        units = [self.units[v.key] for v in order]
        shortfall = self.need - self.base
        fewest, covered = 0, 0
        for amount in sorted(units, reverse=True):  # the fewest gangs whose freed resource covers the shortfall
            if covered >= shortfall:
                break
            covered += amount
            fewest += 1
        for count in range(max(fewest, 1), len(order) + 1):
            if bound is not None and (bound[0], bound[1]) < (max(v.priority for v in allowed), count):
                return None
            self.best: tuple | None = None
            self._depth(order, units, count, 0, [], shortfall, {})
            if self.best is not None:
                return self.best[1]
        return None

    def _depth(self, order: list[Victim], units: list[int], count: int, start: int, chosen: list[Victim],
               shortfall: float, given: dict[str, float]) -> None:
        self.budget -= 1
        if len(chosen) == count:
            if self.fits():
                key = cost_of(chosen)[2:]
                if self.best is None or key < self.best[0]:
                    self.best = (key, list(chosen))
            return
        left = count - len(chosen)
        if len(order) - start < left or sum(sorted(units[start:], reverse=True)[:left]) < shortfall:
            return  # not enough gangs left, or the largest left cannot cover the shortfall
        if self.best is not None:  # what the cheapest completion would cost at least: GPUs, then work lost
            rest = order[start:]
            gpus = round(sum(v.gpus for v in chosen) + sum(sorted(v.gpus for v in rest)[:left]), 6)
            lost = round(sum(v.lost for v in chosen) + sum(sorted(v.lost for v in rest)[:left]), 6)
            if (gpus, lost) > self.best[0][:2]:
                return
        for j in range(start, len(order)):
            if self.budget <= 0:
                self.complete = False
                return
            victim = order[j]
            group = victim.group
            if group in self.limits and given.get(group, 0.0) + victim.gpus > self.limits[group] + 1e-9:
                continue  # its group would give back more than it may
            given[group] = given.get(group, 0.0) + victim.gpus
            self.evict(victim)
            chosen.append(victim)
            self._depth(order, units, count, j + 1, chosen, shortfall - units[j], given)
            chosen.pop()
            self.evict(victim, -1)
            given[group] -= victim.gpus


# ---- preemption in the cycle -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Running:
    """A placed gang, as a possible victim."""

    request: JobRequest
    gpus: float
    lost: float  # GPU-seconds of work lost if it is evicted now
    pods: tuple[str, ...]  # keys of what it holds in the snapshot
    protected: str = ""  # why it may not be preempted now (e.g. it started less than minRuntimeSeconds ago)
    devices: frozenset[DeviceID] = frozenset()  # the DRA devices its pods' claims hold


@dataclass(frozen=True)
class Nomination:
    """A preemptor's nodes, held while the gangs it evicted stop."""

    nodes: tuple[str, ...]
    victims: tuple[GangKey, ...]  # the victims that still hold capacity
    holder: JobRequest | None = None  # a placed gang's, for the replacement of its lost replicas (it does not wait)


def victims(job: JobRequest, running: list[Running],
            bound: Callable[[JobRequest, JobRequest], tuple[str, float] | None],
            given: dict[str, float]) -> tuple[list[Victim], dict[str, float], list[str]]:
    """The candidates among `running` for `job` (the protected left out), the GPUs each group may still give back
    (`given`: what its victims gave this cycle), and the protected ones, each with why."""
    candidates, limits, protected = [], {}, []
    for gang in running:
        if gang.protected:
            protected.append(f"{gang.request.key} ({gang.protected})")
            continue
        group, most = bound(job, gang.request) or ("", 0.0)
        if group:
            limits[group] = most - given.get(group, 0.0)
        candidates.append(Victim(gang.request.key, gang.request.priority, gang.gpus, gang.lost, gang.pods, group,
                                 gang.devices))
    return candidates, limits, protected


def lower_priority(job: JobRequest, victim: JobRequest) -> bool:
    """Who may preempt whom without queues: strictly lower priority, never a reserved gang."""
    return victim.priority < job.priority and victim.service_class != RESERVED


class Preempting:
    """The QueuePolicy in force, plus preemption: a job that does not fit and is the first blocked one of its group
    evicts the cheapest set of `running` gangs `may_evict` allows (choose), and holds the nodes it will start on
    (a pinned reservation) while they stop; a job `nominations` holds nodes for waits for its victims and chooses
    no others. Everything else is the inner policy's."""

    def __init__(self, inner, running: Callable[[Callable[[JobRequest], bool]], list[Running]],
                 nominations: dict[str, Nomination],
                 may_evict: Callable[[JobRequest, JobRequest], bool] = lower_priority,
                 hopeless: Callable[[JobRequest], bool] = lambda job: False,
                 bound: Callable[[JobRequest, JobRequest], tuple[str, float] | None] = lambda job, victim: None) \
            -> None:
        """`running(allowed)`: the placed gangs whose request `allowed` accepts (asked only when a job may
        preempt); `hopeless(job)`: true when no placed gang can be its victim (a cheap test, asked first);
        `bound(job, victim)`: (group, GPUs) when the victims of that group may give back at most so many GPUs
        together (a queue above its guarantee), counted over the whole cycle."""
        self.inner, self._running, self.nominations, self.may_evict = inner, running, nominations, may_evict
        self.hopeless, self.bound = hopeless, bound
        self._given: dict[str, float] = {}  # group -> GPUs its victims gave back this cycle
        self.reserves, self.reserving, self.preempts = inner.reserves, inner.reserving, True
        self.fit = inner.fit
        self.parks = inner.parks and not nominations  # a nominated job must be visited to be placed
        self.chosen: dict[GangKey, Preemption] = {}  # preemptor -> what it evicts this cycle
        self.shielded: dict[GangKey, str] = {}  # job -> the protected gangs it may not evict, named, when it found none
        self._taken = {victim for nomination in nominations.values() for victim in nomination.victims}  # evicting

    def order(self, jobs: list[JobRequest]) -> list[JobRequest]:
        return self.inner.order(jobs)

    def admit(self, job: JobRequest, placed: list) -> Cause | None:
        return self.inner.admit(job, placed)

    def place(self, solver: Solver) -> Placement | None:
        return self.inner.place(solver)

    def group(self, job: JobRequest) -> str:
        return self.inner.group(job)

    def blocking(self, job: JobRequest, held):
        return self.inner.blocking(job, held)

    def nominated(self, snap: Snapshot, jobs: list[JobRequest]) -> list[Reservation]:
        """The nominations of these waiting jobs as pinned reservations, held from the start of the cycle."""
        out = []
        for job in jobs:
            if (nomination := self.nominations.get(job.key)) is not None:
                nodes = frozenset(snap.index[name] for name in nomination.nodes if name in snap.index)
                if nodes:
                    out.append(Reservation(job, nodes=nodes, label=nodes_label(nomination.nodes), pinned=True))
        for key in sorted(key for key, nomination in self.nominations.items() if nomination.holder is not None):
            nomination = self.nominations[key]  # a replacement's nodes: kept off by every waiting job
            nodes = frozenset(snap.index[name] for name in nomination.nodes if name in snap.index)
            if nodes:
                out.append(Reservation(nomination.holder, nodes=nodes, label=nodes_label(nomination.nodes),
                                       pinned=True))
        return out

    def preempt(self, snap: Snapshot, job: JobRequest, taken: Callable[[], frozenset[int]], head: bool):
        """(decision, pinned reservation) of a job that does not fit: waiting for its victims, or evicting new ones;
        None when neither. `taken`: the nodes other jobs hold (reservations); `head`: the first blocked job of its
        group."""
        nomination = self.nominations.get(job.key)
        if nomination is not None:
            nodes = frozenset(snap.index[name] for name in nomination.nodes if name in snap.index)
            label = nodes_label(nomination.nodes)
            names = ", ".join(map(str, nomination.victims))
            stopping = f"{len(nomination.victims)} gang(s) it preempted to stop ({names})" \
                if nomination.victims else "the room its preempted gangs left"
            reason = f"waiting for {stopping}; {label} {'are' if len(nodes) > 1 else 'is'} reserved for it"
            return (Decision(job, None, Cause(Reason.PREEMPTING, reason), reserved=label,
                             reserved_nodes=tuple(sorted(nomination.nodes))),
                    Reservation(job, nodes=nodes, label=label, pinned=True))
        if not head or self.hopeless(job):
            return None
        running = self._running(lambda victim: victim.key not in self._taken and self.may_evict(job, victim))
        candidates, limits, protected = victims(job, running, self.bound, self._given)
        found = choose(snap, job, candidates, taken(), limits=limits, place=self.inner.place) if candidates else None
        if found is None:
            if protected:  # the tenant waiting is told who holds what it may take back
                more = f" and {len(protected) - 3} more" if len(protected) > 3 else ""
                self.shielded[job.key] = f"the gangs it may preempt are protected: {', '.join(protected[:3])}{more}"
            return None
        self.chosen[job.key] = found
        self._taken.update(v.key for v in found.victims)
        for victim in found.victims:
            if victim.group:
                self._given[victim.group] = self._given.get(victim.group, 0.0) + victim.gpus
        names = tuple(sorted(found.placement.assignments))
        label = nodes_label(names)
        gangs = ", ".join(f"{v.key} (priority {v.priority})" for v in found.victims)
        reason = f"preempting {gangs} to start on {label}"
        nodes = frozenset(snap.index[name] for name in names)
        return (Decision(job, None, Cause(Reason.PREEMPTING, reason), reserved=label, reserved_nodes=names,
                         preempts=tuple(v.key for v in found.victims)),
                Reservation(job, nodes=nodes, label=label, pinned=True))


def nodes_label(names) -> str:
    names = sorted(names)
    return f"node {names[0]}" if len(names) == 1 else (
        f"nodes {', '.join(names)}" if len(names) <= 3 else f"{len(names)} nodes ({names[0]}, ...)")
