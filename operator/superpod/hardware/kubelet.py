"""A simulated kubelet for the in-memory API (k8s/memory.py): the pod lifecycle the KWOK stages drive on the real
control plane, on a virtual clock. A stand-in for the node agents, never for the API.

Per step: a node without a Ready condition becomes Ready; a pod bound to a Ready node starts (Running, startTime); a
pod annotated `sim.superpod.dev/run-for: "<seconds>s"` succeeds that long after it started, `fail-after` fails with
exit code 1, `stay-pending` never starts, `image-error` waits with ErrImagePull; a pod being deleted is gone at the
next step, or `terminate-after` seconds after its deletion was asked (at most its grace period), its containers'
finish written on it as it goes."""

from __future__ import annotations

from collections.abc import Iterable

from superpod.api.times import rfc3339, timestamp
from superpod.k8s.api import NODES, PODS
from superpod.k8s.memory import MemoryAPI

RUN_FOR = "sim.superpod.dev/run-for"
FAIL_AFTER = "sim.superpod.dev/fail-after"
STAY_PENDING = "sim.superpod.dev/stay-pending"
IMAGE_ERROR = "sim.superpod.dev/image-error"
TERMINATE_AFTER = "sim.superpod.dev/terminate-after"


def seconds(value: str) -> float:
    return float(str(value).rstrip("s") or 0)


class SimKubelet:
    def __init__(self, store: MemoryAPI) -> None:
        self.store = store

    def step(self, pods: Iterable[str] | None = None) -> None:
        """Every node and pod; or only the pods named (keys), for a caller that knows which ones changed."""
        now = self.store.clock()
        nodes = self.store.objects.get(NODES, {})
        if pods is None:
            for node in list(nodes.values()):
                conditions = (node.get("status") or {}).get("conditions") or []
                if not any(c.get("type") == "Ready" for c in conditions):
                    self.set_ready(node["metadata"]["name"], True)
        stored = self.store.objects.get(PODS, {})
        keys = list(stored) if pods is None else [key for key in pods if key in stored]
        for key in keys:
            pod = stored[key]
            meta, status = pod["metadata"], pod.get("status") or {}
            notes = meta.get("annotations") or {}
            if meta.get("deletionTimestamp"):
                asked = timestamp(meta["deletionTimestamp"]) - float(meta.get("deletionGracePeriodSeconds") or 0)
                if now >= min(asked + seconds(notes.get(TERMINATE_AFTER, "0")), timestamp(meta["deletionTimestamp"])):
                    self._stopped(pod)
                    self.store.delete_now(PODS, key)
                continue
            phase = status.get("phase") or "Pending"
            bound = pod["spec"].get("nodeName")
            if phase == "Pending" and bound in nodes and _ready(nodes[bound]) and STAY_PENDING not in notes:
                if IMAGE_ERROR in notes:
                    self._status(pod, {"phase": "Pending", "containerStatuses": [
                        {"name": c["name"], "state": {"waiting": {"reason": "ErrImagePull",
                                                                  "message": f"pull {c.get('image')}: not found"}}}
                        for c in pod["spec"].get("containers") or []]})
                else:
                    self._status(pod, {"phase": "Running", "startTime": rfc3339(now, micro=True),
                                       "containerStatuses": _containers(pod, {"running": {
                                           "startedAt": rfc3339(now, micro=True)}})})
            elif phase == "Running":
                started = timestamp(status.get("startTime"))
                if RUN_FOR in notes and now >= started + seconds(notes[RUN_FOR]):
                    self.finish(key, 0)
                elif FAIL_AFTER in notes and now >= started + seconds(notes[FAIL_AFTER]):
                    self.finish(key, 1)

    def finish(self, key: str, exit_code: int, message: str = "") -> None:
        """The pod's containers exit with `exit_code` now."""
        pod = self.store.objects[PODS][key]
        done = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                               "finishedAt": rfc3339(self.store.clock(), micro=True), "message": message}}
        self._status(pod, {**(pod.get("status") or {}), "phase": "Succeeded" if exit_code == 0 else "Failed",
                           "containerStatuses": _containers(pod, done)})

    def _stopped(self, pod: dict) -> None:
        """Before its final delete, a terminating pod's running containers say when they stopped, as the kubelet's
        last status update does (carried by the DELETED event: when the pod's GPUs were freed)."""
        finished = rfc3339(self.store.clock(), micro=True)
        for c in (pod.get("status") or {}).get("containerStatuses") or []:
            if "running" in (c.get("state") or {}):
                c["state"] = {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": finished}}
                c["ready"] = False

    def set_ready(self, node: str, ready: bool) -> None:
        obj = self.store.objects[NODES][node]
        now = rfc3339(self.store.clock())
        status = obj.setdefault("status", {})
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"
                                 if ready else "NodeStatusUnknown", "lastHeartbeatTime": now,
                                 "lastTransitionTime": now}]
        self.store._store(NODES, obj, "update")

    def _status(self, pod: dict, status: dict) -> None:
        pod["status"] = status
        self.store._store(PODS, pod, "update")


def _containers(pod: dict, state: dict) -> list[dict]:
    return [{"name": c["name"], "image": c.get("image"), "state": state, "ready": "running" in state}
            for c in pod["spec"].get("containers") or []]


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])
