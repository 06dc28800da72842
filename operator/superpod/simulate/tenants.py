"""Per-queue figures of a replay under GPUQueues (`superpod simulate --queues`), from the job records alone.

For each leaf queue (its namespaces' jobs; flavor `*`, the only one trace jobs count against), over the steady
window:
- `gpu_hours`: GPU-time of its attempts;
- `mean_held`, `mean_borrowed`: GPUs it held, and held beyond its guarantee, on average;
- `below_guarantee_share`: of the time it had waiting jobs, the share during which one of them would have fit
  inside its unused guarantee (0: whenever it waited, it held at least its guarantee, or its waiting jobs were
  larger than what is left of it; without preemption, time spent waiting for borrowers to finish shows here);
- `surplus_share` and `weight_share`: its part of all borrowed GPU-time, and its weight's part of the weights of
  the queues that borrowed (the surplus is split by weight when those are close);
- `namespaces`, and `series` {time, held}: the GPUs it held, a step series over the whole replay.
"""

from __future__ import annotations

from superpod.api.convert import queue_from_k8s
from superpod.core.queues import ANY, QueueTree


def queue_figures(jobs: dict, queues: list[dict], window: tuple[float, float], now: float) -> dict:
    tree = QueueTree.of(queue_from_k8s(obj) for obj in queues)
    leaves = [name for name in sorted(tree.queues) if not tree.children[name]]
    changes: dict[str, list[tuple[float, int, int]]] = {name: [] for name in leaves}  # (time, held, waiting job)
    for job in jobs.values():
        queue = tree.by_namespace.get(job["namespace"])
        if queue not in changes:
            continue
        waiting_from = job["submit"]
        for attempt in job["attempts"]:
            changes[queue] += [(waiting_from, 0, job["gpus"]), (attempt["start"], 0, -job["gpus"]),
                               (attempt["start"], job["gpus"], 0),
                               (attempt["end"] if attempt["end"] is not None else now, -job["gpus"], 0)]
            waiting_from = attempt["end"] if attempt["outcome"] != "Succeeded" else None
            if waiting_from is None:
                break
        if waiting_from is not None and job["end"] is None:  # waits still (never started, or to run again)
            changes[queue] += [(waiting_from, 0, job["gpus"]), (now, 0, -job["gpus"])]
    start, end = window
    length = max(end - start, 1e-9)
    out = {}
    for name in leaves:
        quota = tree.queues[name].quota(ANY)
        guaranteed = quota.guaranteed if quota else 0.0
        held_time = borrowed_time = asked = below = 0.0
        held, waiting = 0, {}
        events = sorted(changes[name])
        times: list[float] = []
        helds: list[int] = []
        for index, (time, held_change, waiting_change) in enumerate(events):
            held += held_change
            if held_change:
                if times and times[-1] == time:
                    helds[-1] = held
                else:
                    times.append(time)
                    helds.append(held)
            if waiting_change:
                size = abs(waiting_change)
                waiting[size] = waiting.get(size, 0) + (1 if waiting_change > 0 else -1)
                if not waiting[size]:
                    del waiting[size]
            following = events[index + 1][0] if index + 1 < len(events) else end
            span = max(0.0, min(following, end) - max(time, start))
            held_time += held * span
            borrowed_time += max(0.0, held - guaranteed) * span
            if waiting:
                asked += span
                below += span if held + min(waiting) <= guaranteed else 0.0  # it fits inside its guarantee
        out[name] = {"guaranteed": guaranteed, "weight": tree.queues[name].weight,
                     "gpu_hours": round(held_time / 3600, 3), "mean_held": round(held_time / length, 3),
                     "mean_borrowed": round(borrowed_time / length, 3),
                     "below_guarantee_share": round(below / asked, 6) if asked else None, "_borrowed": borrowed_time,
                     "namespaces": list(tree.queues[name].namespaces), "series": {"time": times, "held": helds}}
    borrowed_total = sum(figures["_borrowed"] for figures in out.values())
    borrowers = [name for name, figures in out.items() if figures["_borrowed"] > 0]
    weights = sum(out[name]["weight"] for name in borrowers)
    for name, figures in out.items():
        borrowed = figures.pop("_borrowed")
        figures["surplus_share"] = round(borrowed / borrowed_total, 6) if borrowed_total else None
        figures["weight_share"] = round(figures["weight"] / weights, 6) if name in borrowers and weights else None
    return out
