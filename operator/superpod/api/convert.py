"""Kubernetes objects (plain dicts, as the API or `kubectl -o yaml` gives them) to core input types."""

from __future__ import annotations

import math
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from superpod.api.models import ClusterTopology, TrainingJob
from superpod.core.model import Level, Node, Pod, Topology
from superpod.core.request import GPU, JobRequest, Requirement, Taint, Toleration

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
    "E": Decimal(10**18), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
TERMINAL = ("Succeeded", "Failed")


class ConvertError(ValueError):
    """Malformed object: names the object and the field."""

    def __init__(self, obj: str, field: str, problem: str):
        super().__init__(f"{obj}: {field}: {problem}")
        self.obj, self.field, self.problem = obj, field, problem


def describe(obj: Any) -> str:
    if not isinstance(obj, dict):
        return f"item of type {type(obj).__name__}"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name", "<unnamed>")
    ns = meta.get("namespace")
    return f"{obj.get('kind', '<no kind>')} {ns + '/' if ns else ''}{name}"


def quantity(value: Any, resource: str, obj: str = "object", field: str = "quantity") -> int:
    """Canonical integer: millicores for cpu, bytes for memory, a count otherwise (rounded up)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConvertError(obj, field, f"expected a quantity, got {value!r}")
    m = _QTY.match(str(value).strip())
    if not m:
        raise ConvertError(obj, field, f"not a Kubernetes quantity: {value!r}")
    try:
        amount = Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]
    except InvalidOperation as e:
        raise ConvertError(obj, field, f"not a Kubernetes quantity: {value!r}") from e
    if resource == "cpu":
        amount *= 1000
    return int(math.ceil(amount))


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


def _resources(obj: dict, field: str, raw: dict) -> dict[str, int]:
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
        allocatable=_resources(obj, "status.allocatable", _get(obj, "status.allocatable", dict, {})),
        taints=taints,
        unschedulable=bool(_get(obj, "spec.unschedulable", bool, False)),
        ready=ready,
    )


def pod_requests(obj: dict, spec: dict) -> dict[str, int]:
    """Effective request: max(sum over containers, each init container) plus overhead; limits stand in for
    missing requests (as the API server defaults them)."""

    def of(c: dict, i: int, kind: str) -> dict[str, int]:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return _resources(obj, f"spec.{kind}[{i}].resources", merged)

    total: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or []):
        for r, v in of(c, i, "containers").items():
            total[r] = total.get(r, 0) + v
    for i, c in enumerate(spec.get("initContainers") or []):
        for r, v in of(c, i, "initContainers").items():
            total[r] = max(total.get(r, 0), v)
    for r, v in _resources(obj, "spec.overhead", spec.get("overhead") or {}).items():
        total[r] = total.get(r, 0) + v
    return total


def pod_from_k8s(obj: dict) -> Pod | None:
    """A bound non-terminal pod, or None (unbound or finished pods hold no capacity)."""
    node = _get(obj, "spec.nodeName", str)
    if not node or _get(obj, "status.phase", str) in TERMINAL:
        return None
    key = f"{_get(obj, 'metadata.namespace', str, 'default')}/{_get(obj, 'metadata.name', str, '')}"
    reqs = pod_requests(obj, _get(obj, "spec", dict, {}))
    return Pod(key=key, node=node, requests=tuple(sorted(reqs.items())))


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


def timestamp(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def job_from_k8s(obj: dict) -> JobRequest:
    tj: TrainingJob = _validate(TrainingJob, obj)
    name = describe(obj)
    spec, res, topo = tj.spec, tj.spec.resources, tj.spec.topology
    reqs: dict[str, int] = {}
    if res.gpus:
        reqs[GPU] = res.gpus
    if res.migProfile:
        reqs[f"nvidia.com/mig-{res.migProfile}"] = 1
    if res.cpu is not None:
        reqs["cpu"] = quantity(res.cpu, "cpu", name, "spec.resources.cpu")
    if res.memory is not None:
        reqs["memory"] = quantity(res.memory, "memory", name, "spec.resources.memory")
    pod = spec.template.get("spec") or {}
    if not isinstance(pod, dict):
        raise ConvertError(name, "spec.template.spec", "expected a mapping")
    selector = pod.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise ConvertError(name, "spec.template.spec.nodeSelector", "expected a mapping")
    try:
        submitted = timestamp(tj.status.queuedAt if tj.status and tj.status.queuedAt else tj.metadata.creationTimestamp)
    except ValueError as e:
        raise ConvertError(name, "metadata.creationTimestamp", str(e)) from None
    return JobRequest(
        namespace=tj.metadata.namespace or "default",
        name=tj.metadata.name,
        replicas=spec.replicas,
        requests=tuple(sorted((k, v) for k, v in reqs.items() if v)),
        gpu_product=res.gpuProduct,
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        affinity=_affinity(name, pod),
        tolerations=_tolerations(name, pod),
        required=topo.required,
        preferred=topo.preferred,
        slice_size=topo.sliceSize,
        slice_required=topo.sliceRequired,
        priority=spec.priority,
        submitted=submitted,
    )


def _affinity(name: str, pod: dict) -> tuple[tuple[Requirement, ...], ...]:
    path = "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    req = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not req:
        return ()
    terms = []
    for t, term in enumerate(req.get("nodeSelectorTerms") or []):
        exprs = []
        for e, ex in enumerate(term.get("matchExpressions") or []):
            op = ex.get("operator")
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt") or not ex.get("key"):
                raise ConvertError(name, f"{path}.nodeSelectorTerms[{t}].matchExpressions[{e}]", "bad key/operator")
            exprs.append(Requirement(str(ex["key"]), op, tuple(str(v) for v in ex.get("values") or ())))
        terms.append(tuple(exprs))
    return tuple(terms)


def _tolerations(name: str, pod: dict) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(pod.get("tolerations") or []):
        if not isinstance(t, dict):
            raise ConvertError(name, f"spec.template.spec.tolerations[{i}]", "expected a mapping")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise ConvertError(name, f"spec.template.spec.tolerations[{i}].operator", f"unknown operator {op!r}")
        out.append(Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or "")))
    return tuple(out)
