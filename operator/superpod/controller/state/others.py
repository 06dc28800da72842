"""The stores of the kinds with few objects: Services, ClusterTopologies, GPUQueues and PodGroups."""

from __future__ import annotations

from collections.abc import Callable

from superpod.api.convert import topology_from_k8s
from superpod.api.podgang import Grouping
from superpod.api.resources import ConvertError
from superpod.controller.state.base import Notes
from superpod.controller.state.jobs import job_key
from superpod.core.gang_key import POD_GANG, GangKey
from superpod.core.model import Topology


class ServiceStore:
    """The Services (a gang's headless Service, named as its job): the job's key -> uid."""

    def __init__(self) -> None:
        self.services: dict[GangKey, str] = {}

    def job_of(self, key: str) -> GangKey | None:
        return job_key(key)

    def store(self, key: str, obj: dict, now: float) -> None:
        self.services[job_key(key)] = obj["metadata"].get("uid") or ""

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        self.services.pop(job_key(key), None)


class TopologyStore:
    """The ClusterTopologies; a change of any is a new layout of the nodes (`relayout`)."""

    def __init__(self, topology_name: str, relayout: Callable[[], None]) -> None:
        self.topology_name, self.relayout = topology_name, relayout
        self.topologies: dict[str, dict] = {}
        self._read: tuple[dict | None, tuple[Topology, str | None]] | None = None  # the object in force, as read

    def job_of(self, key: str) -> GangKey | None:
        return None

    def store(self, key: str, obj: dict, now: float) -> None:
        self.topologies[key] = obj
        self.relayout()

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        self.topologies.pop(key, None)
        self.relayout()

    def in_force(self) -> tuple[Topology, str | None]:
        """The ClusterTopology in force (the one named topology_name, else the only one), and a problem if any; read
        once per object stored (every placement's message asks)."""
        obj = self.topologies.get(self.topology_name)
        if obj is None and len(self.topologies) == 1:
            obj = next(iter(self.topologies.values()))
        if obj is None:
            if self.topologies:
                return Topology(), (f"{len(self.topologies)} ClusterTopologies and none is named "
                                    f"{self.topology_name!r}")
            return Topology(), None
        if self._read is None or self._read[0] is not obj:
            try:
                self._read = (obj, (topology_from_k8s(obj), None))
            except ConvertError as e:
                self._read = (obj, (Topology(), str(e)))
        return self._read[1]


class QueueStore:
    """The GPUQueues: name -> object, and a count of their edits."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self.queues: dict[str, dict] = {}
        self.queue_edits = 0  # bumped on every stored or deleted GPUQueue

    def job_of(self, key: str) -> GangKey | None:
        return None

    def store(self, key: str, obj: dict, now: float) -> None:
        self.queues[key] = obj
        self.queue_edits += 1

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        self.queues.pop(key, None)
        self.queue_edits += 1
        self.notes.went(uid)


class PodGroupStore:
    """The PodGroups (scheduling.x-k8s.io, when served): key -> object; a change of one is a change of its gang."""

    def __init__(self) -> None:
        self.pod_groups: dict[str, dict] = {}

    def job_of(self, key: str) -> GangKey | None:
        namespace, name = key.split("/", 1)
        return Grouping(name, "pod-group").key(namespace)

    def of(self, gang: GangKey) -> dict | None:
        """The PodGroup that names `gang` (a pod gang is its PodGroup's namesake), if any."""
        return self.pod_groups.get(f"{gang.namespace}/{gang.name}") if gang.kind == POD_GANG else None

    def store(self, key: str, obj: dict, now: float) -> None:
        self.pod_groups[key] = obj

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        self.pod_groups.pop(key, None)
