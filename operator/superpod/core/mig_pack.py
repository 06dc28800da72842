"""Packing state of the MIG planner: instances promised on fixed nodes and on reconfigurable GPUs, undoable.

A reconfigurable GPU keeps its current geometry while the instances pinned on it are a sub-multiset of it; otherwise
it is "changed" and will get the maximal geometry holding its pins whose leftover has the largest shapes.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

from superpod.core.mig_catalog import Product
from superpod.core.mig_geometry import Geometry, canonical, contains, fits_canonical, maximal_geometries, minus


@dataclass
class Gpu:
    node: int
    prod: Product
    current: Geometry | None
    pinned: Geometry = ()  # instances promised to gangs, canonical
    owned: tuple[tuple[str, str], ...] = ()  # (job, profile as the job asked) per pinned instance
    changed: bool = False


@lru_cache(maxsize=65536)
def _add(prod: Product, pinned: Geometry, name: str) -> Geometry | None:
    g = canonical(prod, (*pinned, name))
    return g if fits_canonical(prod, g) else None


@lru_cache(maxsize=65536)
def _option(prod: Product, current: Geometry | None, pinned: Geometry, name: str) -> tuple | None:
    """Adding `name` to a GPU's pinned instances: (grown, already in the current geometry?, what a change would
    lose as (profile, count) pairs or None for a MIG-disabled GPU, memory slices pinned); None if it does not fit."""
    if not prod.offers(name):
        return None
    grown = _add(prod, pinned, name)
    if grown is None:
        return None
    contained = current is not None and contains(current, grown)
    lost = None if current is None else tuple(Counter(minus(current, pinned)).items())
    return grown, contained, lost, sum(prod.profile(n).memory for n in pinned)


@lru_cache(maxsize=4096)
def fill(prod: Product, pinned: Geometry) -> Geometry:
    """The maximal geometry holding `pinned` whose leftover keeps the largest shapes."""
    best: tuple | None = None
    for g in maximal_geometries(prod):
        if contains(g, pinned):
            left = sorted(((prod.profile(n).compute, prod.profile(n).memory) for n in minus(g, pinned)), reverse=True)
            key = (tuple(left), g)
            if best is None or key[0] > best[0]:
                best = key
    assert best is not None, "pinned instances always fit"
    return best[1]


# Orders in which to prefer a GPU to start reconfiguring, from (free instances it would lose that pending gangs want,
# node not yet being reconfigured, instances already promised on it, MIG disabled): each variant wins on some
# instances, so the planner runs them all. The first keeps whole GPUs longest.
TIER2 = (
    lambda wanted, new_node, pinned, whole: (wanted, new_node, whole, pinned),
    lambda wanted, new_node, pinned, whole: (wanted, new_node, pinned, whole),
    lambda wanted, new_node, pinned, whole: (pinned, wanted, new_node, whole),
    lambda wanted, new_node, pinned, whole: (new_node, pinned, wanted, whole),
)


class PackState:
    """Promises made so far: instances taken from fixed nodes, instances pinned on reconfigurable GPUs; undoable."""

    def __init__(self, ctx, variant: int = 0, rng: random.Random | None = None) -> None:
        """ctx: the planner's resolved instance (reconfigurable, fixed, scopes, outstanding)."""
        self.ctx, self.variant, self.rng = ctx, variant, rng
        self.fixed = {pool: dict(free) for pool, free in ctx.fixed.items()}  # (gfd, profile) -> node -> free
        self.taken: list[tuple[str, int]] = []  # (job, node) for instances taken from fixed nodes
        self.gpus: list[Gpu] = []
        self.gfd: dict[int, str] = {}
        self.node_gpus: dict[int, list[int]] = defaultdict(list)
        self.nchanged: Counter = Counter()  # node -> GPUs changed
        self.buckets: dict[str, dict[tuple, set[int]]] = defaultdict(lambda: defaultdict(set))  # gfd -> key -> GPUs
        self.outstanding = Counter(ctx.outstanding)
        self.log: list[tuple] = []
        self.done: list[str] = []
        self.work = 0
        for node, (gfd, prod, layout) in ctx.reconfigurable.items():
            self.gfd[node] = gfd
            for g in layout:
                gid = len(self.gpus)
                self.gpus.append(Gpu(node, prod, g))
                self.node_gpus[node].append(gid)
                self.buckets[gfd][self._key(gid)].add(gid)

    def _key(self, gid: int) -> tuple:
        g = self.gpus[gid]
        return (self.gfd[g.node], g.prod, g.current, g.pinned, g.changed, self.nchanged[g.node] > 0)

    def _set_gpu(self, gid: int, pinned: Geometry, owned: tuple, changed: bool) -> None:
        g = self.gpus[gid]
        self.log.append(("gpu", gid, g.pinned, g.owned, g.changed))
        flip = g.changed != changed
        after = self.nchanged[g.node] + (1 if changed else -1)
        # the node's "being reconfigured" flag is part of every one of its GPUs' bucket keys
        rekey = self.node_gpus[g.node] if flip and (self.nchanged[g.node] > 0) != (after > 0) else [gid]
        buckets = self.buckets[self.gfd[g.node]]
        for i in rekey:
            key = self._key(i)
            buckets[key].discard(i)
            if not buckets[key]:
                del buckets[key]
        if flip:
            self.nchanged[g.node] += 1 if changed else -1
        g.pinned, g.owned, g.changed = pinned, owned, changed
        for i in rekey:
            buckets[self._key(i)].add(i)

    def undo(self, mark: int) -> None:
        while len(self.log) > mark:
            op = self.log.pop()
            if op[0] == "fixed":
                _, pool, node, v, ntaken = op
                self.fixed[pool][node] = v
                del self.taken[ntaken:]
            else:
                _, gid, pinned, owned, changed = op
                self._set_gpu(gid, pinned, owned, changed)
                self.log.pop()

    def place(self, name: str, gfds: frozenset[str], job: str, new: int = 2) -> bool:
        """Promise one `name` instance to `job` on a product in `gfds`. new: 2 any GPU may be reconfigured,
        1 only GPUs on nodes already being reconfigured, 0 none."""
        self.work += 1
        best_fixed = None
        for gfd in gfds:
            for node, v in self.fixed.get((gfd, name), {}).items():
                if v > 0 and (best_fixed is None or (-v, node) < best_fixed[0]):
                    best_fixed = ((-v, node), (gfd, name), node, v)
        if best_fixed is not None:
            _, pool, node, v = best_fixed
            self.log.append(("fixed", pool, node, v, len(self.taken)))
            self.fixed[pool][node] = v - 1
            self.taken.append((job, node))
            return True
        best = None
        for gfd in gfds:
            for key, gids in self.buckets[gfd].items():
                _, prod, current, pinned, changed, touched = key
                opt = _option(prod, current, pinned, name)
                if opt is None:
                    continue
                grown, contained, lost, mem = opt
                if not changed and contained:
                    rank = (self.defer(0), 0, 0, 0, -len(pinned), 0.0)
                elif changed:
                    rank = (self.defer(1), 0, 0, 0, -mem, self.noise())
                elif best is not None and best[0][0][0] < 2:
                    continue  # a spot that needs no new reconfiguration is already known
                elif new == 2 or (new == 1 and touched):
                    # what reconfiguring gives up: free instances still wanted by pending gangs; a whole GPU
                    wanted = 0 if lost is None else sum(min(v, self.outstanding[k]) for k, v in lost)
                    prefs = TIER2[self.variant](wanted, 0 if touched else 1, len(pinned), current is None)
                    rank = (2, *prefs, self.noise())
                else:
                    continue
                if best is None or rank <= best[0][0]:
                    gid = min(gids)
                    if best is None or (rank, gid) < best[0]:
                        best = ((rank, gid), gid, grown)
        if best is None:
            return False
        (rank, _), gid, grown = best
        g = self.gpus[gid]
        self._set_gpu(gid, grown, (*g.owned, (job, name)), g.changed or not contains(g.current or (), grown))
        return True

    def noise(self) -> float:
        """Tie-break: none in the main passes, seeded random in the restarts."""
        return self.rng.random() if self.rng else 0.0

    def defer(self, tier: int) -> int:
        """In the restarts, now and then rank a free spot after a new reconfiguration, to explore other packings."""
        return 3 if self.rng and self.rng.random() < 0.1 else tier

    def cost(self) -> tuple[int, int]:
        return (sum(self.nchanged.values()), sum(1 for v in self.nchanged.values() if v))

    def eliminate(self, budget: int) -> None:
        """Local search: give up a reconfigured GPU, a node, a pair of GPUs for one new; keep what is cheaper."""
        stop = self.work + budget
        changed = sorted((len(g.owned), gid) for gid, g in enumerate(self.gpus) if g.changed)
        for _, gid in changed:
            if self.work < stop:
                self._move_out([gid], new=0)
        for node in sorted(n for n, v in self.nchanged.items() if v):
            if self.work < stop:
                self._move_out([gid for gid in self.node_gpus[node] if self.gpus[gid].changed], new=1)
        changed = [gid for _, gid in changed if self.gpus[gid].changed]
        for i, a in enumerate(changed):
            for b in changed[i + 1 :]:
                if self.work < stop and self.gpus[a].changed and self.gpus[b].changed:
                    self._move_out([a, b], new=2)

    def _move_out(self, gids: list[int], new: int) -> None:
        mark, before = len(self.log), self.cost()
        owned = [o for gid in gids for o in self.gpus[gid].owned]
        for gid in gids:
            self._set_gpu(gid, (), (), False)
        ok = all(self.place(name, self.ctx.scopes[job], job, new) for job, name in owned)
        if not ok or self.cost() >= before:
            self.undo(mark)

    def assignment(self) -> dict[str, Counter]:
        """job -> node index -> instances promised."""
        out: dict[str, Counter] = defaultdict(Counter)
        for job, node in self.taken:
            out[job][node] += 1
        for g in self.gpus:
            for job, _ in g.owned:
                out[job][g.node] += 1
        return out


