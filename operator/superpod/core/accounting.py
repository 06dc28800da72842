"""GPU-seconds, the unit tenants are billed in: each replica's GPUs (a MIG slice counts g/7 of its GPU) times the
time its pod ran, from the pod's start to its finish (or to `now` while it runs). Pure: times are passed in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from superpod.core.request import GPU, MIG_PREFIX


@dataclass(frozen=True)
class Run:
    """One pod's run: started at `start` (None: never started), finished at `end` (None: still running)."""

    start: float | None
    end: float | None = None

    def seconds(self, now: float) -> float:
        if self.start is None:
            return 0.0
        return max(0.0, (now if self.end is None else self.end) - self.start)


def gpu_units(requests: Iterable[tuple[str, int]]) -> float:
    """Whole GPUs a replica holds: nvidia.com/gpu, plus each MIG slice as its share of the GPU's 7 compute slices."""
    units = 0.0
    for resource, amount in requests:
        if resource == GPU:
            units += amount
        elif resource.startswith(MIG_PREFIX):
            units += amount * int(resource[len(MIG_PREFIX):].split("g", 1)[0]) / 7
    return units


def gpu_seconds(runs: Iterable[Run], units_per_replica: float, now: float) -> float:
    return units_per_replica * sum(run.seconds(now) for run in runs)
