"""Admission benchmark: one scheduling cycle under GPUQueues; prints figures and the machine, asserts nothing.

The cluster of bench_placement.py (8-GPU nodes, about half partly or fully busy) and its mixed jobs (1 to 1,024
GPUs), spread over Q leaf queues under Q/100 parents: guarantees add up to half the cluster, every tenth queue has
a limit, weights 1 to 3. Measures the median of a few cycles (core/cycle.schedule with core/queues.FairQueues,
admission and placement together) against the same cycle with one global queue (PriorityFifo) in the same run,
and how much of it is the queues' own work (building the policy and ordering).
Run: .venv/bin/python bench/bench_queues.py [--gpus 100000] [--queues 1000] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import time
from dataclasses import replace

from bench_placement import TOPO, cluster, machine, mixed_jobs

from superpod.core.cycle import PriorityFifo, schedule
from superpod.core.model import Snapshot
from superpod.core.queues import ANY, FairQueues, Queue, QueueTree, Quota, Usage, capacity

ROUNDS = 3


def queues(count: int, gpus: int, seed: int = 3) -> list[Queue]:
    rnd = random.Random(seed)
    parents = max(1, count // 100)
    share = gpus / 2 / count
    out = [Queue(f"p{p:02d}", quotas=(Quota(ANY, share * 100),)) for p in range(parents)]
    for q in range(count):
        limit = share * 4 if q % 10 == 0 else None
        out.append(Queue(f"q{q:04d}", f"p{q % parents:02d}", (f"q{q:04d}",), (Quota(ANY, share, limit),),
                         rnd.choice([1, 2, 3])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    nodes, pods = cluster(args.gpus)
    tree = QueueTree.of(queues(args.queues, args.gpus))
    jobs = [replace(job, namespace=f"q{index % args.queues:04d}") for index, job in enumerate(mixed_jobs(args.jobs))]
    leaves = sum(1 for children in tree.children.values() if not children)
    print(f"{args.gpus:,} GPUs, {len(nodes):,} nodes; {leaves:,} leaf queues of {len(tree.queues):,} in force; "
          f"{len(jobs):,} pending jobs")
    flavors = {ANY}
    results = {}
    for name in ("one queue (PriorityFifo)", "GPUQueues (FairQueues)"):
        walls, own, placed = [], [], 0
        for _ in range(ROUNDS):
            snap = Snapshot(nodes, TOPO, pods)
            started = time.perf_counter()
            if name.startswith("GPU"):
                policy = FairQueues(tree, Usage(), capacity(snap.nodes, flavors))
                policy.order(jobs)
                own.append(time.perf_counter() - started)
                started = time.perf_counter()
                policy = FairQueues(tree, Usage(), capacity(snap.nodes, flavors))
            else:
                policy = PriorityFifo()
            decisions = schedule(snap, jobs, policy)
            walls.append(time.perf_counter() - started)
            placed = sum(d.placed for d in decisions)
        results[name] = statistics.median(walls)
        extra = f", of which building and ordering {statistics.median(own) * 1e3:.0f} ms" if own else ""
        print(f"{name:<26} cycle {statistics.median(walls):6.2f} s (median of {ROUNDS}){extra}; {placed:,} placed")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
