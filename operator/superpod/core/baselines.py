"""Baseline policies for the simulator: what users get from other schedulers, on the same core. Each is a small
QueuePolicy (core/cycle.py); the queue order is superpod's (priority, then submission), so only placement and the
reservation differ.

- `superpod-bestfit`: superpod taking, among domains equal on the count of domains, the best fit (least free GPUs)
  instead of the first in order (placement.BEST_FIT).
- `superpod-service`: superpod, its queue ordered by predicted service (core/estimates.py turn) instead of arrival.
- `superpod-estimate-backfill`: superpod letting a job run inside a reservation when its estimate (not its limit)
  ends before the holder's predicted start.
- `superpod-reserve-all`: superpod with every blocked job reserving (the rule before it was measured).
- `superpod-nopreempt`: superpod without preemption: a blocked gang waits for running ones to end.
- `superpod-nobackfill`: superpod's exact placement with no reservation: every job that fits now is placed in
  order, a blocked big gang holds nothing (greedy list scheduling; big gangs can starve behind small ones).
The baselines do not preempt (`preempts = False`); only `firstfit-reserving` among them reserves.
- `gang-spread`: kube-scheduler with the coscheduling plugin: all-or-nothing, each replica in turn on the node with
  the most free GPUs (least-allocated scoring over nvidia.com/gpu, ties by node order), no topology.
- `gang-firstfit`: all-or-nothing, replicas fill nodes in node order, no topology.
- `gang-firstfit-required`: gang-firstfit inside the first domain of the job's `required` level with room for the
  whole gang (as a scheduler that honours a required topology but neither searches for the tightest domain nor
  reserves); `preferred` and slices dropped. The fair baseline for jobs that require a leaf.
- `firstfit-reserving`: gang-firstfit-required with superpod's reservations (its rule, backfill by limit) and no
  preemption: a study of what the reservation adds to first fit.
- `random`: all-or-nothing, each replica on a random node with room (seeded), no topology.

"No topology": the schedulers these stand for cannot express `required`/`preferred` or slices, so the baselines place
as if the job had none; its runtime in the simulator still pays for the levels the placement crosses."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace

from superpod.core.cycle import ESTIMATE, RESERVE_AFTER, RESERVE_FROM_UNITS, PriorityFifo, QueuePolicy, ReservationRule
from superpod.core.estimates import SERVICE, Ordering
from superpod.core.placement import BEST_FIT, Placement, Solver, placement_of

OPERATOR_RULE = ReservationRule(after=RESERVE_AFTER, from_units=RESERVE_FROM_UNITS)  # `superpod run`'s default


class NoPreemption(PriorityFifo):
    preempts = False
    reserving = OPERATOR_RULE


class NoBackfill(PriorityFifo):
    reserves = False
    preempts = False


class _Greedy(PriorityFifo):
    """Gang all-or-nothing, one replica at a time on the node `choose` picks among those with room."""

    reserves = False
    preempts = False

    def place(self, solver: Solver) -> Placement | None:
        return self.fill(_loose(solver), range(len(solver.snap.nodes)), 0)

    def fill(self, loose: Solver, nodes: Iterable[int], domain: int) -> Placement | None:
        """The gang on `nodes` (inside `domain`, or 0), or None if they have too little room."""
        room = {node: slots for node in nodes if (slots := loose.slots(node)) > 0}
        if sum(room.values()) < loose.job.replicas:
            return None
        counts: dict[int, int] = {}
        for _ in range(loose.job.replicas):
            node = self.choose(loose, room, counts)
            counts[node] = counts.get(node, 0) + 1
            room[node] -= 1
            if not room[node]:
                del room[node]
        return placement_of(loose, sorted(counts.items()), domain)

    def choose(self, solver: Solver, room: dict[int, int], counts: dict[int, int]) -> int:
        raise NotImplementedError


class GangSpread(_Greedy):
    def choose(self, solver: Solver, room: dict[int, int], counts: dict[int, int]) -> int:
        per_replica = solver.job.per_replica.get(solver.job.primary, 0)
        return max(room, key=lambda node: (solver.node_free_primary(node) - counts.get(node, 0) * per_replica,
                                           -node))


class GangFirstFit(_Greedy):
    def choose(self, solver: Solver, room: dict[int, int], counts: dict[int, int]) -> int:
        return min(room)


class RequiredFirstFit(GangFirstFit):
    """First fit inside the first domain of the job's required level with room for the whole gang."""

    def place(self, solver: Solver) -> Placement | None:
        level = solver.required_level
        if not level:
            return super().place(solver)
        loose, snap = _loose(solver), solver.snap
        if level == solver.node_level:
            return next(filter(None, (self.fill(loose, (node,), 0) for node in range(len(snap.nodes)))), None)
        return next(filter(None, (self.fill(loose, snap.nodes_under(d), d) for d in solver.domains_at(level))), None)


class ReservingFirstFit(RequiredFirstFit):
    """RequiredFirstFit with superpod's reservations (its rule, backfill by limit), no preemption: what the
    reservation adds to first fit."""

    reserves = True
    reserving = OPERATOR_RULE


class RandomFit(_Greedy):
    def __init__(self, seed: int = 0) -> None:
        self.random = random.Random(seed)

    def choose(self, solver: Solver, room: dict[int, int], counts: dict[int, int]) -> int:
        return self.random.choice(sorted(room))


def _loose(solver: Solver) -> Solver:
    """The solver of the job as if it asked for no topology."""
    job = replace(solver.job, required=None, preferred=None, slice_size=None, slice_required=None)
    return Solver(solver.snap, job, solver.exclude, exclude_nodes=solver.excluded_nodes)


POLICIES: dict[str, Callable[[int], QueuePolicy]] = {
    "superpod": lambda seed: PriorityFifo(OPERATOR_RULE),
    "superpod-bestfit": lambda seed: PriorityFifo(OPERATOR_RULE, fit=BEST_FIT),
    "superpod-service": lambda seed: PriorityFifo(OPERATOR_RULE, Ordering(SERVICE)),
    "superpod-estimate-backfill": lambda seed: PriorityFifo(replace(OPERATOR_RULE, backfill_by=ESTIMATE)),
    "superpod-reserve-all": lambda seed: PriorityFifo(ReservationRule()),
    "superpod-nopreempt": lambda seed: NoPreemption(),
    "superpod-nobackfill": lambda seed: NoBackfill(),
    "gang-spread": lambda seed: GangSpread(),
    "gang-firstfit": lambda seed: GangFirstFit(),
    "gang-firstfit-required": lambda seed: RequiredFirstFit(),
    "firstfit-reserving": lambda seed: ReservingFirstFit(),
    "random": lambda seed: RandomFit(seed),
}
