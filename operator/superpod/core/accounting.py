"""GPU-seconds, the unit tenants are billed in: each replica's GPUs (a MIG slice counts g/7 of its GPU) times the
time its pod ran, from the pod's start to its finish (or to `now` while it runs). Pure: times are passed in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from superpod.core.request import gpu_units  # noqa: F401 - re-exported: billing reads it here


@dataclass(frozen=True)
class Run:
    """One pod's run: started at `start` (None: never started), finished at `end` (None: still running)."""

    start: float | None
    end: float | None = None

    def seconds(self, now: float) -> float:
        if self.start is None:
            return 0.0
        return max(0.0, (now if self.end is None else self.end) - self.start)


def gpu_seconds(runs: Iterable[Run], units_per_replica: float, now: float) -> float:
    return units_per_replica * sum(run.seconds(now) for run in runs)
