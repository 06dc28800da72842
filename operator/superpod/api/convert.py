"""Kubernetes objects (plain dicts, as the API or `kubectl -o yaml` gives them) to core input types."""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import orjson
from pydantic import ValidationError

from superpod.api.claims import ClaimSource, ClaimsRead, claiming, read_pod_claims
from superpod.api.compute_domain import with_channel
from superpod.api.manifests import replica_requests
from superpod.api.models import API_VERSION, ClusterTopology, GPUQueue, GPUUsage, ObjectMeta, TrainingJob
from superpod.api.resources import ConvertError, pod_requests, quantity
from superpod.api.times import rfc3339, timestamp
from superpod.core.model import Level, Node, Pod, Topology
from superpod.core.phases import POD_FINISHED
from superpod.core.queues import Budget, Queue, Quota
from superpod.core.request import JobRequest, Requirement, Taint, Toleration
from superpod.core.usage import Record

SPEC_DEPTH = 64  # a TrainingJob's spec; its template's deepest pod field is about 15 levels below it
SPECS_READ = 256  # the specs whose reading is kept (job_from_k8s), the least recently read dropped first
SPEC_KEPT_BYTES = 16_384  # the largest spec kept (as JSON): a few times any spec a person writes
_specs_read: OrderedDict[bytes, JobRequest] = OrderedDict()  # spec digest -> its request, but name, namespace, time


def describe(obj: Any) -> str:
    if not isinstance(obj, dict):
        return f"item of type {type(obj).__name__}"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name", "<unnamed>")
    ns = meta.get("namespace")
    return f"{obj.get('kind', '<no kind>')} {ns + '/' if ns else ''}{name}"


def _get(obj: dict, path: str, kind: type, default: Any = None) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            raise ConvertError(describe(obj), path, "expected a mapping")
        cur = cur.get(part)
        if cur is None:
            return default
    if not isinstance(cur, kind):
        raise ConvertError(describe(obj), path, f"expected {kind.__name__}, got {type(cur).__name__}")
    return cur


def resources_of(obj: dict, field: str, raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise ConvertError(describe(obj), field, "expected a mapping of quantities")
    return {str(r): quantity(v, str(r), describe(obj), f"{field}.{r}") for r, v in raw.items()}


def node_from_k8s(obj: dict) -> Node:
    name = _get(obj, "metadata.name", str)
    if not name:
        raise ConvertError(describe(obj), "metadata.name", "missing")
    conds = _get(obj, "status.conditions", list, [])
    # No Ready condition yet means the node has not finished registering: not ready.
    ready = any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "NoSchedule")))
        for t in _get(obj, "spec.taints", list, [])
    )
    return Node(
        name=name,
        labels={str(k): str(v) for k, v in _get(obj, "metadata.labels", dict, {}).items()},
        allocatable=resources_of(obj, "status.allocatable", _get(obj, "status.allocatable", dict, {})),
        taints=taints,
        unschedulable=bool(_get(obj, "spec.unschedulable", bool, False)),
        ready=ready,
    )


def pod_from_k8s(obj: dict) -> Pod | None:
    """A bound non-terminal pod, or None (unbound or finished pods hold no capacity)."""
    node = _get(obj, "spec.nodeName", str)
    if not node or _get(obj, "status.phase", str) in POD_FINISHED:
        return None
    key = f"{_get(obj, 'metadata.namespace', str, 'default')}/{_get(obj, 'metadata.name', str, '')}"
    return Pod(key=key, node=node, requests=pod_resources(obj))


def pod_resources(obj: dict) -> tuple[tuple[str, int], ...]:
    """What a pod requests of its node (canonical units), bound or not. Raises ConvertError."""
    reqs = pod_requests(_get(obj, "spec", dict, {}), lambda field, raw: resources_of(obj, field, raw))
    return tuple(sorted(reqs.items()))


