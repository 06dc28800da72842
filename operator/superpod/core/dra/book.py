"""The devices a cycle places on: each node's pools from the ResourceSlices, the devices claims already hold, and
what the cycle books on top for the gangs it places (their claims' allocations, before they are written)."""

from __future__ import annotations

from collections.abc import Iterable

from superpod.core.dra.allocate import Allocation, Allocator, Shortfall
from superpod.core.dra.model import ClaimSpec, DeviceClass, DeviceID, Pool, Slice, node_pools
from superpod.core.dra.selectors import Selectors, references
from superpod.core.dra.units import device_units

POOLED_DRIVER = "gpu.nvidia.com"  # the DRA driver whose GPUs are those a node's nvidia.com/gpu counts (NVIDIA's)
PodAllocations = list[Allocation]  # one pod's claims, in the order of its spec.resourceClaims


class DeviceBook:
    """Which devices each node sees and which are free. `taken`: devices held by claims (allocated, or allocated by
    this operator and not yet observed so). Pods of one claim shape are counted per node once until the node's free
    devices change."""

    def __init__(self, slices: Iterable[Slice], classes: dict[str, DeviceClass], taken: set[DeviceID],
                 labels: dict[str, dict[str, str]], selectors: Selectors | None = None,
                 extended: frozenset[DeviceID] = frozenset(), serving: frozenset[DeviceID] = frozenset(),
                 pool_classes: frozenset[str] = frozenset()) -> None:
        self.allocator = Allocator(classes, selectors)
        self.taken = set(taken)
        self.extended = extended  # of `taken`: the devices of the claims kube-scheduler made for pods' nvidia.com/gpu
        # (DRA extended resources), which those pods' requests count
        self.serving = serving  # the devices a DeviceClass serves nvidia.com/gpu from, where a node advertises none
        self.pool_classes = pool_classes  # the classes that may select a device of a pool (`pool_gpus`): a claim of
        # another class takes no node's nvidia.com/gpu
        self.labels = labels  # node name -> labels (slices may select nodes by label)
        self._local: dict[str, list[Slice]] = {}  # node name -> its own slices
        self._shared: list[Slice] = []  # slices of all nodes, or of the nodes a selector picks
        self._by_pool: dict[tuple[str, str], list[Slice]] = {}
        for s in slices:
            (self._local.setdefault(s.node_name, []) if s.node_name else self._shared).append(s)
            self._by_pool.setdefault((s.driver, s.pool), []).append(s)
        self._pools: dict[str, list[Pool]] = {}
        self._own_gpus: dict[str, tuple[tuple[DeviceID, float], ...]] = {}  # node -> own_gpus
        self._counts: dict[str, dict[tuple[tuple[ClaimSpec, ...], int], int | Shortfall]] = {}
        # nodes whose devices look alike to a claim shape count alike: (shape, limit, idle, what it sees) -> pods
        self._alike: dict[tuple, int] = {}
        self._reads: dict[tuple[ClaimSpec, ...], tuple | None] = {}
        self.booked: dict[str, dict[str, list[PodAllocations]]] = {}  # gang -> node -> its pods' allocations there
        self.booked_shared: dict[str, tuple[str, PodAllocations]] = {}  # gang -> (node, its shared claims' there)
        self.refused: dict[str, Shortfall] = {}  # gang -> why a node it was placed on could not allocate its claims

    def has_devices(self, node: str) -> bool:
        return node in self._local or bool(self._shared)

    def own_gpus(self, node: str) -> tuple[tuple[DeviceID, float], ...]:
        """The node's own devices that are GPUs, each with the GPUs it is (core/dra/units.device_units); gpu_nodes
        reads the same devices without listing them all."""
        found = self._own_gpus.get(node)
        if found is None:  # (read from its own slices: a device in two generations of a pool is one device)
            found = self._own_gpus[node] = tuple({device.id: units for s in self._local.get(node, ())
                                                  for device in s.devices if (units := device_units(device))}.items())
        return found

    def gpu_nodes(self, driver: str = "") -> list[str]:
        """The nodes whose own devices are GPUs (of `driver`, if named); asked of every node at each new book, so no
        device past the first GPU is read."""
        return [node for node, slices in self._local.items()
                if any(device_units(device) and (not driver or device.driver == driver)
                       for s in slices for device in s.devices)]

    def pool_gpus(self, node: str, devices: set[DeviceID] | frozenset[DeviceID], served: bool) -> float:
        """The node's nvidia.com/gpu among `devices` that claims other than kube-scheduler's for pods' nvidia.com/gpu
        (`extended`: those pods' requests count them) may hold: on a node whose nvidia.com/gpu its DRA devices serve
        (`served`), the devices serving it, one a unit, as kube-scheduler hands them out; on one that advertises
        nvidia.com/gpu, the GPUs of POOLED_DRIVER's devices."""
        pool = self._local.get(node, ())
        if served:
            return sum(1 for s in pool for device in s.devices
                       if device.id in devices and device.id in self.serving and device.id not in self.extended)
        return sum(device_units(device) for s in pool for device in s.devices
                   if device.id in devices and device.driver == POOLED_DRIVER and device.id not in self.extended)

    def pools(self, node: str) -> list[Pool]:
        """The pools `node` sees (core/dra/model.node_pools, given every slice of the pools it meets)."""
        found = self._pools.get(node)
        if found is None:
            seen = {(s.driver, s.pool) for s in self._local.get(node, ())}
            seen.update((s.driver, s.pool) for s in self._shared)
            found = self._pools[node] = node_pools([s for key in sorted(seen) for s in self._by_pool[key]], node,
                                                   self.labels.get(node, {}))
        return found

    def fits(self, node: str, claims: tuple[ClaimSpec, ...], limit: int, idle: bool = False,
             shared: tuple[ClaimSpec, ...] = ()) -> int | Shortfall:
        """How many pods whose claims are `claims` the node's free devices take (`idle`: were none taken), at most
        `limit`, once the claims they all share (`shared`) are allocated there; or why not one."""
        if not self.has_devices(node):
            return 0
        memo = self._counts.setdefault(node, {})
        key = (claims, limit if not idle else -limit, shared)
        found = memo.get(key)
        if found is None:
            seen = self._seen(node, (*shared, *claims), idle)
            found = self._alike.get((key, seen)) if seen is not None else None
            if found is None:
                taken = set() if idle else self.taken
                found = self._count_sharing(node, claims, limit, taken, shared) if shared else \
                    self.allocator.count(node, self.pools(node), taken, claims, limit)
                if seen is not None and not isinstance(found, Shortfall):  # (a Shortfall names its node)
                    self._alike[(key, seen)] = found
            memo[key] = found
        return found

    def _count_sharing(self, node: str, claims: tuple[ClaimSpec, ...], limit: int, taken: set[DeviceID],
                       shared: tuple[ClaimSpec, ...]) -> int | Shortfall:
        """`fits` with claims shared by all the pods: those allocated first, then the pods' own counted beside them."""
        found = self.allocator.allocate(node, self.pools(node), taken, list(shared))
        if isinstance(found, Shortfall):
            return found
        if not claims:
            return limit
        held = taken.union(*(allocation.devices for allocation in found))
        return self.allocator.count(node, self.pools(node), held, claims, limit)

    def _seen(self, node: str, claims: tuple[ClaimSpec, ...], idle: bool) -> tuple | None:
        """What of the node's devices the claims can tell apart (the values their selectors and constraints read,
        taints, and which are taken), or None when a selector may read more than literal lookups."""
        reads = self._reads.get(claims, self)
        if reads is self:
            reads = self._reads[claims] = self._read_by(claims)
        if reads is None:
            return None
        attributes, capacities = reads
        taken = set() if idle else self.taken
        return tuple((pool.driver, pool.usable, tuple(
            (d.driver, d.taints, d.consumes_counters, d.id in taken,
             tuple(d.attribute(domain or d.driver, name) for domain, name in attributes),
             tuple(d.capacity_of(domain or d.driver, name) for domain, name in capacities))
            for d in pool.devices)) for pool in self.pools(node))

    def _read_by(self, claims: tuple[ClaimSpec, ...]) -> tuple | None:
        """(attributes, capacities) as (domain, id) that the claims' selectors, their classes' and their constraints
        read; None when some expression may read more."""
        attributes, capacities = set(), set()
        for claim in claims:
            for constraint in claim.constraints:
                domain, _, name = constraint.attribute.partition("/")
                attributes.add((domain, name))
            for device_request in claim.requests:
                for request in device_request.alternatives:
                    device_class = self.allocator.classes.get(request.class_name)
                    for expression in (*request.selectors, *(device_class.selectors if device_class else ())):
                        refs = references(expression)
                        if not refs.complete:
                            return None
                        for kind, domain, name in refs.lookups:
                            (attributes if kind == "attributes" else capacities).add((domain, name))
        return tuple(sorted(attributes)), tuple(sorted(capacities))

    def slots(self, node: str, claims: tuple[ClaimSpec, ...], limit: int, idle: bool = False,
              shared: tuple[ClaimSpec, ...] = ()) -> int:
        found = self.fits(node, claims, limit, idle, shared)
        return 0 if isinstance(found, Shortfall) else found

    def slots_freeing(self, node: str, claims: tuple[ClaimSpec, ...], limit: int, freed: set[DeviceID],
                      shared: tuple[ClaimSpec, ...] = ()) -> int:
        """`slots`, were the `freed` devices free (a preemption's victims'), not memoised."""
        if not freed:
            return self.slots(node, claims, limit, shared=shared)
        if not self.has_devices(node):
            return 0
        if shared:
            found = self._count_sharing(node, claims, limit, self.taken - freed, shared)
        else:
            found = self.allocator.count(node, self.pools(node), self.taken - freed, claims, limit)
        return 0 if isinstance(found, Shortfall) else found

    def free(self, devices: frozenset[DeviceID]) -> None:
        """Count `devices` as free until `take` (a trial placement without a preemption's victims)."""
        self.taken.difference_update(devices)
        self._counts.clear()

    def take(self, devices: frozenset[DeviceID]) -> None:
        self.taken.update(devices)
        self._counts.clear()

    def book(self, gang: str, node: str, claims: tuple[ClaimSpec, ...], pods: int,
             shared: tuple[ClaimSpec, ...] = ()) -> list[PodAllocations] | Shortfall:
        """Allocate `pods` pods' claims on `node` at once, and the claims they all share (`shared`, kept in
        `booked_shared`), and hold their devices for `gang`; or why not."""
        found = self.allocator.allocate(node, self.pools(node), self.taken, [*shared, *list(claims) * pods])
        if isinstance(found, Shortfall):
            self.refused[gang] = found
            return found
        for allocation in found:
            self.taken.update(allocation.devices)
        self._counts.pop(node, None)
        if shared:
            self.booked_shared[gang] = (node, found[:len(shared)])
            found = found[len(shared):]
        per_pod = [found[i * len(claims):(i + 1) * len(claims)] for i in range(pods)]
        self.booked.setdefault(gang, {}).setdefault(node, []).extend(per_pod)
        return per_pod

    def booked_nodes(self, gang: str) -> set[str]:
        """The nodes `book` holds devices on for `gang`."""
        shared = self.booked_shared.get(gang)
        return set(self.booked.get(gang, ())) | ({shared[0]} if shared is not None else set())

    def release(self, gang: str) -> None:
        """Give back what `book` held for `gang`."""
        self.refused.pop(gang, None)
        if (held := self.booked_shared.pop(gang, None)) is not None:
            node, allocations = held
            for allocation in allocations:
                self.taken.difference_update(allocation.devices)
            self._counts.pop(node, None)
        for node, pods in self.booked.pop(gang, {}).items():
            for allocations in pods:
                for allocation in allocations:
                    self.taken.difference_update(allocation.devices)
            self._counts.pop(node, None)
