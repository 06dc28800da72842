"""The store of the DRA kinds (resource.k8s.io/v1): ResourceSlices, DeviceClasses, ResourceClaims and
ResourceClaimTemplates, kept read (core/dra/model) as they come, so a cycle's DeviceBook is built without parsing."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from superpod.core.dra.allocate import GPU_CLASS_PREFIX
from superpod.core.dra.book import DeviceBook
from superpod.core.dra.model import (
    ClaimSpec,
    DeviceClass,
    DeviceID,
    DraError,
    Slice,
    allocated_devices,
    read_claim,
    read_class,
    read_slice,
    read_template,
)
from superpod.core.gang_key import GangKey


class DraStore:
    """One store for the four kinds, told apart by the plural it was made for (`kind_store`); `generation` moves on
    every change, so a book built at one generation is kept until the next."""

    def __init__(self, gang_of_pod: Callable[[str], GangKey | None]) -> None:
        self.gang_of_pod = gang_of_pod  # pod key -> its gang: a claim's change is its pod's gang's
        self.slices: dict[str, Slice] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, dict] = {}  # namespace/name -> the claim as served
        self.templates: dict[str, ClaimSpec | str] = {}  # namespace/name -> its claim spec, or why it does not read
        self.unreadable: dict[str, str] = {}  # slice or class key -> why it is left out
        self.generation = 0
        self.template_edits = 0  # bumped on every stored or deleted ResourceClaimTemplate
        self._taken: set[DeviceID] | None = None
        self._by_pod: dict[str, list[dict]] | None = None

    def kind_store(self, plural: str) -> _KindStore:
        return _KindStore(self, plural)

    def changed(self) -> None:
        """Devices, classes or what the claims hold changed: a book built before no longer stands."""
        self.generation += 1
        self._taken = self._by_pod = None

    def claim_edits(self) -> None:
        """A claim changed but not what it holds (its owners, its reservation): only the index by pod is stale."""
        self._by_pod = None

    def owned_by(self, pod_uid: str) -> list[dict]:
        """The claims a pod owns (made from its templates)."""
        if self._by_pod is None:
            self._by_pod = {}
            for claim in self.claims.values():
                for owner in claim["metadata"].get("ownerReferences") or ():
                    if owner.get("kind") == "Pod" and owner.get("uid"):
                        self._by_pod.setdefault(owner["uid"], []).append(claim)
        return self._by_pod.get(pod_uid, [])

    def allocated_for(self, pod_uid: str, count: int) -> bool:
        """Whether the pod owns `count` claims and each is allocated."""
        owned = self.owned_by(pod_uid)
        return len(owned) >= count and all((c.get("status") or {}).get("allocation") for c in owned)

    def gpus_of(self, pod_uids: Iterable[str]) -> int:
        """GPUs the pods' own claims hold: devices allocated for requests of a `gpu.*` class."""
        count = 0
        for claim in (claim for uid in pod_uids for claim in self.owned_by(uid)):
            try:
                classes = {alternative.name: alternative.class_name for request in read_claim(claim).requests
                           for alternative in request.alternatives}
            except DraError:
                continue  # (the API server would not have it)
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
            count += sum(classes.get(r.get("request"), "").startswith(GPU_CLASS_PREFIX) for r in results or ())
        return count

    def devices_of(self, pod_uids: Iterable[str]) -> frozenset[DeviceID]:
        """The devices the pods' own claims hold: what evicting them frees."""
        return frozenset(allocated_devices(claim for uid in pod_uids for claim in self.owned_by(uid)))

    @property
    def taken(self) -> set[DeviceID]:
        """The devices the claims hold (their allocations as observed)."""
        if self._taken is None:
            self._taken = allocated_devices(self.claims.values())
        return self._taken

    def book(self, labels: dict[str, dict[str, str]], in_flight: set[DeviceID]) -> DeviceBook | None:
        """A book of the devices as observed, with `in_flight` (allocations written, not yet observed) taken too;
        None when no node publishes devices."""
        if not self.slices:
            return None
        return DeviceBook(self.slices.values(), self.classes, self.taken | in_flight, labels)

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
            self._claim_changed(before, obj)
        elif self.plural == "resourceclaimtemplates":
            try:
                dra.templates[key] = read_template(obj)
            except DraError as error:
                dra.templates[key] = str(error)
            dra.template_edits += 1
        else:
            try:
                if self.plural == "resourceslices":
                    dra.slices[key] = read_slice(obj)
                else:
                    dra.classes[key] = read_class(obj)
                dra.unreadable.pop(key, None)
            except DraError as error:
                self._drop(key)
                dra.unreadable[key] = str(error)
            dra.changed()

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        dra = self.dra
        if self.plural == "resourceclaims":
            self._claim_changed(dra.claims.pop(key, None), None)
        elif self.plural == "resourceclaimtemplates":
            dra.templates.pop(key, None)
            dra.template_edits += 1
        else:
            self._drop(key)
            dra.unreadable.pop(key, None)
            dra.changed()

    def _claim_changed(self, before: dict | None, after: dict | None) -> None:
        """A claim stored or gone: the book stands unless what it holds changed (a tenant's churn of claims that
        hold nothing costs no re-search)."""
        held = [claim for claim in (before, after) if claim is not None]
        if len(held) == 2 and allocated_devices(held[:1]) == allocated_devices(held[1:]) or \
                len(held) == 1 and not allocated_devices(held):
            self.dra.claim_edits()
        else:
            self.dra.changed()

    def _drop(self, key: str) -> None:
        dra = self.dra
        {"resourceslices": dra.slices, "deviceclasses": dra.classes, "resourceclaims": dra.claims,
         "resourceclaimtemplates": dra.templates}[self.plural].pop(key, None)

    def job_of(self, key: str) -> GangKey | None:
        if self.plural != "resourceclaims" or (claim := self.dra.claims.get(key)) is None:
            return None
        owner = next((o for o in claim["metadata"].get("ownerReferences") or () if o.get("kind") == "Pod"), None)
        return self.dra.gang_of_pod(f"{key.split('/', 1)[0]}/{owner['name']}") if owner else None
