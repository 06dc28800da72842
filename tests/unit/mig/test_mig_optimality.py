"""The planner against an exact ILP optimum on seeded small instances (<= 4 nodes x 8 GPUs).

The full figure (share optimal, worst gap over many instances) comes from bench/check_mig_optimality.py.
"""

import random

import pytest

pytest.importorskip("pulp")

from superpod.core.mig_planner import plan  # noqa: E402
from tests.unit.mig_exact import compare, random_instance  # noqa: E402

SEEDS = range(40)


def test_planner_matches_the_exact_optimum_on_seeded_instances():
    misses = []
    for seed in SEEDS:
        nodes, demands = random_instance(random.Random(seed))
        ok, mine, best = compare(nodes, demands, plan(nodes, demands))
        if not ok:
            misses.append((seed, mine, best))
        assert mine[0] <= best[0], "the planner cannot beat the optimum on satisfied demand"
    assert len(misses) <= len(SEEDS) // 100, misses


def test_exact_solver_sanity():
    from superpod.core.mig_planner import MigDemand, MigNode
    from tests.unit.mig_exact import exact

    nodes = [MigNode("a", "NVIDIA-H100-80GB-HBM3", (None, None), dynamic=True)]
    assert exact(nodes, [MigDemand("j", "3g.40gb", 4)]) == ((4,), 2, 1)
    assert exact(nodes, [MigDemand("j", "3g.40gb", 5)]) == ((0,), 0, 0)
