"""The runtime estimator: each waiting job's predicted runtime and turn (core/estimates.py) and the predicted ends of
the gangs that run (core/horizon.py), from the jobs' limits and the runtimes recorded under their estimate keys.

History is the GPUUsage records (core/usage.py Ledger.taught): the operator writes one per ended attempt, so what it
learned survives a restart and is the same on every replica. A waiting job is estimated when it enters the line
(core/waiting.py); a running gang when it is placed, and predicted past its estimate if it outlives it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from superpod.api.convert import estimate_key
from superpod.controller.jobs import JobReader, JobView
from superpod.controller.state import ClusterState
from superpod.core import estimates
from superpod.core.estimates import LIMIT_GRACE, SERVICE, Ordering
from superpod.core.gang_key import GangKey
from superpod.core.horizon import Horizon
from superpod.core.request import JobRequest


class Estimator:
    def __init__(self, state: ClusterState, ordering: Ordering | None = None,
                 limits: Callable[[JobView], float | None] = lambda view: None) -> None:
        """`limits(view)`: a TrainingJob's runtime limit in force (QueueBook.max_runtime)."""
        self.state = state
        self.ordering = ordering or Ordering()
        self.limits = limits
        self.horizon = Horizon()
        self.stopping: dict[GangKey, float] = {}  # gangs no longer placed whose pods still hold capacity -> since

    def runtime(self, view) -> float | None:
        """The predicted runtime of a TrainingJob (a pod gang: unknown)."""
        if not isinstance(view, JobView):
            return None
        namespace = view.obj["metadata"]["namespace"]
        runs = self.state.ledger.runs(namespace, estimate_key(view.obj), view.gang_units)
        return estimates.estimate(runs, self.limit(view))

    def limit(self, view) -> float | None:
        """A TrainingJob's runtime limit in force, if it has one (a pod gang: not known here)."""
        return self.limits(view) if isinstance(view, JobView) else None

    def request(self, view) -> JobRequest:
        """The request the waiting line holds: the job's, with its estimate and, ordered by service, its turn."""
        request = view.request
        # on the estimate grid, rounded up: jobs that differ by seconds share a shape (the waiting line's cost
        # follows the shapes), and a bound rounded up never lets a job into a reservation it could overrun
        guess, limit = (estimates.rounded(seconds) if seconds else None for seconds in (self.runtime(view),
                                                                                        self.limit(view)))
        if self.ordering.by != SERVICE:
            return replace(request, estimate=guess, limit=limit) if (guess or limit) is not None else request
        order = self.ordering
        return replace(request, estimate=guess, limit=limit, turn=estimates.turn(
            request.submitted, self.counted(guess, limit), request.total_units, order.weight))

    def counted(self, guess: float | None, limit: float | None) -> float:
        """How long the turn counts a job as running (core/estimates.counted: not shorter than its bound)."""
        return estimates.counted(guess, limit, self.ordering.unknown)

    def horizon_at(self, reader: JobReader, now: float) -> Horizon:
        """The predicted ends of the placed TrainingJobs, as of `now`: put when placed, dropped when they end and
        their pods are gone, looking only at the gangs that changed, those the last cycle placed and those stopping."""
        horizon = self.horizon
        horizon.now = now
        changed = reader.take_gang_changes()
        keys = (reader.gangs.keys() | horizon.nodes_of.keys()) if changed is None else (
            changed | horizon.assumed | self.stopping.keys())
        for key in keys:
            gang = reader.gangs.get(key)
            if gang is None:
                self._stopped(horizon, key, now)
                continue
            self.stopping.pop(key, None)
            request, uid, attempt, nodes = gang
            if horizon.nodes_of.get(key, ((), ()))[1] == (uid, attempt):
                continue
            view = reader.by_key.get(key)
            start = view.time(view.status.attemptStartTime) if view is not None else None
            horizon.put(key, start if start is not None else now, self.runtime(view), self.limit(view),
                        [(node, request.member_requests(index)) for index, node in nodes.items()], (uid, attempt))
        return horizon

    def _stopped(self, horizon: Horizon, key: GangKey, now: float) -> None:
        """A gang no longer placed (ended, stopped, requeued, deleted). While its pods terminate they still hold
        their nodes, so it is not dropped yet: what they hold is predicted to free LIMIT_GRACE after it was first
        seen stopped (then at once: a prediction that only errs early keeps reservations on the nodes about to
        free). Dropped once none of its pods holds capacity. Were it dropped at once, the nodes its pods still hold
        would be predicted never to free, and a blocked gang's reservation would move to nodes predicted to free
        later, leaving a node where it would start first to a job that runs past that start."""
        held = [(pod.holds.node, pod.holds.requests) for pod in self.state.pods_of(key) if pod.holds is not None]
        if not held:
            self.stopping.pop(key, None)
            horizon.drop(key)
            return
        since = self.stopping.setdefault(key, now)
        horizon.put(key, since, None, LIMIT_GRACE, held, ("stopping", tuple(sorted(held))))
