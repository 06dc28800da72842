"""What the simulated operator is told of runtimes (`superpod simulate --estimates`): `history`, the operator's own
estimator (controller/estimates.py: its limit and the runtimes recorded under its estimate key); `limit`, the user's
time limit alone; `oracle`, the trace's duration (the truth, when placed compactly) — the bound no estimator beats."""

from __future__ import annotations

from superpod.controller.estimates import Estimator
from superpod.controller.jobs import JobView
from superpod.controller.state import ClusterState
from superpod.core.estimates import Ordering
from superpod.core.gang_key import GangKey
from superpod.simulate.trace import TraceJob


class LimitOnly(Estimator):
    def runtime(self, view) -> float | None:
        return self.limit(view)


class Oracle(Estimator):
    def __init__(self, state: ClusterState, ordering: Ordering, limits, jobs: list[TraceJob]) -> None:
        super().__init__(state, ordering, limits)
        self.durations = {GangKey(job.namespace, job.name): job.duration for job in jobs}

    def runtime(self, view) -> float | None:
        return self.durations.get(view.key) if isinstance(view, JobView) else None

    def counted(self, guess: float | None, limit: float | None) -> float:
        """The turn counts the truth: a trace's durations are no tenant's to make."""
        return self.ordering.unknown if guess is None else guess


ESTIMATES = ("history", "limit", "oracle")


def estimator(kind: str, state: ClusterState, ordering: Ordering, limits, jobs: list[TraceJob]) -> Estimator:
    """The estimator of `kind`; `limits`: the jobs' runtime limits in force (QueueBook.max_runtime)."""
    if kind == "oracle":
        return Oracle(state, ordering, limits, jobs)
    if kind == "limit":
        return LimitOnly(state, ordering, limits)
    if kind == "history":
        return Estimator(state, ordering, limits)
    raise ValueError(f"--estimates: {kind!r} is not one of {', '.join(ESTIMATES)}")
