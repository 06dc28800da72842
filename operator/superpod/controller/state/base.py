"""What the stores of the cache share: the interface ClusterState dispatches through, and what they note for the
cycle."""

from __future__ import annotations

from collections import deque
from typing import Protocol

from superpod.core.gang_key import GangKey

TOMBSTONES = 50_000  # deleted uids remembered, so their late events are ignored
# What a node's kubelet reports that no decision reads: the image list alone is often most of a real node's bytes.
UNREAD_NODE_STATUS = ("images", "nodeInfo", "addresses", "daemonEndpoints", "volumesInUse", "volumesAttached",
                      "config", "runtimeHandlers", "features")


class Store(Protocol):
    """The objects of one kind. ClusterState has judged the version (newer, not deleted): a store only keeps."""

    def store(self, key: str, obj: dict, now: float) -> None:
        """A newer version of object `key`, or its first."""

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        """Object `key` is gone: `obj` is its last version, None when a relist found it gone."""

    def job_of(self, key: str) -> GangKey | None:
        """The gang (a TrainingJob, or pods bound as one) a change of object `key` is a change of."""


class Notes:
    """Whether a cycle takes what the stores note for it (`followed`: the leader's), and the uids gone since."""

    def __init__(self) -> None:
        self.followed = True
        # uids of the jobs, nodes and queues deleted since the controller last dropped what it remembers of them
        self.gone: deque[str] = deque(maxlen=TOMBSTONES)

    def went(self, uid: str) -> None:
        if self.followed:
            self.gone.append(uid)


class Unkept:
    """A kind of which only the versions are kept."""

    def store(self, key: str, obj: dict, now: float) -> None:
        pass

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        pass

    def job_of(self, key: str) -> GangKey | None:
        return None


def slim(obj: dict) -> dict:
    """A node or pod as cached: without managedFields (the server's field ownership, often half of a pod's or node's
    bytes, and never written back), a node also without the status fields nothing reads."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if obj.get("kind") == "Node" and any(field in status for field in UNREAD_NODE_STATUS):
        obj = {**obj, "status": {k: v for k, v in status.items() if k not in UNREAD_NODE_STATUS}}
    return obj
