"""What the operator knows of the cluster (the cache): Nodes, Pods, Services, TrainingJobs and ClusterTopologies,
kept current from watch events, from the answers to its own writes and from periodic relists — all applied on the
event loop, one at a time, through `apply` and `resync`.

Versions only move forward: an event older than what is cached (a late or repeated watch event, a relist taken
before our own write) is ignored; objects are tracked by uid, so an event of a deleted object never touches a new
object of the same name, and a deleted object's late events never bring it back (tombstones). resourceVersions are
compared as integers, which holds for etcd-backed API servers and for MemoryAPI."""

from __future__ import annotations

import itertools
import json
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass, replace

from superpod.api.convert import (
    POD_USAGE,
    node_from_k8s,
    pod_from_k8s,
    pod_resources,
    pod_usage_name,
    record_from_k8s,
    topology_from_k8s,
)
from superpod.api.manifests import ATTEMPT_LABEL, GANG_ANNOTATION, INDEX_LABEL, JOB_LABEL, SCHEDULER_NAME, is_replica
from superpod.api.models import GROUP
from superpod.api.podgang import QUEUE_LABEL, Grouping, gang_name, grouping, is_gang_key, nomination_of
from superpod.api.resources import ConvertError
from superpod.api.status import read_status
from superpod.api.times import timestamp
from superpod.controller.gpu_tally import GpuTally
from superpod.core.accounting import Run, gpu_units
from superpod.core.lifecycle import CONTAINER_ERRORS, PodState
from superpod.core.mig_render import STATE_LABEL
from superpod.core.model import Node, Pod, Topology
from superpod.core.phases import KUBELET_DISRUPTIONS, POD_FINISHED
from superpod.core.request import MIG_CAPABLE_LABEL, PRODUCT_LABEL
from superpod.core.usage import Ledger
from superpod.k8s.api import (
    CLUSTERTOPOLOGIES,
    GPUQUEUES,
    GPUUSAGES,
    NODES,
    PODGROUPS,
    PODS,
    SERVICES,
    TRAININGJOBS,
    Kind,
    object_key,
)

log = logging.getLogger(__name__)
TOMBSTONES = 50_000  # deleted uids remembered, so their late events are ignored
# Runs of deleted pods a standby keeps before it drops those no leader would bill (then: twice those it kept)
ENDED_KEPT = 1_000
# Kinds kept without metadata.managedFields (the server's field ownership, often half of a pod's or node's bytes):
# nodes and pods are most of the cache at fleet size, and are never written back whole.
SLIM = (NODES, PODS)
# What a node's kubelet reports that no decision reads: the image list alone is often most of a real node's bytes.
UNREAD_NODE_STATUS = ("images", "nodeInfo", "addresses", "daemonEndpoints", "volumesInUse", "volumesAttached",
                      "config", "runtimeHandlers", "features")
# Dynamic MIG bookkeeping on the nodes themselves (see controller/mig.py), so it survives an operator restart.
MIG_EXPECT = "superpod.dev/mig-expect"  # resources the node must advertise once reconfigured (JSON)
MIG_LAYOUT = "superpod.dev/mig-layout"  # per-GPU geometry we configured (JSON)
MIG_REQUESTED_AT = "superpod.dev/mig-requested-at"  # epoch seconds
MIG_FOR = "superpod.dev/mig-for"  # the jobs the reconfiguration is for
MIG_PREVIOUS = "superpod.dev/mig-previous"  # the nvidia.com/mig.config value before we changed it
MIG_PREVIOUS_RESOURCES = "superpod.dev/mig-previous-resources"  # what the node advertised before (JSON)
MIG_FAILED = "superpod.dev/mig-failed"  # why the last reconfiguration failed; no more MIG plans here
MIG_KEYS = "superpod.dev/mig-"  # the prefix of that bookkeeping, and of the label that opts a node in to dynamic MIG


def version(obj: dict) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def mig_expectation(obj: dict) -> dict[str, int] | None:
    """The resources a node must advertise once its requested MIG reconfiguration is done, or None. Raises
    ConvertError when our own annotation is damaged."""
    raw = (obj["metadata"].get("annotations") or {}).get(MIG_EXPECT)
    if not raw:
        return None
    try:
        expect = json.loads(raw)
        if not isinstance(expect, dict):
            raise ValueError("not a mapping")
        return {str(k): int(v) for k, v in expect.items()}
    except (ValueError, TypeError) as e:
        raise ConvertError(f"Node {obj['metadata']['name']}", f"metadata.annotations[{MIG_EXPECT}]",
                           f"not a JSON mapping of resource counts ({e})") from None


