"""What the operator needs of the Kubernetes API, as a Protocol: list, get, create, replace (with the object's
resourceVersion as precondition), merge-patch and delete (with a uid precondition and the object's own grace
period). Two implementations: KubeAPI (k8s/kube.py) speaks to a real API server; MemoryAPI (k8s/memory.py) keeps the
objects in memory for unit tests and the simulator. Objects are plain dicts, as the API serves them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NamedTuple, Protocol


class Kind(NamedTuple):
    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NODES = Kind("", "v1", "nodes", False, "Node")
PODS = Kind("", "v1", "pods", True, "Pod")
SERVICES = Kind("", "v1", "services", True, "Service")
EVENTS = Kind("", "v1", "events", True, "Event")
CONFIGMAPS = Kind("", "v1", "configmaps", True, "ConfigMap")
LEASES = Kind("coordination.k8s.io", "v1", "leases", True, "Lease")
TRAININGJOBS = Kind("superpod.dev", "v1alpha1", "trainingjobs", True, "TrainingJob")
CLUSTERTOPOLOGIES = Kind("superpod.dev", "v1alpha1", "clustertopologies", False, "ClusterTopology")
GPUQUEUES = Kind("superpod.dev", "v1alpha1", "gpuqueues", False, "GPUQueue")
GPUUSAGES = Kind("superpod.dev", "v1alpha1", "gpuusages", False, "GPUUsage")
PODGROUPS = Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", True, "PodGroup")  # scheduler-plugins' coscheduling
RESOURCESLICES = Kind("resource.k8s.io", "v1", "resourceslices", False, "ResourceSlice")  # Dynamic Resource Allocation
DEVICECLASSES = Kind("resource.k8s.io", "v1", "deviceclasses", False, "DeviceClass")
RESOURCECLAIMS = Kind("resource.k8s.io", "v1", "resourceclaims", True, "ResourceClaim")
RESOURCECLAIMTEMPLATES = Kind("resource.k8s.io", "v1", "resourceclaimtemplates", True, "ResourceClaimTemplate")
COMPUTEDOMAINS = Kind("resource.nvidia.com", "v1beta1", "computedomains", True, "ComputeDomain")  # NVIDIA's driver
DRA = (RESOURCESLICES, DEVICECLASSES, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES)
# what the operator keeps in its cache (and PodGroups and the DRA kinds, where those APIs are served)
WATCHED = (NODES, PODS, SERVICES, TRAININGJOBS, CLUSTERTOPOLOGIES, GPUQUEUES, GPUUSAGES)


# Words of a 403 that refuses a write for something other than the object: RBAC, a full quota, a namespace being
# deleted (its jobs go with it; until then they wait, not Invalid)
NOT_THE_OBJECT = ("cannot create resource", "exceeded quota", "because it is being terminated")


class ApiError(Exception):
    """A refused or failed call. `status` is the HTTP status (0: no answer, e.g. a timeout or a refused connection);
    `reason` the API's StatusReason (AlreadyExists, Conflict, Invalid, NotFound, ...); `message` its own words."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{reason} ({status}): {message}" if status else f"{reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:  # AlreadyExists, or a stale resourceVersion / uid precondition
        return self.status == 409

    @property
    def invalid(self) -> bool:
        """The object itself is refused — malformed (400), invalid (422), or rejected by an admission plugin (a 403
        that is neither RBAC, nor a quota, nor its namespace being deleted) — so the same write cannot succeed."""
        if self.status == 403:
            return not any(cause in self.message for cause in NOT_THE_OBJECT)
        return self.status in (400, 422)

    @property
    def unknown_outcome(self) -> bool:  # sent, but no answer came back: the write may or may not have landed
        return self.status == 0 and self.reason == "Timeout"



class NotLeader(ApiError):
    """A write stopped before it was sent: this replica no longer holds the Lease."""

    def __init__(self) -> None:
        super().__init__(0, "NotLeader", "this replica no longer holds the Lease; the write was not sent")


def object_key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


class ClusterAPI(Protocol):
    async def list(self, kind: Kind) -> tuple[list[dict], str]:
        """Every object of the kind (all namespaces), and the list's resourceVersion."""
        ...

    def pages(self, kind: Kind) -> AsyncIterator[tuple[list[dict], str]]:
        """The same list a page at a time, each with the list's resourceVersion."""
        ...

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict: ...

    async def create(self, kind: Kind, obj: dict) -> dict: ...

    async def replace(self, kind: Kind, obj: dict) -> dict:
        """PUT: fails with 409 unless obj's metadata.resourceVersion is the stored one."""
        ...

    async def replace_status(self, kind: Kind, obj: dict) -> dict:
        """PUT to the status subresource, with the same precondition."""
        ...

    async def patch(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        """JSON merge patch (null deletes a key)."""
        ...

    async def patch_status(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        """Strategic merge patch of the status subresource (a pod's conditions merge by type)."""
        ...

    async def bind(self, namespace: str, name: str, uid: str, node: str,
                   annotations: dict[str, str] | None = None) -> None:
        """POST the pod's binding subresource, as kube-scheduler binds: only if it is still the pod with that uid
        and not bound yet (409 otherwise). The binding's `annotations` are written on the pod with its node."""
        ...

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, uid: str | None = None,
                     grace: int | None = None) -> dict | None:
        """Graceful delete (the object's own grace period, or `grace` seconds); `uid`: only if it is still that
        object. Returns the object as the deletion left it: marked for deletion, or removed at once (at the version of
        its removal, which its DELETED event carries too); None if it was gone already or is another object now."""
        ...

    async def close(self) -> None:
        """Let go of the connections the running loop holds (the end of a process or of its loop)."""
        ...
