"""Random small MIG planning instances and an independent check of a plan (no solver needed)."""

from __future__ import annotations

import random
from collections import Counter

from superpod.core.mig_catalog import PRODUCTS, product
from superpod.core.mig_geometry import fits, maximal_geometries, valid_geometries
from superpod.core.mig_planner import MigDemand, MigNode, MigPlan, free_after, selector_matches


def score(demands: list[MigDemand], satisfied) -> tuple[int, ...]:
    """Satisfied replicas per priority level, highest level first."""
    levels = sorted({d.priority for d in demands}, reverse=True)
    ok = set(satisfied)
    return tuple(sum(d.replicas for d in demands if d.priority == lv and d.job in ok) for lv in levels)


def check_plan(nodes: list[MigNode], demands: list[MigDemand], plan: MigPlan) -> None:
    """Assert the plan's hard rules and that every promise is backed by a free instance afterwards."""
    by_name = {n.name: n for n in nodes}
    for name, layout in plan.layouts.items():
        n = by_name[name]
        assert n.dynamic and not n.busy and not any(n.in_use.values()), f"{name} is busy or not opted in"
        assert len(layout) == len(n.gpus)
        same = [
            (a is None) == (b is None) and sorted(a or ()) == sorted(b or ())
            for a, b in zip(n.gpus, layout, strict=True)
        ]
        assert plan.changed[name] == tuple(i for i, s in enumerate(same) if not s), (name, plan.changed[name])
        for g in layout:
            assert g is None or fits(product(n.product), g), (name, g)
    assert set(plan.changed) == set(plan.layouts)
    free = {n.name: free_after(n, plan.layouts.get(n.name)) for n in nodes if n.name not in plan.refused}
    used: Counter = Counter()
    jobs = {d.job: d for d in demands}
    assert set(plan.satisfied) | set(plan.unsatisfied) == set(jobs)
    assert set(plan.assignment) == set(plan.satisfied)
    for job, per_node in plan.assignment.items():
        d = jobs[job]
        assert sum(per_node.values()) == d.replicas, (job, per_node)
        for name, k in per_node.items():
            n = by_name[name]
            assert selector_matches(d.product, n), (job, name)
            assert product(n.product).offers(d.profile), (job, name)
            used[(name, d.profile)] += k
    for (name, prof), k in used.items():
        assert k <= free[name][prof], f"over-promised {prof} on {name}: {k} > {free[name][prof]}"


GFD = {k: p.gfd_names[0] for k, p in PRODUCTS.items()}


def random_instance(rng: random.Random, max_nodes: int = 4, max_gpus: int = 8) -> tuple[list, list]:
    keys = rng.sample(sorted(PRODUCTS), rng.choice([1, 1, 2, 2, 3]))
    nodes = []
    for i in range(rng.randint(1, max_nodes)):
        prod = product(keys[i % len(keys)])
        geoms = list(valid_geometries(prod))
        maxi = list(maximal_geometries(prod))
        gpus = []
        for _ in range(rng.randint(1, max_gpus)):
            u = rng.random()
            gpus.append(None if u < 0.3 else rng.choice(maxi) if u < 0.7 else rng.choice(geoms))
        busy = rng.random() < 0.2
        in_use = {}
        if busy:
            have = Counter(n for g in gpus if g for n in g)
            in_use = {k: rng.randint(0, v) for k, v in have.items() if rng.random() < 0.5}
        nodes.append(
            MigNode(f"n{i}", GFD[prod.key], tuple(gpus), busy=busy, dynamic=rng.random() < 0.75, in_use=in_use)
        )
    demands = []
    for j in range(rng.randint(1, 6)):
        prod = product(rng.choice(keys))
        prof = rng.choice([p for p in prod.profiles if "+me" not in p.name or rng.random() < 0.2])
        sel = rng.choice([None, None, prod.key, GFD[prod.key]])
        demands.append(MigDemand(f"j{j}", prof.name, rng.randint(1, 8), rng.choice([0, 1, 2]), sel))
    return nodes, demands
