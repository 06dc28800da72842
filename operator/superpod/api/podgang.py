"""Pods that other controllers create for this scheduler (spec.schedulerName), read as gangs. Pure.

A pod's gang: the label superpod.dev/gang (its size in the annotation superpod.dev/gang-size), else the
scheduler-plugins coscheduling label scheduling.x-k8s.io/pod-group (its size: the PodGroup's minMember), else the pod
alone. Topology comes from the annotations superpod.dev/topology-required, -preferred, slice-size and
slice-required, as in a TrainingJob's spec.topology; ranks from superpod.dev/rank, else a JobSet's job index and the
Job completion index (or a StatefulSet's pod index), else the pod name. The gang's members must agree on everything
placement reads but their requests: each is booked at its own (an MPIJob's launcher beside its workers). The runtime
limit a gang asks for: the annotation superpod.dev/max-runtime-seconds, whole seconds. What a gang was bound with
(BOUND_WITH) is the operator's: written by each binding, it is read back by every leader, whatever the tenant edited
since."""

from __future__ import annotations

import json
from dataclasses import dataclass

from superpod.api.claims import ClaimSource, claiming, read_pod_claims
from superpod.api.convert import affinity_of, describe, resources_of, submitted_at, tolerations_of
from superpod.api.manifests import MAX_RUNTIME
from superpod.api.resources import ConvertError, pod_requests
from superpod.api.times import rfc3339, timestamp
from superpod.core.gang_key import POD, POD_GANG, GangKey
from superpod.core.request import PRODUCT_LABEL, JobRequest, Requests, gpu_units

GANG_LABEL = "superpod.dev/gang"
GANG_SIZE = "superpod.dev/gang-size"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_LABEL = "superpod.dev/queue"
RANK_LABEL = "superpod.dev/rank"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_INDEX = "jobset.sigs.k8s.io/job-global-index"
POD_INDEX = "apps.kubernetes.io/pod-index"  # a StatefulSet pod's ordinal
TOPOLOGY = {"required": "superpod.dev/topology-required", "preferred": "superpod.dev/topology-preferred",
            "slice_size": "superpod.dev/slice-size", "slice_required": "superpod.dev/slice-required"}
# A preempting gang's nomination (its nodes, victims, their attempts, time, as JSON in the message) is a condition
# of this type in its first pod's status: only the operator writes it (pods/status is not a tenant's to write).
NOMINATED = "superpod.dev/Nominated"
MAX_NOMINATED = 4096  # nodes or victims a nomination may name: more is not one the operator wrote
# What a gang was bound with (BoundWith, as JSON), on each pod the operator binds: the binding writes it, and the
# chart's admission policy keeps it the operator's (api/admission.py)
BOUND_WITH = "superpod.dev/bound-with"


@dataclass(frozen=True)
class Grouping:
    """How a pod is grouped: its gang's name, and where the gang's size comes from."""

    name: str
    by: str  # "label" (superpod.dev/gang), "pod-group" (scheduling.x-k8s.io/pod-group) or "pod" (alone)

    def key(self, namespace: str) -> GangKey:
        return GangKey(namespace, self.name, POD if self.by == "pod" else POD_GANG)


def grouping(obj: dict) -> Grouping:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(GANG_LABEL):
        return Grouping(str(labels[GANG_LABEL]), "label")
    if labels.get(POD_GROUP_LABEL):
        return Grouping(str(labels[POD_GROUP_LABEL]), "pod-group")
    return Grouping(str(meta.get("name")), "pod")


