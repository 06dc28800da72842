"""Decisions as data: what the cycle wants written, in the order it must happen. The applier (applier.py) carries
them out; nothing else writes. A Plan is the ordered writes for one object (a job, a node, the MIG ConfigMap): its
steps run one after another and stop at the first failure, then its `undo` steps run. Plans of different objects
are independent and run concurrently."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from superpod.core.gang_key import GangKey
from superpod.k8s.api import ApiError


@dataclass(frozen=True)
class WriteStatus:
    """Replace a job's status (PUT /status) if the job is still at `resource_version`. `status` is the whole new
    status: nothing of the old one survives that is not in it (a placement is replaced, never merged).

    `deferred`: in force in the cache at once, sent with the job's next status write (ClusterState.unsent): a gang
    whose pods run before its placement's status is due is written once, Running."""

    job: GangKey
    resource_version: str
    status: dict
    deferred: bool = False


@dataclass(frozen=True)
class WriteQueueStatus:
    """Replace a GPUQueue's status (PUT /status): what the operator computed of it this cycle."""

    queue: str
    status: dict


@dataclass(frozen=True)
class RecordUsage:
    """Create a GPUUsage record (an ended attempt's usage). Written once: if it exists, the earlier write stands."""

    usage: dict


@dataclass(frozen=True)
class CreateService:
    service: dict


@dataclass(frozen=True)
class CreateComputeDomain:
    """A job's ComputeDomain (api/compute_domain.py). Written once: if it exists, the earlier write stands."""

    domain: dict


@dataclass(frozen=True)
class CreatePods:
    """A gang's pods, already bound to their nodes: all are written or, on any failure, none stays."""

    job: GangKey
    pods: tuple[dict, ...]


@dataclass(frozen=True)
class DeletePods:
    """Graceful deletion (each pod's own grace period, or `grace` seconds), each only while it is still the object
    with that uid. A failed delete is retried next cycle; `required`: it also stops the plan (what follows needs the
    pods gone)."""

    pods: tuple[tuple[str, str], ...]  # (namespace/name, uid)
    grace: int | None = None
    required: bool = False


@dataclass(frozen=True)
class BindPods:
    """Bind another controller's pods to their nodes (pods/binding), all in parallel. A binding cannot be taken
    back: a pod whose binding failed is scheduled again with the gang's bound pods where they are."""

    gang: GangKey
    bindings: tuple[tuple[str, str, str], ...]  # (namespace/name, uid, node)
    annotations: tuple[tuple[str, str], ...] = ()  # written on each pod by its binding


@dataclass(frozen=True)
class WriteClaims:
    """Write ResourceClaims' status (allocation and reservedFor, or neither: released), all in parallel, each only
    while the claim is at the version decided on; the step fails if any write does (the bindings after it wait). A
    claim allocated gets kube-scheduler's delete-protection finalizer first (deleted while in use, its devices would
    be handed out again); a claim released loses it after."""

    gang: GangKey
    # (namespace/name, uid, resourceVersion, status, finalizers)
    claims: tuple[tuple[str, str, str, dict, tuple[str, ...]], ...]


@dataclass(frozen=True)
class SetPodCondition:
    """Set a condition on another controller's pod (PodScheduled=False while its gang waits), if it is still the pod
    with that uid."""

    pod: str  # namespace/name
    uid: str
    condition: dict
    required: bool = False  # the plan fails if the pod is gone or replaced (a nomination: the commit point)


@dataclass(frozen=True)
class PatchNode:
    """A JSON merge patch of a node's labels and annotations (None removes a key)."""

    node: str
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MergeMigConfigs:
    """Add mig-parted configs (name -> entries) to the ConfigMap NVIDIA's MIG manager reads; of the configs the
    operator made before (named superpod-*), keep only those a node's label still names."""

    namespace: str
    name: str
    configs: dict
    in_use: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Emit:
    """An Event on a job or a node. Best effort: a failure is logged, never stops the plan."""

    ref: dict  # the involved object: apiVersion, kind, name, namespace, uid
    type: str  # Normal | Warning
    reason: str
    message: str


Action = (WriteStatus | RecordUsage | CreateService | CreateComputeDomain | CreatePods | DeletePods | BindPods
          | WriteClaims | SetPodCondition | PatchNode | MergeMigConfigs | Emit)


@dataclass
class Plan:
    key: GangKey | str  # what the plan is about: a gang (its writes), or e.g. "node:<name>", "mig-config"
    steps: list[Action] = field(default_factory=list)
    # After a step fails past a status write, or a claim write fails: the writes that take the object back (given
    # the error).
    undo: Callable[[ApiError], list[Action]] | None = None

    def then(self, *actions: Action) -> Plan:
        self.steps.extend(actions)
        return self


def job_ref(job: dict) -> dict:
    meta = job["metadata"]
    return {"apiVersion": job.get("apiVersion", "superpod.dev/v1alpha1"), "kind": "TrainingJob",
            "name": meta["name"], "namespace": meta.get("namespace"), "uid": meta.get("uid")}


def pod_ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": meta.get("namespace"),
            "uid": meta.get("uid")}


def node_ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta.get("uid")}
