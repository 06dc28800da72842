"""One scheduling cycle over the pending jobs: order, place, assume, reserve for the blocked head, backfill.

Order comes from a QueuePolicy (default: priority desc, then submission time). The first job that does not fit but
could fit once running pods finish holds a reservation (see reservation_for: the domain closest to fitting at its
required level, narrowed to just enough child domains or nodes). Jobs behind it are placed only outside the
reservation, so big gangs are not starved by streams of small ones. One reservation per cycle; the cycle runs again
on the next event, so the reservation follows the cluster as it changes. Tenant queues with quotas and fair share
(GPUQueue) plug in as another QueuePolicy: `order` decides who goes first, `admit` may hold a job back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from superpod.core.explain import explain, idle_slots, idle_ub, room_of
from superpod.core.model import Snapshot
from superpod.core.placement import Placement, Solver, place, solve, validate
from superpod.core.request import JobRequest


@dataclass(frozen=True)
class Decision:
    job: JobRequest
    placement: Placement | None
    reason: str | None  # why it waits; None when placed
    reserved: str | None = None  # what this job holds a reservation on, e.g. "leaf su-2"
    reserved_nodes: tuple[str, ...] = ()  # every node inside that reservation

    @property
    def placed(self) -> bool:
        return self.placement is not None


class QueuePolicy(Protocol):
    def order(self, jobs: list[JobRequest]) -> list[JobRequest]: ...

    def admit(self, job: JobRequest, placed: list[Decision]) -> str | None:
        """None if the job may be placed now, else why not (e.g. its queue is over quota)."""
        ...


class PriorityFifo:
    """Priority descending, then submission time, then namespace/name. Admits everything."""

    def order(self, jobs: list[JobRequest]) -> list[JobRequest]:
        return sorted(jobs, key=lambda j: (-j.priority, j.submitted, j.namespace, j.name))

    def admit(self, job: JobRequest, placed: list[Decision]) -> str | None:
        return None


@dataclass(frozen=True)
class Reservation:
    """Capacity held for a blocked job: whole domains and/or single nodes (indexes into the snapshot)."""

    holder: JobRequest
    domains: frozenset[int] = frozenset()
    nodes: frozenset[int] = frozenset()
    label: str = ""

    def node_names(self, snap: Snapshot) -> tuple[str, ...]:
        idx = set(self.nodes) | {i for d in self.domains for i in snap.nodes_under(d)}
        return tuple(sorted(snap.nodes[i].name for i in idx))


def reservation_for(snap: Snapshot, job: JobRequest) -> Reservation | None:
    """What the blocked `job` should reserve; None if it could not fit anywhere even on an idle cluster.

    At the required level (else the finest level where one domain could ever hold the gang), take the domain with
    the most room now among those that could hold it when idle; then keep only as many of its children (domains,
    or nodes below the finest level; most room first) as could hold the gang when idle, so the rest of that domain
    stays open for backfill."""
    sv = Solver(snap, job)
    R = job.replicas
    levels = [min(sv.q, sv.L)] if sv.q else range(sv.L, -1, -1)
    chosen = None
    for lvl in levels:
        doms = [d for d in snap.by_level[lvl] if idle_ub(sv, d) >= R and room_of(sv, d, idle=True) >= R]
        if sv.q == sv.L + 1:  # required: one node — keep domains holding such a node
            big = {snap.anc[i][-1] for i in range(len(snap.nodes)) if idle_slots(sv, i) >= R}
            doms = [d for d in doms if d in big]
        if doms:  # closest to fitting: most room now, then most free GPUs (or the job's primary resource)
            chosen = max(doms, key=lambda d: (room_of(sv, d), sv.view.free[d][sv.primary], -d))
            break
    if chosen is None:
        return None
    lvl = snap.domains[chosen][0]
    whole = Reservation(job, domains=frozenset([chosen]), label=snap.domain_label(chosen))
    if sv.sl is not None and sv.sl <= lvl + 1:
        return whole  # slices must fit inside the children: keep the whole domain
    if lvl == sv.L:  # below the finest level: single nodes
        if sv.q == sv.L + 1:
            i = max((i for i in snap.node_children[chosen] if idle_slots(sv, i) >= R), key=lambda i: sv.slots(i))
            return Reservation(job, nodes=frozenset([i]), label=f"node {snap.nodes[i].name}")
        unit = sv.u if sv.sl == sv.L + 1 else 1
        free = [max(snap.free[i].get(sv.primary, 0), 0) for i in range(len(snap.nodes))]
        kids = [((sv.slots(i), free[i]), i, idle_slots(sv, i) // unit * unit) for i in snap.node_children[chosen]]
        picked = _enough(kids, R)
        if picked is None or len(picked) == len(kids):
            return whole
        where = snap.domain_label(chosen)
        if len(picked) > 3:
            label = f"{len(picked)} nodes of {where}"
        else:
            names = ", ".join(snap.nodes[i].name for i in sorted(picked))
            label = f"node{'s' if len(picked) > 1 else ''} {names} ({where})"
        return Reservation(job, nodes=frozenset(picked), label=label)
    kids = [
        ((room_of(sv, c), sv.view.free[c][sv.primary]), c, room_of(sv, c, idle=True)) for c in snap.children[chosen]
    ]
    picked = _enough(kids, R)
    if picked is None:
        return whole
    if len(picked) == 1:
        return Reservation(job, domains=frozenset(picked), label=snap.domain_label(picked[0]))
    level = snap.levels[lvl].name
    names = ", ".join(snap.domains[c][1] for c in sorted(picked))
    return Reservation(job, domains=frozenset(picked), label=f"{level} domains {names}")


def _enough(kids: list[tuple[tuple[int, int], int, int]], need: int) -> list[int] | None:
    """((room now, free), id, room when idle): ids closest to fitting first, until their idle room reaches `need`."""
    out, acc = [], 0
    for _, k, idle in sorted(kids, key=lambda x: (-x[0][0], -x[0][1], x[1])):
        if idle <= 0:
            continue
        out.append(k)
        acc += idle
        if acc >= need:
            return out
    return None


def schedule(snap: Snapshot, jobs: list[JobRequest], policy: QueuePolicy | None = None) -> list[Decision]:
    """Decide every pending job in order; placed gangs are assumed into `snap` (the caller writes them)."""
    policy = policy or PriorityFifo()
    out: list[Decision] = []
    placed: list[Decision] = []
    held: Reservation | None = None
    for job in policy.order(jobs):
        why = validate(snap, job) or policy.admit(job, placed)
        if why:
            out.append(Decision(job, None, why))
            continue
        outside = Solver(snap, job, held.domains, exclude_nodes=held.nodes) if held else None
        p = solve(outside) if outside else place(snap, job)
        if p is not None:
            snap.assume(job, p.assignments)
            d = Decision(job, p, None)
            placed.append(d)
            out.append(d)
            continue
        if held is None:
            reason = explain(snap, job)
            held = reservation_for(snap, job)
            if held is not None:
                verb = "are" if len(held.domains) > 1 or len(held.nodes) > 1 else "is"
                text = f"{reason}; {held.label} {verb} reserved for it"
                out.append(Decision(job, None, text, reserved=held.label, reserved_nodes=held.node_names(snap)))
            else:
                out.append(Decision(job, None, reason))
            continue
        if place(snap, job) is not None:
            why = (
                f"fits only inside {held.label}, reserved for {held.holder.key} (priority {held.holder.priority}); "
                "it runs after that job starts"
            )
            out.append(Decision(job, None, why))
        else:
            out.append(Decision(job, None, explain(snap, job, held.domains, held.nodes)))
    return out
