"""Exact optimum of the MIG planning problem as an ILP (PuLP with its bundled CBC; a dev dependency).

Used by bench/check_mig_optimality.py and tests/unit/mig/test_mig_optimality.py. Independent of the planner's method:
it chooses, for every reconfigurable GPU, its current geometry (free) or any maximal geometry, and which gangs run.
Objective, lexicographic: satisfied replicas per priority level (highest first), then GPUs, then nodes reconfigured.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pulp

from superpod.core.mig_catalog import product
from superpod.core.mig_geometry import canonical, maximal_geometries
from superpod.core.mig_planner import MigDemand, MigNode, MigPlan, free_after, selector_matches
from tests.unit.mig_cases import random_instance, score  # noqa: F401  (random_instance: for the bench script)


def exact(nodes: list[MigNode], demands: list[MigDemand]) -> tuple[tuple[int, ...], int, int]:
    """(satisfied replicas per level, GPUs reconfigured, nodes reconfigured) of an optimal plan."""
    prob = pulp.LpProblem("mig", pulp.LpMaximize)
    supply: dict[tuple[str, str], list] = {}  # (gfd, profile) -> terms

    def add(key, term):
        supply.setdefault(key, []).append(term)

    gpu_changes, node_changes = [], []
    for ni, n in enumerate(nodes):
        prod = product(n.product)
        if not n.dynamic or n.busy:
            for name, v in free_after(n).items():
                add((n.product, name), v)
            continue
        r = prob.add_variable(f"r{ni}", cat="Binary")
        node_changes.append(r)
        for gi, cur in enumerate(n.gpus):
            cur_c = None if cur is None else canonical(prod, cur)
            options = [(cur_c, 0)] + [(g, 1) for g in maximal_geometries(prod) if g != cur_c]
            xs = [prob.add_variable(f"x{ni}_{gi}_{k}", cat="Binary") for k in range(len(options))]
            prob += pulp.lpSum(xs) == 1
            changed = pulp.lpSum(x for x, (_, c) in zip(xs, options, strict=True) if c)
            gpu_changes.append(changed)
            prob += r >= changed
            for x, (g, _) in zip(xs, options, strict=True):
                for name, v in Counter(g or ()).items():
                    add((n.product, name), v * x)
    ys, use = {}, {}
    for j, d in enumerate(demands):
        y = ys[d.job] = prob.add_variable(f"y{j}", cat="Binary")
        gfds = sorted(
            {n.product for n in nodes if selector_matches(d.product, n) and product(n.product).offers(d.profile)}
        )
        zs = []
        for gfd in gfds:
            z = prob.add_variable(f"z{j}_{gfd}", lowBound=0, cat="Integer")
            zs.append(z)
            use.setdefault((gfd, d.profile), []).append(z)
        prob += pulp.lpSum(zs) == d.replicas * y
    for key, zs in use.items():
        prob += pulp.lpSum(zs) <= pulp.lpSum(supply.get(key, [0]))
    levels = sorted({d.priority for d in demands}, reverse=True)
    got = []
    with warnings.catch_warnings():  # PuLP 3.3 deprecates the bundled-CBC class for 4.0; pinned <4 in dev extras
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False)
    for lv in levels:
        expr = pulp.lpSum(d.replicas * ys[d.job] for d in demands if d.priority == lv)
        prob.setObjective(expr)
        prob.sense = pulp.LpMaximize
        prob.solve(solver)
        val = round(pulp.value(expr) or 0)
        got.append(val)
        prob += expr >= val
    gpus = pulp.lpSum(gpu_changes)
    prob.setObjective(gpus)
    prob.sense = pulp.LpMinimize
    prob.solve(solver)
    n_gpus = round(pulp.value(gpus) or 0)
    prob += gpus <= n_gpus
    nds = pulp.lpSum(node_changes)
    prob.setObjective(nds)
    prob.solve(solver)
    return tuple(got), n_gpus, round(pulp.value(nds) or 0)


def compare(nodes, demands, p: MigPlan) -> tuple[bool, tuple, tuple]:
    """(optimal?, planner's (score, gpus, nodes), exact (score, gpus, nodes))."""
    mine = (score(demands, p.satisfied), p.gpus_reconfigured, p.nodes_reconfigured)
    best = exact(nodes, demands)
    return mine == best, mine, best