def nomination_of(pod: dict) -> str | None:
    """The JSON of a pod's nomination condition while it holds (status True), else None."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == NOMINATED:
            return str(cond.get("message") or "") if cond.get("status") == "True" else None
    return None


def rank_of(obj: dict) -> tuple:
    """A member's place in the gang's rank order."""
    meta = obj.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}

    def number(*values) -> int:
        for value in values:
            try:
                return int(value)
            except (TypeError, ValueError):
                continue
        return -1

    return (number(labels.get(RANK_LABEL), notes.get(RANK_LABEL)),
            number(labels.get(JOBSET_INDEX), notes.get(JOBSET_INDEX)),
            number(labels.get(COMPLETION_INDEX), notes.get(COMPLETION_INDEX), labels.get(POD_INDEX)),
            str(meta.get("name")))


def gang_size(key: GangKey, pods: list[dict], pod_group: dict | None, by: str) -> int:
    """The number of pods the gang waits for. Raises ConvertError naming the pods that disagree or the field that is
    missing; a pod-group gang whose PodGroup is not there raises LookupError."""
    if by == "pod":
        said = ((pods[0].get("metadata") or {}).get("annotations") or {}).get(GANG_SIZE)
        if said not in (None, "1"):  # meant as a gang, but which? Alone it would start without its peers
            raise ConvertError(describe(pods[0]), f"metadata.labels[{GANG_LABEL}]", f"missing, though {GANG_SIZE} "
                               f"says {said}: name the gang its pods form (or drop {GANG_SIZE} to run it alone)")
        return 1
    if by == "pod-group":
        if pod_group is None:
            raise LookupError(f"waiting for PodGroup {key} (label {POD_GROUP_LABEL})")
        value = (pod_group.get("spec") or {}).get("minMember")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConvertError(describe(pod_group), "spec.minMember", f"expected a count of at least 1, got {value!r}")
        return value
    sizes: dict[str, list[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        sizes.setdefault(str((meta.get("annotations") or {}).get(GANG_SIZE)), []).append(str(meta.get("name")))
    if len(sizes) > 1:
        said = ", ".join(f"{size} ({', '.join(sorted(names)[:3])})" for size, names in sorted(sizes.items()))
        raise ConvertError(f"gang {key}", f"metadata.annotations[{GANG_SIZE}]",
                           f"its pods disagree: {said}")
    text = next(iter(sizes))
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        what = "missing" if text == "None" else f"not a count of at least 1: {text!r}"
        raise ConvertError(f"gang {key}", f"metadata.annotations[{GANG_SIZE}]", what)
    return size


def max_runtime_of(key: GangKey, pods: list[dict]) -> int | None:
    """The runtime limit, in seconds, the gang's pods ask for (annotation MAX_RUNTIME); None when none does. Raises
    ConvertError naming the pod whose value is not whole seconds of at least 1, or the pods that disagree (a pod
    without it disagrees with one that has it)."""
    said: dict[str | None, list[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(MAX_RUNTIME)
        if value is not None and not (isinstance(value, str) and value.isascii() and value.isdigit()
                                      and len(value) <= 12 and int(value) >= 1):
            raise ConvertError(describe(pod), f"metadata.annotations[{MAX_RUNTIME}]",
                               f"expected whole seconds of at least 1 (e.g. \"3600\"), got {value!r}")
        said.setdefault(value, []).append(str(meta.get("name")))
    if len(said) > 1:
        which = ", ".join(f"{value or 'none'} ({', '.join(sorted(names)[:3])})" for value, names in
                          sorted(said.items(), key=lambda item: item[0] or ""))
        raise ConvertError(f"gang {key}", f"metadata.annotations[{MAX_RUNTIME}]",
                           f"its pods disagree: {which}")
    value = next(iter(said), None)
    return int(value) if value is not None else None


@dataclass(frozen=True)
class BoundWith:
    """What a pod gang was bound with: the runtime limit it asked for when first bound (None: none), when it first
    started, once it had (a pod bound later, in place of one gone, carries the start of the gang it joins), and the
    GPUs each member's claims were worth (counted so while its devices cannot be read: slices being published again)."""

    max_runtime: int | None
    first_start: float | None = None
    claimed_gpus: float = 0.0

    def text(self) -> str:
        said: dict = {"maxRuntimeSeconds": self.max_runtime}
        if self.first_start is not None:
            said["firstStartTime"] = rfc3339(self.first_start)
        if self.claimed_gpus:
            said["claimedGpus"] = self.claimed_gpus
        return json.dumps(said, sort_keys=True, separators=(",", ":"))


def bound_with_of(pods: list[dict]) -> BoundWith | None:
    """What the gang's pods say it was bound with (BOUND_WITH): the least limit and the earliest start among them
    (each binding copies the gang's: they agree); None when none says it (bound before it was recorded)."""
    found = [said for pod in pods if (said := _bound_with(pod)) is not None]
    if not found:
        return None
    return BoundWith(min((f.max_runtime for f in found if f.max_runtime is not None), default=None),
                     min((f.first_start for f in found if f.first_start is not None), default=None),
                     max(f.claimed_gpus for f in found))


