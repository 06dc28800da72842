"""The measures of a simulation, computed from the records of `summary.json` (one source for the summary's
metrics and the plots): job completion time, queueing delay, size classes, leaves, percentiles."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

SIZE_CLASSES = ("1", "2-8", "9-64", ">64")


def size_class(gpus: int) -> str:
    """The job size class of a gang asking for `gpus` GPUs: "1", "2-8", "9-64" or ">64"."""
    if gpus <= 1:
        return "1"
    if gpus <= 8:
        return "2-8"
    if gpus <= 64:
        return "9-64"
    return ">64"


def jct(job: dict) -> float | None:
    """Job completion time: end − submit, for a job that ended."""
    return None if job.get("end") is None else job["end"] - job["submit"]


def queueing_delay(job: dict) -> float | None:
    """Queueing delay: start − submit, for a job that started."""
    return None if job.get("start") is None else job["start"] - job["submit"]


def by_size_class(jobs: dict, measure: Callable[[dict], float | None]) -> dict[str, list[float]]:
    """The measure of each job that has one, grouped by size class (every class present, maybe empty), sorted."""
    grouped: dict[str, list[float]] = {name: [] for name in SIZE_CLASSES}
    for job in jobs.values():
        value = measure(job)
        if value is not None:
            grouped[size_class(job["gpus"])].append(value)
    return {name: sorted(values) for name, values in grouped.items()}


def by_priority(jobs: dict, measure: Callable[[dict], float | None]) -> dict[int, list[float]]:
    """The measure of each job that has one, grouped by priority, sorted."""
    grouped: dict[int, list[float]] = {}
    for job in jobs.values():
        value = measure(job)
        if value is not None:
            grouped.setdefault(job.get("priority", 0), []).append(value)
    return {priority: sorted(values) for priority, values in grouped.items()}


def fewest_leaves_share(jobs: dict) -> tuple[float | None, int]:
    """Share of multi-node jobs placed on the fewest leaves possible, and how many multi-node jobs there were (none
    when the topology has no leaf level)."""
    multi_node = [job for job in jobs.values() if len(job.get("nodes") or {}) > 1 and job.get("leaves") is not None]
    if not multi_node:
        return None, 0
    best = sum(1 for job in multi_node if job.get("leaves") == job.get("fewest_leaves"))
    return best / len(multi_node), len(multi_node)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile of already sorted values (`fraction` in [0, 1])."""
    rank = fraction * (len(sorted_values) - 1)
    below = math.floor(rank)
    above = min(below + 1, len(sorted_values) - 1)
    return sorted_values[below] + (sorted_values[above] - sorted_values[below]) * (rank - below)
