"""The measures of a simulation, computed from the records of `summary.json` (one source for the summary's
metrics, the command's table and the plots): job completion time, queueing delay, size classes, leaves,
percentiles, and the GPU-time left idle while a job waits."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

SIZE_CLASSES = ("1", "2-8", "9-64", ">64")
SIZE_CLASS_TITLES = {"1": "1 GPU", "2-8": "2–8 GPUs", "9-64": "9–64 GPUs", ">64": "> 64 GPUs"}
ALL_JOBS = "all"  # the figures over every size class
BIG_GANG_GPUS = 32  # the gangs whose p99 wait the reports follow


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


def distribution(values: Sequence[float]) -> dict:
    """{jobs, mean, p50, p99, max} of the values, rounded to the millisecond (the figures None when there is none)."""
    values = sorted(values)
    if not values:
        return {"jobs": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {"jobs": len(values), "mean": round(sum(values) / len(values), 3),
            "p50": round(percentile(values, 0.5), 3), "p99": round(percentile(values, 0.99), 3),
            "max": round(values[-1], 3)}


def size_class_figures(jobs: dict) -> dict[str, dict]:
    """Per size class and over all jobs (`ALL_JOBS`): {"jct": distribution, "wait": distribution} — JCT over the
    jobs that ended, queueing delay over those that started (its max is the longest wait)."""
    completion, waits = by_size_class(jobs, jct), by_size_class(jobs, queueing_delay)
    figures = {name: {"jct": distribution(completion[name]), "wait": distribution(waits[name])}
               for name in SIZE_CLASSES}
    figures[ALL_JOBS] = {"jct": distribution([value for name in SIZE_CLASSES for value in completion[name]]),
                         "wait": distribution([value for name in SIZE_CLASSES for value in waits[name]])}
    return figures


def big_gang_waits(jobs: dict) -> list[float]:
    """Queueing delays of the gangs of `BIG_GANG_GPUS` GPUs or more that started, sorted."""
    return sorted(value for job in jobs.values()
                  if job["gpus"] >= BIG_GANG_GPUS and (value := queueing_delay(job)) is not None)


def idle_while_waiting_share(series: dict, window: Sequence[float], capacity: int) -> float | None:
    """The GPU-time idle while a job that fits an idle cluster waits, as a share of the window's GPU-time: the
    step series `unusable_gpus` (each value holds until the next time, the last one on) integrated over `window`,
    ÷ (`capacity` × the window's length). None for an empty window or cluster."""
    start, end = window
    if end <= start or capacity <= 0:
        return None
    times, values = series["time"], series["unusable_gpus"]
    idle = 0.0
    for index, (time, value) in enumerate(zip(times, values, strict=True)):
        until = times[index + 1] if index + 1 < len(times) else end
        idle += value * max(0.0, min(until, end) - max(time, start))
    return idle / (capacity * (end - start))