def mig_held(obj: dict) -> bool:
    """A node we asked to reconfigure, until the MIG manager says success and its allocatable shows the result."""
    expect = mig_expectation(obj)
    if expect is None:
        return False
    if (obj["metadata"].get("labels") or {}).get(STATE_LABEL) != "success":
        return True
    alloc = (obj.get("status") or {}).get("allocatable") or {}
    return any(str(alloc.get(r, "0")) != str(n) for r, n in expect.items())


@dataclass(frozen=True)
class PodGpus:
    """What billing reads of a bound pod that asks for GPUs (controller/podbills.py)."""

    units: float  # GPUs (a MIG slice counts g/7 of its GPU)
    requests: tuple[tuple[str, int], ...]  # all it requests of its node
    product: str | None  # the GPU product its nodeSelector asks for
    queue: str | None  # its superpod.dev/queue label
    job: str | None  # its superpod.dev/job-name label: a TrainingJob's pod, owned or orphaned


@dataclass(frozen=True)
class PodInfo:
    key: str
    uid: str
    node: str | None
    phase: str
    deleting: bool
    job: str | None  # "<namespace>/<job name>" for pods the operator owns; a pod gang's key for the pods it binds
    owner: str | None  # uid of the controlling owner
    attempt: int | None
    index: int | None
    holds: Pod | None  # the capacity it holds (bound, not finished), for the snapshot
    state: PodState
    run: Run  # from status.startTime until its GPUs were freed: its last container's finish (None while it runs or
    # terminates; a pod deleted before it finished ends when it is gone, `removed_run`)
    last_known: float = 0.0  # the latest time its object names (a start, a transition): it ran at least until
    gang_spec: str | None = None  # a TrainingJob pod's digest of the spec it was made from (manifests.gang_digest)
    gpus: PodGpus | None = None  # bound and asking for GPUs: what billing reads of it


@dataclass
class NodeEntry:
    uid: str
    obj: dict
    node: Node | None  # None when the object cannot be read: it is left out, with `problem` saying why
    problem: str | None = None
    not_ready_since: float | None = None  # on the local clock, when it was first seen not ready


