"""Dynamic MIG partition planner.

Given nodes (per GPU its MIG geometry or MIG disabled), which are busy and which opted in to dynamic MIG, and
pending gangs that each want `replicas` instances of one profile, choose new geometries for some GPUs.

Objective, in order: (1) most demand satisfied, priority level by priority level, whole gangs only; (2) fewest GPUs
reconfigured, then fewest nodes; (3) leftover capacity most useful: whole GPUs kept, free slices in large shapes.
Hard rules: a busy node (a running pod uses a GPU resource) or a node not opted in is never reconfigured; its free
instances still count. Free instances count before any reconfiguration.

Method (mig_pack.py holds the packing state): gangs in priority order, largest instance first, each instance put
at the cheapest spot (a free instance; room on a GPU already being reconfigured, best fit; then a GPU to reconfigure,
preferring nodes already touched and GPUs whose loss matters least), a gang that does not fit rolled back. That pass
runs under a few preference orders; then a hill-climb over gang orders (largest first, a left-out gang first, one
gang swapped for another) and seeded random restarts, each followed by a local search that gives up reconfigured
GPUs or nodes whose gangs fit elsewhere. The search is bounded by a work budget counted in placements, not by time.
Ties keep the first plan found, whose preferences keep whole GPUs and large free shapes.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from superpod.core.mig_catalog import Product, UnknownProductError, product
from superpod.core.mig_geometry import Geometry, canonical
from superpod.core.mig_pack import TIER2, PackState, fill

Layout = tuple[Geometry | None, ...]  # per GPU: its instances, or None when MIG is disabled


@dataclass(frozen=True)
class MigNode:
    name: str
    product: str  # value of nvidia.com/gpu.product (a catalogue key is accepted too)
    gpus: Layout
    busy: bool = False  # a running pod uses nvidia.com/gpu or nvidia.com/mig-* here
    dynamic: bool = False  # labelled superpod.dev/mig-dynamic="true"
    in_use: Mapping[str, int] = field(default_factory=dict)  # MIG instances held by running pods, by profile


@dataclass(frozen=True)
class MigDemand:
    job: str
    profile: str  # e.g. "3g.40gb"
    replicas: int
    priority: int = 0
    product: str | None = None  # selector: a GFD product name or a catalogue key; None = any product


@dataclass(frozen=True)
class MigPlan:
    layouts: dict[str, Layout]  # nodes to reconfigure -> their full layout afterwards
    changed: dict[str, tuple[int, ...]]  # nodes to reconfigure -> indices of the GPUs that change
    satisfied: tuple[str, ...]  # jobs whose whole gang fits after the plan
    unsatisfied: tuple[str, ...]
    assignment: dict[str, dict[str, int]]  # job -> node -> instances promised
    refused: dict[str, str] = field(default_factory=dict)  # node or job -> why it was left out

    @property
    def gpus_reconfigured(self) -> int:
        return sum(len(v) for v in self.changed.values())

    @property
    def nodes_reconfigured(self) -> int:
        return len(self.changed)


def node_product(node: MigNode) -> Product:
    return product(node.product)


def selector_matches(selector: str | None, node: MigNode) -> bool:
    return selector is None or selector == node.product or selector == node_product(node).key


class _Ctx:
    """The instance, resolved once: usable nodes, each gang's allowed products, sizes, priority levels."""

    def __init__(self, nodes: Sequence[MigNode], demands: Sequence[MigDemand]) -> None:
        if len({d.job for d in demands}) != len(demands):
            raise ValueError("one MigDemand per job")
        if any(d.replicas < 1 for d in demands):
            raise ValueError("a MigDemand needs at least one replica")
        self.nodes, self.demands = nodes, demands
        self.refused: dict[str, str] = {}
        self.usable = []
        for i, n in enumerate(nodes):
            try:
                prod = node_product(n)
                for g in n.gpus:
                    canonical(prod, g or ())
                for k in n.in_use:
                    prod.profile(k)
                self.usable.append(i)
            except UnknownProductError as e:
                self.refused[n.name] = str(e)
        self.scopes: dict[str, frozenset[str]] = {}
        self.size: dict[str, tuple[int, int]] = {}
        for d in demands:
            ok = [nodes[i] for i in self.usable if selector_matches(d.product, nodes[i])]
            ok = [n for n in ok if node_product(n).offers(d.profile)]
            self.scopes[d.job] = frozenset(n.product for n in ok)
            p = node_product(ok[0]).profile(d.profile) if ok else None
            self.size[d.job] = (p.memory, p.compute) if p else (0, 0)
            if not ok:
                self.refused[d.job] = f"no usable node offers MIG profile {d.profile!r} for selector {d.product!r}"
        self.reconfigurable: dict[int, tuple[str, Product, list]] = {}  # node -> (gfd, product, canonical layout)
        self.fixed: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)  # (gfd, profile) -> node -> free
        for i in self.usable:
            n = nodes[i]
            prod = node_product(n)
            if n.dynamic and not n.busy and not any(v > 0 for v in n.in_use.values()):
                self.reconfigurable[i] = (n.product, prod, [None if g is None else canonical(prod, g) for g in n.gpus])
            else:
                for name, v in free_after(n).items():
                    self.fixed[(n.product, name)][i] = v
        self.outstanding = Counter()
        for d in demands:
            self.outstanding[d.profile] += d.replicas
        self.levels = sorted({d.priority for d in demands}, reverse=True)
        self.order = {d.job: i for i, d in enumerate(demands)}
        self.rank = {
            d.job: (-self.size[d.job][0], -self.size[d.job][1], len(self.scopes[d.job]), -d.replicas, self.order[d.job])
            for d in demands
        }


