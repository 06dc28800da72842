"""`summary.json`: what one replay measured, with every job's record so anyone can recompute each figure.

Keys (stable; times in simulated seconds from the trace's first submit):
- `utilisation`: GPU-time of all attempts inside `window` ÷ (cluster GPUs × window length): GPUs held by gangs
  that run, slowed down or failing included.
- `useful_utilisation`: the same for the work itself: a succeeded attempt counts its trace duration's share of
  its length (a gang slowed down by a spread placement holds GPUs longer for the same work), failed ones nothing.
- `window` [t0, t1]: the steady window, the same for every policy of a trace: from the submit of the job at the
  10th percentile of submits (the cluster has filled) to the last submit (after it the queue only drains).
- `metrics`: `jct` {jobs, mean, p50, p99, max} over jobs that ended (`never_ended` says how many did not);
  `queueing` per size class ("1", "2-8", "9-64", ">64") {jobs, mean, p50, p99, max} over jobs that started;
  `size_classes` per size class and "all" {jct, wait}, each {jobs, mean, p50, p99, max}: JCT over the jobs that
  ended, queueing delay over those that started (`wait.max` the longest wait; `all.jct` is `jct`, each class's
  `wait` its `queueing`); `idle_while_waiting`: the GPU-time idle while a job that fits an idle cluster waits,
  as a share of the window's GPU-time (`series.unusable_gpus` integrated over `window` ÷ (cluster GPUs × window
  length)); `p99_queueing_32_plus` (gangs of 32 GPUs or more); `largest_gang_wait` {gpus, wait, never_started}
  (the longest wait among the jobs of the largest GPU count, and how many of them never started); `restarts`
  (attempts after the first); `queueing_by_priority` {priority: {jobs, mean, p50, p99, max}}; `preempted`
  {attempts, gpu_hours_lost} (attempts stopped before their end, and the GPU-hours they had run: a trace job
  starts over); `fewest_leaves_share` {share, of} (multi-node jobs whose last attempt used the fewest leaves
  possible); `never_started`, `never_ended`; `gpu_hours` per namespace (all attempts); `cycles`; `api_writes` by
  verb. Each figure is computed in `simulate/metrics.py`.
- `failures` (with `--node-mtbf`, simulate/failures.py): {node_failures, replacements (replicas replaced while their
  gang ran on), restarts (gangs a failure stopped and placed again), redone_gpu_hours (work lost since the last
  checkpoint of a gang stopped or a replica replaced: run again), stalled_gpu_hours (GPUs of gangs held while they
  waited for a replacement)}.
- `queues` (with `--queues`): per leaf GPUQueue {guaranteed, weight, gpu_hours, mean_held, mean_borrowed,
  below_guarantee_share, surplus_share, weight_share, namespaces, series}, as `simulate/tenants.py` defines them.
- `series` {time, busy_gpus, free_gpus, unusable_gpus}: step series (each value holds until the next time).
  busy: GPUs of gangs that run; free: GPUs no pod holds; unusable: free GPUs while some job waits (one that could
  run on this cluster when idle and is not in a restart backoff).
- `jobs` {"<namespace>/<name>": {submit, start, end, namespace, priority, gpus, duration, nodes, leaves,
  fewest_leaves, attempts}}:
  `start` the first attempt's start, `end` the final end (null if never), `nodes` the last attempt's
  {node: replicas}, `attempts` [{start, end, nodes, outcome}] (with node failures also `work`: the seconds of the
  job's duration the attempt did and kept)."""

from __future__ import annotations

from superpod.simulate.engine import Sample, Simulation
from superpod.simulate.metrics import (
    ALL_JOBS,
    SIZE_CLASSES,
    big_gang_waits,
    by_priority,
    distribution,
    fewest_leaves_share,
    idle_while_waiting_share,
    queueing_delay,
    size_class_figures,
)
from superpod.simulate.runtime import RuntimeModel
from superpod.simulate.tenants import queue_figures
from superpod.simulate.trace import TraceJob

VERSION = 1
STEADY_FROM = 0.10  # the window starts at this quantile of submits


def steady_window(jobs: list[TraceJob]) -> tuple[float, float]:
    submits = sorted(job.submit for job in jobs)
    if not submits:
        return 0.0, 0.0
    return submits[int(STEADY_FROM * (len(submits) - 1))], submits[-1]


def policy_summary(simulation: Simulation, runtime: RuntimeModel, window: tuple[float, float],
                   queues: list[dict] = ()) -> dict:
    jobs = {key: _job(record, runtime) for key, record in sorted(simulation.records.items())}
    series = _series(simulation.samples)
    out = {"utilisation": round(utilisation(jobs, simulation.capacity, window, simulation.now), 6),
            "useful_utilisation": round(utilisation(jobs, simulation.capacity, window, simulation.now, useful=True),
                                        6),
            "window": list(window),
            "metrics": _metrics(jobs, simulation, series, window),
            "series": series,
            "jobs": jobs}
    if queues:
        out["queues"] = queue_figures(jobs, queues, window, simulation.now)
    if simulation.failure_model is not None:
        counts = simulation.failure_counts
        out["failures"] = {"node_failures": counts.node_failures, "replacements": counts.replacements,
                           "restarts": counts.restarts,
                           "redone_gpu_hours": round(counts.redone_gpu_seconds / 3600, 3),
                           "stalled_gpu_hours": round(counts.stalled_gpu_seconds / 3600, 3)}
    return out


