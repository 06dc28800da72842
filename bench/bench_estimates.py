"""How well runtime estimates predict, on a trace, with no scheduling: each job is predicted, as it is submitted, from
the runs of its estimate key (and size) that had ended by then, as if every job started when submitted. Prints per
method the share of jobs with history, the share predicted short (they would overrun a reservation if backfilled by
estimate) and the mean and median of log(estimate / runtime). Asserts nothing.

Methods: `limit` (the user's limit alone); `runtimes` (the mean of the last two runtimes under the key and size, the
estimator before 2026-12-05); `operator` (core/estimates.py as the operator runs it: the share of their limits the
runs used, applied to the job's own limit); `operator-any-size` (the same, learning across sizes).
Run: .venv/bin/python bench/bench_estimates.py TRACE.csv [TRACE.csv ...]   (superpod simulate generate makes them)
"""

from __future__ import annotations

import heapq
import math
import statistics
import sys
from collections.abc import Callable

from superpod.api.convert import estimate_key
from superpod.core.estimates import RUNS, estimate
from superpod.simulate.trace import TraceJob, read_jobs_csv

Run = tuple[float, float | None]


def methods() -> dict[str, tuple[Callable[[TraceJob], tuple], Callable[[list[Run], float | None], float | None]]]:
    """name -> (the history key of a job, its prediction from that history and its limit)."""
    def key(job: TraceJob) -> tuple:
        return job.namespace, estimate_key({"metadata": {"name": job.name}}), job.total_gpus

    def runtimes(runs: list[Run], limit: float | None) -> float | None:
        return estimate([(runtime, None) for runtime, _ in runs], limit)

    return {"limit": (key, lambda runs, limit: limit), "runtimes": (key, runtimes), "operator": (key, estimate),
            "operator-any-size": (lambda job: key(job)[:2], estimate)}


def measure(jobs: list[TraceJob], key_of, predict) -> str:
    history: dict[tuple, list[Run]] = {}
    ended: list[tuple[float, int, tuple, Run]] = []  # (end, order, key, run), as if started when submitted
    errors, short, known = [], 0, 0
    for order, job in enumerate(sorted(jobs, key=lambda job: job.submit)):
        while ended and ended[0][0] <= job.submit:
            _, _, key, run = heapq.heappop(ended)
            history.setdefault(key, []).append(run)
        key = key_of(job)
        runs = history.get(key, [])[-RUNS:]
        known += bool(runs)
        guess = predict(runs, job.limit)
        if guess is not None:
            errors.append(math.log(guess / job.duration))
            short += guess < job.duration
        heapq.heappush(ended, (job.submit + job.duration, order, key, (job.duration, job.limit)))
    count, mean, median = len(jobs), statistics.mean(map(abs, errors)), statistics.median(errors)
    return (f"history {known / count:5.2f}   predicted short {short / count:5.2f}   "
            f"mean |log error| {mean:5.2f}   median log error {median:+.2f}")


def main() -> None:
    for path in sys.argv[1:]:
        jobs = read_jobs_csv(path)
        print(f"{path}: {len(jobs)} jobs")
        for name, (key_of, predict) in methods().items():
            print(f"  {name:<18} {measure(jobs, key_of, predict)}")


if __name__ == "__main__":
    main()
