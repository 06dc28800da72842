"""Placement benchmark: prints figures and the machine; asserts nothing.

Generated clusters of 8-GPU nodes in spine/leaf/node levels (leaves of 32 nodes, spines of 8 leaves), about half
the nodes partly or fully busy with foreign pods. Measures:
  - building the snapshot (and the first filter view);
  - placing one 1,024-GPU gang (128 x 8 GPUs) required inside one spine, repeated (median, p90);
  - one scheduling cycle over 1,000 mixed jobs (1 to 1,024 GPUs) with assume, reservation and backfill;
  - peak RSS of the process.
Each size is measured under each objective of --fits (placement.FIRST_FIT, BEST_FIT: how equal domains are chosen).
Run: .venv/bin/python bench/bench_placement.py [--sizes 1000,10000,100000] [--repeat 30] [--fits first,best]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import sys
import time

from superpod.core.cycle import PriorityFifo, schedule
from superpod.core.model import Level, Node, Pod, Snapshot, Topology
from superpod.core.placement import place
from superpod.core.request import GPU, JobRequest, make_request

TOPO = Topology(
    (Level("spine", "superpod.dev/spine"), Level("leaf", "superpod.dev/leaf"), Level("node", "kubernetes.io/hostname"))
)
PRODUCT = "NVIDIA-H100-80GB-HBM3"


def cluster(gpus: int, seed: int = 1) -> tuple[list[Node], list[Pod]]:
    rnd = random.Random(seed)
    nodes, pods = [], []
    for i in range(gpus // 8):
        leaf, spine = i // 32, i // 256
        name = f"n{i:05d}"
        labels = {
            "kubernetes.io/hostname": name,
            "superpod.dev/spine": f"spine-{spine:02d}",
            "superpod.dev/leaf": f"su-{leaf:03d}",
            "nvidia.com/gpu.product": PRODUCT,
        }
        alloc = {"cpu": 224_000, "memory": 2 * 2**40, GPU: 8, "pods": 110}
        nodes.append(Node(name, labels, alloc))
        r = rnd.random()
        used = 0 if r < 0.5 else (8 if r < 0.7 else rnd.choice([1, 2, 4, 6]))
        if used:
            pods.append(Pod(f"other/p{i}", name, ((GPU, used), ("cpu", used * 16_000))))
    return nodes, pods


def mixed_jobs(n: int, seed: int = 2) -> list[JobRequest]:
    rnd = random.Random(seed)
    jobs = []
    for k in range(n):
        r = rnd.random()
        kw: dict = {}
        if r < 0.5:
            replicas, g = 1, rnd.choice([1, 2, 4])
        elif r < 0.7:
            replicas, g = 1, 8
        elif r < 0.9:
            replicas, g = rnd.choice([2, 4, 8, 16]), 8
            kw["required"] = "leaf"
        else:
            replicas, g = rnd.choice([32, 64, 128]), 8
            kw["required"] = "spine"
        jobs.append(
            make_request("bench", f"j{k:04d}", replicas, {GPU: g, "cpu": g * 8_000}, gpu_product=PRODUCT,
                         priority=rnd.choice([0, 0, 1, 2]), submitted=float(k), **kw)
        )  # fmt: skip
    return jobs


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}; {os.cpu_count()} logical CPUs; Python {platform.python_version()} on {platform.system()}"


def bench(gpus: int, repeat: int, fit: str) -> None:
    nodes, pods = cluster(gpus)
    t0 = time.perf_counter()
    snap = Snapshot(nodes, TOPO, pods)
    big = make_request("bench", "big", 128, {GPU: 8, "cpu": 64_000}, gpu_product=PRODUCT, required="spine")
    snap.view(big)
    build = time.perf_counter() - t0
    times, cpus, result = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        result = place(snap, big, fit=fit)
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    where = f"placed in {result.domains[0]}, {result.counts[1]} leaves" if result else "no spine fits"
    med, p90 = statistics.median(times) * 1e3, sorted(times)[int(0.9 * (len(times) - 1))] * 1e3
    jobs = mixed_jobs(1000)
    snap = Snapshot(nodes, TOPO, pods)
    t, c = time.perf_counter(), time.process_time()
    decisions = schedule(snap, jobs, PriorityFifo(fit=fit))
    cyc, cpu = time.perf_counter() - t, time.process_time() - c
    placed = sum(d.placed for d in decisions)
    held = next((d.reserved for d in decisions if d.reserved), None)
    print(
        f"{gpus:>7,} GPUs {len(nodes):>6,} nodes {fit:>5} fit | snapshot {build * 1e3:7.1f} ms | "
        f"1,024-GPU gang in one spine: median {med:6.2f} ms wall ({statistics.median(cpus) * 1e3:5.2f} CPU), "
        f"p90 {p90:6.2f} ms ({where}) | "
        f"cycle of 1,000 jobs {cyc:5.2f} s wall, {cpu:5.2f} s CPU ({placed} placed; reserved: {held})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--fits", default="first", help="comma-separated objectives to compare: first, best")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    for size in [int(s) for s in args.sizes.split(",")]:
        for fit in args.fits.split(","):
            bench(size, args.repeat, fit)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
