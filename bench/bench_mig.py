"""Benchmark the MIG planner: 1,000 GPUs (125 nodes x 8), 500 pending MIG gangs; prints the median planning time.

Usage: .venv/bin/python bench/bench_mig.py [RUNS=5] [SEED=0]
Cluster: H100, H200 and A100-40GB nodes; 20% busy, 80% opted in to dynamic MIG; GPUs MIG-disabled or in a random
maximal geometry. Demand: 500 gangs of 1-4 replicas (all fit), then of 1-16 (more than fits); random profiles,
4 priority levels, a third with a product selector.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import sys
import time
from collections import Counter

from superpod.core.mig_catalog import product
from superpod.core.mig_geometry import maximal_geometries
from superpod.core.mig_planner import MigDemand, MigNode, plan

PRODUCTS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200", "NVIDIA-A100-SXM4-40GB"]


def cluster(rng: random.Random, nodes: int = 125, gpus: int = 8) -> list[MigNode]:
    out = []
    for i in range(nodes):
        gfd = PRODUCTS[i % len(PRODUCTS)]
        geoms = maximal_geometries(product(gfd))
        layout = tuple(None if rng.random() < 0.4 else rng.choice(geoms) for _ in range(gpus))
        busy = rng.random() < 0.2
        in_use = {}
        if busy:
            have = Counter(n for g in layout if g for n in g)
            in_use = {k: rng.randint(0, v) for k, v in have.items()}
        out.append(MigNode(f"node-{i:03d}", gfd, layout, busy=busy, dynamic=rng.random() < 0.8, in_use=in_use))
    return out


def demand(rng: random.Random, jobs: int = 500, max_replicas: int = 4) -> list[MigDemand]:
    out = []
    for j in range(jobs):
        gfd = rng.choice(PRODUCTS)
        prof = rng.choice([p for p in product(gfd).profiles if "+me" not in p.name])
        sel = rng.choice([None, None, gfd])
        replicas, priority = rng.randint(1, max_replicas), rng.choice([0, 10, 50, 100])
        out.append(MigDemand(f"job-{j:03d}", prof.name, replicas, priority, sel))
    return out


def measure(title: str, nodes: list[MigNode], demands: list[MigDemand], runs: int) -> None:
    times, p = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        p = plan(nodes, demands)
        times.append(time.perf_counter() - t0)
    assert p is not None
    gpus = sum(len(n.gpus) for n in nodes)
    replicas = sum(d.replicas for d in demands)
    print(f"{title}: {gpus} GPUs on {len(nodes)} nodes, {len(demands)} pending gangs ({replicas} MIG instances)")
    print(f"  planning time: median {statistics.median(times):.3f} s over {runs} runs "
          f"(min {min(times):.3f}, max {max(times):.3f})")
    sat = sum(d.replicas for d in demands if d.job in set(p.satisfied))
    print(f"  plan: {len(p.satisfied)} gangs / {sat} instances satisfied, "
          f"{p.gpus_reconfigured} GPUs on {p.nodes_reconfigured} nodes reconfigured")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()} ({platform.python_implementation()}), {platform.platform()}")
    rng = random.Random(seed)
    nodes = cluster(rng)
    measure("fits (gangs of 1-4)", nodes, demand(rng), runs)
    measure("contended (gangs of 1-16)", nodes, demand(rng, max_replicas=16), runs)


if __name__ == "__main__":
    main()
