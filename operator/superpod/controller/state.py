"""What the operator knows of the cluster, kept current from watch events (never re-listed per decision), and the
core Snapshot derived from it: rebuilt when nodes or the topology change, updated by diff when pods or placements
change."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

from superpod.api.convert import ConvertError, node_from_k8s, pod_from_k8s, topology_from_k8s
from superpod.core.model import Node, Pod, Snapshot, Topology
from superpod.core.request import JobRequest
from superpod.k8s.manifests import ATTEMPT_LABEL, INDEX_LABEL, JOB_LABEL

log = logging.getLogger(__name__)
# Dynamic MIG bookkeeping on the nodes themselves (see controller/mig.py), so it survives an operator restart.
MIG_EXPECT = "superpod.dev/mig-expect"  # resources the node must advertise once reconfigured (JSON)
MIG_LAYOUT = "superpod.dev/mig-layout"  # per-GPU geometry we configured (JSON)
MIG_REQUESTED_AT = "superpod.dev/mig-requested-at"  # epoch seconds
MIG_FOR = "superpod.dev/mig-for"  # the jobs the reconfiguration is for
MIG_FAILED = "superpod.dev/mig-failed"  # why the last reconfiguration failed; no more MIG plans here


def mig_held(obj: dict) -> bool:
    """A node we asked to reconfigure, until the MIG manager says success and its allocatable shows the result."""
    meta = obj.get("metadata") or {}
    expect = (meta.get("annotations") or {}).get(MIG_EXPECT)
    if not expect:
        return False
    if (meta.get("labels") or {}).get("nvidia.com/mig.config.state") != "success":
        return True
    alloc = (obj.get("status") or {}).get("allocatable") or {}
    return any(str(alloc.get(r, "0")) != str(n) for r, n in json.loads(expect).items())


@dataclass(frozen=True)
class PodInfo:
    key: str
    node: str | None
    phase: str
    deleting: bool
    job: str | None  # "<namespace>/<job name>" for pods the operator owns
    attempt: int | None
    index: int | None
    holds: Pod | None  # the capacity it holds (bound, not finished), for the snapshot


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _rv(obj: dict) -> int:
    return _int(obj.get("metadata", {}).get("resourceVersion")) or 0


def pod_info(obj: dict) -> PodInfo:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    ns = meta.get("namespace", "default")
    job = labels.get(JOB_LABEL)
    try:
        holds = pod_from_k8s(obj)
    except ConvertError as e:  # a pod with a malformed quantity: the API server would not have it, but be safe
        log.warning("ignoring pod capacity: %s", e)
        holds = None
    return PodInfo(
        key=f"{ns}/{meta.get('name')}", node=(obj.get("spec") or {}).get("nodeName"),
        phase=(obj.get("status") or {}).get("phase") or "Pending", deleting=bool(meta.get("deletionTimestamp")),
        job=f"{ns}/{job}" if job else None, attempt=_int(labels.get(ATTEMPT_LABEL)),
        index=_int(labels.get(INDEX_LABEL)), holds=holds,
    )


class ClusterState:
    def __init__(self, topology_name: str = "default") -> None:
        self.topology_name = topology_name
        self.nodes: dict[str, Node] = {}
        self.node_objs: dict[str, dict] = {}
        self.node_bad: dict[str, str] = {}  # nodes that could not be read, and why
        self.pods: dict[str, PodInfo] = {}
        self._by_job: dict[str, set[str]] = {}  # job key -> keys of its pods
        self.jobs: dict[str, dict] = {}
        self.topologies: dict[str, dict] = {}
        self._snap: Snapshot | None = None
        self._assumed: dict[str, tuple[JobRequest, dict[str, list[int]]]] = {}

    # ---- watch events -----------------------------------------------------------------------------------------
    def on_node(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            changed = self.nodes.pop(name, None) is not None
            self.node_objs.pop(name, None)
        else:
            self.node_objs[name] = obj
            try:
                node = node_from_k8s(obj)
                if mig_held(obj):  # being repartitioned: no placement until the new resources are there
                    node = replace(node, ready=False)
                self.node_bad.pop(name, None)
            except ConvertError as e:
                self.node_bad[name] = str(e)
                node = None
            changed = self.nodes.get(name) != node
            if node is None:
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = node
        if changed:
            self._snap = None

    def on_pod(self, kind: str, obj: dict) -> None:
        info = pod_info(obj)
        if kind == "DELETED":
            self.pods.pop(info.key, None)
        else:
            self.pods[info.key] = info
        if info.job:
            keys = self._by_job.setdefault(info.job, set())
            if kind == "DELETED":
                keys.discard(info.key)
                if not keys:
                    del self._by_job[info.job]
            else:
                keys.add(info.key)

    def on_job(self, kind: str, obj: dict) -> None:
        key = f"{obj['metadata'].get('namespace', 'default')}/{obj['metadata']['name']}"
        if kind == "DELETED":
            self.jobs.pop(key, None)
        elif key not in self.jobs or _rv(obj) >= _rv(self.jobs[key]):
            self.jobs[key] = obj  # never go back to an older version than one we wrote ourselves

    def on_topology(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.topologies.pop(name, None)
        else:
            self.topologies[name] = obj
        self._snap = None

    # ---- derived ----------------------------------------------------------------------------------------------
    def topology(self) -> tuple[Topology, str | None]:
        """The ClusterTopology in force (the one named topology_name, else the only one), and a problem if any."""
        obj = self.topologies.get(self.topology_name)
        if obj is None and len(self.topologies) == 1:
            obj = next(iter(self.topologies.values()))
        if obj is None:
            if self.topologies:
                return Topology(), (f"{len(self.topologies)} ClusterTopologies and none is named "
                                    f"{self.topology_name!r}")
            return Topology(), None
        try:
            return topology_from_k8s(obj), None
        except ConvertError as e:
            return Topology(), str(e)

    def pods_of(self, job_key: str) -> list[PodInfo]:
        return [self.pods[k] for k in self._by_job.get(job_key, ()) if k in self.pods]

    def snapshot(self, assumed: dict[str, tuple[JobRequest, dict[str, list[int]]]]) -> Snapshot:
        """The core snapshot: every pod holding capacity, except the pods of a placed attempt, whose whole placement
        is assumed instead (so a gang holds its nodes from the moment it is placed, pods created or not)."""
        covered = {(key, self._attempt(key)) for key in assumed}
        counted = {p.key: p.holds for p in self.pods.values()
                   if p.holds is not None and (p.job, p.attempt) not in covered}
        if self._snap is None:
            self._snap = Snapshot(self.nodes.values(), self.topology()[0], counted.values())
            self._assumed = {}
        snap = self._snap
        for key in [k for k in snap.pods if "#" not in k and k not in counted]:
            snap.remove_pod(key)
        for key, pod in counted.items():
            if snap.pods.get(key) != pod:
                snap.add_pod(pod)
        for key, (job, assignments) in list(self._assumed.items()):
            if key not in assumed or assumed[key][1] != assignments:
                snap.forget(job)
                del self._assumed[key]
        for key, (job, assignments) in assumed.items():
            if key not in self._assumed:
                snap.assume(job, assignments)
                self._assumed[key] = (job, assignments)
        return snap

    def adopt(self, job: JobRequest, assignments: dict[str, list[int]]) -> None:
        """The cycle assumed this placement into the snapshot itself: remember it so it is not assumed twice."""
        self._assumed[job.key] = (job, assignments)

    def drop(self, job: JobRequest) -> None:
        """A placement whose write failed: give its capacity back."""
        if self._snap is not None:
            self._snap.forget(job)
        self._assumed.pop(job.key, None)

    def _attempt(self, job_key: str) -> int | None:
        job = self.jobs.get(job_key)
        return _int(((job or {}).get("status") or {}).get("attempt")) if job else None
