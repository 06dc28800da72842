"""Runtime limits: how long a placed gang may hold its nodes before the operator stops it (reason
MaxRuntimeExceeded). One rule, for TrainingJobs and pod gangs alike: what the job asks for (a TrainingJob's
spec.maxRuntimeSeconds, a pod gang's annotation), else its queue's default; never more than its queue's cap. The
limit runs from the attempt's start as the operator records it (a TrainingJob's placement, a pod gang's first pod
start). Pure: no clock, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from superpod.core.queues import Queue


@dataclass(frozen=True)
class RuntimeLimit:
    seconds: float
    source: str  # what set it, in the words of the message: "spec.maxRuntimeSeconds", "queue a's maxRuntimeSeconds"

    def message(self) -> str:
        """What the job and its Event say when it is stopped."""
        return f"stopped after {self.seconds:.0f} s: {self.source} {self.seconds:.0f} reached"

    def deadline(self, started: float) -> float:
        return started + self.seconds


def effective_limit(asked: float | None, asked_by: str, queue: Queue | None) -> RuntimeLimit | None:
    """The limit in force: `asked` (named by `asked_by`), else the queue's default; capped by the queue's maximum.
    None: no limit."""
    cap = queue.max_runtime if queue is not None else None
    if asked is None and queue is not None and queue.default_max_runtime is not None:
        asked, asked_by = queue.default_max_runtime, f"queue {queue.name}'s defaultMaxRuntimeSeconds"
    if cap is not None and (asked is None or asked > cap):
        return RuntimeLimit(float(cap), f"queue {queue.name}'s maxRuntimeSeconds")
    return RuntimeLimit(float(asked), asked_by) if asked is not None else None
