"""Exact topology-aware gang placement.

Objective, lexicographic: (1) `required` and every slice constraint hold; (2) fewest domains used at each level,
coarsest first, ending with nodes; (3) among equals, first fit among domains and best fit among nodes: the least sum
of the chosen domains' places at their level (a level's domains in the order of their first node's name), coarsest
level first, then the least free capacity of the job's primary resource (GPUs, else its MIG slice, else cpu) summed
over the chosen nodes. (3) fills the first leaves, and their tightest nodes, so the last leaves stay whole for the
next big gang. `fit=BEST_FIT` (a study policy, core/baselines.py) takes instead, at every level, the least free
capacity over the chosen domains (the tightest domains). `preferred` needs no extra rule: (2) already keeps a job
inside one domain of any level whenever that is possible at all.

The cost of a solution is one integer: the components above as digits of base 2**48, so costs add and compare as
plain ints. Because the cost is additive over subtrees, a min-plus knapsack over children is exact. Search runs top
down: a domain that one child can hold alone needs only its best single child, otherwise we combine children's full
cost arrays. Candidate domains are visited best first by a lower bound on their cost: first the cheap one (the
child's own cost plus what any child of its level must add), then, when that comes first, the full one from
per-domain aggregates (domains, nodes and fit terms needed below it); a domain whose bound cannot beat the best found
is never searched.

Explanations and reservations ask the Solver questions (slots, room, ...) instead of reading its fields.

Exactness has one limit: a combination step whose work (sum of child capacities x replicas) exceeds `budget` keeps
only the largest children (a few more than the fewest that could hold the gang). That happens only for gangs far
larger than any single domain (e.g. 300 x 8 GPUs over fragmented spines is still exact); the placement is feasible
and says `exact=False`.

A gang whose members differ (a pod gang's launcher or parameter server: JobRequest.others) is placed in two steps.
Its identical members are placed exactly as above, with every topology rule; then each other member, largest first,
goes to a node with room after them, inside the same required domain (the same node, when a node is required): the
node that adds the fewest domains at each level, coarsest first (the tightest domain the identical members got, then
the next level up), then the tightest fit of its own primary resource. A required domain (or node) whose best
placement leaves the others no room is passed over for the next best. Slices count identical members only. This is
exact for the identical members, greedy for the others (their nodes are not weighed against the identical members'
placement); when the others find no room at all, the gang is placed as if every member asked for the largest request
(JobRequest.at_largest), so a gang that booking places is always placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from itertools import repeat
from operator import add
from typing import TypeVar

from superpod.core.gang_key import GangKey
from superpod.core.model import Snapshot, View
from superpod.core.request import GPU, PODS, JobRequest, gpu_units, primary_of

FIRST_FIT = "first"  # (3) at the domain levels: the first domains in order; at the node level: the best fit
BEST_FIT = "best"  # (3) at every level: the least free capacity
INF = 1 << 1000  # anything >= INF is infeasible; finite costs stay far below (48 bits x 2 x levels)
BASE_BITS = 48
KEEP_EXTRA = 2  # children kept beyond the minimum when a combination step is over budget
T = TypeVar("T")
DEVICES = "devices"  # what a node short of the DRA devices a member claims is short of (shortages)


@dataclass(frozen=True)
class Placement:
    job: GangKey
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
    for what, level in (
        ("required", job.required),
        ("preferred", job.preferred),
        ("sliceRequired", job.slice_required),
    ):
        if level is not None and topo.index(level) is None:
            return (
                f"topology.{what} names level {level!r}, which the ClusterTopology does not define ({', '.join(names)})"
            )
    if (job.slice_size is None) != (job.slice_required is None):
        return "topology.sliceSize and topology.sliceRequired must be set together"
    if job.slice_size is not None:
        if job.slice_size < 1:
            return f"topology.sliceSize must be at least 1, got {job.slice_size}"
        if job.replicas % job.slice_size:
            return f"replicas ({job.replicas}) must be a multiple of topology.sliceSize ({job.slice_size})"
    if any(amount < 0 for requests in (job.requests, *job.others) for _, amount in requests):
        return "resource requests must not be negative"
    return None


class Solver:
    """One placement attempt of one job on one snapshot. `exclude`: domain ids (with subtrees) not to use;
    `exclude_nodes`: node indexes not to use (reservations). `budget`: see _children_table. `fit`: FIRST_FIT or
    BEST_FIT, the objective's (3) among domains.

    Levels are tree depths: 0 the cluster root, 1..finest_level the domain levels, node_level the nodes. Besides
    solve(), explain and cycle ask it only the questions below and read snap, job and the *_level attributes."""

    def __init__(
        self,
        snap: Snapshot,
        job: JobRequest,
        exclude: frozenset[int] = frozenset(),
        budget: int = 2_000_000,
        exclude_nodes: frozenset[int] = frozenset(),
        fit: str = FIRST_FIT,
    ):
        self.snap = snap
        self.job = job
        self.exclude = exclude
        self.view: View = snap.view(job)
        self.replicas = job.replicas
        self.finest_level = len(snap.levels)
        self.node_level = self.finest_level + 1
        topo = snap.topology
        self.required_level = topo.index(job.required) if job.required else 0  # 0: anywhere
        if job.shared:  # a claim its pods share is allocated on one node: the whole gang goes there
            self.required_level = self.node_level
        slice_level = topo.index(job.slice_required) if job.slice_required else None
        self.slice_size = job.slice_size or 1
        binds = slice_level is not None and slice_level > self.required_level and self.slice_size > 1
        self.slice_level = slice_level if binds else None  # each domain of this level holds whole slices
        self.node_step = self.slice_size if self.slice_level == self.node_level else 1  # replicas per node: multiples
        self.requests = [(r, v) for r, v in job.requests if v > 0]
        self.claims = job.claims  # DRA claims of each identical member: the node's devices must take them too
        self.shared = job.shared  # DRA claims the gang shares, allocated once on its node before the members'
        self.claiming = bool(job.claims or job.shared)
        # GPUs each member takes of a node whose nvidia.com/gpu and devices are one pool (Snapshot._pool): its claims'
        # only when a class they name may select the pool's devices (DeviceBook.pool_classes)
        pooling = snap.devices is not None and not snap.devices.pool_classes.isdisjoint(job.gpu_classes)
        self.claims_pool = pooling and job.claimed_per_member > 0
        self.pooled_share = dict(job.requests).get(GPU, 0) + (job.claimed_per_member if pooling else 0.0)
        self.gpus_per_replica = job.gpus
        self.primary = job.primary
        self.primary_per_replica = dict(self.requests).get(self.primary, 0)  # requests are positive
        # the other members' requests, by rank after the identical ones
        self.others = [[(r, v) for r, v in requests if v > 0] for requests in job.others] if job.others else []
        depth = self.node_level
        self.count_weight = [0] + [1 << (BASE_BITS * (2 * depth - i)) for i in range(1, depth + 1)]  # per level
        self.fit_weight = [0] + [1 << (BASE_BITS * (depth - i)) for i in range(1, depth + 1)]  # per level
        self.fit = fit
        self.first_fit = fit == FIRST_FIT
        self.excluded_domains: set[int] = set()
        for d in exclude:
            self.excluded_domains.update(snap.descendants(d))
        self.excluded_nodes = exclude_nodes
        # free GPUs alone decide a domain's room now where no node is short of pod slots: the view's aggregates
        # answer room() without visiting nodes
        self.room_by_gpus = (self.primary == GPU and {r for r, _ in self.requests} <= {GPU, PODS}
                             and dict(self.requests).get(PODS, 1) == 1 and self.slice_level is None
                             and not (exclude_nodes or self.excluded_domains))
        self._slots: dict[int, int] = {}
        self._tables: dict[tuple[int, int], _Table] = {}
        self._floors: dict[tuple[int, int], int] = {}
        self.budget = budget
        self.exact = True  # False if a combination step had to drop children to stay within `budget`

    def refit(self, fit: str) -> Solver:
        """This solver, or a fresh one for the same question under the objective `fit`."""
        if fit == self.fit:
            return self
        return Solver(self.snap, self.job, self.exclude, self.budget, self.excluded_nodes, fit)

    # -- questions (also asked by explain and cycle) --------------------------------------------------------
    def is_open(self, node: int) -> bool:
        """Whether the gang may use `node`: it passes the job's filters and is not excluded."""
        return self.view.eligible[node] and node not in self.excluded_nodes and not (
            self.excluded_domains and self.snap.ancestors[node][-1] in self.excluded_domains)

    def slots(self, node: int) -> int:
        """Replicas that fit on `node` now (0 if filtered out or excluded), capped at the gang size."""
        k = self._slots.get(node)
        if k is None:
            if (  # is_open, inlined: asked for every node a search looks at
                not self.view.eligible[node]
                or node in self.excluded_nodes
                or (self.excluded_domains and self.snap.ancestors[node][-1] in self.excluded_domains)
            ):
                k = 0
            else:
                free = self.snap.free[node]
                k = self.replicas
                for r, v in self.requests:
                    fit = free.get(r, 0) // v
                    if fit < k:
                        k = max(fit, 0)
                if self.claiming and k:
                    k = self._device_slots(node, k, idle=False)
            self._slots[node] = k
        return k

    def idle_slots(self, node: int) -> int:
        """Replicas that would fit on `node` if no pod ran on it (0 if filtered out or excluded)."""
        if not self.is_open(node):
            return 0
        alloc = self.snap.nodes[node].allocatable
        k = min([self.replicas] + [alloc.get(r, 0) // v for r, v in self.requests])
        return self._device_slots(node, k, idle=True) if self.claiming and k else k

    def _device_slots(self, node: int, limit: int, idle: bool) -> int:
        """Pods whose claims the node's DRA devices take (free ones, or all if `idle`), at most `limit`; on a node
        whose nvidia.com/gpu are the same GPUs (Snapshot._pool), at most as many as its free ones hold too."""
        devices = self.snap.devices
        if node in self.snap.pooled and self.claims_pool:
            gpus = (self.snap.nodes[node].allocatable if idle else self.snap.free[node]).get(GPU, 0)
            limit = min(limit, int(gpus / self.pooled_share + 1e-9))
            if not limit:
                return 0
        return 0 if devices is None else devices.slots(self.snap.nodes[node].name, self.claims, limit, idle,
                                                       self.shared)

    def node_room(self, node: int, idle: bool = False) -> int:
        """Replicas `node` could hold now (or `idle`: if no pod ran), slices of one node respected."""
        step = self.node_step
        return (self.idle_slots(node) if idle else self.slots(node)) // step * step

    def room(self, domain: int, idle: bool = False) -> int:
        """Most replicas `domain` could hold on its own now (or `idle`: if no pod ran), slices respected."""
        if self.room_by_gpus and not idle and not self.view.few_pods[domain]:
            return self._capacity_bound(domain)
        slots = self.idle_slots if idle else self.slots
        size, slice_level, ancestors = self.slice_size, self.slice_level, self.snap.ancestors
        total = 0
        per_slice_domain: Counter = Counter()
        for i in self.snap.nodes_under(domain):
            k = slots(i)
            if not k:
                continue
            if slice_level is None:
                total += k
            elif slice_level == self.node_level:
                total += (k // size) * size
            else:
                per_slice_domain[ancestors[i][slice_level]] += k
        total += sum((v // size) * size for v in per_slice_domain.values())
        return min(total, self.replicas)

    def best_room(self, domains: list[int], idle: bool = False) -> tuple[int, int]:
        """(domain, room) with the most room among `domains`: exact, visiting domains in upper-bound order."""
        bound = self._idle_bound if idle else self._capacity_bound
        best, arg = -1, domains[0] if domains else 0
        for upper, d in sorted(((bound(d), d) for d in domains), key=lambda x: (-x[0], x[1])):
            if upper <= best:
                break
            r = self.room(d, idle)
            if r > best:
                best, arg = r, d
        return arg, max(best, 0)

    def could_ever_hold(self, domain: int) -> bool:
        """Whether `domain` alone could hold the gang if no pod ran (on one of its nodes, if one node is required;
        the other members: if its open nodes' allocatable covers the whole gang's requests)."""
        gang = self.replicas
        if self._idle_bound(domain) < gang or self.room(domain, idle=True) < gang:
            return False
        if self.others and not self.covers(self.idle_capacity(self.snap.nodes_under(domain))):
            return False
        if self.required_level == self.node_level:
            return any(self.idle_slots(i) >= gang for i in self.snap.nodes_under(domain))
        return True

    def remembered(self, question: tuple, answer: Callable[[], T]) -> T:
        """`answer()`, for a question that reads only the nodes, the topology and the job's request, never pods:
        kept on the snapshot until a node changes (Snapshot.idle_answers), unless something is excluded."""
        if self.excluded_domains or self.excluded_nodes:
            return answer()
        job = self.job
        key = (question, job.replicas, job.requests, job.others, job.filter_signature(), job.required,
               job.slice_size, job.slice_required, job.claims, job.shared)
        known = self.snap.idle_answers.get(key, self)
        if known is self:
            known = self.snap.idle_answers[key] = answer()
        return known

    def idle_capacity(self, nodes: Iterable[int]) -> Counter:
        """The allocatable of those of `nodes` the gang may use, summed."""
        total: Counter = Counter()
        for i in nodes:
            if self.is_open(i):
                total.update(self.snap.nodes[i].allocatable)
        return total

    def covers(self, capacity: Counter) -> bool:
        """Whether `capacity` holds every resource the whole gang asks for."""
        return all(capacity[resource] >= amount for resource, amount in self.job.total_requests.items())

    def domains_at(self, level: int) -> list[int]:
        """The domains of `level` not excluded."""
        return [d for d in self.snap.domains_by_level[level] if d not in self.excluded_domains]

    def free_primary(self, domain: int) -> int:
        """Free amount of the job's primary resource on the eligible nodes of `domain`."""
        return self.view.free[domain][self.primary]

    def node_free_primary(self, node: int) -> int:
        """Free amount of the job's primary resource on `node` (0 if overcommitted)."""
        return max(self.snap.free[node].get(self.primary, 0), 0)

    def shortages(self) -> Counter:
        """Eligible nodes without room for one replica now, by (resource short first, even when idle?)."""
        short: Counter = Counter()
        gpus = self.gpus_per_replica
        if gpus > 0:  # from the aggregates: nodes with fewer free GPUs than one replica needs ...
            histogram = self.view.gpu_histogram[0]
            short[(GPU, False)] = sum(histogram[: min(gpus, len(histogram))])
            short.update(self._too_small())  # ... and nodes too small for the rest even when idle
            return short
        snap = self.snap
        for i, eligible in enumerate(self.view.eligible):
            if eligible and self.slots(i) == 0:
                free, alloc = snap.free[i], snap.nodes[i].allocatable
                for r, v in self.requests:
                    if free.get(r, 0) < v:
                        short[(r, alloc.get(r, 0) < v)] += 1
                        break
                else:
                    if self.claiming:
                        short[(DEVICES, self.idle_slots(i) == 0)] += 1
        return short

    def _too_small(self) -> Counter:
        """Eligible nodes with enough GPUs whose allocatable is below another request (cpu, memory, rdma/ib...):
        static for a view, so counted once per request shape."""
        key = ("too-small", tuple(self.requests))
        found = self.view.static.get(key)
        if found is None:
            found = Counter()
            others = [(r, v) for r, v in self.requests if r != GPU]
            for i, eligible in enumerate(self.view.eligible):
                alloc = self.snap.nodes[i].allocatable
                if eligible and alloc.get(GPU, 0) >= self.gpus_per_replica:
                    short = next((r for r, v in others if alloc.get(r, 0) < v), None)
                    if short is not None:
                        found[(short, True)] += 1
            self.view.static[key] = found
        return found

    # -- bounds and costs -----------------------------------------------------------------------------------
    def _capacity_bound(self, domain: int) -> int:
        """Upper bound on replicas `domain` can hold (exact when GPUs are the binding resource)."""
        if domain in self.excluded_domains:
            return 0
        if self.gpus_per_replica <= 0:
            return self.replicas if self.view.node_count[domain] else 0
        return min(self.replicas, self._gpu_capacity(domain))

    def _idle_bound(self, domain: int) -> int:
        """Upper bound on room(domain, idle=True)."""
        if domain in self.excluded_domains:
            return 0
        eligible, gpus = self.view.node_count[domain], self.gpus_per_replica
        if gpus <= 0:
            return self.replicas if eligible else 0
        return min(self.replicas, eligible * (self.snap.max_gpus_per_node // gpus))

    def _gpu_capacity(self, domain: int) -> int:
        """Replicas `domain` holds by free GPUs alone, memoised."""
        view, gpus = self.view, self.gpus_per_replica
        memo = view.capacity_memo.get((domain, gpus))
        if memo is None or memo[0] != view.version[domain]:
            histogram = view.gpu_histogram[domain]
            memo = view.capacity_memo[(domain, gpus)] = (
                view.version[domain], sum(histogram[h] * (h // gpus) for h in range(gpus, len(histogram))))
        return memo[1]

    def _children_capacities(self, domain: int) -> tuple[list[int], list[int]]:
        """_gpu_capacity of `domain`'s children, descending and in their order, memoised (apart from its own
        capacity: most questions need only that)."""
        view, gpus = self.view, self.gpus_per_replica
        memo = view.children_memo.get((domain, gpus))
        if memo is None or memo[0] != view.version[domain]:
            children = [self._gpu_capacity(c) for c in self.snap.child_domains[domain]]
            memo = view.children_memo[(domain, gpus)] = (view.version[domain], sorted(children, reverse=True),
                                                         children)
        return memo[1], memo[2]

    def _child_bounds(self, domain: int) -> list[int]:
        """_capacity_bound of each child of `domain`, in the order of snap.child_domains, uncapped by the gang's size
        where free GPUs bind (compare them only with amounts up to the gang's size)."""
        if self.gpus_per_replica <= 0 or self.excluded_domains:
            return [self._capacity_bound(c) for c in self.snap.child_domains[domain]]
        return self._children_capacities(domain)[1]

    def _domain_cost(self, domain: int) -> int:
        """Cost of using `domain`: one domain at its level plus its place there (first fit) or its free primary
        resource (best fit)."""
        level = self.snap.domains[domain].level
        fit = self.snap.position[domain] if self.first_fit else self.view.free[domain][self.primary]
        return self.count_weight[level] + fit * self.fit_weight[level]

    def _node_cost(self, node: int) -> int:
        """Cost of using `node`: one node plus its free primary resource (best fit)."""
        level = self.node_level
        return self.count_weight[level] + max(self.snap.free[node].get(self.primary, 0), 0) * self.fit_weight[level]

    def _lower_bound(self, domain: int, amount: int) -> int:
        """Lower bound on _domain_cost(domain) + the best cost of `amount` replicas inside it. Below `domain`, each
        level uses at least one domain (`need` children at the next, `nodes` nodes at the last), each holding a node
        with at least `fit` free GPUs (the fewest free of a node that can take a replica), and together at least the
        gang's primary resource; under first fit, the `need` domains of each level below sit in distinct places from
        that of the first domain of the level under `domain`. Without those fit terms, every domain tied with the
        best on the coarser terms was searched in full (a burst of gangs on an idle fleet)."""
        level = self.snap.domains[domain].level
        weight, gpus = self.count_weight, self.gpus_per_replica
        bound = self._domain_cost(domain) + sum(weight[level + 1 : self.node_level])
        need = 1
        if level < self.finest_level:  # children needed at the next level, from their upper bounds
            if gpus > 0 and not self.excluded_domains:
                capacities = self._children_capacities(domain)[0]
            else:
                capacities = sorted((self._capacity_bound(c) for c in self.snap.child_domains[domain]), reverse=True)
            need, held = 0, 0
            for c in capacities:
                if held >= amount:
                    break
                held += c
                need += 1
            need = max(need, 1)
            bound += (need - 1) * weight[level + 1]
        nodes, fit = 1, 0
        if gpus > 0:  # nodes needed, from the free-GPU histogram
            held, nodes = 0, 0
            histogram = self.view.gpu_histogram[domain]
            for h in range(len(histogram) - 1, gpus - 1, -1):
                per = min(h // gpus, amount)
                c = histogram[h]
                if held + c * per >= amount:
                    nodes += -(-(amount - held) // per)
                    held = amount
                    break
                held += c * per
                nodes += c
            nodes = max(nodes, 1)
            fit = next((h for h in range(gpus, len(histogram)) if histogram[h]), gpus)
        total, fit_weight, position = amount * self.primary_per_replica, self.fit_weight, self.snap.position
        for below in range(level + 1, self.node_level + 1):
            if below == self.node_level:
                bound += max(total, nodes * fit) * fit_weight[below]
            elif self.first_fit:  # a domain's first descendant at each level is built with it: ids domain + 1, ...
                first = position[domain + below - level]
                bound += (need * first + need * (need - 1) // 2) * fit_weight[below]
            else:
                bound += max(total, (need if below == level + 1 else 1) * fit) * fit_weight[below]
        return bound + nodes * weight[self.node_level]

    def _floor(self, level: int, amount: int) -> int:
        """The part of _lower_bound that is the same for every domain of `level`: at each level below, the domains
        (and nodes) the gang needs if each were as wide as the widest and its nodes as large as the largest, and the
        gang's primary resource free (first fit: that many domains in the first places). Candidates are visited in the
        order of their own cost plus it, their full bound computed only when that comes first: computing it for every
        leaf of a fleet first was most of a placement's time."""
        key = (level, amount)
        floor = self._floors.get(key)
        if floor is None:
            snap, gpus = self.snap, self.gpus_per_replica
            per_node = snap.max_gpus_per_node // gpus if gpus > 0 else 0
            free = amount * self.primary_per_replica
            floor = 0
            for below in range(level + 1, self.node_level + 1):
                nodes = 1 if below == self.node_level else snap.widest[below]
                used = -(-amount // (nodes * per_node)) if per_node and nodes else 1
                fit = used * (used - 1) // 2 if self.first_fit and below < self.node_level else free
                floor += used * self.count_weight[below] + fit * self.fit_weight[below]
            self._floors[key] = floor
        return floor

    # -- search ---------------------------------------------------------------------------------------------
    def _several_nodes(self, amount: int) -> bool:
        """Whether `amount` replicas need more than one node, even of the largest."""
        gpus = self.gpus_per_replica
        return amount > (self.snap.max_gpus_per_node // gpus if gpus > 0 else 1)

    def _best_in(self, domain: int, amount: int) -> tuple[int, list[tuple[int, int]]] | None:
        """Best (cost below `domain`, [(node, replicas)]) for exactly `amount` replicas inside `domain`."""
        level = self.snap.domains[domain].level
        if level == self.finest_level:
            return self._best_from_table(domain, amount)
        floor = self._floor(level + 1, amount)
        children = [(self._domain_cost(c) + floor, c)
                    for c, bound in zip(self.snap.child_domains[domain], self._child_bounds(domain), strict=True)
                    if bound >= amount]
        best: tuple[int, int, list[tuple[int, int]]] | None = None  # (cost, child, parts)

        def known() -> tuple[int, int] | None:
            return best[:2] if best is not None else None

        for child in _best_first(children, lambda c: self._lower_bound(c, amount), known, self._several_nodes(amount)):
            found = self._best_in(child, amount)
            if found is not None and (level + 1 != self.slice_level or amount % self.slice_size == 0):
                cost = found[0] + self._domain_cost(child)
                if best is None or (cost, child) < best[:2]:
                    best = (cost, child, found[1])
        return (best[0], best[2]) if best is not None else self._best_from_table(domain, amount)

    def _best_from_table(self, domain: int, amount: int) -> tuple[int, list[tuple[int, int]]] | None:
        table = self._table(domain, amount)
        cost = table.cost[amount]
        return (cost, table.pick(amount)) if cost < INF else None

    def _table(self, domain: int, most: int) -> _Table:
        """Cost of placing 0..`most` replicas inside `domain`, for every amount (INF where impossible)."""
        key = (domain, most)
        table = self._tables.get(key)
        if table is None:
            level = self.snap.domains[domain].level
            if level == self.finest_level:
                table = self._nodes_table(domain, most)
            else:
                table = self._children_table(domain, most)
            if level == self.slice_level:
                table.cost = [v if y % self.slice_size == 0 else INF for y, v in enumerate(table.cost)]
            self._tables[key] = table
        return table

    def _children_table(self, domain: int, most: int) -> _ChildrenTable:
        cost = [0] + [INF] * most
        steps: list[tuple[_Table, int, list[int]]] = []
        children = [(min(most, bound), c)
                    for c, bound in zip(self.snap.child_domains[domain], self._child_bounds(domain), strict=True)]
        children = [(capacity, c) for capacity, c in children if capacity > 0]
        if sum(capacity for capacity, _ in children) * most > self.budget:
            # Too big to combine exactly in Python time: keep the largest children, a few more than the fewest
            # that could hold `most`. Still feasible and usually optimal, but no longer proven: flag it.
            children.sort(key=lambda x: (-x[0], x[1]))
            need, held = 0, 0
            while need < len(children) and held < most:
                held += children[need][0]
                need += 1
            if need + KEEP_EXTRA < len(children):
                children = children[: need + KEEP_EXTRA]
                self.exact = False
        reach = 0  # amounts above this are still INF
        domains = self.snap.domains
        for capacity, child in sorted(children, key=lambda x: domains[x[1]].name):
            child_table = self._table(child, capacity)
            use = self._domain_cost(child)
            options = [(k, v + use) for k, v in enumerate(child_table.cost) if k and v < INF]
            if not options:
                continue
            new = cost[:]
            for k, option in options:  # min-plus step over the reachable amounts, element-wise in C via map()
                hi = min(most - k, reach)
                new[k : k + hi + 1] = map(min, new[k : k + hi + 1], map(add, cost[: hi + 1], repeat(option)))
            steps.append((child_table, use, cost))
            cost = new
            reach = min(most, reach + capacity)
        return _ChildrenTable(cost, steps)

    def _nodes_table(self, domain: int, most: int) -> _NodesTable:
        step = self.node_step
        top = most // step  # knapsack state: units of `step` replicas covered, capped at `top`
        classes: dict[tuple[int, int], list[int]] = {}  # (units a node holds, its cost) -> nodes
        for i in self.snap.child_nodes[domain]:
            k = min(self.slots(i) // step, top)
            if k > 0:
                classes.setdefault((k, self._node_cost(i)), []).append(i)
        # 0/1 knapsack over bundles of identical nodes (binary split)
        cost = [0] + [INF] * top
        bundles: list[tuple[int, int, list[int], list[int]]] = []  # (units, price, nodes, cost array before)
        nodes = self.snap.nodes
        for (k, node_cost), members in sorted(classes.items()):
            members.sort(key=lambda i: nodes[i].name)
            pos, size = 0, 1
            while pos < len(members):
                take = members[pos : pos + size]
                pos += len(take)
                size *= 2
                units, price = k * len(take), node_cost * len(take)
                before = cost
                cost = before[:]
                for c in range(top + 1):
                    v = before[c]
                    if v < INF:
                        to = min(top, c + units)
                        if v + price < cost[to]:
                            cost[to] = v + price
                bundles.append((units, price, take, before))
        # suffix minimum: covering at least u units
        best, arg = INF, top
        cover = [INF] * (top + 1)
        cover_state = [0] * (top + 1)
        for c in range(top, -1, -1):
            if cost[c] < best:
                best, arg = cost[c], c
            cover[c], cover_state[c] = best, arg
        by_amount = [INF] * (most + 1)
        for u in range(top + 1):
            by_amount[u * step] = cover[u]
        return _NodesTable(by_amount, self, bundles, cost, cover_state)


class _Table:
    """cost[y]: the least cost of y replicas inside one domain (INF where impossible); pick(y) rebuilds it."""

    def __init__(self, cost: list[int]):
        self.cost = cost

    def pick(self, y: int) -> list[tuple[int, int]]:
        """[(node, replicas)] in topology order for y replicas."""
        raise NotImplementedError


class _ChildrenTable(_Table):
    def __init__(self, cost: list[int], steps: list[tuple[_Table, int, list[int]]]):
        super().__init__(cost)
        self.steps = steps  # per child combined, in order: (its table, its domain cost, the cost array before it)

    def pick(self, y: int) -> list[tuple[int, int]]:
        parts = []
        after = self.cost
        for child_table, use, before in reversed(self.steps):
            if before[y] != after[y]:  # this child was used: find how many replicas it took
                child_cost = child_table.cost
                k = next(
                    k
                    for k in range(1, min(y, len(child_cost) - 1) + 1)
                    if before[y - k] + child_cost[k] + use == after[y]
                )
                parts.append(child_table.pick(k))
                y -= k
            after = before
        return [x for p in reversed(parts) for x in p]


class _NodesTable(_Table):
    def __init__(
        self,
        cost: list[int],
        solver: Solver,
        bundles: list[tuple[int, int, list[int], list[int]]],
        final: list[int],
        cover_state: list[int],
    ):
        super().__init__(cost)
        self.solver = solver
        self.bundles = bundles  # the knapsack's items: (units, cost, nodes, cost array before)
        self.final = final  # cost array after every bundle, by units covered
        self.cover_state = cover_state  # units covered -> the cheapest state covering at least that many

    def pick(self, y: int) -> list[tuple[int, int]]:
        if y == 0:
            return []
        step = self.solver.node_step
        c = self.cover_state[y // step]
        chosen: list[int] = []
        after = self.final
        for units, price, take, before in reversed(self.bundles):
            if after[c] != before[c]:  # this bundle was used: step back to its predecessor state
                top = len(before) - 1
                candidates = [c - units] if c < top else range(max(0, c - units), c + 1)
                c = next(p for p in candidates if p >= 0 and before[p] < INF and before[p] + price == after[c])
                chosen.extend(take)
            after = before
        return _spread(self.solver, chosen, y, step)


def _spread(solver: Solver, chosen: list[int], y: int, step: int) -> list[tuple[int, int]]:
    """Give each chosen node one step of replicas, then fill in name order up to its slots."""
    nodes = solver.snap.nodes
    chosen.sort(key=lambda i: nodes[i].name)
    amount = dict.fromkeys(chosen, step)
    left = y - step * len(chosen)
    for i in chosen:
        if left <= 0:
            break
        extra = min(left, (solver.slots(i) // step) * step - amount[i])
        amount[i] += extra
        left -= extra
    assert left == 0, "node table inconsistent"
    return [(i, amount[i]) for i in chosen]


def place(snap: Snapshot, job: JobRequest, exclude: frozenset[int] = frozenset(),
          fit: str = FIRST_FIT) -> Placement | None:
    """The best placement of the whole gang, or None when no feasible placement exists (see explain.py)."""
    if validate(snap, job) is not None:
        return None
    return solve(Solver(snap, job, exclude, fit=fit))


def solve(sv: Solver) -> Placement | None:
    """The best placement for the solver's job, or None when there is none (no validation: see place)."""
    found = _best(sv)
    if found is not None:
        return placement_of(sv, *found)
    largest = sv.job.at_largest()  # every slot fits every member: placed when today's booking is
    if largest is sv.job or sv._capacity_bound(0) < sv.replicas or validate(sv.snap, largest) is not None:
        return None
    return solve(Solver(sv.snap, largest, sv.exclude, sv.budget, sv.excluded_nodes, sv.fit))


def _best(sv: Solver) -> tuple[list[tuple[int, int]], int, dict[int, int]] | None:
    """The best ([(node, identical replicas)], required domain or 0, {rank: node} of the other members) whose other
    members find room (_place_others), or None."""
    snap, replicas = sv.snap, sv.replicas
    if sv._capacity_bound(0) < replicas:
        return None
    # (cost, the candidate's id: ties go to the lowest, parts, domain, others)
    best: tuple[int, int, list[tuple[int, int]], int, dict[int, int]] | None = None

    def consider(cost: int, candidate: int, parts: list[tuple[int, int]], domain: int) -> None:
        nonlocal best
        if best is None or (cost, candidate) < best[:2]:
            others = _place_others(sv, parts, domain)
            if others is not None:
                best = (cost, candidate, parts, domain, others)

    if sv.required_level == sv.node_level:
        for i in range(len(snap.nodes)):
            if sv.slots(i) >= replicas:
                consider(sv._node_cost(i) + sum(sv._domain_cost(a) for a in snap.ancestors[i][1:]), i,
                         [(i, replicas)], snap.ancestors[i][-1])
    elif sv.required_level == 0:
        found = sv._best_in(0, replicas)
        if found is not None:
            consider(found[0], 0, found[1], 0)
    else:
        candidates, above = [], {}
        floor = sv._floor(sv.required_level, replicas)
        for d in snap.domains_by_level[sv.required_level]:
            if sv._capacity_bound(d) >= replicas:
                above[d] = sum(sv._domain_cost(a) for a in _domains_above(snap, d))
                candidates.append((above[d] + sv._domain_cost(d) + floor, d))
        for d in _best_first(candidates, lambda d: above[d] + sv._lower_bound(d, replicas),
                             lambda: None if best is None else best[:2], sv._several_nodes(replicas)):
            found = sv._best_in(d, replicas)
            if found is not None:
                consider(above[d] + sv._domain_cost(d) + found[0], d, found[1], d)
    return best[2:] if best is not None else None


def _best_first(candidates: list[tuple[int, int]], bound: Callable[[int], int],
                best: Callable[[], tuple[int, int] | None], eager: bool) -> Iterator[int]:
    """The ids of `candidates` ((cheap lower bound, id)) in increasing order of their full lower bound (`bound(id)`,
    computed only once the cheap one comes first), while one could still beat `best()`, the (cost, id) found so far:
    ties go to the lowest id. Unless `eager`, the first is searched on its cheap bound alone: its full bound pays
    only when the cheap one undercounts the domains below (a gang of several nodes), and costs more than a search."""
    heap = [(cheap, d, False) for cheap, d in candidates]
    heapify(heap)
    while heap:
        key, d, full = heappop(heap)
        known = best()
        if known is not None and (key, d) > known:
            return
        if full or (known is None and not eager):
            yield d
        else:
            heappush(heap, (max(key, bound(d)), d, True))


def _place_others(sv: Solver, parts: list[tuple[int, int]], domain: int) -> dict[int, int] | None:
    """Rank -> node of each other member, largest first, on a node with room after the identical members (`parts`)
    inside `domain` (the required one, or 0), or on their node when one is required: the node adding the fewest
    domains at each level, coarsest first, then the tightest fit of its primary resource. None if one finds none."""
    if not sv.others:
        return {}
    snap = sv.snap
    free: dict[int, dict[str, int]] = {}  # node -> free after the members placed on it so far

    def take(node: int, requests: list[tuple[str, int]], times: int = 1) -> None:
        left = free.setdefault(node, dict(snap.free[node]))
        for resource, amount in requests:
            left[resource] = left.get(resource, 0) - amount * times

    for node, count in parts:
        take(node, sv.requests, count)
    domains = {d for node, _ in parts for d in snap.ancestors[node]}  # used by the gang so far
    nodes = {node for node, _ in parts}
    chosen: dict[int, int] = {}
    for k in sorted(range(len(sv.others)), key=lambda k: (-gpu_units(sv.others[k]), -dict(sv.others[k]).get(
            "cpu", 0), k)):
        requests = sv.others[k]
        primary = primary_of(tuple(requests))
        best = None
        for scope in _scopes(sv, parts, domain):
            for i in scope:
                left = free.get(i, snap.free[i])
                if not sv.is_open(i) or any(left.get(r, 0) < v for r, v in requests):
                    continue
                new = tuple(d not in domains for d in snap.ancestors[i][1:]) + (i not in nodes,)
                key = (new, left.get(primary, 0) - dict(requests).get(primary, 0), i)
                if best is None or key < best:
                    best = key
            if best is not None:
                break
        if best is None:
            return None
        node = best[2]
        chosen[sv.replicas + k] = node
        take(node, requests)
        domains.update(snap.ancestors[node])
        nodes.add(node)
    return chosen


def _scopes(sv: Solver, parts: list[tuple[int, int]], domain: int) -> Iterable[list[int]]:
    """The nodes to look at for another member, tightest first: the identical members' node when they are on one,
    then the nodes of each domain from the deepest holding them all up to `domain` (the node, when one is required)."""
    snap = sv.snap
    if len(parts) == 1:
        yield [parts[0][0]]
        if sv.required_level == sv.node_level:
            return
    paths = [snap.ancestors[node] for node, _ in parts]
    common = 0
    for depth in range(len(paths[0])):
        if any(path[depth] != paths[0][depth] for path in paths):
            break
        common = paths[0][depth]
    while True:
        yield snap.nodes_under(common)
        if common == domain or common <= 0:
            return
        common = snap.domains[common].parent


def could_ever_hold(sv: Solver, level: int) -> list[int]:
    """The domains of `level` that could hold the gang on an idle cluster (kept on the snapshot when nothing is
    excluded: the answer reads only nodes and topology)."""
    return sv.remembered(("could-ever-hold", level),
                         lambda: [d for d in sv.domains_at(level) if sv.could_ever_hold(d)])


def _domains_above(snap: Snapshot, d: int) -> list[int]:
    """Ancestors of domain `d`, excluding `d` and the root."""
    out = []
    parent = snap.domains[d].parent
    while parent > 0:
        out.append(parent)
        parent = snap.domains[parent].parent
    return out


def placement_of(sv: Solver, parts: list[tuple[int, int]], domain: int,
                 others: dict[int, int] | None = None) -> Placement:
    """The Placement of `parts` ([(node index, replicas)], ranks in that order) and of `others` (rank -> node index);
    `domain` the required one or 0."""
    snap = sv.snap
    assignments: dict[str, list[int]] = {}
    rank = 0
    used: list[set[int]] = [set() for _ in range(sv.node_level)]  # domains used per level
    for i, count in parts:
        assignments[snap.nodes[i].name] = list(range(rank, rank + count))
        rank += count
        for level, d in enumerate(snap.ancestors[i][1:], start=1):
            used[level].add(d)
    for other, i in sorted(others.items()) if others else ():
        assignments.setdefault(snap.nodes[i].name, []).append(other)
        for level, d in enumerate(snap.ancestors[i][1:], start=1):
            used[level].add(d)
    counts = tuple(len(u) for u in used[1:]) + (len(assignments),)
    if domain:
        labels = (snap.domain_label(domain),)
    else:
        top = sorted(used[1]) if sv.finest_level else []
        labels = tuple(snap.domain_label(d) for d in top)
    return Placement(job=sv.job.key, assignments=assignments, counts=counts, domains=labels, exact=sv.exact)
