"""Victim search benchmark (core/preempt.py): prints figures and the machine; asserts nothing.

The cluster of bench_placement.py (8-GPU nodes, leaves of 32 nodes, spines of 8 leaves) filled with G running gangs
of mixed size and priority (60% one pod of 1-8 GPUs, 30% 2-4 x 8 GPUs inside a leaf, 10% 8-16 x 8 GPUs inside a
spine; priorities 0, 1, 2, 5 and one in six at 200, above the preemptor), then every node's GPUs left taken by a
single-pod gang of its own, so no GPU is free. Measures `preempt.choose` for a
priority-100 preemptor that does not fit:
  - 32 x 8 GPUs required inside one leaf (a whole leaf: the issue's case);
  - 8 x 8 GPUs required inside one leaf (part of a leaf: the search chooses among the leaf's gangs);
  - 8 x 8 GPUs anywhere (no required level: every candidate in the cluster);
against, in the same run, the first-feasible baseline a heuristic would take (the first leaf, in name order, where
evicting every lower-priority gang makes room) and one plain placement attempt on the same snapshot.
Run: .venv/bin/python bench/bench_preempt.py [--gpus 100000] [--gangs 5000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import time

from bench_placement import PRODUCT, TOPO, machine

from superpod.core.model import Node, Snapshot
from superpod.core.placement import Solver, place, solve
from superpod.core.preempt import Victim, choose, cost_of
from superpod.core.request import GPU, make_request


def full_cluster(gpus: int, gangs: int, seed: int = 5) -> tuple[Snapshot, list[Victim]]:
    rnd = random.Random(seed)
    nodes = []
    for i in range(gpus // 8):
        name = f"n{i:05d}"
        labels = {"kubernetes.io/hostname": name, "superpod.dev/spine": f"spine-{i // 256:02d}",
                  "superpod.dev/leaf": f"su-{i // 32:03d}", "nvidia.com/gpu.product": PRODUCT}
        nodes.append(Node(name, labels, {"cpu": 224_000, "memory": 2 * 2**40, GPU: 8, "pods": 110}))
    snap = Snapshot(nodes, TOPO)
    victims = []
    for k in range(gangs):
        r = rnd.random()
        if r < 0.6:
            replicas, per, required = 1, rnd.choice([1, 2, 4, 8]), None
        elif r < 0.9:
            replicas, per, required = rnd.choice([2, 4]), 8, "leaf"
        else:
            replicas, per, required = rnd.choice([8, 16]), 8, "spine"
        job = make_request("bench", f"g{k:05d}", replicas, {GPU: per, "cpu": per * 8_000}, required=required)
        placement = place(snap, job)
        if placement is None:
            break
        snap.assume(job, placement.assignments)
        priority = rnd.choice([0, 0, 1, 2, 5, 200])
        keys = tuple(f"{job.key}#{r}" for ranks in placement.assignments.values() for r in ranks)
        victims.append(Victim(job.key, priority, float(replicas * per), replicas * per * rnd.uniform(0, 86_400), keys))
    for i, node in enumerate(snap.nodes):  # the GPUs left: one single-pod gang each node, so nothing fits
        left = snap.free[i].get(GPU, 0)
        if left > 0:
            job = make_request("bench", f"fill{i:05d}", 1, {GPU: left, "cpu": left * 8_000})
            snap.assume(job, {node.name: [0]})
            victims.append(Victim(job.key, rnd.choice([0, 0, 1, 2, 5, 200]), float(left),
                                  left * rnd.uniform(0, 86_400), (f"{job.key}#0",)))
    return snap, victims


def first_feasible(snap: Snapshot, job, candidates: list[Victim]) -> tuple | None:
    """The baseline: the first leaf (in name order) where evicting every lower-priority gang with pods there makes
    room; every such gang is evicted."""
    solver = Solver(snap, job)
    by_node: dict[int, list[Victim]] = {}
    for victim in candidates:
        for key in victim.pods:
            by_node.setdefault(snap.index[snap.pods[key].node], []).append(victim)
    for leaf in solver.domains_at(solver.required_level or 1):
        chosen = {v.key: v for i in snap.nodes_under(leaf) for v in by_node.get(i, [])}
        pods = [snap.pods[key] for v in chosen.values() for key in v.pods]
        for pod in pods:
            snap.remove_pod(pod.key)
        fits = solve(Solver(snap, job)) is not None
        for pod in pods:
            snap.add_pod(pod)
        if fits:
            return cost_of(chosen.values())
    return None


def timed(fn, repeat: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1000)
    return times, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=100_000)
    ap.add_argument("--gangs", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    print(machine())
    start = time.perf_counter()
    snap, victims = full_cluster(args.gpus, args.gangs)
    used = sum(v.gpus for v in victims)
    print(f"cluster: {len(snap.nodes) * 8:,} GPUs, {len(victims):,} running gangs holding {used:,.0f} GPUs "
          f"(built in {time.perf_counter() - start:.1f} s)")
    candidates = [v for v in victims if v.priority < 100]
    print(f"candidates (priority < 100): {len(candidates):,} gangs")
    cases = [("32 x 8 GPUs, required leaf", 32, "leaf"), ("8 x 8 GPUs, required leaf", 8, "leaf"),
             ("8 x 8 GPUs, anywhere", 8, None)]
    for title, replicas, required in cases:
        job = make_request("bench", "preemptor", replicas, {GPU: 8, "cpu": 64_000}, required=required, priority=100)
        plain, _ = timed(lambda j=job: solve(Solver(snap, j)), args.repeat)
        exact, found = timed(lambda j=job: choose(snap, j, candidates), args.repeat)
        base, baseline = timed(lambda j=job: first_feasible(snap, j, candidates), max(3, args.repeat // 5))
        print(f"\n{title}:")
        if found is None:
            print("  no victim set makes room")
            continue
        cost = found.cost
        print(f"  exact search: median {statistics.median(exact):.1f} ms, p99 {_p99(exact):.1f} ms, "
              f"max {max(exact):.1f} ms; victims: {cost[1]} gangs, highest priority {cost[0]}, {cost[2]:.0f} GPUs, "
              f"{cost[3] / 3600:.1f} GPU-hours lost; exact={found.exact}")
        if baseline is not None:
            print(f"  first-feasible baseline: median {statistics.median(base):.1f} ms; victims: {baseline[1]} gangs, "
                  f"highest priority {baseline[0]}, {baseline[2]:.0f} GPUs, {baseline[3] / 3600:.1f} GPU-hours lost")
        print(f"  one placement attempt (fails): median {statistics.median(plain):.1f} ms")
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


if __name__ == "__main__":
    main()
