"""Leader election on a coordination.k8s.io Lease: of several operator replicas, only the holder schedules.

Optimistic concurrency on the Lease's resourceVersion makes two replicas that race for it see one winner."""

from __future__ import annotations

import datetime
import logging

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _fmt(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(s: str | datetime.datetime | None) -> datetime.datetime | None:
    if s is None or isinstance(s, datetime.datetime):
        return s
    return datetime.datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


class LeaderLease:
    def __init__(self, api: client.ApiClient, namespace: str, name: str, identity: str, duration: int = 15) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity, self.duration = namespace, name, identity, duration
        self.leading = False

    def _body(self, transitions: int, rv: str | None, acquired: str | None) -> dict:
        now = _fmt(_now())
        meta = {"name": self.name, "namespace": self.namespace}
        if rv:
            meta["resourceVersion"] = rv
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": {
            "holderIdentity": self.identity, "leaseDurationSeconds": self.duration,
            "acquireTime": acquired or now, "renewTime": now, "leaseTransitions": transitions}}

    def step(self) -> bool:
        """Acquire or renew the lease if possible; return whether this replica leads now. Call every duration/3."""
        try:
            self.leading = self._step()
        except ApiException as e:
            if e.status not in (404, 409):
                log.warning("lease %s/%s: %s", self.namespace, self.name, e.reason)
            self.leading = False
        return self.leading

    def _step(self) -> bool:
        try:
            cur = self.coord.read_namespaced_lease(self.name, self.namespace, _preload_content=False).json()
        except ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease(self.namespace, self._body(0, None, None))
            log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
            return True
        spec = cur.get("spec") or {}
        rv = cur["metadata"]["resourceVersion"]
        holder = spec.get("holderIdentity")
        transitions = spec.get("leaseTransitions") or 0
        if holder == self.identity:
            self.coord.replace_namespaced_lease(self.name, self.namespace,
                                                self._body(transitions, rv, spec.get("acquireTime")))
            return True
        renewed = _parse(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds") or self.duration
        if holder and renewed and _now() < renewed + datetime.timedelta(seconds=duration):
            return False
        self.coord.replace_namespaced_lease(self.name, self.namespace, self._body(transitions + 1, rv, None))
        log.info("lease %s/%s taken over by %s from %s", self.namespace, self.name, self.identity, holder)
        return True

    def release(self) -> None:
        """Give the lease up on a clean shutdown so another replica takes over at once."""
        if not self.leading:
            return
        try:
            cur = self.coord.read_namespaced_lease(self.name, self.namespace, _preload_content=False).json()
            if (cur.get("spec") or {}).get("holderIdentity") == self.identity:
                cur["spec"]["holderIdentity"] = None
                cur["spec"]["renewTime"] = None
                self.coord.replace_namespaced_lease(self.name, self.namespace, cur)
        except ApiException as e:
            log.warning("lease release: %s", e.reason)
        self.leading = False
