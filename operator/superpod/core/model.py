"""Cluster snapshot: nodes, free capacity, the topology domain tree and per-filter aggregates.

Free = allocatable minus the requests of every bound non-terminal pod (whoever scheduled it). The domain tree has a
root (level 0), one level per ClusterTopology level except the node level, and nodes below the finest level.
Aggregates (free per resource, histogram of nodes by free whole GPUs) are kept per *view*: the set of nodes that
pass one job's filters. Views are built lazily and updated incrementally on every add/remove of a pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from superpod.core.request import GPU, PRODUCT_LABEL, JobRequest, Taint

HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Level:
    name: str
    label: str


@dataclass(frozen=True)
class Topology:
    """Levels coarsest first. A level labelled kubernetes.io/hostname is the node level itself."""

    levels: tuple[Level, ...] = ()

    @property
    def domain_levels(self) -> tuple[Level, ...]:
        return tuple(lv for lv in self.levels if lv.label != HOSTNAME)

    @property
    def node_level_name(self) -> str:
        for lv in self.levels:
            if lv.label == HOSTNAME:
                return lv.name
        return "node"

    def index(self, name: str) -> int | None:
        """Tree depth of a level name: 1..L for domain levels, L+1 for the node level, None if unknown."""
        for i, lv in enumerate(self.domain_levels, start=1):
            if lv.name == name:
                return i
        if name == self.node_level_name:
            return len(self.domain_levels) + 1
        return None


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True


@dataclass(frozen=True)
class Pod:
    """A bound, non-terminal pod as far as capacity is concerned."""

    key: str
    node: str
    requests: tuple[tuple[str, int], ...]


def filter_reason(node: Node, job: JobRequest) -> str | None:
    """Why `node` is excluded by `job`'s filters (never by size or load); None if it passes."""
    if not node.ready:
        return "not ready"
    if node.unschedulable:
        return "cordoned"
    for t in node.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in job.tolerations):
            return "tainted"
    if job.gpu_product and node.labels.get(PRODUCT_LABEL) != job.gpu_product:
        return "other GPU product"
    if any(node.labels.get(k) != v for k, v in job.node_selector):
        return "nodeSelector mismatch"
    if job.affinity and not any(all(r.matches(node.labels) for r in term) for term in job.affinity):
        return "node affinity mismatch"
    return None


class View:
    """Aggregates over the nodes that pass one filter signature."""

    def __init__(self, snap: Snapshot, ok: list[bool], reasons: Counter):
        self.ok = ok
        self.reasons = reasons  # filter reason -> node count
        nd = len(snap.domains)
        self.hist = [[0] * (snap.hmax + 1) for _ in range(nd)]
        self.free: list[Counter] = [Counter() for _ in range(nd)]
        self.count = [0] * nd
        self.ver = [0] * nd  # bumped on every change below a domain; keys the memo
        self.memo: dict[tuple[int, int], tuple[int, int, list[int]]] = {}  # (domain, gpus) -> (ver, cap, kid caps)
        hmax = snap.hmax
        for x in range(len(snap.domains)):  # per finest domain from its nodes, then fold upwards
            for i in snap.node_children[x]:
                if ok[i]:
                    f = snap.free[i]
                    self.hist[x][min(max(f.get(GPU, 0), 0), hmax)] += 1
                    self.count[x] += 1
                    fr = self.free[x]
                    for r, v in f.items():
                        if v > 0:
                            fr[r] += v
        for lvl in range(len(snap.levels), 0, -1):
            for x in snap.by_level[lvl]:
                p = snap.domains[x][2]
                self.count[p] += self.count[x]
                self.free[p].update(self.free[x])
                self.hist[p] = [a + b for a, b in zip(self.hist[p], self.hist[x], strict=True)]

    def add(self, snap: Snapshot, i: int, sign: int) -> None:
        f = snap.free[i]
        h = min(max(f.get(GPU, 0), 0), snap.hmax)
        for d in snap.anc[i]:
            self.ver[d] += 1
            self.hist[d][h] += sign
            self.count[d] += sign
            fr = self.free[d]
            for r, v in f.items():
                fr[r] += sign * max(v, 0)


