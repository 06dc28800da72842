"""Cluster snapshot: nodes, free capacity, the topology domain tree and per-filter aggregates.

Free = allocatable minus the requests of every bound non-terminal pod (whoever scheduled it). The domain tree has a
root (level 0), one level per ClusterTopology level except the node level, and nodes below the finest level; each
`Domain(level, name, parent)` has an integer id, and `ancestors[node]` lists a node's domain ids root to finest.
Aggregates (free per resource, histogram of nodes by free whole GPUs) are kept per *view*: the set of nodes that
pass one job's filters. Views are built lazily and updated incrementally on every add/remove of a pod.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from superpod.core.dra.book import POOLED_DRIVER, DeviceBook
from superpod.core.dra.model import DeviceID, node_selector_matches
from superpod.core.horizon import Horizon
from superpod.core.request import GPU, PODS, PRODUCT_LABEL, JobRequest, Taint

HOSTNAME = "kubernetes.io/hostname"
UNLABELLED = "?"  # prefix of the domain a node forms on its own at a level whose label it lacks
POOLED = "pooled#"  # the booking "pooled#<node>": GPUs DRA claims hold on a node whose nvidia.com/gpu they are too
# why a pod gang asking nvidia.com/gpu keeps off a node that serves it from DRA devices: kube-scheduler makes the claim
# that gives a pod those GPUs, and a pod this scheduler binds by name would run without them
SERVED_BY_DRA = "serving nvidia.com/gpu only to pods kube-scheduler binds (DRA devices): claim them instead"


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
    held: str = ""  # why the scheduler keeps it out of placement for now, e.g. "being repartitioned for MIG"
    served: bool = False  # its nvidia.com/gpu are served from its DRA devices (a DeviceClass's extendedResourceName)


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
    if node.held:
        return node.held
    if node.name in job.avoid_nodes:
        return "still terminating its earlier pods"
    for t in node.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in job.tolerations):
            return "tainted"
    if job.gpu_product and node.labels.get(PRODUCT_LABEL) != job.gpu_product:
        return "other GPU product"
    if any(node.labels.get(k) != v for k, v in job.node_selector):
        return "nodeSelector mismatch"
    if job.affinity and not any(all(r.matches(node.labels) for r in term) for term in job.affinity):
        return "node affinity mismatch"
    if node.served and job.binds_gpus_by_name:
        return SERVED_BY_DRA
    if job.shared_on and not all(node_selector_matches(_selector(s), node.name, node.labels) for s in job.shared_on):
        return "not where the ResourceClaim its pods share is allocated"
    return None


@functools.lru_cache(maxsize=1024)
def _selector(text: str) -> dict:
    """A node selector written as JSON (JobRequest.shared_on), read once."""
    return json.loads(text)


class View:
    """Aggregates over the nodes that pass one filter signature, per domain id."""

    def __init__(self, snap: Snapshot, eligible: list[bool], reasons: Counter):
        self.eligible = eligible  # per node: passes the filters
        self.reasons = reasons  # filter reason -> node count
        n_domains = len(snap.domains)
        top = snap.max_gpus_per_node
        self.gpu_histogram = [[0] * (top + 1) for _ in range(n_domains)]  # eligible nodes by free whole GPUs
        self.free: list[Counter] = [Counter() for _ in range(n_domains)]  # free resources of eligible nodes
        self.node_count = [0] * n_domains  # eligible nodes
        self.few_pods = [0] * n_domains  # eligible nodes with fewer free pod slots than a node has GPUs
        self.version = [0] * n_domains  # bumped on every change below a domain; keys the memo
        # (domain, gpus per replica) -> (version, GPU-bound capacity)
        self.capacity_memo: dict[tuple[int, int], tuple[int, int]] = {}
        # (domain, gpus per replica) -> (version, its children's capacities descending, the same in their order)
        self.children_memo: dict[tuple[int, int], tuple[int, list[int], list[int]]] = {}
        self.static: dict[tuple, object] = {}  # facts of the eligible nodes' allocatable and labels
        for d in range(n_domains):  # per finest domain from its nodes, then fold upwards
            for i in snap.child_nodes[d]:
                if eligible[i]:
                    free = snap.free[i]
                    self.gpu_histogram[d][min(max(free.get(GPU, 0), 0), top)] += 1
                    self.node_count[d] += 1
                    self.few_pods[d] += free.get(PODS, 0) < top
                    total = self.free[d]
                    for r, v in free.items():
                        if v > 0:
                            total[r] += v
        for level in range(len(snap.levels), 0, -1):
            for d in snap.domains_by_level[level]:
                parent = snap.domains[d].parent
                self.node_count[parent] += self.node_count[d]
                self.few_pods[parent] += self.few_pods[d]
                self.free[parent].update(self.free[d])
                self.gpu_histogram[parent] = [
                    a + b for a, b in zip(self.gpu_histogram[parent], self.gpu_histogram[d], strict=True)
                ]

    def add_node(self, snap: Snapshot, node: int, sign: int) -> None:
        """Add (sign 1) or remove (sign -1) an eligible node's free capacity in every domain above it."""
        free = snap.free[node]
        bucket = min(max(free.get(GPU, 0), 0), snap.max_gpus_per_node)
        few = sign if free.get(PODS, 0) < snap.max_gpus_per_node else 0
        for d in snap.ancestors[node]:
            self.version[d] += 1
            self.gpu_histogram[d][bucket] += sign
            self.node_count[d] += sign
            self.few_pods[d] += few
            total = self.free[d]
            for r, v in free.items():
                total[r] += sign * max(v, 0)


