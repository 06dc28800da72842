"""What the operator knows of the cluster (the cache): Nodes, Pods, Services, TrainingJobs, ClusterTopologies,
GPUQueues, GPUUsages and PodGroups, kept current from watch events, from the answers to its own writes and from
periodic relists — all applied on the event loop, one at a time, through `ClusterState.apply` and `resync`.

Versions only move forward: an event older than what is cached (a late or repeated watch event, a relist taken
before our own write) is ignored; objects are tracked by uid, so an event of a deleted object never touches a new
object of the same name, and a deleted object's late events never bring it back (tombstones). resourceVersions are
compared as integers, which holds for etcd-backed API servers and for MemoryAPI.

ClusterState (cluster.py) judges the versions, stamps the jobs changed, and hands each object to the store of its
kind (the `Store` interface, base.py): nodes.py, pods.py, jobs.py, billing.py (GPUUsage records and the pods billed
on their own), others.py (Services, ClusterTopologies, GPUQueues, PodGroups)."""

from superpod.controller.state.base import TOMBSTONES, UNREAD_NODE_STATUS, Notes, Store, slim
from superpod.controller.state.billing import Billing
from superpod.controller.state.cluster import ClusterState, Relist, version
from superpod.controller.state.jobs import JobStore
from superpod.controller.state.nodes import (
    MIG_EXPECT,
    MIG_FAILED,
    MIG_FOR,
    MIG_KEYS,
    MIG_LAYOUT,
    MIG_PREVIOUS,
    MIG_PREVIOUS_RESOURCES,
    MIG_REQUESTED_AT,
    NodeEntry,
    NodeStore,
    mig_expectation,
    mig_held,
    offer_keys,
)
from superpod.controller.state.pod_info import PodGpus, PodInfo, pod_info, pod_state, removed_run
from superpod.controller.state.pods import ENDED_KEPT, PodStore

__all__ = [
    "ENDED_KEPT", "MIG_EXPECT", "MIG_FAILED", "MIG_FOR", "MIG_KEYS", "MIG_LAYOUT", "MIG_PREVIOUS",
    "MIG_PREVIOUS_RESOURCES", "MIG_REQUESTED_AT", "TOMBSTONES", "UNREAD_NODE_STATUS", "Billing", "ClusterState",
    "JobStore", "NodeEntry", "NodeStore", "Notes", "PodGpus", "PodInfo", "PodStore", "Relist", "Store",
    "mig_expectation", "mig_held", "offer_keys", "pod_info", "pod_state", "removed_run", "slim", "version",
]
