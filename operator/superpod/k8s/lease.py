"""Leader election on a coordination.k8s.io Lease, as client-go does it: of several operator replicas, only the holder
writes.

- Expiry is judged by local observed time: a replica notes when it last saw the Lease record change (on its own
  clock) and takes the Lease only when it has not changed for leaseDurationSeconds since. Clocks of different
  machines are never compared, so skew cannot steal the Lease.
- The holder renews every retry period, from its own task, and counts itself leader only until its last successful
  renewal's start + renew deadline, which is shorter than the lease duration: it stops writing before any other
  replica may start (the difference is the margin for writes already in flight).
- Every write of the resourceVersion-checked update means two replicas that race for the Lease see one winner."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

from superpod.api.times import rfc3339
from superpod.k8s.api import LEASES, ApiError, ClusterAPI

log = logging.getLogger(__name__)
LEASE_SECONDS = 15.0
# The acquisition a cycle's decisions were made in: set by the schedule loop, carried by the cycle's tasks and the
# API worker threads they run on; None outside a cycle.
TERM: ContextVar[int | None] = ContextVar("superpod_lease_term", default=None)


def lease_timings(duration: float = LEASE_SECONDS) -> tuple[float, float, float]:
    """(lease duration, renew deadline, retry period), in the proportions client-go uses (15s, 10s, 2s)."""
    return duration, duration * 2 / 3, duration * 2 / 15


class LeaderLease:
    def __init__(self, api: ClusterAPI, namespace: str, name: str, identity: str, duration: float = LEASE_SECONDS,
                 renew_deadline: float = LEASE_SECONDS * 2 / 3, retry_period: float = LEASE_SECONDS * 2 / 15,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        if not retry_period < renew_deadline < duration:
            raise ValueError("need retry period < renew deadline < lease duration")
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.duration, self.renew_deadline, self.retry_period = duration, renew_deadline, retry_period
        self.clock, self.wall = clock, wall
        self.valid_until = float("-inf")  # local clock: leader until then, unless renewed
        self.term = 0  # leaseTransitions when this replica took the Lease: its writes carry it
        self.acquisitions = 0  # how often this replica took the Lease (each time: a new term)
        self._observed: tuple | None = None  # the last Lease record seen ...
        self._observed_at = 0.0  # ... and when it was first seen, on the local clock

    def is_leading(self) -> bool:
        return self.clock() < self.valid_until

    def may_write(self) -> bool:
        """Leading, and in the term the cycle that wants to write began in: a write held back (throttled) across a
        lost and retaken Lease carries a decision made before another replica may have written, and is not sent."""
        term = TERM.get()
        return self.is_leading() and (term is None or term == self.acquisitions)

    @property
    def fence(self) -> str:
        """Who writes, for the objects it creates: identity and Lease term."""
        return f"{self.identity}/{self.term}"

    async def step(self) -> bool:
        """Acquire or renew once; True while this replica leads. ApiErrors pass to the caller (who counts them)."""
        started = self.clock()
        try:
            lease = await self.api.get(LEASES, self.name, self.namespace)
        except ApiError as e:
            if not e.not_found:
                raise
            return await self._create(started)
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"),
                  spec.get("leaseTransitions"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, started
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        if holder and holder != self.identity and started < self._observed_at + duration:
            self.valid_until = float("-inf")
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        taking = holder != self.identity
        if taking:
            transitions += 1
        lease["spec"] = {**spec, "holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                         "renewTime": rfc3339(self.wall(), micro=True), "leaseTransitions": transitions,
                         "acquireTime": rfc3339(self.wall(), micro=True) if taking else spec.get("acquireTime")}
        try:
            await self.api.replace(LEASES, lease)
        except ApiError as e:
            if e.conflict:  # another replica wrote first
                self.valid_until = float("-inf")
                return False
            raise
        # Held already, but not in a term this replica counted: its taking write landed and the answer was lost
        # (or an earlier process of the same identity held it). Its first renewal begins the term.
        unknowingly = not taking and (self.acquisitions == 0 or transitions != self.term)
        if taking or unknowingly:
            self.term = transitions
            self.acquisitions += 1
            log.info("lease %s/%s taken by %s (term %d, from %s)", self.namespace, self.name, self.identity,
                     transitions, holder or "nobody")
        self.valid_until = started + self.renew_deadline
        return True

    async def _create(self, started: float) -> bool:
        now = rfc3339(self.wall(), micro=True)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        try:
            await self.api.create(LEASES, body)
        except ApiError as e:
            if e.conflict:
                return False
            raise
        self.term = 0
        self.acquisitions += 1
        self.valid_until = started + self.renew_deadline
        log.info("lease %s/%s created by %s", self.namespace, self.name, self.identity)
        return True

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown so another replica takes over at once."""
        if not self.is_leading():
            return
        self.valid_until = float("-inf")
        try:
            lease = await self.api.get(LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = None
                await self.api.replace(LEASES, lease)
        except ApiError as e:
            log.warning("lease release: %s", e)