def _validate(model: type, obj: dict) -> Any:
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<object>"
        raise ConvertError(describe(obj), field, err["msg"]) from None


def topology_from_k8s(obj: dict) -> Topology:
    ct: ClusterTopology = _validate(ClusterTopology, obj)
    return Topology(tuple(Level(lv.name, lv.nodeLabel) for lv in ct.spec.levels))


def job_from_k8s(obj: dict, source: ClaimSource | None = None) -> JobRequest:
    """The core request of a TrainingJob, from its metadata and spec (the status is the operator's own and is read
    elsewhere: a damaged status never makes a spec invalid); `source`: the ResourceClaimTemplates its pods' DRA
    claims are made from, and what their devices are worth. A spec read before (most jobs share a few: a team's,
    a trace's) is not read again, only the metadata: its name, namespace and submit time."""
    key = _spec_key(obj)
    known = _specs_read.get(key) if key is not None else None
    meta = _metadata(obj) if known is not None else None
    if meta is None:  # not kept, or its metadata does not read (the whole reading says why)
        request = _job_from_k8s(obj, source)
        if key is not None:
            _specs_read[key] = replace(request, namespace="", name="", submitted=0.0)
            while len(_specs_read) > SPECS_READ:
                _specs_read.popitem(last=False)
        return request
    _specs_read.move_to_end(key)
    return replace(known, namespace=meta.namespace or "default", name=meta.name, submitted=submitted_at(obj),
                   extra=dict(known.extra))


def _metadata(obj: dict) -> ObjectMeta | None:
    try:
        return ObjectMeta.model_validate(obj.get("metadata"))
    except ValidationError:
        return None


