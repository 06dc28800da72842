"""The store of the DRA kinds (resource.k8s.io/v1): ResourceSlices, DeviceClasses, ResourceClaims and
ResourceClaimTemplates, kept read (core/dra/model) as they come, so a cycle's DeviceBook is built without parsing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from superpod.api.claims import Shared, selector_text
from superpod.core.dra.book import POOLED_DRIVER, DeviceBook
from superpod.core.dra.model import (
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceID,
    DraError,
    Request,
    Slice,
    allocated_devices,
    read_claim,
    read_class,
    read_slice,
    read_template,
)
from superpod.core.dra.selectors import Selectors
from superpod.core.dra.units import Shape, device_units, request_units, selects, shape
from superpod.core.gang_key import GangKey
from superpod.core.queues import ANY
from superpod.core.request import GPU

EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"  # on a claim kube-scheduler made for a pod's
# extended resource served from DRA devices (KEP-5004): the pod's requests of that resource count what it holds
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"  # on a claim made from a pod's template
MOST_NAMED = 4096  # claim names read as used by name beyond twice the claims there are, before they are read anew


class DraStore:
    """One store for the four kinds, told apart by the plural it was made for (`kind_store`); `generation` moves on
    every change, so a book built at one generation is kept until the next."""

    def __init__(self, gang_of_pod: Callable[[str], GangKey | None],
                 named_by_pod: Callable[[str], frozenset[str]] = lambda pod_key: frozenset()) -> None:
        self.gang_of_pod = gang_of_pod  # pod key -> its gang: a claim's change is its pod's gang's
        self.named_by_pod = named_by_pod  # pod key -> the claims its spec uses by name
        self.slices: dict[str, Slice] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.class_created: dict[str, str] = {}  # class name -> its creationTimestamp (for `serving`)
        self.claims: dict[str, dict] = {}  # namespace/name -> the claim as served
        self.templates: dict[str, ClaimSpec | str] = {}  # namespace/name -> its claim spec, or why it does not read
        self.unreadable: dict[str, str] = {}  # slice or class key -> why it is left out
        self.generation = 0
        self.template_edits = 0  # bumped on every stored or deleted ResourceClaimTemplate
        self.shared_edits = 0  # bumped when a claim pods use by name (`named`) changes what they read, or goes
        self.named: set[str] = set()  # the claims read as used by name (DraStore.shared)
        self.reservations = 0  # bumped when a claim changes but not what it holds (its reservedFor, its owners)
        self.device_edits = 0  # bumped on every stored or deleted slice or class
        self.shape_edits = 0  # bumped when a device shape appears or goes, or a class changes: what claims are worth
        self._shape_refs: Counter = Counter()  # shape -> the slices holding a device of it
        self._shapes: dict[str, dict[Shape, Device]] = {}  # slice key -> a device of each shape it holds
        self._shape_counts: dict[str, tuple[str, tuple, int, Counter]] = {}  # slice key -> (its node, its pool,
        # the pool's generation, the devices it hands out per shape)
        self._node_units: tuple[int, dict[str, dict[str, float]]] = (-1, {})  # (device_edits, node -> GPUs)
        self._worth_of: tuple[int, dict] = (-1, {})  # (shape_edits, (class, selectors) -> request_units)
        self._representatives: tuple[int, dict[Shape, Device]] = (-1, {})  # (shape_edits, a device of each shape)
        self._selectors = Selectors()
        self._device_gpus: tuple[int, dict[DeviceID, float]] = (-1, {})  # (device_edits, device -> GPUs it is)
        self._taken: set[DeviceID] | None = None
        self._extended: frozenset[DeviceID] | None = None  # the devices of the claims `extended` says
        self._extended_by_pod: dict[str, list[dict]] | None = None  # pod uid -> the claims `extended` says it owns
        self._served: tuple[tuple, tuple[frozenset[DeviceID], dict[str, int]]] = ((), (frozenset(), {}))
        self._pool_classes: tuple[int, frozenset[str]] = (-1, frozenset())  # (shape_edits, pool_classes)
        self._held_by: Counter | None = None  # device -> how many claims hold it (`taken`, `taken_twice`)
        self._twice: dict[str, tuple[DeviceID, str]] | None = None
        self._by_pod: dict[str, list[dict]] | None = None
        self._by_consumer: dict[str, list[dict]] | None = None  # pod uid -> the claims reserved for it

    def kind_store(self, plural: str) -> _KindStore:
        return _KindStore(self, plural)

    def changed(self) -> None:
        """Devices, classes or what the claims hold changed: a book built before no longer stands."""
        self.generation += 1
        self._taken = self._held_by = self._by_pod = self._by_consumer = self._twice = self._extended = None
        self._extended_by_pod = None

    def devices_changed(self) -> None:
        """A slice or a class stored or gone: what a class's devices are worth may have changed too."""
        self.device_edits += 1
        self.changed()

    def set_shapes(self, key: str, shapes: dict[Shape, Device] | None) -> None:
        """Slice `key` holds a device of each of `shapes` now (None: it is gone)."""
        before = self._shapes.pop(key, {})
        if shapes is not None:
            self._shapes[key] = shapes
        moved = False
        for gone in before.keys() - (shapes or {}).keys():
            self._shape_refs[gone] -= 1
            if not self._shape_refs[gone]:
                del self._shape_refs[gone]
                moved = True
        for new in (shapes or {}).keys() - before.keys():
            moved |= not self._shape_refs[new]
            self._shape_refs[new] += 1
        self.shape_edits += moved

    def representatives(self) -> dict[Shape, Device]:
        """A device of each shape the slices hold (core/dra/units.shape), kept until a shape appears or goes."""
        if self._representatives[0] != self.shape_edits:
            self._representatives = (self.shape_edits, {key: device for shapes in self._shapes.values()
                                                         for key, device in shapes.items()})
        return self._representatives[1]

    def worth(self, request: Request) -> float:
        """GPUs one device given to `request` is, at most (core/dra/units.request_units over a device of each shape
        the slices hold), kept until a shape appears or goes or a class changes."""
        if self._worth_of[0] != self.shape_edits:
            self._worth_of = (self.shape_edits, {})
        memo = self._worth_of[1]
        key = (request.class_name, request.selectors)
        found = memo.get(key)
        if found is None:
            found = memo[key] = request_units(request, self.classes, self.representatives().values(),
                                              self._selectors)
        return found

    def node_units(self, node: str) -> dict[str, float]:
        """The GPUs `node`'s own devices are (core/dra/units.device_units): in all ("*") and per DeviceClass that
        selects them; what queues count as capacity. Counted by device shape, again after a slice or class changes."""
        if self._node_units[0] != self.device_edits:
            self._node_units = (self.device_edits, self._count_node_units())
        return self._node_units[1].get(node, {})

    def _count_node_units(self) -> dict[str, dict[str, float]]:
        representatives = self.representatives()
        worth = {key: device_units(device) for key, device in representatives.items()}
        classes = {key: [name for name, device_class in self.classes.items()
                         if selects(self._selectors, device_class.selectors, device)]
                   for key, device in representatives.items() if worth[key]}
        newest: dict[tuple, int] = {}  # pool -> its newest generation (a pool being rolled over has two)
        for _, pool, generation, _ in self._shape_counts.values():
            newest[pool] = max(newest.get(pool, generation), generation)
        out: dict[str, dict[str, float]] = {}
        for node, pool, generation, counts in self._shape_counts.values():
            if not node or generation < newest[pool]:
                continue  # devices of no one node (network-attached: no node's capacity), or replaced
            units = out.setdefault(node, {})
            for key, count in counts.items():
                if worth[key]:
                    for name in (ANY, *classes[key]):
                        units[name] = units.get(name, 0.0) + count * worth[key]
        return out

    def serving(self, resource: str) -> str | None:
        """The DeviceClass kube-scheduler serves `resource` from on a node that does not advertise it (Kubernetes'
        DRA extended resources: the newest class naming it its extendedResourceName, the lower name on a tie); None
        when no class does."""
        named = [name for name, device_class in self.classes.items() if device_class.extended_resource_name == resource]
        return max(sorted(named), key=lambda name: self.class_created.get(name, ""), default=None)  # (the first max)

    def served(self, resource: str) -> tuple[frozenset[DeviceID], dict[str, int]]:
        """What kube-scheduler may hand out as `resource` on nodes that do not advertise it: the GPU devices the class
        `serving` it selects, one device a unit, and how many of them each node has (of each pool's newest
        generation; devices that consume counters are not handed out here). Read by shape, again after a slice or a
        class changes."""
        key = (self.device_edits, resource)
        if self._served[0] != key:
            self._served = (key, self._count_served(resource))
        return self._served[1]

    def _count_served(self, resource: str) -> tuple[frozenset[DeviceID], dict[str, int]]:
        name = self.serving(resource)
        device_class = self.classes.get(name) if name is not None else None
        if device_class is None:
            return frozenset(), {}
        newest: dict[tuple[str, str], int] = {}
        for piece in self.slices.values():
            newest[(piece.driver, piece.pool)] = max(newest.get((piece.driver, piece.pool), 0), piece.generation)
        chosen: dict[Shape, bool] = {}  # (a class selects every device of a shape alike)
        where: dict[DeviceID, str] = {}
        for piece in self.slices.values():
            if not piece.node_name or piece.generation < newest[(piece.driver, piece.pool)]:
                continue
            for device in piece.devices:
                if device.consumes_counters:
                    continue
                kind = shape(device)
                picked = chosen.get(kind)
                if picked is None:
                    picked = chosen[kind] = bool(device_units(device)) and selects(
                        self._selectors, device_class.selectors, device)
                if picked:
                    where[device.id] = piece.node_name
        return frozenset(where), dict(Counter(where.values()))

    def pool_classes(self) -> frozenset[str]:
        """The classes that may select a GPU device a node's nvidia.com/gpu counts too (DeviceBook.pool_gpus): one of
        NVIDIA's DRA driver (POOLED_DRIVER), or one the class serving nvidia.com/gpu selects. Read by shape."""
        if self._pool_classes[0] != self.shape_edits:
            serving = self.classes.get(self.serving(GPU) or "")
            pooled = [device for device in self.representatives().values() if device_units(device) and (
                device.driver == POOLED_DRIVER or serving is not None and selects(
                    self._selectors, serving.selectors, device))]
            self._pool_classes = (self.shape_edits, frozenset(
                name for name, device_class in self.classes.items()
                if any(selects(self._selectors, device_class.selectors, device) for device in pooled)))
        return self._pool_classes[1]

    def reading_edits(self) -> int:
        """Moves when what claims are read against may have changed: a template, a claim pods use by name, a device
        shape or a class (a slice written again with devices of the shapes it had moves nothing)."""
        return self.template_edits + self.shape_edits + self.shared_edits

    def claim_edits(self) -> None:
        """A claim changed but not what it holds (its owners, its reservation): only the index by pod is stale, and
        the pods' shares of the claims they share may have moved."""
        self._by_pod = self._by_consumer = self._extended_by_pod = None
        self._extended = None
        self.reservations += 1

    def extended(self, claim: dict) -> bool:
        """Whether kube-scheduler made `claim` for a pod's nvidia.com/gpu served from DRA devices (an extended
        resource, KEP-5004), so the pod's requests count what it holds: annotated so, made from no template, and
        used by name by none of the pods it is for. A pod is given a claim its spec names or one kube-scheduler made
        for it (named in the pod's status, which a tenant cannot write): a tenant's claim annotated so is still
        counted wherever a pod of its uses it."""
        meta = claim["metadata"]
        annotations = meta.get("annotations") or {}
        if annotations.get(EXTENDED_CLAIM) != "true" or POD_CLAIM_NAME in annotations:
            return False
        namespace, name = meta.get("namespace"), meta.get("name")
        consumers = [*(meta.get("ownerReferences") or ()), *((claim.get("status") or {}).get("reservedFor") or ())]
        return not any(isinstance(pod, dict) and name in self.named_by_pod(f"{namespace}/{pod.get('name')}")
                       for pod in consumers)

    @property
    def extended_devices(self) -> frozenset[DeviceID]:
        """The devices the claims `extended` says hold (the pods' nvidia.com/gpu requests count them)."""
        if self._extended is None:
            self._extended = frozenset(allocated_devices(
                claim for claim in self.claims.values() if claim["metadata"].get("annotations")
                and self.extended(claim)))
        return self._extended

    def owned_by(self, pod_uid: str) -> list[dict]:
        """The claims a pod owns (made from its templates), but those kube-scheduler made for its nvidia.com/gpu
        (`extended_of`)."""
        if self._by_pod is None:
            self._by_pod, self._extended_by_pod = {}, {}
            for claim in self.claims.values():
                index = self._extended_by_pod if claim["metadata"].get("annotations") and self.extended(claim) \
                    else self._by_pod  # (its pod's requests count what the first holds)
                for owner in claim["metadata"].get("ownerReferences") or ():
                    if owner.get("kind") == "Pod" and owner.get("uid"):
                        index.setdefault(owner["uid"], []).append(claim)
        return self._by_pod.get(pod_uid, [])

    def extended_of(self, pod_uid: str) -> list[dict]:
        """The claims kube-scheduler made for a pod's nvidia.com/gpu (`extended`) that it owns."""
        if self._extended_by_pod is None:
            self.owned_by(pod_uid)
        return self._extended_by_pod.get(pod_uid, [])

    def allocated_for(self, pod_uid: str, count: int) -> bool:
        """Whether the pod owns `count` claims and each is allocated."""
        owned = self.owned_by(pod_uid)
        return len(owned) >= count and all((c.get("status") or {}).get("allocation") for c in owned)

    def reserved_for(self, pod_uid: str) -> list[dict]:
        """The claims reserved for a pod (status.reservedFor: written by kube-scheduler or this operator, never by a
        tenant), whoever owns them: its own and those it shares by name; not one kube-scheduler made for its
        nvidia.com/gpu (`extended`)."""
        if self._by_consumer is None:
            self._by_consumer = {}
            for claim in self.claims.values():
                if claim["metadata"].get("annotations") and self.extended(claim):
                    continue  # (its pod's requests count it)
                for consumer in (claim.get("status") or {}).get("reservedFor") or ():
                    if isinstance(consumer, dict) and consumer.get("resource") == "pods" and consumer.get("uid"):
                        self._by_consumer.setdefault(consumer["uid"], []).append(claim)
        return self._by_consumer.get(pod_uid, [])

    def gpus_of(self, pod_uids: Iterable[str], whole: bool = False) -> float:
        """GPUs the claims reserved for the pods hold: what the devices allocated to them are
        (core/dra/units.device_units), a claim shared with other pods at its share (`whole`: in full, as a gang that
        uses it holds its devices while any of its pods does, whoever else leaves)."""
        uids, total, seen = set(pod_uids), 0.0, set()
        for uid in uids:
            for claim in self.reserved_for(uid):
                key = (claim["metadata"].get("namespace"), claim["metadata"].get("name"))
                if key in seen:
                    continue
                seen.add(key)
                consumers = [c for c in claim["status"]["reservedFor"] if isinstance(c, dict) and c.get("uid")]
                share = 1.0 if whole else sum(c["uid"] in uids for c in consumers) / len(consumers)
                total += share * self._held(claim)
        return total

    def member_gpus(self, pod_uid: str, members: int) -> float:
        """GPUs the claims reserved for a pod hold as a member of a gang of `members` counts them when admitted: its
        own claims (made from its templates) in full, a claim it uses by name at a `members`-th (whoever else is
        reserved on it yet: kube-scheduler reserves a shared claim for one pod at a time)."""
        total = 0.0
        for claim in self.reserved_for(pod_uid):
            own = any(owner.get("uid") == pod_uid for owner in claim["metadata"].get("ownerReferences") or ())
            total += self._held(claim) if own else self._held(claim) / max(members, 1)
        return total

    def _held(self, claim: dict) -> float:
        """GPUs the devices allocated to `claim` are."""
        at, worth = self._device_gpus
        if at != self.device_edits:
            worth = {device.id: device_units(device) for s in self.slices.values() for device in s.devices}
            self._device_gpus = (self.device_edits, worth)
        return sum(worth.get(device, 0.0) for device in allocated_devices([claim]))

    def devices_of(self, pod_uids: Iterable[str]) -> frozenset[DeviceID]:
        """The devices the pods' own claims hold, kube-scheduler's for their nvidia.com/gpu too: what evicting them
        frees."""
        return frozenset(allocated_devices(claim for uid in pod_uids
                                           for claim in (*self.owned_by(uid), *self.extended_of(uid))))

    @property
    def taken(self) -> set[DeviceID]:
        """The devices the claims hold (their allocations as observed)."""
        if self._taken is None:
            self._taken = set(self._claims_holding())
        return self._taken

    def _claims_holding(self) -> Counter:
        """Device -> how many claims hold it, counted once per change of what the claims hold."""
        if self._held_by is None:
            self._held_by = Counter(device for claim in self.claims.values() for device in allocated_devices([claim]))
        return self._held_by

    @property
    def taken_twice(self) -> dict[str, tuple[DeviceID, str]]:
        """Each claim (namespace/name) holding a device an earlier claim holds too, with that device and claim: two
        allocators (kube-scheduler allocates TrainingJobs' claims, this operator pod gangs'), or one that did not see
        the other's write yet. The earlier claim (by creation, then name) keeps it. Devices that allow multiple
        allocations are left out."""
        if self._twice is None:
            self._twice = {}
            twice = {device for device, count in self._claims_holding().items() if count > 1}
            if twice:  # (rare: only then are the claims holding them ordered)
                twice -= {device.id for s in self.slices.values() for device in s.devices
                          if device.multiple_allocations}
                first: dict[DeviceID, str] = {}
                holders = sorted(((c["metadata"].get("creationTimestamp") or "", key), c)
                                 for key, c in self.claims.items() if allocated_devices([c]) & twice)
                for (_, key), held in holders:
                    for device in sorted(allocated_devices([held]) & twice):
                        if device in first:
                            self._twice.setdefault(key, (device, first[device]))
                        else:
                            first[device] = key
        return self._twice

    def taken_before(self, claim: dict) -> tuple[DeviceID, str] | None:
        """The device `claim` holds that an earlier claim holds too, and that claim (`taken_twice`); None if none."""
        meta = claim["metadata"]
        return self.taken_twice.get(f"{meta.get('namespace')}/{meta.get('name')}")

    def book(self, labels: dict[str, dict[str, str]], in_flight: set[DeviceID]) -> DeviceBook | None:
        """A book of the devices as observed, with `in_flight` (allocations written, not yet observed) taken too;
        None when no node publishes devices."""
        if not self.slices:
            return None
        return DeviceBook(self.slices.values(), self.classes, self.taken | in_flight, labels,
                          extended=self.extended_devices, serving=self.served(GPU)[0], pool_classes=self.pool_classes())

    def shared(self, namespace: str, name: str) -> Shared:
        """ResourceClaim namespace/name as pods that use it by name read it; raises LookupError or DraError."""
        if len(self.named) > MOST_NAMED + 2 * len(self.claims):  # names pods gave once and no claim has: read anew
            self.named.clear()
            self.shared_edits += 1
        self.named.add(f"{namespace}/{name}")
        claim = self.claims.get(f"{namespace}/{name}")
        if claim is None:
            raise LookupError(f"ResourceClaim {namespace}/{name} does not exist")
        if claim["metadata"].get("deletionTimestamp"):
            raise LookupError(f"ResourceClaim {namespace}/{name} is being deleted")
        allocation = (claim.get("status") or {}).get("allocation")
        on = None if not allocation else selector_text(allocation["nodeSelector"]) if allocation.get(
            "nodeSelector") else ""
        return Shared(read_claim(claim), on)

    def template(self, namespace: str, name: str) -> ClaimSpec:
        """The claim spec a ResourceClaimTemplate makes; raises LookupError or DraError with the words."""
        found = self.templates.get(f"{namespace}/{name}")
        if found is None:
            raise LookupError(f"ResourceClaimTemplate {namespace}/{name} does not exist")
        if isinstance(found, str):
            raise DraError(found)
        return found