def _bound_with(pod: dict) -> BoundWith | None:
    """A pod's BOUND_WITH, None when it has none or it does not read (not the operator's)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(BOUND_WITH)
    try:
        said = json.loads(text) if isinstance(text, str) else None
        seconds, started = said.get("maxRuntimeSeconds"), said.get("firstStartTime")
        claimed = said.get("claimedGpus", 0)
        if seconds is not None and (type(seconds) is not int or seconds < 1):
            raise ValueError(seconds)
        if type(claimed) not in (int, float) or not 0 <= claimed < 1e6:
            raise ValueError(claimed)
        return BoundWith(seconds, timestamp(started) if started is not None else None, float(claimed))
    except (ValueError, AttributeError):
        return None


def gang_request(key: GangKey, pods: list[dict], extra_selector: tuple[tuple[str, str], ...] = (),
                 check: bool = True) -> JobRequest:
    """The core request for placing `pods` (members of one gang) together, each member booked at its own requests:
    the most common request as the identical members, the others each on its own, ranked as `in_slot_order` orders
    the pods. The members must agree on their node filters and topology (`check`; without it the first pod's, e.g.
    for what bound pods hold). Raises ConvertError."""
    first = pods[0]
    where = f"gang {key}"
    filters = [_filters(pod) for pod in (pods if check else pods[:1])]
    for pod, seen in zip(pods[1:], filters[1:], strict=False):
        if seen != filters[0]:
            field = next(name for name, a, b in zip(_FILTER_FIELDS, seen, filters[0], strict=True) if a != b)
            raise ConvertError(where, field, f"pods {first['metadata']['name']} and {pod['metadata']['name']} "
                               "differ: a gang's pods must agree on what placement reads")
    identical, others = _members(pods)
    selector, affinity, tolerations, topology = filters[0]
    priorities = [(pod.get("spec") or {}).get("priority") for pod in pods]
    labels = (first.get("metadata") or {}).get("labels") or {}
    return JobRequest(
        namespace=key.namespace, name=key.name, kind=key.kind, replicas=len(identical[1]),
        requests=identical[0], others=tuple(requests for requests, _ in others),
        gpu_product=dict(selector).get(PRODUCT_LABEL),
        node_selector=tuple(sorted({*selector, *extra_selector})), affinity=affinity, tolerations=tolerations,
        required=topology[0], preferred=topology[1], slice_size=topology[2], slice_required=topology[3],
        priority=max((p for p in priorities if isinstance(p, int)), default=0),
        submitted=min(submitted_at(pod) for pod in pods), queue=labels.get(QUEUE_LABEL) or None)


def with_claims(request: JobRequest, pods: list[dict], source: ClaimSource) -> JobRequest:
    """`request` with the DRA claims its pods make from ResourceClaimTemplates (each pod its own) and those they share
    by name, all alike. Raises ConvertError: pods that differ, a template or claim that is missing or does not read."""
    read = {read_pod_claims(describe(pod), (pod.get("metadata") or {}).get("namespace") or "", pod.get("spec") or {},
                            "spec", source) for pod in pods}
    if len(read) > 1:
        raise ConvertError(f"gang {request.key}", "spec.resourceClaims",
                           "its pods differ: a gang's pods must claim alike")
    return claiming(request, read.pop(), source) if read else request


def in_slot_order(pods: list[dict]) -> list[dict]:
    """The pods as their gang's request ranks its members (a placement's slots): the identical members, then each
    other one, each part in the order given. Raises ConvertError."""
    identical, others = _members(pods)
    return identical[1] + [pod for _, pod in others]


def _members(pods: list[dict]) -> tuple[tuple[Requests, list[dict]], list[tuple[Requests, dict]]]:
    """((the identical members' requests, their pods), [(requests, pod)] of the others), each in the order given.
    The identical members: those of the most common request (a tie goes to the larger: more GPUs, then the rest)."""
    by_request: dict[Requests, list[dict]] = {}
    owned = []
    for pod in pods:
        requests = requests_of(pod)
        by_request.setdefault(requests, []).append(pod)
        owned.append((requests, pod))
    common = max(by_request, key=lambda requests: (len(by_request[requests]), gpu_units(requests), requests))
    return (common, by_request[common]), [(requests, pod) for requests, pod in owned if requests != common]


def requests_of(pod: dict) -> Requests:
    """What one pod asks for, as its gang's request reads it (the nonzero amounts, sorted). Raises ConvertError."""
    found = pod_requests(pod.get("spec") or {}, lambda field, raw: resources_of(pod, field, raw))
    return tuple(sorted((resource, amount) for resource, amount in found.items() if amount))


_FILTER_FIELDS = ("spec.nodeSelector", "spec.affinity.nodeAffinity", "spec.tolerations", "metadata.annotations")


UNREAD = (("affinity", "podAffinity"), ("affinity", "podAntiAffinity"))  # inter-pod rules placement cannot keep


def _filters(pod: dict) -> tuple:
    name = describe(pod)
    spec = pod.get("spec") or {}
    for parent, field in UNREAD:
        rules = ((spec.get(parent) or {}).get(field) or {}) if isinstance(spec.get(parent), dict) else {}
        if isinstance(rules, dict) and rules.get("requiredDuringSchedulingIgnoredDuringExecution"):
            raise ConvertError(name, f"spec.{parent}.{field}", "required inter-pod rules are not kept by "
                               "superpod-scheduler; keep a gang together with superpod.dev/topology-required")
    if any(isinstance(c, dict) and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
           for c in spec.get("topologySpreadConstraints") or []):
        raise ConvertError(name, "spec.topologySpreadConstraints", "DoNotSchedule spread constraints are not kept by "
                           "superpod-scheduler; use ScheduleAnyway or superpod.dev/topology-* annotations")
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise ConvertError(name, "spec.nodeSelector", "expected a mapping")
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    topology = []
    for field, annotation in TOPOLOGY.items():
        value = notes.get(annotation)
        if value is not None and field == "slice_size":
            try:
                value = int(value)
                if value < 1:
                    raise ValueError
            except ValueError:
                raise ConvertError(name, f"metadata.annotations[{annotation}]",
                                   f"expected a count of at least 1, got {value!r}") from None
        topology.append(value or None)
    return (tuple(sorted((str(k), str(v)) for k, v in selector.items())), affinity_of(name, spec, "spec"),
            tolerations_of(name, spec, "spec"), tuple(topology))