def utilisation(jobs: dict, capacity: int, window: tuple[float, float], now: float, useful: bool = False) -> float:
    """GPU-time inside `window` ÷ (capacity × its length). `useful`: only the work itself — an attempt that
    succeeded counts its trace duration's share of its length (not its slowdown or start-up delay), others nothing;
    with node failures, each attempt counts the share of its length that did the work it kept (`work`)."""
    start, end = window
    if end <= start or capacity <= 0:
        return 0.0
    used = 0.0
    for job in jobs.values():
        for attempt in job["attempts"]:
            stop = attempt["end"] if attempt["end"] is not None else now
            share = 1.0
            if useful:
                length, work = stop - attempt["start"], attempt.get("work")
                if work is None:  # (no node failures: only a succeeded attempt did the job's work)
                    work = job["duration"] if attempt["outcome"] == "Succeeded" else 0.0
                share = min(1.0, work / length) if length > 0 else 0.0
            used += job["gpus"] * share * max(0.0, min(stop, end) - max(attempt["start"], start))
    return used / (capacity * (end - start))


def _job(record, runtime: RuntimeModel) -> dict:
    job: TraceJob = record.job
    attempts = [{"start": a.start, "end": a.end, "nodes": dict(sorted(a.nodes.items())), "outcome": a.outcome,
                 **({} if a.work is None else {"work": a.work})} for a in record.attempts]
    nodes = attempts[-1]["nodes"] if attempts else {}
    leaf = runtime.depth("leaf")
    return {"submit": job.submit, "start": attempts[0]["start"] if attempts else None, "end": record.end,
            "namespace": job.namespace, "priority": job.priority, "gpus": job.total_gpus, "duration": job.duration,
            "nodes": nodes,
            "leaves": runtime.domains_used(list(nodes), leaf) if leaf is not None and nodes else None,
            "fewest_leaves": runtime.fewest_domains(job, leaf) if leaf is not None else None,
            "attempts": attempts}


def _metrics(jobs: dict, simulation: Simulation, series: dict, window: tuple[float, float]) -> dict:
    classes = size_class_figures(jobs)
    idle = idle_while_waiting_share(series, window, simulation.capacity)
    share, multi_node = fewest_leaves_share(jobs)
    largest = max((job["gpus"] for job in jobs.values()), default=0)
    largest_waits = [queueing_delay(job) for job in jobs.values() if job["gpus"] == largest]
    hours: dict[str, float] = {}
    for job in jobs.values():
        for attempt in job["attempts"]:
            stop = attempt["end"] if attempt["end"] is not None else simulation.now
            hours[job["namespace"]] = hours.get(job["namespace"], 0.0) + job["gpus"] * (stop - attempt["start"]) / 3600
    return {
        "jct": classes[ALL_JOBS]["jct"],
        "queueing": {name: classes[name]["wait"] for name in SIZE_CLASSES},
        "size_classes": classes,
        "idle_while_waiting": None if idle is None else round(idle, 6),
        "p99_queueing_32_plus": distribution(big_gang_waits(jobs))["p99"],
        "largest_gang_wait": {"gpus": largest, "wait": max((w for w in largest_waits if w is not None), default=None),
                              "never_started": sum(w is None for w in largest_waits)},
        "restarts": sum(max(0, len(job["attempts"]) - 1) for job in jobs.values()),
        "queueing_by_priority": {str(priority): distribution(values)
                                 for priority, values in sorted(by_priority(jobs, queueing_delay).items())},
        "preempted": _preempted(jobs, simulation.now),
        "fewest_leaves_share": {"share": None if share is None else round(share, 6), "of": multi_node},
        "never_started": sum(job["start"] is None for job in jobs.values()),
        "never_ended": sum(job["end"] is None for job in jobs.values()),
        "gpu_hours": {namespace: round(value, 3) for namespace, value in sorted(hours.items())},
        "cycles": simulation.cycles,
        "api_writes": dict(sorted(simulation.writes.items())),
    }


def _preempted(jobs: dict, now: float) -> dict:
    """Attempts stopped before their end (preempted: the simulator fails no node) and the GPU-hours they had run:
    work lost, since a trace job starts over."""
    lost = [job["gpus"] * ((attempt["end"] if attempt["end"] is not None else now) - attempt["start"])
            for job in jobs.values() for attempt in job["attempts"] if attempt["outcome"] == "Interrupted"]
    return {"attempts": len(lost), "gpu_hours_lost": round(sum(lost) / 3600, 3)}


def _series(samples: list[Sample]) -> dict:
    return {"time": [sample.time for sample in samples],
            "busy_gpus": [sample.busy_gpus for sample in samples],
            "free_gpus": [sample.free_gpus for sample in samples],
            "unusable_gpus": [sample.unusable_gpus for sample in samples]}


def summary(cluster: dict, trace: dict, policies: dict[str, dict]) -> dict:
    return {"version": VERSION, "cluster": cluster, "trace": trace, "policies": policies}