def slim(obj: dict) -> dict:
    """A node or pod as cached: without managedFields, a node also without the status fields nothing reads."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if obj.get("kind") == "Node" and any(field in status for field in UNREAD_NODE_STATUS):
        obj = {**obj, "status": {k: v for k, v in status.items() if k not in UNREAD_NODE_STATUS}}
    return obj


class Relist:
    """A full list of one kind at one resourceVersion, applied page by page on the event loop; at its end, what it
    proves deleted (cached from before the list, absent from it) is dropped. Watch events may come between pages:
    versions only move forward, so a page older than them changes nothing."""

    def __init__(self, state: ClusterState, kind: Kind, list_version: str) -> None:
        self.state, self.kind, self.version = state, kind, list_version
        self.present: set[str] = set()
        self.changed = 0
        self.dropped: list[str] = []  # keys the list proved deleted: cached, but their deletion never seen

    def page(self, items: list[dict], now: float) -> None:
        apply, kind = self.state.apply, self.kind
        for item in items:
            self.changed += apply(kind, "MODIFIED", item, now)
            self.present.add(object_key(item))

    def end(self, now: float) -> int:
        """Drop what the list proves deleted; how many cached objects the whole list changed."""
        try:
            listed_at = int(self.version)
        except ValueError:
            listed_at = 0
        state, plural = self.state, self.kind.plural
        for (kind_plural, key), (uid, rv) in list(state._versions.items()):
            if kind_plural == plural and key not in self.present and rv <= listed_at:
                state._forget(self.kind, key, uid, max(rv, listed_at), now)
                self.dropped.append(key)
                self.changed += 1
        return self.changed

    def said(self) -> str:
        """What the list corrected, for the log: how many it changed, and which it found gone (a few)."""
        gone = (f", {len(self.dropped)} deleted unseen (e.g. {', '.join(self.dropped[:5])})" if self.dropped
                else "")
        return f"{self.changed} {self.kind.plural}{gone}"


class ClusterState:
    def __init__(self, topology_name: str = "default", scheduler_name: str = SCHEDULER_NAME) -> None:
        self.topology_name, self.scheduler_name = topology_name, scheduler_name
        self.nodes: dict[str, NodeEntry] = {}
        self.pods: dict[str, PodInfo] = {}
        self.jobs: dict[str, dict] = {}
        self.services: dict[str, str] = {}  # key -> uid
        self.topologies: dict[str, dict] = {}
        self.queues: dict[str, dict] = {}  # GPUQueue name -> object
        self.queue_edits = 0  # bumped on every stored or deleted GPUQueue
        self.ledger = Ledger()  # the GPUUsage records, by queue
        self.by_job: dict[str, set[str]] = {}  # job key (or pod gang key) -> keys of its pods
        self.gang_keys: set[str] = set()  # the pod gang keys of by_job
        self.gang_pods: dict[str, dict] = {}  # pod key -> object, of the pods other controllers ask it to bind
        self.gang_nominations: dict[str, str] = {}  # pod key -> gang key, of those pods holding a nomination
        self.pod_groups: dict[str, dict] = {}  # PodGroup key -> object (scheduling.x-k8s.io, when served)
        self.holding: dict[str, Pod] = {}  # pod key -> the capacity it holds (bound, not finished)
        self.holding_changed: set[str] = set()  # keys changed in `holding` since the snapshot last took them
        self.gpus = GpuTally()  # GPUs offered by the usable nodes and held by `holding`, by product
        self.edited_jobs: set[str] = set()  # TrainingJobs stored or deleted since JobReader last read them
        # Job statuses in force but not sent yet (WriteStatus.deferred): key -> (the object as the API server has it,
        # since when). The cache shows the job with its new status until a status is written (the next write of
        # it landing, or anyone's) or the job is deleted; then what the API server has is all there is.
        self.unsent: dict[str, tuple[dict, float]] = {}
        self.ended: dict[str, tuple[str, int, Run]] = {}  # pod key -> (job uid, attempt, run) of deleted pods
        # Pods billed on their own (controller/podbills.py) — GPU pods no TrainingJob owns (pod gangs, orphans,
        # other schedulers' pods) and a TrainingJob's pods being deleted (past their attempt's close) — while they
        # hold GPUs, and the keys changed in it since billing last took them (all of them after `billable_whole`)
        self.billable: dict[str, PodInfo] = {}
        self.billable_changed: set[str] = set()
        self.billable_whole = True
        # pod uid -> such pods that ended (finished, or gone: their run until their GPUs were freed) whose own
        # record is not in the ledger yet; a record that arrives takes its pod out (on every replica)
        self.unbilled: OrderedDict[str, PodInfo] = OrderedDict()
        self.version = 0  # bumped on every change to nodes or the topology
        # bumped when the snapshot cannot follow in place (a node added, removed or unreadable, the topology changed)
        self.layout = 0
        self.node_stamps: dict[str, int] = {}  # node name -> the version of its last change (present nodes only)
        self.nodes_changed: set[str] = set()  # names of the nodes changed since the snapshot last took them
        self.unreadable: set[str] = set()  # names of the nodes whose object cannot be read (NodeEntry.problem)
        self.node_edits = 0  # bumped on every stored or deleted Node object (annotations included)
        # Nodes with a label or annotation under MIG_KEYS: what the MIG flow looks at, kept as nodes are stored (at
        # fleet size every heartbeat stores a node; a scan of them all at each was most of the operator's CPU).
        self.mig_nodes: set[str] = set()
        self.offers: dict[tuple[str, str], int] = {}  # offer_keys of the usable nodes -> how many nodes offer it
        self.changes: dict[str, int] = {}  # job key -> stamp of the last change to the job, its pods or Service
        self.touched: set[str] = set()  # keys of the jobs stamped (or deleted) since the controller last looked
        # uids of the jobs, nodes and queues deleted since the controller last dropped what it remembers of them
        self.gone: deque[str] = deque(maxlen=TOMBSTONES)
        # A cycle takes the changes above (touched, edited_jobs, holding_changed, nodes_changed, gone); on a standby
        # none does, and none is kept (`unfollow`): its cache is bounded by what exists, whatever the churn.
        self.followed = True
        self._ended_bound = ENDED_KEPT  # a standby looks which runs of deleted pods still matter past this many
        self._stamps = itertools.count(1)  # never repeats, so a (stamp, version) seen once is never seen again
        self._versions: dict[tuple[str, str], tuple[str, int]] = {}  # (plural, key) -> (uid, resourceVersion)
        self._tombstones: OrderedDict[str, int] = OrderedDict()  # deleted uid -> resourceVersion of the deletion

    # ---- the one way in -----------------------------------------------------------------------------------------
    def apply(self, kind: Kind, event: str, obj: dict, now: float) -> bool:
        """One watch event (ADDED, MODIFIED, DELETED) or an object a write returned; False if it was stale."""
        meta = obj.get("metadata") or {}
        key, uid, rv = object_key(obj), meta.get("uid") or "", version(obj)
        if self._tombstones.get(uid, -1) >= rv:
            return False  # an event of an object already deleted
        held = self._versions.get((kind.plural, key))
        # Older than what we have, or the same version again. A deletion at the version we hold is news: a delete
        # that removed the object at once answers with the version its DELETED event then carries.
        if held is not None and held[0] == uid and (held[1] > rv or held[1] == rv != 0 and event != "DELETED"):
            return False
        if event == "DELETED":
            if held is not None and held[0] != uid:
                return False  # the name belongs to a newer object now
            self._forget(kind, key, uid, rv, now, obj)
            return True
        self._versions[(kind.plural, key)] = (uid, rv)
        if kind in SLIM:
            obj = slim(obj)
        self._store(kind, key, obj, now)
        self._changed(kind, key)
        return True

    def defer(self, key: str, resource_version: str, status: dict, now: float) -> bool:
        """A job's new status in force at once and sent later; False if the job is gone or no longer at
        `resource_version` (the decision was made on another version)."""
        obj = self.jobs.get(key)
        if obj is None or (resource_version and obj["metadata"].get("resourceVersion") != resource_version):
            return False
        self.unsent.setdefault(key, (obj, now))
        self.jobs[key] = {**obj, "status": status}
        self._edited(key)
        self._stamp(key)
        return True

    def _store_job(self, key: str, obj: dict) -> None:
        """A job's new version. A status not sent yet stays in force over an edit that left the status as it was
        (a label, the spec: the status write that follows is made on this version); a status written by anyone
        ends it."""
        unsent = self.unsent.get(key)
        if unsent is not None and obj.get("status") == unsent[0].get("status"):
            self.unsent[key] = (obj, unsent[1])
            obj = {**obj, "status": self.jobs[key]["status"]}
        else:
            self.unsent.pop(key, None)
        before = self.jobs.get(key)
        self.jobs[key] = obj
        self._edited(key)
        if before is None or before["metadata"].get("uid") != obj["metadata"].get("uid") or (
                _accounted(before) != _accounted(obj)):
            self._owner_changed(key)

    def _owner_changed(self, key: str) -> None:
        """The job of this name came, went, was made again or closed an attempt: whether its pods are billed on their
        own may change."""
        for pod_key in self.by_job.get(key, ()):
            if (info := self.pods.get(pod_key)) is not None:
                self._bill(pod_key, info)
                self._unbill_ended(info)

    def forget_unsent(self) -> None:
        """The jobs as the API server has them: the statuses not sent are dropped (a new Lease term decides only on
        what was written; the pods a dropped placement made are found by their job, `decide.recovered`)."""
        for key, (obj, _) in self.unsent.items():
            self.jobs[key] = obj
            self._edited(key)
            self._stamp(key)
        self.unsent.clear()

    # ---- what the cycle takes -----------------------------------------------------------------------------------
    def unfollow(self) -> None:
        """No cycle takes the changes from now on (a standby): those kept are dropped and no more are kept, and of the
        runs of deleted pods only those a leader would bill. A new term relists everything, and its first cycle
        looks at everything (`follow`)."""
        if not self.followed:
            return
        self.followed = False
        self.touched, self.edited_jobs, self.holding_changed, self.nodes_changed = set(), set(), set(), set()
        self.gone.clear()
        self._forget_accounted()

    def follow(self) -> bool:
        """A cycle takes the changes from now on; False when none were kept until now: it must look at everything."""
        kept, self.followed = self.followed, True
        return kept

    def _changed(self, kind: Kind, key: str) -> None:
        if job := self._job_of(kind, key):
            self._stamp(job)

    def _job_of(self, kind: Kind, key: str) -> str | None:
        """The job (or pod gang) a change of this object is a change of."""
        if kind is PODS:
            return self.pods[key].job if key in self.pods else None
        if kind in (SERVICES, TRAININGJOBS):
            return key
        if kind is PODGROUPS:
            namespace, name = key.split("/", 1)
            return Grouping(name, "pod-group").key(namespace)
        return None

    def touch(self, job: str) -> None:
        """Have the controller look at a job (or pod gang) again though nothing of it changed."""
        self._stamp(job)

    def _stamp(self, job: str) -> None:
        """The job changed: a new stamp while anything of it is cached, none once all is gone (the pods the garbage
        collector deletes after their job, every Service of the cluster, left one each for good); the cycle looks
        at it again."""
        if (job in self.jobs or self.by_job.get(job) or job in self.services
                or is_gang_key(job) and gang_name(job) in self.pod_groups):
            self.changes[job] = next(self._stamps)
        else:
            self.changes.pop(job, None)
        if self.followed:
            self.touched.add(job)

    def _edited(self, key: str) -> None:
        if self.followed:
            self.edited_jobs.add(key)

    def _gone(self, uid: str) -> None:
        if self.followed:
            self.gone.append(uid)

    def resync(self, kind: Kind, items: list[dict], list_version: str, now: float) -> int:
        """A full list: apply every item, and drop what the list proves deleted (cached from before the list, absent
        from it). Returns how many cached objects changed."""
        relist = self.relist(kind, list_version)
        relist.page(items, now)
        return relist.end(now)

    def relist(self, kind: Kind, list_version: str) -> Relist:
        """A full list taken page by page (resync one page at a time: the pages are never all held at once)."""
        return Relist(self, kind, list_version)

    def _store(self, kind: Kind, key: str, obj: dict, now: float) -> None:
        if kind is PODS:
            self._store_pod(key, obj, now)
        elif kind is TRAININGJOBS:
            self._store_job(key, obj)
        elif kind is NODES:
            self._store_node(key, obj, now)
        elif kind is SERVICES:
            self.services[key] = obj["metadata"].get("uid") or ""
        elif kind is CLUSTERTOPOLOGIES:
            self.topologies[key] = obj
            self.version += 1
            self.layout += 1
        elif kind is GPUQUEUES:
            self.queues[key] = obj
            self.queue_edits += 1
        elif kind is GPUUSAGES:
            self._store_record(key, obj)
        elif kind is PODGROUPS:
            self.pod_groups[key] = obj

    def _forget(self, kind: Kind, key: str, uid: str, rv: int, now: float, obj: dict | None = None) -> None:
        job = self._job_of(kind, key)  # stamped at the end, once the object is gone (no stamp outlives its job)
        self._versions.pop((kind.plural, key), None)
        if uid:
            self._tombstones[uid] = rv
            while len(self._tombstones) > TOMBSTONES:
                self._tombstones.popitem(last=False)
        if kind is PODS:
            pod = self.pods.pop(key, None)
            if (held := self.holding.pop(key, None)) is not None:
                if self.followed:
                    self.holding_changed.add(key)
                self.gpus.pod(held, None)
            self.gang_pods.pop(key, None)
            self.gang_nominations.pop(key, None)
            if pod is not None and pod.job:
                self._leave_job(key, pod)
                if pod.owner is None:
                    self._gone(pod.uid)  # the Events said on it
            if pod is not None:
                run = removed_run(pod, obj, now)
                if pod.job:
                    self._keep_run(key, pod, run)
                self._bill(key, None)
                if pod.gpus is not None and run.start is not None and pod.phase not in POD_FINISHED:
                    self._unbilled(replace(pod, run=run))  # (a finished pod was taken when it finished)
        elif kind is TRAININGJOBS:
            self.jobs.pop(key, None)
            self.unsent.pop(key, None)
            self._edited(key)
            self._gone(uid)
            self._owner_changed(key)
        elif kind is NODES:
            gone = self.nodes.pop(key, None)
            self._offer(gone.node if gone else None, -1)
            self.gpus.node(key, gone.node if gone else None, None)
            self.mig_nodes.discard(key)
            self.unreadable.discard(key)
            self.node_edits += 1
            self.version += 1
            self.layout += 1
            self.node_stamps.pop(key, None)  # the layout changed: the next snapshot is built anew
            self._gone(uid)
        elif kind is SERVICES:
            self.services.pop(key, None)
        elif kind is CLUSTERTOPOLOGIES:
            self.topologies.pop(key, None)
            self.version += 1
            self.layout += 1
        elif kind is GPUQUEUES:
            self.queues.pop(key, None)
            self.queue_edits += 1
            self._gone(uid)
        elif kind is GPUUSAGES:
            self.ledger.remove(key)
        elif kind is PODGROUPS:
            self.pod_groups.pop(key, None)
        if job:
            self._stamp(job)

    def _keep_run(self, key: str, pod: PodInfo, run: Run) -> None:
        """Keep a deleted pod's run until its attempt is accounted (`forget_ended`): the leader's cycle drops the
        others every cycle, a standby each time they have doubled."""
        self.ended[key] = (pod.owner, pod.attempt, run)
        if not self.followed and len(self.ended) > self._ended_bound:
            self._forget_accounted()

    def _leave_job(self, key: str, pod: PodInfo) -> None:
        """Pod `key` no longer counts for `pod.job` (deleted, or relabelled into another gang); a pod gang left with
        no pods is gone, with what is remembered of it."""
        self.by_job.get(pod.job, set()).discard(key)
        if not self.by_job.get(pod.job):
            self.by_job.pop(pod.job, None)
            self.gang_keys.discard(pod.job)
            if pod.owner is None:
                self._gone(pod.job)

    def _store_pod(self, key: str, obj: dict, now: float) -> None:
        held = self.holding.get(key)
        info = pod_info(obj, self.scheduler_name, held)
        old = self.pods.get(key)
        if old is not None and old.job and old.job != info.job:
            self._leave_job(key, old)
            self._stamp(old.job)  # the job it left has one pod fewer
        self.pods[key] = info
        if info.holds is not held:
            if self.followed:
                self.holding_changed.add(key)
            self.gpus.pod(held, info.holds)
        if info.holds is not None:
            self.holding[key] = info.holds
        else:
            self.holding.pop(key, None)
        if info.job:
            self.by_job.setdefault(info.job, set()).add(key)
            if is_gang_key(info.job):
                self.gang_keys.add(info.job)
        if info.job and not info.owner:
            self.gang_pods[key] = obj
        else:
            self.gang_pods.pop(key, None)
        if info.job and not info.owner and nomination_of(obj) is not None:
            self.gang_nominations[key] = info.job
        else:
            self.gang_nominations.pop(key, None)
        self._bill(key, info)
        self._unbill_ended(info)

    def _unbill_ended(self, info: PodInfo) -> None:
        """A finished pod billed on its own has its record due (a TrainingJob's live one: its attempt bills it all)."""
        if info.gpus is not None and info.run.start is not None and info.run.end is not None and self._on_its_own(info):
            self._unbilled(info)

    def _on_its_own(self, info: PodInfo) -> bool:
        """Billed by itself, not by an attempt: no TrainingJob owns it, it is being deleted, or its job is gone (or
        was made again: the garbage collector has yet to come to it)."""
        if info.owner is None or info.deleting:
            return True
        job = self.jobs.get(info.job or "")
        return job is None or job["metadata"].get("uid") != info.owner or info.attempt is not None and (
            info.attempt <= _accounted(job))  # its attempt closed and billed: what it runs since is its own

    def _bill(self, key: str, info: PodInfo | None) -> None:
        """Keep `billable`: a pod holding GPUs billed on its own (`_on_its_own`)."""
        if info is not None and info.gpus is not None and info.holds is not None and self._on_its_own(info):
            if self.billable.get(key) is not info:
                self.billable[key] = info
                self._bill_changed(key)
        elif self.billable.pop(key, None) is not None:
            self._bill_changed(key)

    def _bill_changed(self, key: str) -> None:
        if len(self.billable_changed) >= TOMBSTONES:  # nobody takes them (a standby): the next taker looks at all
            self.billable_changed.clear()
            self.billable_whole = True
        self.billable_changed.add(key)

    def _unbilled(self, pod: PodInfo) -> None:
        if pod_usage_name(pod.uid) in self.ledger.queue_of:
            return  # billed already
        self.unbilled[pod.uid] = replace(pod, holds=None, state=_ENDED)  # what billing reads of it, no more
        while len(self.unbilled) > TOMBSTONES:  # a standby whose leader bills none of them: the oldest go
            self.unbilled.popitem(last=False)

    def take_billable_changes(self) -> set[str] | None:
        """The keys of `billable` changed since the last take (None: look at all of them)."""
        changed, whole = self.billable_changed, self.billable_whole
        self.billable_changed, self.billable_whole = set(), False
        return None if whole else changed

    def _store_record(self, name: str, obj: dict) -> None:
        self.ledger.remove(name)
        if name.endswith(POD_USAGE):
            self.unbilled.pop(name[:-len(POD_USAGE)], None)
        try:
            record = record_from_k8s(obj)
        except ConvertError as e:  # the API server checks the schema: only a hand-edited CRD gets here
            log.warning("GPUUsage %s is left out of the budgets: %s", name, e)
            return
        self.ledger.add(name, record)

    def _store_node(self, name: str, obj: dict, now: float) -> None:
        self.node_edits += 1
        old = self.nodes.get(name)
        problem = None
        try:
            node: Node | None = node_from_k8s(obj)
            if mig_held(obj):  # being repartitioned: no placement until the new resources are there
                node = replace(node, held="being repartitioned for MIG")
        except ConvertError as e:
            node, problem = None, str(e)
        ready = node is not None and node.ready
        since = None if ready else (old.not_ready_since if old and old.not_ready_since is not None else now)
        self.nodes[name] = NodeEntry(obj["metadata"].get("uid") or "", obj, node, problem, since)
        if problem:
            self.unreadable.add(name)
        else:
            self.unreadable.discard(name)
        if old is None or old.node != node:
            self._offer(old.node if old else None, -1)
            self._offer(node, 1)
            self.gpus.node(name, old.node if old else None, node)
        meta = obj["metadata"]
        if any(k.startswith(MIG_KEYS) for k in (*(meta.get("annotations") or ()), *(meta.get("labels") or ()))):
            self.mig_nodes.add(name)
        else:
            self.mig_nodes.discard(name)
        if old is None or old.node != node:
            self.version += 1
            self.node_stamps[name] = self.version
            if self.followed:
                self.nodes_changed.add(name)
            if old is None or old.node is None or node is None:
                self.layout += 1

    def _offer(self, node: Node | None, sign: int) -> None:
        for key in offer_keys(node) if node is not None else ():
            count = self.offers.get(key, 0) + sign
            if count:
                self.offers[key] = count
            else:
                del self.offers[key]

    # ---- reading ------------------------------------------------------------------------------------------------
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

    def usable_nodes(self) -> list[Node]:
        return [entry.node for entry in self.nodes.values() if entry.node is not None]

    def forget_ended(self, accounted: dict[str, int]) -> None:
        """Drop the runs of deleted pods once their attempt is accounted or their job is gone (job uid ->
        accountedAttempts)."""
        self.ended = {k: v for k, v in self.ended.items() if v[0] in accounted and v[1] > accounted[v[0]]}

    def _forget_accounted(self) -> None:
        """`forget_ended` without a cycle (a standby): the attempts accounted as the cached jobs' statuses say. Looks
        again only when as many more runs are kept (and not before the jobs are as many)."""
        owners = {uid for uid, _, _ in self.ended.values()}
        self.forget_ended({uid: read_status(obj)[0].accountedAttempts for obj in self.jobs.values()
                           if (uid := obj["metadata"].get("uid")) in owners})
        self._ended_bound = max(ENDED_KEPT, len(self.jobs), 2 * len(self.ended))

    def pods_of(self, job_key: str) -> list[PodInfo]:
        return [self.pods[k] for k in self.by_job.get(job_key, ()) if k in self.pods]


def _accounted(job: dict) -> int:
    """The attempts a job's status says are closed and billed (status.accountedAttempts)."""
    value = (job.get("status") or {}).get("accountedAttempts")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


_ENDED = PodState("Succeeded")  # the state kept of a pod whose bill is due (billing reads its run, not its state)


def offer_keys(node: Node) -> set[tuple[str, str]]:
    """What one usable node adds to what the cluster offers at all (`decide.Offered`): ("product", its GPU product),
    ("resource", each resource it has some of), ("mig", its product when it is MIG-capable)."""
    keys = {("resource", resource) for resource, amount in node.allocatable.items() if amount > 0}
    product = node.labels.get(PRODUCT_LABEL)
    if product is not None:
        keys.add(("product", product))
        if node.labels.get(MIG_CAPABLE_LABEL) == "true":
            keys.add(("mig", product))
    return keys


def pod_info(obj: dict, scheduler_name: str = SCHEDULER_NAME, held: Pod | None = None) -> PodInfo:
    """What the cache keeps of a pod. A pod a TrainingJob controls, named as the replica its labels say, is its job's
    (a pod that only carries a job's owner reference and labels is not); a pod another controller made for this
    scheduler (spec.schedulerName) is its gang's (api/podgang.py), bound or not. `held`: what the pod held before,
    kept as the same object when it holds the same (the snapshot compares holdings by identity first: an equal copy
    from each status update of each pod was compared again every cycle)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    ns = meta.get("namespace", "default")
    replica = is_replica(str(meta.get("name")), labels)
    owner = next((o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller") and o.get("kind") ==
                  "TrainingJob" and str(o.get("apiVersion")).startswith(f"{GROUP}/") and o.get("name") ==
                  labels.get(JOB_LABEL)), None) if replica else None
    job = f"{ns}/{labels.get(JOB_LABEL)}" if owner else None
    if owner is None and (obj.get("spec") or {}).get("schedulerName") == scheduler_name:
        job = grouping(obj).key(ns)
    status = obj.get("status") or {}
    try:
        holds = pod_from_k8s(obj)
        if holds is not None and holds == held:
            holds = held
    except ConvertError as e:  # a pod with a malformed quantity: the API server would not have it, but be safe
        log.warning("ignoring pod capacity: %s", e)
        holds = None
    state = pod_state(obj)
    return PodInfo(
        key=f"{ns}/{meta.get('name')}", uid=meta.get("uid") or "", node=(obj.get("spec") or {}).get("nodeName"),
        phase=state.phase, deleting=bool(meta.get("deletionTimestamp")), job=job,
        owner=owner, attempt=_int(labels.get(ATTEMPT_LABEL)), index=_int(labels.get(INDEX_LABEL)), holds=holds,
        state=state, run=Run(_time(status.get("startTime")), _ended(obj)), last_known=_last_known(status, meta),
        gang_spec=(meta.get("annotations") or {}).get(GANG_ANNOTATION) if owner else None,
        gpus=_gpus(obj, holds, state.phase, labels, replica),
    )


def _gpus(obj: dict, holds: Pod | None, phase: str, labels: dict, replica: bool) -> PodGpus | None:
    """What billing reads of a bound pod that asks for GPUs (None: unbound, or no GPUs). `replica`: it is named as
    its labels say a TrainingJob's replica is (else its job-name label is not read)."""
    spec = obj.get("spec") or {}
    if holds is not None:
        requests = holds.requests
    elif spec.get("nodeName") and phase in POD_FINISHED:  # finished: it held them (its requests, computed again)
        try:
            requests = pod_resources(obj)
        except ConvertError:
            return None
    else:
        return None
    units = gpu_units(requests)
    if not units:
        return None
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    product = selector.get(PRODUCT_LABEL)
    return PodGpus(units, requests, str(product) if product is not None else None, labels.get(QUEUE_LABEL) or None,
                   (labels.get(JOB_LABEL) or None) if replica else None)


def removed_run(pod: PodInfo, obj: dict | None, now: float) -> Run:
    """The run of a pod that is gone, until its GPUs were freed: its containers' finish when its last version names
    it (the kubelet writes them before its final delete), else when the removal was seen (`now`), at most the end of
    its grace period (deletionTimestamp). A pod that vanished unseen (a relist found it gone) is billed only up to
    the last time its object names: never more than it ran."""
    if obj is None:
        run = pod.run
        return run if run.end is not None else replace(run, end=max(run.start or 0.0, pod.last_known))
    run = pod_info(obj).run
    if run.end is not None or run.start is None:
        return run
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    containers = status.get("containerStatuses") or []
    ends = _finishes(containers)
    if containers and len(ends) == len(containers):
        end = max(ends)
    else:
        deadline = _time(meta.get("deletionTimestamp"))
        end = now if deadline is None else min(now, deadline)
    return replace(run, end=max(run.start, end))


def pod_state(obj: dict) -> PodState:
    """What the lifecycle needs of a pod: phase, the exit code and message of a failure, a container error, and
    whether the infrastructure (eviction, preemption, the kubelet's admission) rather than the program ended it."""
    status = obj.get("status") or {}
    phase = status.get("phase") or "Pending"
    exit_code, message, waiting, waiting_message = None, status.get("message") or "", "", ""
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = c.get("state") or {}
        done = state.get("terminated") or {}
        if done.get("exitCode") and exit_code is None:
            exit_code = _int(done.get("exitCode"))
            message = done.get("message") or done.get("reason") or message
        why = (state.get("waiting") or {}).get("reason") or ""
        if why in CONTAINER_ERRORS and not waiting:
            waiting, waiting_message = why, (state.get("waiting") or {}).get("message") or ""
    reason = status.get("reason") or ""
    disrupted = reason in KUBELET_DISRUPTIONS or reason.startswith("OutOf") or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or [])
    if status.get("reason") and not message:
        message = status["reason"]
    return PodState(phase=phase, node=(obj.get("spec") or {}).get("nodeName"), exit_code=exit_code,
                    message=(waiting_message if waiting and phase != "Failed" else message)[:512],
                    waiting_reason=waiting, disrupted=disrupted)