class Domain(NamedTuple):
    """A node of the topology tree: its depth (0 = the cluster root), label value and parent domain id (-1)."""

    level: int
    name: str
    parent: int


class Snapshot:
    """Nodes, pods and the domain tree. Mutate only through add_pod/remove_pod/assume/forget."""

    def __init__(self, nodes: Iterable[Node], topology: Topology | None = None, pods: Iterable[Pod] = ()):
        self.topology = topology or Topology()
        self.levels = self.topology.domain_levels
        self.nodes: list[Node] = sorted(nodes, key=lambda n: n.name)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.free: list[dict[str, int]] = [dict(n.allocatable) for n in self.nodes]
        self.max_gpus_per_node = max([n.allocatable.get(GPU, 0) for n in self.nodes] + [0])
        # per resource, the most one node has (ready or not): what one pod could ever be given. A node replaced in
        # place only raises it (a bound kept high errs on the side of a job claiming its place in a queue's order)
        self.largest: dict[str, int] = {}
        for node in self.nodes:
            self._widen(node)
        self.pods: dict[str, Pod] = {}
        self.assumed: set[str] = set()  # keys assume() and forget() changed (for the owner of a kept snapshot)
        self.spares: dict[str, Pod] = {}  # node -> the booking that keeps it free for replacements (core/spares.py)
        self.spare_runtime: float | None = None  # a job whose runtime limit is at most this may run on spares
        self.generation = 0  # bumped on every change of capacity
        # Capacity only ever taken since a job shape did not fit: it still does not. Kept here, so it lasts as long
        # as this snapshot (the cycle drops it when capacity is freed): (shape, reservations) -> its decision.
        self.unfit: dict[tuple, object] = {}  # the Decision it got (core/cycle.py)
        self.idle_answers: dict[tuple, object] = {}  # answers that read only nodes and topology, never pods
        self.horizon = Horizon()  # the predicted ends of what runs, and the clock (set by the cycle's owner)
        self.devices: DeviceBook | None = None  # the DRA devices (set by the cycle's owner: set_devices)
        self.pooled: set[int] = set()  # nodes whose nvidia.com/gpu and own DRA devices are one pool of GPUs (_pool)
        self._build_tree()
        self.views: dict[tuple, View] = {}
        self.view_jobs: dict[tuple, JobRequest] = {}  # filter signature -> a job of it (to filter a changed node)
        for p in pods:
            self.add_pod(p)

    def _build_tree(self) -> None:
        # Domain ids index domains, child_domains and child_nodes; ancestors[node] = domain ids, root to finest.
        self.domains: list[Domain] = [Domain(0, "cluster", -1)]
        self.child_domains: list[list[int]] = [[]]
        self.child_nodes: list[list[int]] = [[]]
        self.domains_by_level: list[list[int]] = [[0]] + [[] for _ in self.levels]
        ids: dict[tuple[str, ...], int] = {}
        self.ancestors: list[tuple[int, ...]] = []
        self._under: dict[int, tuple[int, ...]] = {}  # domain -> nodes_under it
        for i, n in enumerate(self.nodes):
            path: list[int] = [0]
            key: tuple[str, ...] = ()
            for level, lv in enumerate(self.levels, start=1):
                value = n.labels.get(lv.label)
                key = key + (value if value is not None else f"{UNLABELLED}{n.name}",)  # a domain of its own
                d = ids.get(key)
                if d is None:
                    d = ids[key] = len(self.domains)
                    self.domains.append(Domain(level, key[-1], path[-1]))
                    self.child_domains.append([])
                    self.child_nodes.append([])
                    self.child_domains[path[-1]].append(d)
                    self.domains_by_level[level].append(d)
                path.append(d)
            self.child_nodes[path[-1]].append(i)
            self.ancestors.append(tuple(path))
        below = [0] * len(self.domains)  # nodes under each domain
        for path in self.ancestors:
            for d in path:
                below[d] += 1
        # per level: the most nodes one domain of it holds (bounds how many domains a gang needs there)
        self.widest: list[int] = [max((below[d] for d in ds), default=0) for ds in self.domains_by_level]
        # each domain's place at its level: domains are in the order of their first node's name
        self.position: list[int] = [0] * len(self.domains)
        for ds in self.domains_by_level:
            for k, d in enumerate(ds):
                self.position[d] = k

    # -- capacity -------------------------------------------------------------------------------------------
    def _apply(self, node: int, requests: Iterable[tuple[str, int]], sign: int) -> None:
        live = [v for v in self.views.values() if v.eligible[node]]
        for v in live:
            v.add_node(self, node, -1)
        free = self.free[node]
        for r, q in requests:
            free[r] = free.get(r, 0) - sign * q
        for v in live:
            v.add_node(self, node, 1)
        self.generation += 1
        if sign < 0:
            self.unfit = {}

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

    def update(self, gone: Iterable[str], pods: Iterable[Pod]) -> None:
        """Remove pods and add or replace others as one change, each node's capacity moved once by what it nets (an
        assumed replica replaced by its pod moves nothing): what did not fit is forgotten only if some node ends with
        more of something free than before."""
        net: dict[int, dict[str, int]] = {}

        def move(pod: Pod, sign: int) -> None:
            if (i := self.index.get(pod.node)) is not None:
                change = net.setdefault(i, {})
                for r, q in pod.requests:
                    change[r] = change.get(r, 0) + sign * q

        for key in gone:
            if (pod := self.pods.pop(key, None)) is not None:
                move(pod, -1)
        for pod in pods:
            if (old := self.pods.pop(pod.key, None)) is not None:
                move(old, -1)
            self.pods[pod.key] = pod
            move(pod, 1)
        freed = False
        for i, change in net.items():
            if taken := [(r, q) for r, q in change.items() if q]:
                self._apply(i, taken, 1)  # (a negative amount taken is freed)
                freed = freed or any(q < 0 for _, q in taken)
        if freed:
            self.unfit = {}

    def _widen(self, node: Node) -> None:
        for resource, amount in node.allocatable.items():
            if amount > self.largest.get(resource, 0):
                self.largest[resource] = amount

    def replace_node(self, node: Node) -> bool:
        """Take a changed node in place: its allocatable, taints, readiness, cordon, hold and the labels the
        topology does not read, with every view's aggregates and filter counts. False when it cannot be done in place
        (a node not here, a topology label changed, a larger GPU count than any node had): build a new snapshot."""
        i = self.index.get(node.name)
        if i is None or node.allocatable.get(GPU, 0) > self.max_gpus_per_node:
            return False
        old = self.nodes[i]
        if any(old.labels.get(level.label) != node.labels.get(level.label) for level in self.levels):
            return False
        self._widen(node)
        for view in self.views.values():
            if view.eligible[i]:
                view.add_node(self, i, -1)
        free = self.free[i]
        for resource in old.allocatable.keys() | node.allocatable.keys():
            free[resource] = free.get(resource, 0) + node.allocatable.get(resource, 0) - old.allocatable.get(
                resource, 0)
        self.nodes[i] = node
        grew = any(amount > old.allocatable.get(resource, 0) for resource, amount in node.allocatable.items())
        refiltered = False  # a node cordoned, held or tainted: what did not fit still does not, but not for that reason
        for signature, view in self.views.items():
            job = self.view_jobs[signature]
            before, after = filter_reason(old, job), filter_reason(node, job)
            if before is not None:
                view.reasons[before] -= 1
                if view.reasons[before] <= 0:
                    del view.reasons[before]
            if after is not None:
                view.reasons[after] += 1
            view.eligible[i] = after is None
            grew |= before is not None and after is None
            refiltered |= before != after
            if view.eligible[i]:
                view.add_node(self, i, 1)
            if before != after or old.allocatable != node.allocatable or old.labels != node.labels:
                view.static = {}  # facts of the eligible nodes' allocatable and labels
        self.idle_answers = {}
        if grew or refiltered:  # what did not fit may now (a node offers more), or says why differently (a cordon)
            self.unfit = {}
        self.generation += 1
        return True

    def set_devices(self, book: DeviceBook | None) -> None:
        """Decide on these DRA devices from now on (what did not fit may now)."""
        if book is not self.devices:
            self.devices, self.unfit = book, {}
            self.generation += 1
            pooled_driver = set(book.gpu_nodes(POOLED_DRIVER)) if book is not None else set()
            both = {i for name in (book.gpu_nodes() if book is not None else ())
                    if (i := self.index.get(name)) is not None and self.nodes[i].allocatable.get(GPU, 0) > 0
                    and (self.nodes[i].served or name in pooled_driver)}
            self._pool(self.pooled | both, both)

    def _pool(self, nodes: Iterable[int], pooled: set[int] | None = None) -> None:
        """One pool of GPUs on a node that advertises nvidia.com/gpu and publishes its GPUs as NVIDIA's DRA driver's
        devices too (the same GPUs: the device plugin beside the DRA driver), or whose nvidia.com/gpu a DeviceClass
        serves from its DRA devices (Node.served: then the devices it serves from): the GPUs those devices' claims
        hold are booked as its nvidia.com/gpu (a booking keyed POOLED, DeviceBook.pool_gpus), and claims placed there
        fit its free nvidia.com/gpu too (Solver), so neither hands out a GPU the other holds. Other devices are GPUs
        of their own; the claims kube-scheduler makes for pods' nvidia.com/gpu are left out (DeviceBook.extended: the
        pods count them).
        `pooled`: the nodes pooled from now on (None: as they are)."""
        if pooled is not None:
            self.pooled = pooled
        for i in nodes:
            key, taken = f"{POOLED}{self.nodes[i].name}", 0
            if i in self.pooled and self.devices is not None:
                taken = math.ceil(self.devices.pool_gpus(self.nodes[i].name, self.devices.taken, self.nodes[i].served)
                                  - 1e-9)
            held = self.pods.get(key)
            if held is not None and held.requests == ((GPU, taken),):
                continue  # (unchanged: every view's aggregates stay as they are)
            if taken:
                self.add_pod(Pod(key, self.nodes[i].name, ((GPU, taken),)))
            else:
                self.remove_pod(key)

    def repool(self, names: Iterable[str]) -> None:
        """Book the one pool again on these nodes (those pooled among them), after their devices were freed or
        taken outside `assume` and `forget` (a trial without a preemption's victims)."""
        self._pool(i for name in names if (i := self.index.get(name)) in self.pooled)

    def published_gpus(self, name: str) -> tuple[float, tuple[DeviceID, ...]]:
        """The GPUs node `name`'s own DRA devices are (DeviceBook.own_gpus), and those devices."""
        own = self.devices.own_gpus(name) if self.devices is not None else ()
        return sum(units for _, units in own), tuple(device for device, _ in own)

    def assume(self, job: JobRequest, assignments: dict[str, list[int]]) -> None:
        """Reserve capacity for a placed gang (pod keys `<its key's text>#<rank>`: a TrainingJob's and a pod gang's of
        one name never meet), each member's own requests, before the pods exist; and its claims' devices, allocated
        node by node (`devices.booked`; a node whose allocation fails is booked as its Shortfall)."""
        if (job.claims or job.shared) and self.devices is not None:
            for node, ranks in assignments.items():
                self.devices.book(job.key.text, node, job.claims, len(ranks), job.shared)
            self._pool(i for node in assignments if (i := self.index.get(node)) in self.pooled)
        for node, ranks in assignments.items():
            for r in ranks:
                self.add_pod(Pod(f"{job.key.text}#{r}", node, job.member_requests(r)))
                self.assumed.add(f"{job.key.text}#{r}")

    def forget(self, job: JobRequest) -> None:
        """Undo `assume` (a failed write rolls the whole gang back)."""
        prefix = f"{job.key.text}#"
        if self.devices is not None:
            booked = self.devices.booked_nodes(job.key.text)
            self.devices.release(job.key.text)
            self._pool(i for node in booked if (i := self.index.get(node)) in self.pooled)
        for k in [k for k in self.pods if k.startswith(prefix)]:
            self.remove_pod(k)
            self.assumed.add(k)

    # -- filters --------------------------------------------------------------------------------------------
    def view(self, job: JobRequest) -> View:
        sig = job.filter_signature()
        v = self.views.get(sig)
        if v is None:
            reasons: Counter = Counter()
            eligible = []
            for n in self.nodes:
                why = filter_reason(n, job)
                eligible.append(why is None)
                if why is not None:
                    reasons[why] += 1
            v = self.views[sig] = View(self, eligible, reasons)
            self.view_jobs[sig] = job
        return v

    def domain_label(self, d: int) -> str:
        level, name, _ = self.domains[d]
        if name.startswith(UNLABELLED):
            return f"node {name[len(UNLABELLED):]}"
        return "cluster" if level == 0 else f"{self.levels[level - 1].name} {name}"

    def descendants(self, d: int) -> Iterable[int]:
        stack = [d]
        while stack:
            x = stack.pop()
            yield x
            stack.extend(self.child_domains[x])

    def nodes_under(self, d: int) -> tuple[int, ...]:
        """The nodes below domain `d`, kept: the tree is the snapshot's for its life."""
        under = self._under.get(d)
        if under is None:
            under = self._under[d] = tuple(i for x in self.descendants(d) for i in self.child_nodes[x])
        return under

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
            fresh = View(self, v.eligible, v.reasons)
            if fresh.gpu_histogram != v.gpu_histogram or fresh.node_count != v.node_count:
                return False
            if [+c for c in fresh.free] != [+c for c in v.free]:
                return False
        return True
