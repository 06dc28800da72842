"""What the cache keeps of a pod (`PodInfo`), read once from its object as it is stored."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from superpod.api.convert import pod_from_k8s, pod_resources
from superpod.api.manifests import (
    ATTEMPT_LABEL,
    GANG_ANNOTATION,
    INDEX_LABEL,
    JOB_LABEL,
    SCHEDULER_NAME,
    is_replica,
    pinned_to,
)
from superpod.api.models import GROUP
from superpod.api.podgang import QUEUE_LABEL, grouping
from superpod.api.resources import ConvertError
from superpod.api.times import timestamp
from superpod.core.accounting import Run, gpu_units
from superpod.core.dra.model import DraError, pod_claims
from superpod.core.gang_key import GangKey
from superpod.core.lifecycle import CONTAINER_ERRORS, PodState
from superpod.core.model import Pod
from superpod.core.phases import KUBELET_DISRUPTIONS, POD_FINISHED
from superpod.core.request import PRODUCT_LABEL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodGpus:
    """What billing reads of a bound pod that asks for GPUs (controller/podbills.py)."""

    units: float  # GPUs (a MIG slice counts g/7 of its GPU)
    requests: tuple[tuple[str, int], ...]  # all it requests of its node
    product: str | None  # the GPU product its nodeSelector asks for
    queue: str | None  # its superpod.dev/queue label
    job: str | None  # its superpod.dev/job-name label: a TrainingJob's pod, owned or orphaned
    claims: tuple[str, ...] = ()  # the ResourceClaimTemplates its DRA claims are made from ("" for one used by name):
    # what they hold is read from its claims (podbills.py)


@dataclass(frozen=True)
class PodInfo:
    key: str
    uid: str
    node: str | None
    phase: str
    deleting: bool
    job: GangKey | None  # its TrainingJob for pods the operator owns; its pod gang for the pods it binds
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
    claims_named: frozenset[str] = frozenset()  # the ResourceClaims its spec uses by name (DraStore.extended)
    pinned: str | None = None  # unbound, the node its affinity pins it to for kube-scheduler (manifests.pinned_to)

    @property
    def where(self) -> str | None:
        """The node it is bound to, or pinned to while kube-scheduler has not bound it."""
        return self.node or self.pinned


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
    job = GangKey(ns, str(labels[JOB_LABEL])) if owner else None
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
        gpus=_gpus(obj, holds, state.phase, labels, replica), claims_named=_claims_named(obj),
        pinned=None if (obj.get("spec") or {}).get("nodeName") or not owner else pinned_to(obj.get("spec") or {}),
    )


def _claims_named(obj: dict) -> frozenset[str]:
    try:
        return frozenset(claim.claim for claim in pod_claims(obj.get("spec") or {}) if claim.claim)
    except DraError:
        return frozenset()


def _gpus(obj: dict, holds: Pod | None, phase: str, labels: dict, replica: bool) -> PodGpus | None:
    """What billing reads of a bound pod that asks for GPUs or claims devices (None: unbound, or neither).
    `replica`: it is named as its labels say a TrainingJob's replica is (else its job-name label is not read)."""
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
    try:
        claims = tuple(claim.template for claim in pod_claims(spec))
    except DraError:
        claims = ("",)  # (the API server would not have it)
    if not units and not claims:
        return None
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    product = selector.get(PRODUCT_LABEL)
    return PodGpus(units, requests, str(product) if product is not None else None, labels.get(QUEUE_LABEL) or None,
                   (labels.get(JOB_LABEL) or None) if replica else None, claims)


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
