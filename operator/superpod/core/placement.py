"""Exact topology-aware gang placement.

Objective, lexicographic: (1) `required` and every slice constraint hold; (2) fewest domains used at each level,
coarsest first, ending with nodes; (3) best fit: the least free capacity of the job's primary resource (GPUs, else
its MIG slice, else cpu) summed over the chosen domains, again coarsest level first. (3) fills the tightest domains
so large free blocks stay whole. `preferred` needs no extra rule: (2) already keeps a job inside one domain of any
level whenever that is possible at all.

The cost of a solution is one integer: the components above as digits of base 2**48, so costs add and compare as
plain ints. Because the cost is additive over subtrees, a min-plus knapsack over children is exact. Search runs top
down: a domain that one child can hold alone needs only its best single child (tried in lower-bound order from
per-domain aggregates, pruned by the bound), otherwise we combine children's full cost arrays.

Exactness has one limit: a combination step whose work (sum of child capacities x replicas) exceeds `budget` keeps
only the largest children (a few more than the fewest that could hold the gang). That happens only for gangs far
larger than any single domain (e.g. 300 x 8 GPUs over fragmented spines is still exact); the placement is feasible
and says `exact=False`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import add

from superpod.core.model import Snapshot, View
from superpod.core.request import JobRequest

INF = 1 << 1000  # anything >= INF is infeasible; finite costs stay far below (48 bits x 2 x levels)
BASE_BITS = 48
KEEP_EXTRA = 2  # children kept beyond the minimum when a combination step is over budget


@dataclass(frozen=True)
class Placement:
    job: str
    assignments: dict[str, list[int]]  # node -> replica indexes (ranks follow the topology)
    counts: tuple[int, ...]  # domains used per level, coarsest first, nodes last
    domains: tuple[str, ...]  # the domain at the required level (or every top-level domain used)
    exact: bool = True  # False only when a huge multi-domain gang went over the search budget (see Solver)


def validate(snap: Snapshot, job: JobRequest) -> str | None:
    """A precise sentence if the request can never be placed as written; None if it is well-formed."""
    topo = snap.topology
    names = [lv.name for lv in snap.levels] + [topo.node_level_name]
    if job.replicas < 1:
        return f"replicas must be at least 1, got {job.replicas}"
    for what, lvl in (("required", job.required), ("preferred", job.preferred), ("sliceRequired", job.slice_required)):
        if lvl is not None and topo.index(lvl) is None:
            return (
                f"topology.{what} names level {lvl!r}, which the ClusterTopology does not define ({', '.join(names)})"
            )
    if (job.slice_size is None) != (job.slice_required is None):
        return "topology.sliceSize and topology.sliceRequired must be set together"
    if job.slice_size is not None:
        if job.slice_size < 1:
            return f"topology.sliceSize must be at least 1, got {job.slice_size}"
        if job.replicas % job.slice_size:
            return f"replicas ({job.replicas}) must be a multiple of topology.sliceSize ({job.slice_size})"
    if any(q < 0 for _, q in job.requests):
        return "resource requests must not be negative"
    return None


class Solver:
    """One placement attempt of one job on one snapshot. `exclude`: domain ids (with subtrees) not to use;
    `exclude_nodes`: node indexes not to use (reservations). `budget`: see _kids_table."""

    def __init__(
        self,
        snap: Snapshot,
        job: JobRequest,
        exclude: frozenset[int] = frozenset(),
        budget: int = 2_000_000,
        exclude_nodes: frozenset[int] = frozenset(),
    ):
        self.s = snap
        self.job = job
        self.view: View = snap.view(job)
        self.R = job.replicas
        self.L = len(snap.levels)
        topo = snap.topology
        self.q = topo.index(job.required) if job.required else 0
        s = topo.index(job.slice_required) if job.slice_required else None
        self.u = job.slice_size or 1
        self.sl = s if (s is not None and s > self.q and self.u > 1) else None  # slice level, if it binds
        self.req = [(r, v) for r, v in job.requests if v > 0]
        self.g = job.gpus
        self.primary = job.primary
        n = self.L + 1
        self.wc = [0] + [1 << (BASE_BITS * (2 * n - i)) for i in range(1, n + 1)]  # count weight per level
        self.wf = [0] + [1 << (BASE_BITS * (n - i)) for i in range(1, n + 1)]  # free weight per level
        self.excluded: set[int] = set()
        for d in exclude:
            self.excluded.update(snap.descendants(d))
        self.exclude_nodes = exclude_nodes
        self._slots: dict[int, int] = {}
        self._full: dict[tuple[int, int], _Table] = {}
        self.budget = budget
        self.exact = True  # False if a combination step had to drop children to stay within `budget`

    # -- per node / domain measures -------------------------------------------------------------------------
    def slots(self, i: int) -> int:
        """How many replicas fit on node i now (0 if filtered out or excluded), capped at R."""
        k = self._slots.get(i)
        if k is None:
            if not self.view.ok[i] or i in self.exclude_nodes or (self.excluded and self.s.anc[i][-1] in self.excluded):
                k = 0
            else:
                f = self.s.free[i]
                k = self.R
                for r, v in self.req:
                    x = f.get(r, 0) // v
                    if x < k:
                        k = max(x, 0)
            self._slots[i] = k
        return k

    def ub(self, d: int) -> int:
        """Upper bound on replicas domain d can hold (exact when GPUs are the binding resource)."""
        if d in self.excluded:
            return 0
        if self.g <= 0:
            return self.R if self.view.count[d] else 0
        return min(self.R, self._caps(d)[0])

    def _caps(self, d: int) -> tuple[int, list[int]]:
        """(GPU-bound capacity of d, its children's capacities descending), memoised in the view."""
        view, g = self.view, self.g
        m = view.memo.get((d, g))
        if m is None or m[0] != view.ver[d]:
            hist = view.hist[d]
            cap = sum(hist[h] * (h // g) for h in range(g, len(hist)))
            kids = sorted((self._caps(c)[0] for c in self.s.children[d]), reverse=True)
            m = view.memo[(d, g)] = (view.ver[d], cap, kids)
        return m[1], m[2]

    def unit(self, d: int) -> int:
        lvl = self.s.domains[d][0]
        return self.wc[lvl] + self.view.free[d][self.primary] * self.wf[lvl]

    def node_unit(self, i: int) -> int:
        return self.wc[self.L + 1] + max(self.s.free[i].get(self.primary, 0), 0) * self.wf[self.L + 1]

    def lower_bound(self, d: int, y: int) -> int:
        """Lower bound on unit(d) + best cost of y replicas inside d."""
        lvl = self.s.domains[d][0]
        lb = self.unit(d) + sum(self.wc[lvl + 1 : self.L + 1])
        if lvl < self.L:  # children needed at the next level, from their upper bounds
            if self.g > 0 and not self.excluded:
                caps = self._caps(d)[1]
            else:
                caps = sorted((self.ub(c) for c in self.s.children[d]), reverse=True)
            need, acc = 0, 0
            for c in caps:
                if acc >= y:
                    break
                acc += c
                need += 1
            lb += (max(need, 1) - 1) * self.wc[lvl + 1]
        need = 1
        if self.g > 0:  # nodes needed, from the free-GPU histogram
            acc, need = 0, 0
            hist = self.view.hist[d]
            for h in range(len(hist) - 1, self.g - 1, -1):
                per = min(h // self.g, y)
                c = hist[h]
                if acc + c * per >= y:
                    need += -(-(y - acc) // per)
                    acc = y
                    break
                acc += c * per
                need += c
            need = max(need, 1)
        return lb + need * self.wc[self.L + 1]

    # -- search ---------------------------------------------------------------------------------------------
    def best_in(self, d: int, y: int) -> tuple[int, list[tuple[int, int]]] | None:
        """Best (cost below d, [(node, replicas)]) for exactly y replicas inside domain d."""
        lvl = self.s.domains[d][0]
        if lvl == self.L:
            t = self.full(d, y)
            return (t.f[y], t.pick(y)) if t.f[y] < INF else None
        kids = [c for c in self.s.children[d] if self.ub(c) >= y]
        best: tuple[int, list[tuple[int, int]]] | None = None
        for lb, c in sorted((self.lower_bound(c, y), c) for c in kids):
            if best is not None and lb >= best[0]:
                break
            r = self.best_in(c, y)
            if r is not None and (lvl + 1 != self.sl or y % self.u == 0):
                cost = r[0] + self.unit(c)
                if best is None or cost < best[0]:
                    best = (cost, r[1])
        if best is not None:
            return best
        t = self.full(d, y)
        return (t.f[y], t.pick(y)) if t.f[y] < INF else None

    def full(self, d: int, Y: int) -> _Table:
        """Cost of placing y = 0..Y replicas inside d, for every y (INF where impossible)."""
        key = (d, Y)
        t = self._full.get(key)
        if t is None:
            lvl = self.s.domains[d][0]
            t = self._nodes_table(d, Y) if lvl == self.L else self._kids_table(d, Y)
            if lvl == self.sl:
                t.f = [v if y % self.u == 0 else INF for y, v in enumerate(t.f)]
            self._full[key] = t
        return t

    def _kids_table(self, d: int, Y: int) -> _Table:
        f = [0] + [INF] * Y
        steps: list[tuple[int, _Table, int, list[int]]] = []
        kids = [(min(Y, self.ub(c)), c) for c in self.s.children[d]]
        kids = [(cap, c) for cap, c in kids if cap > 0]
        if sum(cap for cap, _ in kids) * Y > self.budget:
            # Too big to combine exactly in Python time: keep the largest children, a few more than the fewest
            # that could hold Y. Still feasible and usually optimal, but no longer proven: flag it.
            kids.sort(key=lambda x: (-x[0], x[1]))
            need, acc = 0, 0
            while need < len(kids) and acc < Y:
                acc += kids[need][0]
                need += 1
            if need + KEEP_EXTRA < len(kids):
                kids = kids[: need + KEEP_EXTRA]
                self.exact = False
        reach = 0  # states above this are still INF
        for cap, c in sorted(kids, key=lambda x: self.s.domains[x[1]][1]):
            ct = self.full(c, cap)
            uc = self.unit(c)
            opts = [(t, v + uc) for t, v in enumerate(ct.f) if t and v < INF]
            if not opts:
                continue
            new = f[:]
            for t, ctv in opts:  # min-plus step over the reachable states, element-wise in C via map()
                hi = min(Y - t, reach)
                new[t : t + hi + 1] = map(min, new[t : t + hi + 1], map(add, f[: hi + 1], repeat(ctv)))
            steps.append((c, ct, uc, f))
            f = new
            reach = min(Y, reach + cap)
        return _Table(f, kids=steps)

    def _nodes_table(self, d: int, Y: int) -> _Table:
        unit = self.u if self.sl == self.L + 1 else 1
        Yu = Y // unit
        classes: dict[tuple[int, int], list[int]] = {}
        for i in self.s.node_children[d]:
            k = min(self.slots(i) // unit, Yu)
            if k > 0:
                classes.setdefault((k, self.node_unit(i)), []).append(i)
        # 0/1 knapsack over bundles of identical nodes (binary split), state = units covered, capped at Yu
        dp = [0] + [INF] * Yu
        items: list[tuple[int, int, list[int], list[int]]] = []  # (size, cost, nodes, dp before)
        for (k, cu), nodes in sorted(classes.items()):
            nodes.sort(key=lambda i: self.s.nodes[i].name)
            pos, b = 0, 1
            while pos < len(nodes):
                take = nodes[pos : pos + b]
                pos += len(take)
                b *= 2
                size, cost = k * len(take), cu * len(take)
                prev = dp
                dp = prev[:]
                for c in range(Yu + 1):
                    v = prev[c]
                    if v < INF:
                        n = min(Yu, c + size)
                        if v + cost < dp[n]:
                            dp[n] = v + cost
                items.append((size, cost, take, prev))
        # suffix minimum: covering at least y units
        best, arg = INF, Yu
        cover = [INF] * (Yu + 1)
        at = [0] * (Yu + 1)
        for c in range(Yu, -1, -1):
            if dp[c] < best:
                best, arg = dp[c], c
            cover[c], at[c] = best, arg
        f = [INF] * (Y + 1)
        for yu in range(Yu + 1):
            f[yu * unit] = cover[yu]
        return _Table(f, nodes=(items, dp, at, unit, self))


class _Table:
    def __init__(self, f: list[int], kids: list | None = None, nodes: tuple | None = None):
        self.f = f
        self.kids = kids
        self.nodes = nodes

    def pick(self, y: int) -> list[tuple[int, int]]:
        """Reconstruct [(node, replicas)] in topology order for y replicas."""
        if self.kids is not None:
            parts = []
            cur = self.f
            for _c, ct, uc, prev in reversed(self.kids):
                if prev[y] != cur[y]:  # this child was used: find how many replicas it took
                    t = next(t for t in range(1, min(y, len(ct.f) - 1) + 1) if prev[y - t] + ct.f[t] + uc == cur[y])
                    parts.append(ct.pick(t))
                    y -= t
                cur = prev
            return [x for p in reversed(parts) for x in p]
        items, dp, at, unit, solver = self.nodes
        if y == 0:
            return []
        c = at[y // unit]
        chosen: list[int] = []
        after = dp
        for size, cost, take, prev in reversed(items):
            if after[c] != prev[c]:  # this bundle was used: step back to its predecessor state
                top = len(prev) - 1
                cands = [c - size] if c < top else range(max(0, c - size), c + 1)
                c = next(p for p in cands if p >= 0 and prev[p] < INF and prev[p] + cost == after[c])
                chosen.extend(take)
            after = prev
        return _spread(solver, chosen, y, unit)


def _spread(solver: Solver, chosen: list[int], y: int, unit: int) -> list[tuple[int, int]]:
    """Give each chosen node one unit, then fill in name order up to its slots."""
    chosen.sort(key=lambda i: solver.s.nodes[i].name)
    amt = {i: unit for i in chosen}
    left = y - unit * len(chosen)
    for i in chosen:
        if left <= 0:
            break
        extra = min(left, (solver.slots(i) // unit) * unit - amt[i])
        amt[i] += extra
        left -= extra
    assert left == 0, "node table inconsistent"
    return [(i, amt[i]) for i in chosen]


def place(snap: Snapshot, job: JobRequest, exclude: frozenset[int] = frozenset()) -> Placement | None:
    """The best placement of the whole gang, or None when no feasible placement exists (see explain.py)."""
    if validate(snap, job) is not None:
        return None
    sv = Solver(snap, job, exclude)
    return solve(sv)


def solve(sv: Solver) -> Placement | None:
    s, R = sv.s, sv.R
    if sv.ub(0) < R:
        return None
    best: tuple[int, list[tuple[int, int]], int] | None = None
    if sv.q == sv.L + 1:  # required: one node
        for i in range(len(s.nodes)):
            if sv.slots(i) >= R:
                cost = sv.node_unit(i) + sum(sv.unit(a) for a in s.anc[i][1:])
                if best is None or cost < best[0]:
                    best = (cost, [(i, R)], s.anc[i][-1])
    elif sv.q == 0:
        r = sv.best_in(0, R)
        if r is not None:
            best = (r[0], r[1], 0)
    else:
        cands = []
        for d in s.by_level[sv.q]:
            if sv.ub(d) >= R:
                above = sum(sv.unit(a) for a in _ancestors(s, d))
                cands.append((above + sv.lower_bound(d, R), above, d))
        cands.sort()
        for lb, above, d in cands:
            if best is not None and lb >= best[0]:
                break
            r = sv.best_in(d, R)
            if r is not None:
                cost = above + sv.unit(d) + r[0]
                if best is None or cost < best[0]:
                    best = (cost, r[1], d)
    if best is None:
        return None
    return _placement(sv, best[1], best[2])


def _ancestors(s: Snapshot, d: int) -> list[int]:
    out = []
    p = s.domains[d][2]
    while p > 0:
        out.append(p)
        p = s.domains[p][2]
    return out


def _placement(sv: Solver, parts: list[tuple[int, int]], dom: int) -> Placement:
    s = sv.s
    assign: dict[str, list[int]] = {}
    rank = 0
    used: list[set[int]] = [set() for _ in range(sv.L + 1)]
    for i, n in parts:
        assign[s.nodes[i].name] = list(range(rank, rank + n))
        rank += n
        for lvl, a in enumerate(s.anc[i][1:], start=1):
            used[lvl].add(a)
    counts = tuple(len(u) for u in used[1:]) + (len(parts),)
    if dom:
        doms = (s.domain_label(dom),)
    else:
        top = sorted(used[1]) if sv.L else []
        doms = tuple(s.domain_label(d) for d in top)
    return Placement(job=sv.job.key, assignments=assign, counts=counts, domains=doms, exact=sv.exact)
