"""Compare the MIG planner with an exact ILP optimum on random small instances (<= 4 nodes x 8 GPUs).

Usage: .venv/bin/python bench/check_mig_optimality.py [N=300] [SEED=0]
Prints the share of instances where the planner is optimal (same satisfied replicas at every priority level and
the same GPU and node reconfiguration counts) and the worst gaps.
"""

from __future__ import annotations

import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.mig_exact import compare, random_instance  # noqa: E402

from superpod.core.mig_planner import plan  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    optimal, worst_demand, worst_gpus, worst_nodes, misses = 0, 0, 0, 0, []
    t0 = time.perf_counter()
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        nodes, demands = random_instance(rng)
        ok, mine, best = compare(nodes, demands, plan(nodes, demands))
        if ok:
            optimal += 1
            continue
        misses.append((i, mine, best))
        if mine[0] != best[0]:
            short = next(b - m for m, b in zip(mine[0], best[0], strict=True) if m != b)
            worst_demand = max(worst_demand, short)
        else:
            worst_gpus = max(worst_gpus, mine[1] - best[1])
            worst_nodes = max(worst_nodes, mine[2] - best[2])
    dt = time.perf_counter() - t0
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"instances: {n} (seed {seed}), checked in {dt:.1f} s")
    print(f"optimal: {optimal}/{n} = {100 * optimal / n:.1f}%")
    print(
        f"worst gap: {worst_demand} replicas short at the first differing priority level; "
        f"{worst_gpus} extra GPUs, {worst_nodes} extra nodes reconfigured at equal demand"
    )
    for i, mine, best in misses[:10]:
        print(f"  instance {i}: planner {mine} vs exact {best}  (per-level replicas, GPUs, nodes)")


if __name__ == "__main__":
    main()