def _run(ctx: _Ctx, order: Iterable[MigDemand], variant: int = 0, rng: random.Random | None = None) -> PackState:
    """Place gangs in this order, all or none each."""
    st = PackState(ctx, variant, rng)
    for d in order:
        st.work += 1  # so that every pass costs something, even when no gang can be placed
        mark = len(st.log)
        scope = ctx.scopes[d.job]
        if scope and all(st.place(d.profile, scope, d.job) for _ in range(d.replicas)):
            st.done.append(d.job)
        else:
            st.undo(mark)
        st.outstanding[d.profile] -= d.replicas
    return st


def _objective(ctx: _Ctx, st: PackState) -> tuple:
    ok = set(st.done)
    per_level = tuple(-sum(d.replicas for d in ctx.demands if d.priority == lv and d.job in ok) for lv in ctx.levels)
    return (per_level, *st.cost())


def _moves(ctx: _Ctx, best: PackState, base: list[MigDemand]):
    """Other orders worth a try: largest first; each left-out gang first; each left-out gang instead of another."""
    done = set(best.done)
    chosen = [d for d in base if d.job in done]
    rest = [d for d in base if d.job not in done]

    def ffd(jobs):  # largest instance first, then priority
        return sorted(jobs, key=lambda d: (ctx.rank[d.job][:2], -d.priority, ctx.rank[d.job][2:]))

    yield ffd(chosen) + rest
    for r in rest:
        yield ffd([*chosen, r]) + [d for d in rest if d is not r]
        higher = [d for d in base if d.priority > r.priority]
        yield higher + [r] + [d for d in base if d.priority <= r.priority and d is not r]
    for r in rest:
        for s in chosen:
            if s.priority == r.priority and s.replicas <= r.replicas:
                yield ffd([*(d for d in chosen if d is not s), r]) + [d for d in rest if d is not r] + [s]


WORK_BUDGET = 3000  # instance placements spent on search beyond the first pass (deterministic, no clock)


def _shuffled(base: list[MigDemand], rng: random.Random) -> list[MigDemand]:
    """A random order that keeps priority levels in order, or now and then ignores them."""
    if rng.random() < 0.2:
        return rng.sample(base, len(base))
    return sorted(base, key=lambda d: (-d.priority, rng.random()))


def plan(nodes: Sequence[MigNode], demands: Sequence[MigDemand], work_budget: int = WORK_BUDGET) -> MigPlan:
    """Choose new MIG geometries for some idle, opted-in nodes so that the most important gangs fit."""
    ctx = _Ctx(nodes, demands)
    # priority first; then largest instance, most constrained (fewest products), largest gang
    base = sorted(demands, key=lambda d: (-d.priority, *ctx.rank[d.job]))
    best: PackState | None = None
    spent = 0

    def attempt(order: list[MigDemand], variant: int, rng: random.Random | None = None) -> bool:
        nonlocal best, spent
        st = _run(ctx, order, variant, rng)
        st.eliminate(min(max(st.work, 400), max(0, work_budget - spent - st.work)))
        spent += st.work + 1  # +1: a pass with nothing to place still counts
        if best is None or _objective(ctx, st) < _objective(ctx, best):
            best = st
            return True
        return False

    for v in range(len(TIER2)):  # 1. the main pass under each preference
        if best is None or spent < work_budget:
            attempt(base, v)
    improved = True
    while improved and spent < work_budget:  # 2. hill-climb over gang orders
        improved = False
        for order in _moves(ctx, best, base):
            if spent >= work_budget:
                break
            if attempt(order, best.variant):
                improved = True
                break
    rng = random.Random(0)  # 3. seeded restarts while budget remains (deterministic)
    while spent < work_budget:
        attempt(_shuffled(base, rng), rng.randrange(len(TIER2)), rng)
    assert best is not None
    return _result(ctx, best)


def _result(ctx: _Ctx, st: PackState) -> MigPlan:
    layouts: dict[str, Layout] = {}
    changed: dict[str, tuple[int, ...]] = {}
    for node, gids in st.node_gpus.items():
        gpus = [st.gpus[gid] for gid in gids]
        if any(g.changed for g in gpus):
            name = ctx.nodes[node].name
            layouts[name] = tuple(fill(g.prod, g.pinned) if g.changed else g.current for g in gpus)
            changed[name] = tuple(k for k, g in enumerate(gpus) if g.changed)
    done = set(st.done)
    chosen = [d for d in ctx.demands if d.job in done]
    assignment = st.assignment()
    return MigPlan(
        layouts=layouts,
        changed=changed,
        satisfied=tuple(d.job for d in ctx.demands if d.job in done),
        unsatisfied=tuple(d.job for d in ctx.demands if d.job not in done),
        assignment={d.job: {ctx.nodes[i].name: k for i, k in sorted(assignment[d.job].items())} for d in chosen},
        refused=ctx.refused,
    )


def free_after(node: MigNode, layout: Layout | None = None) -> Counter:
    """Free instances by catalogue profile name on a node, with `layout` applied (a new layout has no users)."""
    prod = node_product(node)
    gpus = node.gpus if layout is None else layout
    free = Counter(prod.profile(n).name for g in gpus if g for n in g)
    if layout is None:
        free.subtract({prod.profile(k).name: v for k, v in node.in_use.items()})
    return +free