class _KindStore:
    """The Store interface (controller/state/base.py) for one of the DRA kinds."""

    def __init__(self, dra: DraStore, plural: str) -> None:
        self.dra, self.plural = dra, plural

    def store(self, key: str, obj: dict, now: float) -> None:
        dra = self.dra
        if self.plural == "resourceclaims":
            before = dra.claims.get(key)
            dra.claims[key] = obj
            self._claim_changed(key, before, obj)
        elif self.plural == "resourceclaimtemplates":
            try:
                dra.templates[key] = read_template(obj)
            except DraError as error:
                dra.templates[key] = str(error)
            dra.template_edits += 1
        else:
            try:
                if self.plural == "resourceslices":
                    read = dra.slices[key] = read_slice(obj)
                    shapes = [shape(device) for device in read.devices]
                    dra.set_shapes(key, dict(zip(shapes, read.devices, strict=True)))
                    given = Counter(key for key, device in zip(shapes, read.devices, strict=True)
                                    if not device.consumes_counters)  # (partitionable: never handed out here)
                    dra._shape_counts[key] = (read.node_name, (read.driver, read.pool), read.generation, given)
                else:
                    dra.classes[key] = read_class(obj)
                    dra.class_created[key] = (obj.get("metadata") or {}).get("creationTimestamp") or ""
                    dra.shape_edits += 1
                dra.unreadable.pop(key, None)
            except DraError as error:
                self._drop(key)
                dra.unreadable[key] = str(error)
            dra.devices_changed()

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        dra = self.dra
        if self.plural == "resourceclaims":
            self._claim_changed(key, dra.claims.pop(key, None), None)
        elif self.plural == "resourceclaimtemplates":
            dra.templates.pop(key, None)
            dra.template_edits += 1
        else:
            self._drop(key)
            dra.unreadable.pop(key, None)
            dra.devices_changed()

    def _claim_changed(self, key: str, before: dict | None, after: dict | None) -> None:
        """A claim stored or gone: the book stands unless what it holds changed (a tenant's churn of claims that
        hold nothing costs no re-search)."""
        held = [claim for claim in (before, after) if claim is not None]
        if key in self.dra.named and (len(held) == 1 or _as_shared(held[0]) != _as_shared(held[1])):
            self.dra.shared_edits += 1  # (pods that use it by name read it again)
        if len(held) == 2 and allocated_devices(held[:1]) == allocated_devices(held[1:]) or \
                len(held) == 1 and not allocated_devices(held):
            self.dra.claim_edits()
        else:
            self.dra.changed()

    def _drop(self, key: str) -> None:
        dra = self.dra
        if self.plural == "resourceslices":
            dra.set_shapes(key, None)
            dra._shape_counts.pop(key, None)
        elif self.plural == "deviceclasses":
            dra.shape_edits += 1
            dra.class_created.pop(key, None)
        {"resourceslices": dra.slices, "deviceclasses": dra.classes, "resourceclaims": dra.claims,
         "resourceclaimtemplates": dra.templates}[self.plural].pop(key, None)

    def job_of(self, key: str) -> GangKey | None:
        if self.plural != "resourceclaims" or (claim := self.dra.claims.get(key)) is None:
            return None
        owner = next((o for o in claim["metadata"].get("ownerReferences") or () if o.get("kind") == "Pod"), None)
        return self.dra.gang_of_pod(f"{key.split('/', 1)[0]}/{owner['name']}") if owner else None


def _as_shared(claim: dict) -> str:
    """What pods that use a claim by name read of it (DraStore.shared), as text to compare."""
    return selector_text({"spec": claim.get("spec"), "allocation": (claim.get("status") or {}).get("allocation"),
                          "deleting": claim["metadata"].get("deletionTimestamp")})
