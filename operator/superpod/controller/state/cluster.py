"""ClusterState: the one way in to the cache, which keeps the versions and tombstones and the change stamps of jobs,
and hands each object to the store of its kind."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from operator import attrgetter

from superpod.api.manifests import SCHEDULER_NAME
from superpod.controller.gpu_tally import GpuTally
from superpod.controller.state.base import TOMBSTONES, Notes, Store, Unkept
from superpod.controller.state.billing import Billing
from superpod.controller.state.dra import DraStore
from superpod.controller.state.jobs import JobStore
from superpod.controller.state.nodes import NodeStore
from superpod.controller.state.others import PodGroupStore, QueueStore, ServiceStore, TopologyStore
from superpod.controller.state.pod_info import PodInfo
from superpod.controller.state.pods import PodStore
from superpod.core.gang_key import GangKey
from superpod.core.model import Node, Topology
from superpod.core.request import GPU
from superpod.k8s.api import (
    CLUSTERTOPOLOGIES,
    DRA,
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

UNKEPT = Unkept()


def version(obj: dict) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def _field(path: str) -> property:
    """A store's field under ClusterState's name: read, and put back whole by the cycle that takes it."""
    store, name = path.split(".")

    def put(state: ClusterState, value: object) -> None:
        setattr(getattr(state, store), name, value)

    return property(attrgetter(path), put)


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
    """The cache. Each kind has its store; the names callers read (`nodes`, `pods`, `jobs`, `holding`, ...) are the
    stores' own containers, which they never replace, or properties (`_field`) for their numbers and the sets a
    cycle takes."""

    version = _field("_nodes.version")  # bumped on every change to nodes or the topology
    layout = _field("_nodes.layout")  # bumped when the snapshot cannot follow the nodes in place
    node_edits = _field("_nodes.node_edits")
    nodes_changed = _field("_nodes.nodes_changed")
    holding_changed = _field("_pods.holding_changed")
    ended = _field("_pods.ended")
    edited_jobs = _field("_jobs.edited_jobs")
    queue_edits = _field("_queues.queue_edits")
    followed = _field("_notes.followed")
    topology_name = _field("_topologies.topology_name")
    scheduler_name = _field("_pods.scheduler_name")

    def __init__(self, topology_name: str = "default", scheduler_name: str = SCHEDULER_NAME) -> None:
        # A cycle takes what the stores note (touched, edited_jobs, holding_changed, nodes_changed, gone); on a
        # standby none does, and none is kept (`unfollow`): its cache is bounded by what exists, whatever the churn.
        self._notes = Notes()
        # Where the stores meet, all of it here: nodes offer GPUs and pods hold them (one tally); a pod stored or
        # gone is told to billing; billing and the pods read the jobs; a job that came, went or closed an attempt
        # has its pods billed again (`_owner_changed`); a pod that leaves a job stamps it; a ClusterTopology moves the
        # nodes' layout.
        self.gpus = GpuTally()  # GPUs offered by the usable nodes and held by `holding`, by product
        self._jobs = JobStore(self._notes, self._owner_changed)
        self._billing = Billing(self._jobs.jobs)
        self._nodes = NodeStore(self._notes, self.gpus)
        self._pods = PodStore(self._notes, scheduler_name, self.gpus, self._billing, self._jobs.jobs, self._stamp)
        self._services = ServiceStore()
        self._topologies = TopologyStore(topology_name, self._nodes.relayout)
        self._queues = QueueStore(self._notes)
        self._pod_groups = PodGroupStore()
        self._stores: dict[str, Store] = {  # by Kind.plural
            NODES.plural: self._nodes, PODS.plural: self._pods, TRAININGJOBS.plural: self._jobs,
            GPUUSAGES.plural: self._billing, SERVICES.plural: self._services,
            CLUSTERTOPOLOGIES.plural: self._topologies, GPUQUEUES.plural: self._queues,
            PODGROUPS.plural: self._pod_groups}
        pod_infos = self._pods.pods
        self.dra = DraStore(lambda pod_key: (info := pod_infos.get(pod_key)) and info.job,
                            lambda pod_key: info.claims_named if (info := pod_infos.get(pod_key)) else frozenset())
        self._stores.update({kind.plural: self.dra.kind_store(kind.plural) for kind in DRA})
        nodes, pods, jobs, billing = self._nodes, self._pods, self._jobs, self._billing
        self.nodes, self.node_stamps, self.unreadable = nodes.nodes, nodes.node_stamps, nodes.unreadable
        self.mig_nodes, self.offers = nodes.mig_nodes, nodes.offers
        self.pods, self.by_job, self.gang_keys, self.holding = pods.pods, pods.by_job, pods.gang_keys, pods.holding
        self.gang_pods, self.gang_nominations = pods.gang_pods, pods.gang_nominations
        self.jobs, self.unsent = jobs.jobs, jobs.unsent
        self.ledger, self.billable, self.unbilled = billing.ledger, billing.billable, billing.unbilled
        self.services, self.topologies = self._services.services, self._topologies.topologies
        self.queues, self.pod_groups = self._queues.queues, self._pod_groups.pod_groups
        self.gone = self._notes.gone
        self.changes: dict[GangKey, int] = {}  # gang -> stamp of the last change to the job, its pods or Service
        self.touched: set[GangKey] = set()  # the gangs stamped (or deleted) since the controller last looked
        self._stamps = itertools.count(1)  # never repeats, so a (stamp, version) seen once is never seen again
        self._versions: dict[tuple[str, str], tuple[str, int]] = {}  # (plural, key) -> (uid, resourceVersion)
        self._tombstones: OrderedDict[str, int] = OrderedDict()  # deleted uid -> resourceVersion of the deletion
        self._served_at = -1  # the DraStore.device_edits the nodes' served GPUs were read at

    def fail_on(self, conditions: frozenset[tuple[str, str]]) -> None:
        """Node conditions (type, status) that mean a node failed (NodeStore.fail_on)."""
        self._nodes.fail_on(conditions)

    def serve_gpus(self, now: float) -> None:
        """Give the nodes that advertise no nvidia.com/gpu the GPUs a DeviceClass serves it from among their DRA
        devices (DraStore.served), read again when a slice or a class changed (NodeStore.serve): at the start of
        each cycle, before anything reads the nodes."""
        if self._served_at != self.dra.device_edits:
            self._served_at = self.dra.device_edits
            self._nodes.serve(self.dra.served(GPU)[1], now)

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
        store = self._stores.get(kind.plural, UNKEPT)
        store.store(key, obj, now)
        if held is None and kind.plural == PODS.plural and (info := self._pods.pods.get(key)) and info.claims_named:
            self.dra.changed()  # (which claims kube-scheduler made for pods' nvidia.com/gpu: DraStore.extended)
        if job := store.job_of(key):
            self._stamp(job)
        return True

    def _forget(self, kind: Kind, key: str, uid: str, rv: int, now: float, obj: dict | None = None) -> None:
        store = self._stores.get(kind.plural, UNKEPT)
        if kind.plural == PODS.plural and (info := self._pods.pods.get(key)) and info.claims_named:
            self.dra.changed()  # (DraStore.extended, as when it came)
        job = store.job_of(key)  # stamped at the end, once the object is gone (no stamp outlives its job)
        self._versions.pop((kind.plural, key), None)
        if uid:
            self._tombstones[uid] = rv
            while len(self._tombstones) > TOMBSTONES:
                self._tombstones.popitem(last=False)
        store.forget(key, uid, obj, now)
        if job:
            self._stamp(job)

    def resync(self, kind: Kind, items: list[dict], list_version: str, now: float) -> int:
        """A full list: apply every item, and drop what the list proves deleted (cached from before the list, absent
        from it). Returns how many cached objects changed."""
        relist = self.relist(kind, list_version)
        relist.page(items, now)
        return relist.end(now)

    def relist(self, kind: Kind, list_version: str) -> Relist:
        """A full list taken page by page (resync one page at a time: the pages are never all held at once)."""
        return Relist(self, kind, list_version)

    def defer(self, key: GangKey, resource_version: str, status: dict, now: float) -> bool:
        """A job's new status in force at once and sent later; False if the job is gone or no longer at
        `resource_version` (the decision was made on another version)."""
        if not self._jobs.defer(key, resource_version, status, now):
            return False
        self._stamp(key)
        return True

    def forget_unsent(self) -> None:
        """The jobs as the API server has them: the statuses not sent are dropped (a new Lease term decides only on
        what was written; the pods a dropped placement made are found by their job, `decide.recovered`)."""
        for key in self._jobs.forget_unsent():
            self._stamp(key)

    def _owner_changed(self, job: GangKey) -> None:
        """The job of this name came, went, was made again or closed an attempt: whether its pods are billed on their
        own may change."""
        pods, billing = self.pods, self._billing
        for pod_key in self.by_job.get(job, ()):
            if (info := pods.get(pod_key)) is not None:
                billing.bill(pod_key, info)
                billing.due_if_ended(info)

    # ---- what the cycle takes -----------------------------------------------------------------------------------
    def unfollow(self) -> None:
        """No cycle takes the changes from now on (a standby): those kept are dropped and no more are kept, and of the
        runs of deleted pods only those a leader would bill. A new term relists everything, and its first cycle
        looks at everything (`follow`)."""
        if not self._notes.followed:
            return
        self._notes.followed = False
        self.touched, self.edited_jobs, self.holding_changed, self.nodes_changed = set(), set(), set(), set()
        self.gone.clear()
        self._pods.forget_accounted()

    def follow(self) -> bool:
        """A cycle takes the changes from now on; False when none were kept until now: it must look at everything."""
        kept, self._notes.followed = self._notes.followed, True
        return kept

    def touch(self, job: GangKey) -> None:
        """Have the controller look at a job (or pod gang) again though nothing of it changed."""
        self._stamp(job)

    def _stamp(self, job: GangKey) -> None:
        """The job changed: a new stamp while anything of it is cached, none once all is gone (the pods the garbage
        collector deletes after their job, every Service of the cluster, left one each for good); the cycle looks
        at it again."""
        if job in self.jobs or self.by_job.get(job) or job in self.services or self._pod_groups.of(job) is not None:
            self.changes[job] = next(self._stamps)
        else:
            self.changes.pop(job, None)
        if self._notes.followed:
            self.touched.add(job)

    def take_billable_changes(self) -> set[str] | None:
        """The keys of `billable` changed since the last take (None: look at all of them)."""
        return self._billing.take_billable_changes()

    def forget_ended(self, accounted: dict[str, int]) -> None:
        """Drop the runs of deleted pods once their attempt is accounted or their job is gone (job uid ->
        accountedAttempts)."""
        self._pods.forget_ended(accounted)

    # ---- reading ------------------------------------------------------------------------------------------------
    def topology(self) -> tuple[Topology, str | None]:
        """The ClusterTopology in force (the one named topology_name, else the only one), and a problem if any."""
        return self._topologies.in_force()

    def usable_nodes(self) -> list[Node]:
        return self._nodes.usable_nodes()

    def pod_group(self, gang: GangKey) -> dict | None:
        """The PodGroup that names a pod gang, if any."""
        return self._pod_groups.of(gang)

    def pods_of(self, job: GangKey) -> list[PodInfo]:
        return self._pods.pods_of(job)
