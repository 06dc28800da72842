"""Runtime estimates: how long the queue policy expects a gang to run, from its limit and from history.

- A job's estimate comes from the last RUNS runs recorded under its estimate key and size (Tsafrir, Etsion and
  Feitelson: the mean of a user's last two runtimes predicts better than the user's own estimate). When the job and
  those runs have limits, it is its own limit times the mean share of their limits the runs used (users who set
  limits set them the same way each time, so the limit says how long this run is meant to be: Tang et al. correct
  each user's estimates by how much of them their jobs use); else the mean of their runtimes. Capped by its limit;
  its limit alone when nothing is recorded; None (unknown) when it has neither.
- Estimates and limits are held in the waiting line rounded up to a grid of quarter octaves (at most 19 % more): a
  limit is part of a job's shape (it decides which reservations the job may use), so limits seconds apart make one.
- A gang that outlives its prediction is predicted to run half as long again as it has so far, up to its limit.
- Order by service: a job's turn is its submission time pushed back by the square root of its GPU-hours, `weight`
  seconds for one GPU-hour. Short, small jobs pass long, big ones; a job is passed only by those submitted less than
  that push before it, so no job waits forever (aging by arrival, with no clock in the key). The hours are those of
  what binds the job, its limit (or `unknown` with none), and its estimate only where longer: a history is the
  tenant's to make (runs that exit at once teach seconds; runs that fail or are stopped teach nothing, so a long one
  never spoils the lesson), so it may push a turn back, never forward."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RUNS = 2  # runtimes averaged per estimate key
GRID = 4  # estimate grid steps per doubling
OUTLIVED = 1.5  # a gang past its prediction: predicted to run this many times what it has run so far
LIMIT_GRACE = 30  # seconds a gang stopped at its runtime limit has to exit (its pods' own grace is not trusted)
ARRIVAL, SERVICE = "arrival", "service"


@dataclass(frozen=True)
class Ordering:
    """How jobs of one priority are ordered: by arrival, or by service (`turn`: `weight` seconds of turn per
    square-root GPU-hour; a job with no limit is counted to run at least `unknown` seconds)."""

    by: str = ARRIVAL
    weight: float = 600.0
    unknown: float = 4 * 3600.0


def rounded(seconds: float) -> float:
    """`seconds` rounded up to the estimate grid (at least one second)."""
    steps = math.ceil(math.log2(max(seconds, 1.0)) * GRID - 1e-9)
    return 2.0 ** (steps / GRID)


def rounded_down(seconds: float) -> float:
    """The largest value of the estimate grid not above `seconds` (at least one second): a limit rounded up
    (`rounded`) is at most this exactly when the limit itself is."""
    steps = math.floor(math.log2(max(seconds, 1.0)) * GRID + 1e-9)
    return 2.0 ** (steps / GRID)


def estimate(runs: Sequence[tuple[float, float | None]], limit: float | None) -> float | None:
    """The estimate of a job whose key recorded `runs` (runtime, the limit it ran under or None; oldest first) and
    whose limit is `limit` (None: no limit)."""
    recent = [(runtime, ran_under) for runtime, ran_under in runs[-RUNS:] if runtime > 0]
    if not recent:
        return limit or None
    if limit and all(ran_under for _, ran_under in recent):
        guess = limit * sum(min(runtime / ran_under, 1.0) for runtime, ran_under in recent) / len(recent)
    else:
        guess = sum(runtime for runtime, _ in recent) / len(recent)
    guess = rounded(guess)
    return min(guess, limit) if limit else guess


def predicted_end(start: float, estimate: float | None, limit: float | None, now: float) -> float | None:
    """When a gang started at `start` is predicted to end, seen at `now`; None if unknown."""
    if estimate is None:
        return start + limit if limit else None
    end = start + estimate
    if end <= now:
        if limit and now >= moving_until(start, limit):
            return start + limit
        end = start + max(now - start, 1.0) * OUTLIVED
    return min(end, start + limit) if limit else end


def steady_until(start: float, estimate: float | None, limit: float | None, now: float) -> float:
    """Until when predicted_end, read at `now`, stays what it is: the predicted end while it is ahead (inf with no
    estimate: the limit alone never moves); once outlived, the end of its first second (it is predicted to run
    OUTLIVED seconds) or, once its limit caps it, forever; -inf while the prediction moves with the clock."""
    if estimate is None:
        return float("inf")
    if start + estimate > now:
        return start + estimate
    if limit and now >= moving_until(start, limit):
        return float("inf")
    return start + 1.0 if now - start < 1.0 else float("-inf")


def moving_until(start: float, limit: float | None) -> float:
    """When an outlived gang's predicted end, which moves with the clock (OUTLIVED times what it has run), reaches
    its limit and stays there (inf with no limit)."""
    if not limit:
        return float("inf")
    return start if limit <= OUTLIVED else start + limit / OUTLIVED


def turn(submitted: float, seconds: float, gpus: float, weight: float) -> float:
    """Its turn in the queue (core request.turn): `submitted` pushed back by `weight` × √(GPU-hours), for a job
    counted to run `seconds` (`counted`)."""
    return submitted + weight * math.sqrt(max(gpus, 0.0) * seconds / 3600.0)


def counted(estimate: float | None, limit: float | None, unknown: float) -> float:
    """How long the turn counts a job as running: its limit, else `unknown`, or its estimate where that is longer
    (never shorter: a limit binds the job, its history does not)."""
    return max(estimate or 0.0, limit or unknown)
