"""The DRA claims of the pods this operator binds. A pod's claims are allocated on the node chosen for it and reserved
for it (status.allocation, status.reservedFor, as kube-scheduler writes them) before the pod is bound: all of a
gang's claims, then its bindings, in one plan. An allocation written but not yet observed is in flight: its devices
stay taken in the next cycles' DeviceBook until the claim is seen again. A claim allocated for a pod that was never
bound (a binding that failed, an operator stopped between the two writes) is released before its gang is placed
again, as kube-scheduler releases a claim of a pod it could not schedule."""

from __future__ import annotations

from dataclasses import dataclass

from superpod.controller.actions import WriteClaims
from superpod.controller.state import ClusterState
from superpod.core.dra.allocate import Allocation
from superpod.core.dra.book import PodAllocations
from superpod.core.dra.model import DeviceID, pod_claims
from superpod.core.gang_key import GangKey

RELEASED = {"allocation": None, "reservedFor": None}
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0  # seconds a gang whose claim write failed waits, doubling each time


@dataclass(frozen=True)
class PodClaims:
    """The claims a waiting pod's templates made (namespace/name, in its spec's order) and those it shares by name,
    or why it must wait."""

    keys: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    waiting: str = ""


def claims_of(pod: dict) -> PodClaims:
    """The claims kube-controller-manager made for the pod from its templates (pod.status.resourceClaimStatuses), and
    those it names."""
    meta = pod.get("metadata") or {}
    made = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get(
        "resourceClaimStatuses") or ()}
    keys, shared = [], []
    for claim in pod_claims(pod.get("spec") or {}):
        name = claim.claim or made.get(claim.name)
        if not name:
            return PodClaims(waiting="waiting for the ResourceClaims of its pods to be made from their templates")
        (shared if claim.claim else keys).append(f"{meta.get('namespace')}/{name}")
    return PodClaims(tuple(keys), tuple(shared))


