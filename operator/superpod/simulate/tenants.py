"""Per-queue figures of a replay under GPUQueues (`superpod simulate --queues`), from the job records alone.

For each leaf queue (its namespaces' jobs; flavor `*`, the only one trace jobs count against), over the steady
window:
- `gpu_hours`: GPU-time of its attempts;
- `mean_held`, `mean_borrowed`: GPUs it held, and held beyond its guarantee, on average;
- `below_guarantee_share`: of the time it had waiting jobs, the share during which one of them would have fit
  inside its unused guarantee (0: whenever it waited, it held at least its guarantee, or its waiting jobs were
  larger than what is left of it; without preemption, time spent waiting for borrowers to finish shows here);
- `surplus_share` and `weight_share`: while two or more queues had waiting jobs (they competed for the surplus),
  its part of the GPUs those queues borrowed, and the part its weight would give it (its weight over theirs);
- `namespaces`, and `series` {time, held}: the GPUs it held, a step series over the whole replay.
"""

from __future__ import annotations

from superpod.api.convert import queue_from_k8s
from superpod.core.queues import ANY, QueueTree


def queue_figures(jobs: dict, queues: list[dict], window: tuple[float, float], now: float) -> dict:
    tree = QueueTree.of(queue_from_k8s(obj) for obj in queues)
    leaves = [name for name in sorted(tree.queues) if not tree.children[name]]
    events = sorted(_changes(jobs, tree, set(leaves), now))
    guaranteed = {name: (q.guaranteed if (q := tree.queues[name].quota(ANY)) else 0.0) for name in leaves}
    weight = {name: tree.queues[name].weight for name in leaves}
    held = dict.fromkeys(leaves, 0)
    waiting: dict[str, dict[int, int]] = {name: {} for name in leaves}  # queue -> waiting job size -> how many
    sums = {name: dict.fromkeys(("held", "borrowed", "asked", "below", "contested", "fair"), 0.0) for name in leaves}
    series: dict[str, tuple[list[float], list[int]]] = {name: ([], []) for name in leaves}
    start, end = window
    for index, (time, queue, held_change, waiting_change) in enumerate(events):
        held[queue] += held_change
        if held_change:
            times, values = series[queue]
            if times and times[-1] == time:
                values[-1] = held[queue]
            else:
                times.append(time)
                values.append(held[queue])
        if waiting_change:
            sizes = waiting[queue]
            sizes[abs(waiting_change)] = sizes.get(abs(waiting_change), 0) + (1 if waiting_change > 0 else -1)
            if not sizes[abs(waiting_change)]:
                del sizes[abs(waiting_change)]
        following = events[index + 1][0] if index + 1 < len(events) else end
        span = max(0.0, min(following, end) - max(time, start))
        if not span:
            continue
        borrowed = {name: max(0.0, held[name] - guaranteed[name]) for name in leaves}
        wanting = [name for name in leaves if waiting[name]]
        for name in leaves:
            totals = sums[name]
            totals["held"] += held[name] * span
            totals["borrowed"] += borrowed[name] * span
            if waiting[name]:
                totals["asked"] += span
                if held[name] + min(waiting[name]) <= guaranteed[name]:
                    totals["below"] += span
        if len(wanting) >= 2:  # they compete for the surplus: compare what each borrowed with its weight's part
            pool = sum(borrowed[name] for name in wanting)
            weights = sum(weight[name] for name in wanting)
            for name in wanting:
                sums[name]["contested"] += borrowed[name] * span
                sums[name]["fair"] += pool * weight[name] / weights * span
    length = max(end - start, 1e-9)
    contested = sum(totals["contested"] for totals in sums.values())
    fair = sum(totals["fair"] for totals in sums.values())
    return {name: {"guaranteed": guaranteed[name], "weight": weight[name],
                   "gpu_hours": round(sums[name]["held"] / 3600, 3),
                   "mean_held": round(sums[name]["held"] / length, 3),
                   "mean_borrowed": round(sums[name]["borrowed"] / length, 3),
                   "below_guarantee_share": round(sums[name]["below"] / sums[name]["asked"], 6)
                   if sums[name]["asked"] else None,
                   "surplus_share": round(sums[name]["contested"] / contested, 6) if contested else None,
                   "weight_share": round(sums[name]["fair"] / fair, 6) if fair else None,
                   "namespaces": list(tree.queues[name].namespaces),
                   "series": {"time": series[name][0], "held": series[name][1]}}
            for name in leaves}


def _changes(jobs: dict, tree: QueueTree, leaves: set[str], now: float) -> list[tuple[float, str, int, int]]:
    """(time, queue, change of GPUs held, a waiting job of this many GPUs: +appears / -leaves)."""
    out = []
    for job in jobs.values():
        queue = tree.by_namespace.get(job["namespace"])
        if queue not in leaves:
            continue
        gpus, waiting_from = job["gpus"], job["submit"]
        for attempt in job["attempts"]:
            stop = attempt["end"] if attempt["end"] is not None else now
            out += [(waiting_from, queue, 0, gpus), (attempt["start"], queue, 0, -gpus),
                    (attempt["start"], queue, gpus, 0), (stop, queue, -gpus, 0)]
            waiting_from = attempt["end"] if attempt["outcome"] not in ("Succeeded", "") else None
            if waiting_from is None:
                break
        until = now if job["end"] is None else job["end"]  # waits still, or ended while waiting (deleted, say)
        if waiting_from is not None and until > waiting_from:
            out += [(waiting_from, queue, 0, gpus), (until, queue, 0, -gpus)]
    return out