class Snapshot:
    """Nodes, pods and the domain tree. Mutate only through add_pod/remove_pod/assume/forget."""

    def __init__(self, nodes: Iterable[Node], topology: Topology | None = None, pods: Iterable[Pod] = ()):
        self.topology = topology or Topology()
        self.levels = self.topology.domain_levels
        self.nodes: list[Node] = sorted(nodes, key=lambda n: n.name)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.free: list[dict[str, int]] = [dict(n.allocatable) for n in self.nodes]
        self.hmax = max([n.allocatable.get(GPU, 0) for n in self.nodes] + [0])
        self.pods: dict[str, Pod] = {}
        self.generation = 0
        self._build_tree()
        self.views: dict[tuple, View] = {}
        for p in pods:
            self.add_pod(p)

    def _build_tree(self) -> None:
        # domains[d] = (level, name, parent); children/nodes lists by domain id
        self.domains: list[tuple[int, str, int]] = [(0, "cluster", -1)]
        self.children: list[list[int]] = [[]]
        self.node_children: list[list[int]] = [[]]
        self.by_level: list[list[int]] = [[0]] + [[] for _ in self.levels]
        ids: dict[tuple[str, ...], int] = {}
        self.anc: list[tuple[int, ...]] = []
        for i, n in enumerate(self.nodes):
            path: list[int] = [0]
            key: tuple[str, ...] = ()
            for lvl, lv in enumerate(self.levels, start=1):
                val = n.labels.get(lv.label)
                key = key + (val if val is not None else f"?{n.name}",)  # unlabelled: a domain of its own
                d = ids.get(key)
                if d is None:
                    d = ids[key] = len(self.domains)
                    self.domains.append((lvl, key[-1], path[-1]))
                    self.children.append([])
                    self.node_children.append([])
                    self.children[path[-1]].append(d)
                    self.by_level[lvl].append(d)
                path.append(d)
            self.node_children[path[-1]].append(i)
            self.anc.append(tuple(path))

    # -- capacity -------------------------------------------------------------------------------------------
    def _apply(self, i: int, requests: Iterable[tuple[str, int]], sign: int) -> None:
        live = [v for v in self.views.values() if v.ok[i]]
        for v in live:
            v.add(self, i, -1)
        f = self.free[i]
        for r, q in requests:
            f[r] = f.get(r, 0) - sign * q
        for v in live:
            v.add(self, i, 1)
        self.generation += 1

    def add_pod(self, pod: Pod) -> None:
        """Count a bound pod (replacing an earlier version with the same key)."""
        self.remove_pod(pod.key)
        i = self.index.get(pod.node)
        self.pods[pod.key] = pod
        if i is not None:
            self._apply(i, pod.requests, +1)

    def remove_pod(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None and (i := self.index.get(pod.node)) is not None:
            self._apply(i, pod.requests, -1)

    def assume(self, job: JobRequest, assignments: dict[str, list[int]]) -> None:
        """Reserve capacity for a placed gang (pod keys `<ns>/<name>#<replica>`) before the pods exist."""
        for node, ranks in assignments.items():
            for r in ranks:
                self.add_pod(Pod(f"{job.key}#{r}", node, job.requests))

    def forget(self, job: JobRequest) -> None:
        """Undo `assume` (a failed write rolls the whole gang back)."""
        prefix = f"{job.key}#"
        for k in [k for k in self.pods if k.startswith(prefix)]:
            self.remove_pod(k)

    # -- filters --------------------------------------------------------------------------------------------
    def view(self, job: JobRequest) -> View:
        sig = job.filter_signature()
        v = self.views.get(sig)
        if v is None:
            reasons: Counter = Counter()
            ok = []
            for n in self.nodes:
                why = filter_reason(n, job)
                ok.append(why is None)
                if why is not None:
                    reasons[why] += 1
            v = self.views[sig] = View(self, ok, reasons)
        return v

    def domain_label(self, d: int) -> str:
        lvl, name, _ = self.domains[d]
        return "cluster" if lvl == 0 else f"{self.levels[lvl - 1].name} {name}"

    def descendants(self, d: int) -> Iterable[int]:
        stack = [d]
        while stack:
            x = stack.pop()
            yield x
            stack.extend(self.children[x])

    def nodes_under(self, d: int) -> list[int]:
        return [i for x in self.descendants(d) for i in self.node_children[x]]

    def recount_ok(self) -> bool:
        """Invariant check for tests: every aggregate equals a from-scratch recount."""
        free = [dict(n.allocatable) for n in self.nodes]
        for p in self.pods.values():
            i = self.index.get(p.node)
            if i is not None:
                for r, q in p.requests:
                    free[i][r] = free[i].get(r, 0) - q
        if [{k: v for k, v in f.items() if v} for f in free] != [{k: v for k, v in f.items() if v} for f in self.free]:
            return False
        for v in self.views.values():
            fresh = View(self, v.ok, v.reasons)
            if fresh.hist != v.hist or fresh.count != v.count:
                return False
            if [+c for c in fresh.free] != [+c for c in v.free]:
                return False
        return True