def _spec_key(obj: dict) -> bytes | None:
    """The digest of what a job's request reads of it but its metadata; None when it reads more (its claims read the
    cluster's templates), does not encode (the whole reading says why), or is larger than any spec worth keeping (a
    tenant's large specs are not kept past their jobs)."""
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod, dict) or pod.get("resourceClaims") or spec.get("computeDomain") is not None:
        return None
    try:
        text = orjson.dumps([obj.get("apiVersion"), obj.get("kind"), spec], option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return None
    if len(text) > SPEC_KEPT_BYTES or b"null" in text and orjson.loads(text)[2] != spec:
        return None  # (NaN and infinities encode as null: such a spec is read whole)
    return hashlib.sha256(text).digest()


def _job_from_k8s(obj: dict, source: ClaimSource | None) -> JobRequest:
    if _deeper_than(obj.get("spec"), SPEC_DEPTH):
        raise ConvertError(describe(obj), "spec", f"nests deeper than {SPEC_DEPTH} levels (no field of a pod "
                           "template is that deep)")
    tj: TrainingJob = _validate(TrainingJob, {**obj, "status": None})
    name = describe(obj)
    spec, res, topo = tj.spec, tj.spec.resources, tj.spec.topology
    for resource in ("cpu", "memory"):  # checked here to name the field the user wrote
        if (value := getattr(res, resource)) is not None:
            quantity(value, resource, name, f"spec.resources.{resource}")
    namespace = tj.metadata.namespace or "default"
    reqs = replica_requests({**obj, "metadata": {**obj["metadata"], "namespace": namespace}})
    pod = with_channel(obj, _field(name, spec.template, "spec", dict, {}, "spec.template"), name)
    selector = _field(name, pod, "nodeSelector", dict, {}, "spec.template.spec")
    claims = ClaimsRead()
    if pod.get("resourceClaims"):
        if source is None:
            raise ConvertError(name, "spec.template.spec.resourceClaims", "its claims are read from the cluster's "
                               "ResourceClaimTemplates, which this reading does not have")
        claims = read_pod_claims(name, namespace, pod, "spec.template.spec", source)
        if pod.get("priorityClassName") or pod.get("priority") is not None:
            raise ConvertError(name, "spec.template.spec.priorityClassName", "not accepted with resourceClaims: these "
                               "pods are bound by kube-scheduler, whose preemption would bypass the queues; set "
                               "spec.priority")
    request = JobRequest(
        namespace=namespace,
        name=tj.metadata.name,
        replicas=spec.replicas,
        requests=tuple(sorted((k, v) for k, v in reqs.items() if v)),
        gpu_product=res.gpuProduct,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        affinity=affinity_of(name, pod),
        tolerations=tolerations_of(name, pod),
        required=topo.required,
        preferred=topo.preferred,
        slice_size=topo.sliceSize,
        slice_required=topo.sliceRequired,
        priority=spec.priority,
        submitted=submitted_at(obj),
        queue=spec.queue,
        service_class=spec.serviceClass,
    )
    return claiming(request, claims, source) if source is not None else request


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` holds a mapping or list more than `limit` levels down (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict | list):
            if level == limit:
                return True
            stack.extend((child, level + 1) for child in (value.values() if isinstance(value, dict) else value))
    return False


def queue_from_k8s(obj: dict) -> Queue:
    """The core Queue of a GPUQueue."""
    gq: GPUQueue = _validate(GPUQueue, {**obj, "status": None})
    spec = gq.spec
    budget = None
    if spec.budget:
        budget = Budget(spec.budget.gpuHours, duration(spec.budget.period), spec.budget.onExhausted)
    return Queue(gq.metadata.name, spec.parent, tuple(spec.namespaces),
                 tuple(Quota(r.flavor, r.guaranteed, r.limit, r.lendingLimit) for r in spec.resources),
                 spec.weight, budget, spec.minRuntimeSeconds, spec.defaultMaxRuntimeSeconds, spec.maxRuntimeSeconds)


LABEL_VALUE_MAX = 63  # characters of a Kubernetes label value


def record_from_k8s(obj: dict) -> Record:
    """The core Record of a GPUUsage object."""
    spec = _validate(GPUUsage, obj).spec
    return Record(spec.queue, spec.namespace, spec.job, spec.flavor, spec.serviceClass, spec.attempt, spec.gpus,
                  spec.start.timestamp(), spec.end.timestamp(), spec.gpuSeconds, spec.pod or "", spec.estimateKey or "",
                  spec.outcome or "", spec.maxRuntimeSeconds, spec.jobUid or "")


def usage_name(job_uid: str, attempt: int) -> str:
    """The GPUUsage record of an attempt: one name, so it is written once whoever closes the attempt."""
    return f"{job_uid}-a{attempt}"


POD_USAGE = "-pod"  # the end of the name of a pod's own record


def pod_usage_name(pod_uid: str) -> str:
    """The GPUUsage record of a pod billed on its own: one per pod (uids are never reused), written once it ended."""
    return f"{pod_uid}{POD_USAGE}"


def usage_object(record: Record, job_uid: str, pod_uid: str = "") -> dict:
    """The GPUUsage object of an ended attempt, named <job uid>-a<attempt>, or of a pod billed on its own (`pod_uid`),
    named <pod uid>-pod: written once, whoever writes it."""
    labels = {"superpod.dev/namespace": record.namespace}
    if len(record.queue) <= LABEL_VALUE_MAX:  # a longer queue name is in the spec only (label values stop at 63)
        labels["superpod.dev/queue"] = record.queue
    name = pod_usage_name(pod_uid) if pod_uid else usage_name(job_uid, record.attempt)
    return {"apiVersion": API_VERSION, "kind": "GPUUsage",
            "metadata": {"name": name, "labels": labels},
            "spec": {"queue": record.queue, "namespace": record.namespace, "job": record.job, "jobUid": job_uid,
                     "attempt": record.attempt, "flavor": record.flavor, "serviceClass": record.service_class,
                     "gpus": record.gpus, "start": rfc3339(record.start, micro=True),
                     "end": rfc3339(record.end, micro=True), "gpuSeconds": record.gpu_seconds,
                     **({"pod": record.pod} if record.pod else {}),
                     **({"estimateKey": record.estimate_key} if record.estimate_key else {}),
                     **({"outcome": record.outcome} if record.outcome else {}),
                     **({"maxRuntimeSeconds": round(record.limit)} if record.limit else {})}}


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|m|s)")


def duration(text: str) -> float:
    """Seconds of a Kubernetes duration such as 720h or 1h30m (the CRD's pattern admits only h, m and s parts)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (e.g. 720h, 1h30m)")
    return sum(float(number) * {"h": 3600, "m": 60, "s": 1}[unit] for number, unit in parts)


ESTIMATE_KEY_LABEL = "superpod.dev/estimate-key"
_RUN_NUMBER = re.compile(r"-[0-9]+$")


def estimate_key(obj: dict) -> str:
    """What a job's runtime is predicted from (core/estimates.py), within its namespace: its
    superpod.dev/estimate-key label, else its name without the suffix its metadata.generateName got and without a
    trailing run number (train-llama-17 and train-llama-18 teach each other; train-small and train-large do not)."""
    meta = obj.get("metadata") or {}
    given = str((meta.get("labels") or {}).get(ESTIMATE_KEY_LABEL) or "")
    name, generated = str(meta.get("name") or ""), str(meta.get("generateName") or "")
    if generated and name.startswith(generated):
        name = generated
    return given or _RUN_NUMBER.sub("", name.rstrip("-")) or name


def submitted_at(obj: dict) -> float:
    """When the job entered the queue (status.queuedAt), else when it was created; 0 when neither can be read."""
    for value in ((obj.get("status") or {}).get("queuedAt"), (obj.get("metadata") or {}).get("creationTimestamp")):
        try:
            if value:
                return timestamp(value)
        except ValueError:
            continue
    return 0.0


def _field(name: str, parent: dict, key: str, kind: type, default: Any, at: str) -> Any:
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise ConvertError(name, f"{at}.{key}", f"expected a {'mapping' if kind is dict else kind.__name__}")
    return value


def affinity_of(name: str, pod: dict, at: str = "spec.template.spec") -> tuple[tuple[Requirement, ...], ...]:
    """The required node affinity of a pod spec (`at`: where it is, for the error)."""
    affinity = _field(name, pod, "affinity", dict, {}, at)
    node_affinity = _field(name, affinity, "nodeAffinity", dict, {}, f"{at}.affinity")
    at += ".affinity.nodeAffinity"
    required = _field(name, node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", dict, {}, at)
    at += ".requiredDuringSchedulingIgnoredDuringExecution"
    terms = []
    for t, term in enumerate(_field(name, required, "nodeSelectorTerms", list, [], at)):
        where = f"{at}.nodeSelectorTerms[{t}]"
        if not isinstance(term, dict):
            raise ConvertError(name, where, "expected a mapping")
        exprs = []
        for e, ex in enumerate(_field(name, term, "matchExpressions", list, [], where)):
            op = ex.get("operator") if isinstance(ex, dict) else None
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt") or not ex.get("key"):
                raise ConvertError(name, f"{where}.matchExpressions[{e}]", "needs a key and an operator of In, "
                                   "NotIn, Exists, DoesNotExist, Gt, Lt")
            values = _field(name, ex, "values", list, [], f"{where}.matchExpressions[{e}]")
            exprs.append(Requirement(str(ex["key"]), op, tuple(str(v) for v in values)))
        terms.append(tuple(exprs))
    return tuple(terms)


def tolerations_of(name: str, pod: dict, at: str = "spec.template.spec") -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_field(name, pod, "tolerations", list, [], at)):
        if not isinstance(t, dict):
            raise ConvertError(name, f"{at}.tolerations[{i}]", "expected a mapping")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise ConvertError(name, f"{at}.tolerations[{i}].operator", f"unknown operator {op!r}")
        out.append(Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or "")))
    return tuple(out)