def _last_known(status: dict, meta: dict | None = None) -> float:
    """The latest time the object names that the pod ran until (if it started): a start, a transition, the deletion
    request."""
    times = [status.get("startTime")] + [c.get("lastTransitionTime") for c in status.get("conditions") or []] + [
        ((c.get("state") or {}).get("running") or {}).get("startedAt") for c in status.get("containerStatuses") or []]
    known = [t for t in map(_time, times) if t is not None]
    deleting = _time((meta or {}).get("deletionTimestamp"))
    if deleting is not None:
        known.append(deleting - float((meta or {}).get("deletionGracePeriodSeconds") or 0))
    return max(known, default=0.0)


def _ended(obj: dict) -> float | None:
    """When the pod's GPUs were freed, while its object is there: once it finished, its last container's finish
    (else the last time its object names); None while it runs, or terminates: a pod being deleted holds its GPUs
    until it is gone (`removed_run`)."""
    status = obj.get("status") or {}
    if status.get("phase") not in POD_FINISHED:
        return None
    ends = _finishes(status.get("containerStatuses") or [])
    return max(ends) if ends else _last_known(status)


def _finishes(containers: list) -> list[float]:
    """The finish times of the containers that terminated."""
    ends = [_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt")) for c in containers]
    return [t for t in ends if t is not None]


def _time(value) -> float | None:
    try:
        return timestamp(value) or None
    except ValueError:
        return None


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