def _uid(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("uid") or ""


def _reserved(claim: dict) -> list[dict]:
    return [c for c in (claim.get("status") or {}).get("reservedFor") or () if isinstance(c, dict)]


@dataclass
class InFlight:
    """An allocation decided and maybe written, not seen yet."""

    version: str  # the claim's resourceVersion it was decided on
    devices: tuple[DeviceID, ...]
    since: float
    gang: GangKey
    sent: bool = False  # its write went out and did not fail (its answer may be lost)


class Claims:
    """What this operator allocated and has not seen yet (claim key -> InFlight)."""

    def __init__(self) -> None:
        self.in_flight: dict[str, InFlight] = {}
        self.backoff: dict[GangKey, tuple[float, int, str]] = {}  # gang -> (not before, failures in a row, why)

    def settle(self, writes: dict[str, str], now: float, ttl: float) -> None:
        """After the last cycle's writes (`writes`: claim key -> ok, unknown or "failed: why"): an allocation stays in
        flight only if its write was sent and did not fail, for at most `ttl` seconds; a gang whose claim write failed
        is held back, longer each time, so a gang whose writes always fail never keeps devices from the others."""
        for key, held in list(self.in_flight.items()):
            if not held.sent:
                outcome = writes.get(key, "failed: not sent")
                held.sent = not outcome.startswith("failed")
                if held.sent:
                    self.backoff.pop(held.gang, None)
                else:
                    failures = self.backoff.get(held.gang, (0.0, 0, ""))[1] + 1
                    self.backoff[held.gang] = (now + min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1)), failures,
                                               outcome.removeprefix("failed: "))
            if not held.sent or now - held.since > ttl:
                del self.in_flight[key]
        writes.clear()

    def observe(self, state: ClusterState) -> set[DeviceID]:
        """Drop what the cache now shows (the claim changed or is gone); the devices still in flight."""
        claims = state.dra.claims
        for key, held in list(self.in_flight.items()):
            claim = claims.get(key)
            if claim is None or claim["metadata"].get("resourceVersion") != held.version:
                del self.in_flight[key]
        return {device for held in self.in_flight.values() for device in held.devices}

    def _unseen(self, key: str, claim: dict) -> bool:
        """Whether this operator's write of the claim is in flight (the cache still has the claim as it was)."""
        return key in self.in_flight and self.in_flight[key].version == claim["metadata"].get("resourceVersion")

    def waiting(self, state: ClusterState, gang: GangKey, pods: list[dict],
                now: float) -> tuple[str, WriteClaims | None]:
        """Why the gang's pods cannot be bound yet as far as claims go ("" if they can), and the release of the claims
        allocated for them that no binding in flight holds (allocated by a plan that did not finish)."""
        if (held := self.backoff.get(gang)) is not None and held[0] > now:
            return (f"allocating its pods' ResourceClaims failed {held[1]} time(s) in a row, tried again in "
                    f"{held[0] - now:.0f}s: {held[2]}"), None
        claims, stale, ours = state.dra.claims, {}, {_uid(pod) for pod in pods}
        for pod in pods:
            found = claims_of(pod)
            if found.waiting:
                return found.waiting, None
            for key in (*found.keys, *found.shared):
                claim = claims.get(key)
                if claim is None:
                    return f"waiting for ResourceClaim {key} to be seen", None
                if claim["metadata"].get("deletionTimestamp"):
                    return f"ResourceClaim {key} of its pods is being deleted", None
                status = claim.get("status") or {}
                if self._unseen(key, claim) or not (status.get("allocation") or status.get("reservedFor")):
                    continue
                reserved = {c.get("uid") for c in _reserved(claim)}
                if key in found.keys or reserved and reserved <= ours:  # (a shared claim others use, or one
                    stale[key] = claim  # allocated before any pod used it, stands: the gang goes where it is)
        if stale:
            return (f"releasing {len(stale)} ResourceClaim(s) of its pods allocated for a binding that did not "
                    "happen", self._write(gang, [(key, claim, RELEASED) for key, claim in stale.items()]))
        return "", None

    def allocate(self, state: ClusterState, gang: GangKey, pods: list[dict], allocations: list[PodAllocations],
                 shared: PodAllocations, now: float) -> WriteClaims:
        """The claim writes of `pods` (each with its allocations, in its claims' order), held in flight; and of the
        claims they share by name, reserved for them all (`shared`: the allocations of those not allocated yet, in
        their order)."""
        writes = []
        for pod, allocated in zip(pods, allocations, strict=True):
            reserved = [_consumer(pod)]
            for key, allocation in zip(claims_of(pod).keys, allocated, strict=True):
                writes.append(self._hold(state, gang, key, allocation, reserved, now))
        unallocated, users = iter(shared), {_uid(pod) for pod in pods}
        for key in claims_of(pods[0]).shared if pods else ():
            claim = state.dra.claims[key]
            reserved = [c for c in _reserved(claim) if c.get("uid") not in users] + [_consumer(pod) for pod in pods]
            if (claim.get("status") or {}).get("allocation"):
                self.in_flight[key] = InFlight(claim["metadata"].get("resourceVersion") or "", (), now, gang)
                writes.append((key, claim, {"reservedFor": reserved}))  # (in flight: a refused write backs off)
            else:
                writes.append(self._hold(state, gang, key, next(unallocated), reserved, now))
        return self._write(gang, writes)

    def _hold(self, state: ClusterState, gang: GangKey, key: str, allocation: Allocation, reserved: list[dict],
              now: float) -> tuple[str, dict, dict]:
        """The write of claim `key`'s allocation reserved for `reserved`, held in flight."""
        claim = state.dra.claims[key]
        self.in_flight[key] = InFlight(claim["metadata"].get("resourceVersion") or "", allocation.devices, now, gang)
        return key, claim, {"allocation": allocation.to_dict(), "reservedFor": reserved}

    @staticmethod
    def _write(gang: GangKey, writes: list[tuple[str, dict, dict]]) -> WriteClaims:
        return WriteClaims(gang, tuple((key, claim["metadata"].get("uid") or "",
                                        claim["metadata"].get("resourceVersion") or "", status,
                                        tuple(claim["metadata"].get("finalizers") or ()))
                                       for key, claim, status in writes))


def _consumer(pod: dict) -> dict:
    """The pod as a claim's status.reservedFor names it."""
    meta = pod["metadata"]
    return {"resource": "pods", "name": meta["name"], "uid": meta.get("uid") or ""}
