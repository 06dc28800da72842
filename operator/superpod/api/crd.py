"""CustomResourceDefinitions generated from the pydantic models: structural OpenAPI v3 schemas with every field's
description, plus the cross-field rules as CEL (`x-kubernetes-validations`) that the API server enforces at apply.
hack/gen-crds.py writes them to crds/; CI fails when the files there are stale."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from superpod.api import models
from superpod.api.manifests import GANG_FIELDS

# Level names in the ClusterTopology conventions of DESIGN.md, coarsest first. CEL can order these; levels with
# other names are checked by the operator, which knows the cluster's ClusterTopology.
KNOWN_LEVELS = ["spine", "leaf", "nvlink", "node"]
_RANK = "{" + ", ".join(f"'{name}': {i}" for i, name in enumerate(KNOWN_LEVELS)) + "}"


def _order_rule(a: str, b: str, msg: str) -> dict:
    """a must be no finer than b when both are set and both are known level names."""
    both = f"has(self.{a}) && has(self.{b})"
    rule = (f"!({both}) || !(self.{a} in {_RANK} && self.{b} in {_RANK}) || "
            f"{_RANK}[self.{a}] <= {_RANK}[self.{b}]")
    return {"rule": rule, "message": msg}


_POD_SPEC = "self.template.spec"
_GPU_KEY = "k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-')"
_ACTIVE = "['Starting', 'Running']"


# What a job was admitted with: its queue and class (whose quota it counts against, whether it may be preempted),
# its priority, its own minimum runtime (what it may preempt, and for how long it is shielded) and its runtime limit
# (when it is stopped; what the queue planned around). Changing one of these on a placed job would move it out of its
# queue's limit, make borrowed GPUs unreclaimable or let it outlive the end it was placed with.
ADMITTED_FIELDS = ("queue", "serviceClass", "priority", "minRuntimeSeconds", "maxRuntimeSeconds")
_PLACED = f"has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase in {_ACTIVE}"


def _fixed_while_placed(field: str) -> dict:
    """spec.<field> (optional: set on both sides or on neither) is unchanged while the job is Starting or Running."""
    same = (f"has(self.spec.{field}) == has(oldSelf.spec.{field}) && "
            f"(!has(self.spec.{field}) || self.spec.{field} == oldSelf.spec.{field})")
    return {"rule": f"!({_PLACED}) || ({same})", "fieldPath": f".spec.{field}",
            "message": f"spec.{field} cannot change while the job is Starting or Running: the job was admitted with "
                       "it; delete and recreate the job, or wait until it ends"}


def _containers_rule(each: str, msg: str) -> dict:
    """`each` holds for every container and init container of the template (c: the container)."""
    lists = [f"(!has({_POD_SPEC}.{kind}) || {_POD_SPEC}.{kind}.all(c, {each}))"
             for kind in ("containers", "initContainers")]
    return {"rule": f"!has({_POD_SPEC}) || ({' && '.join(lists)})", "message": msg}


RULES: dict[str, list[dict]] = {
    "TrainingJob": [
        {"rule": f"!has(oldSelf.status) || !has(oldSelf.status.phase) || !(oldSelf.status.phase in {_ACTIVE}) || "
                 f"({' && '.join(f'self.spec.{f} == oldSelf.spec.{f}' for f in GANG_FIELDS)})",
         "fieldPath": ".spec",
         "message": "replicas, resources, topology and template define the gang and cannot change while it is "
                    "Starting or Running: delete and recreate the job, or wait until it ends"},
        *(_fixed_while_placed(field) for field in (*ADMITTED_FIELDS, "computeDomain")),
        {"rule": "self.metadata.name.size() <= 50",
         "message": "metadata.name must be at most 50 characters (replica hostnames are <name>-<index>)"},
        {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
         "message": "metadata.name must be a DNS label starting with a letter (it names the job's Service)"},
    ],
    "TrainingJob.spec": [
        {"rule": "has(self.resources.gpus) != has(self.resources.migProfile) || (!has(self.resources.gpus) && "
                 f"has({_POD_SPEC}) && has({_POD_SPEC}.resourceClaims))",
         "message": "set exactly one of resources.gpus (whole GPUs) and resources.migProfile (one MIG slice), or "
                    "neither when the template's pods claim their devices (resourceClaims)"},
        {"rule": "!has(self.computeDomain) || has(self.topology.required)",
         "message": "computeDomain needs topology.required, the level of NVLink cliques (nvlink in the presets): an "
                    "IMEX domain joins the GPUs of one clique"},
        {"rule": "!has(self.topology.sliceSize) || self.replicas % self.topology.sliceSize == 0",
         "message": "replicas must be a multiple of topology.sliceSize"},
        {"rule": "has(self.template.spec) && has(self.template.spec.containers) && "
                 "size(self.template.spec.containers) > 0",
         "message": "template.spec.containers must list at least one container"},
        {"rule": f"!has({_POD_SPEC}) || !has({_POD_SPEC}.nodeName)",
         "message": "template.spec.nodeName must not be set: the scheduler chooses every replica's node"},
        {"rule": f"!has({_POD_SPEC}) || !has({_POD_SPEC}.schedulerName)",
         "message": "template.spec.schedulerName must not be set: replicas are placed by superpod-scheduler"},
        {"rule": f"!has({_POD_SPEC}) || !has({_POD_SPEC}.schedulingGates)",
         "message": "template.spec.schedulingGates must not be set: the gang is placed whole by superpod-scheduler"},
        {"rule": f"!has({_POD_SPEC}) || !has({_POD_SPEC}.restartPolicy) || {_POD_SPEC}.restartPolicy == 'Never'",
         "message": "template.spec.restartPolicy must be Never (or unset): a failed replica restarts the whole gang"},
        _containers_rule(
            "!has(c.resources) || ((!has(c.resources.limits) || !c.resources.limits.exists(k, "
            f"{_GPU_KEY})) && (!has(c.resources.requests) || !c.resources.requests.exists(k, {_GPU_KEY})))",
            "containers must not request nvidia.com/gpu or nvidia.com/mig-* resources: set spec.resources.gpus or "
            "spec.resources.migProfile, the scheduler puts them on the first container"),
        _containers_rule(
            "!has(c.resources) || !has(c.resources.requests) || c.resources.requests.all(k, !k.contains('/') || "
            "(has(c.resources.limits) && k in c.resources.limits))",
            "an extended resource (a name with a '/', e.g. rdma/ib) requested without a limit: Kubernetes requires "
            "its limit, equal to the request"),
    ],
    "GPUUsage.spec": [
        {"rule": "self == oldSelf", "message": "a usage record does not change once written (it is what was billed)"},
    ],
    "TrainingJob.spec.topology": [
        {"rule": "has(self.sliceSize) == has(self.sliceRequired)",
         "message": "topology.sliceSize and topology.sliceRequired must be set together"},
        _order_rule("required", "sliceRequired",
                    "topology.required must not be a finer level than topology.sliceRequired"),
        _order_rule("required", "preferred", "topology.preferred must be a level at or inside topology.required"),
    ],
    "GPUQueue.spec": [
        {"rule": "!has(self.resources) || self.resources.all(r, self.resources.exists_one(o, o.flavor == r.flavor))",
         "message": "each flavor at most once in resources"},
        {"rule": "!has(self.resources) || self.resources.all(r, !has(r.limit) || r.limit >= r.guaranteed)",
         "message": "a resource's limit must not be below its guarantee"},
        {"rule": "!has(self.resources) || self.resources.all(r, !has(r.lendingLimit) || r.lendingLimit <= "
                 "r.guaranteed)",
         "message": "a resource's lendingLimit must not exceed its guarantee"},
        {"rule": "!has(self.defaultMaxRuntimeSeconds) || !has(self.maxRuntimeSeconds) || "
                 "self.defaultMaxRuntimeSeconds <= self.maxRuntimeSeconds",
         "fieldPath": ".defaultMaxRuntimeSeconds",
         "message": "defaultMaxRuntimeSeconds must not exceed maxRuntimeSeconds (the most any job of the queue gets)"},
    ],
    "GPUQueue.spec.budget": [
        # 0h matches the duration pattern but is no period at all (the operator refuses such a queue too)
        {"rule": "!has(self.period) || duration(self.period) > duration('0s')", "fieldPath": ".period",
         "message": "budget.period must be longer than 0, e.g. 720h: the budget renews every period"},
    ],
    "ClusterTopology.spec": [
        {"rule": "self.levels.all(l, self.levels.exists_one(m, m.name == l.name))",
         "message": "level names must be unique"},
        {"rule": "self.levels.all(l, self.levels.exists_one(m, m.nodeLabel == l.nodeLabel))",
         "message": "level node labels must be unique"},
    ],
}

_QUANTITIES = {"type": "object", "maxProperties": 32,
               "additionalProperties": {"x-kubernetes-int-or-string": True}}
_KEEP = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_CONTAINERS = {"type": "array", "maxItems": 64, "items": {
    "type": "object", "x-kubernetes-preserve-unknown-fields": True,
    "properties": {"resources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                 "properties": {"limits": _QUANTITIES, "requests": _QUANTITIES}}}}}
# A PodTemplateSpec is kept as given; only the fields the rules above read are typed, so CEL can see them.
TEMPLATE = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "metadata": _KEEP,
        "spec": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "nodeName": {"type": "string", "maxLength": 253},
                "schedulerName": {"type": "string", "maxLength": 253},
                "restartPolicy": {"type": "string", "maxLength": 16},
                "schedulingGates": {"type": "array", "maxItems": 16, "items": _KEEP},
                "resourceClaims": {"type": "array", "maxItems": 16, "items": _KEEP},
                "containers": _CONTAINERS,
                "initContainers": _CONTAINERS,
            },
        },
    },
}

# Defaults the API server fills in, so CEL rules can read these objects when the user leaves them out.
DEFAULTS: dict[str, Any] = {"TrainingJob.spec.topology": {}}

PRINTER_COLUMNS = {
    "TrainingJob": [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "GPUs", "type": "string", "jsonPath": ".status.gpus", "description": "GPUs or MIG slices in all"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.ready", "description": "replicas running / total"},
        {"name": "Placement", "type": "string", "jsonPath": ".status.domain", "description": "tightest domain"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "GPUQueue": [
        {"name": "Guaranteed", "type": "number", "jsonPath": ".status.guaranteed"},
        {"name": "Allocated", "type": "number", "jsonPath": ".status.allocated"},
        {"name": "Borrowed", "type": "number", "jsonPath": ".status.borrowed"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pending", "description": "jobs waiting"},
        {"name": "Share", "type": "number", "jsonPath": ".status.fairShare", "description": "weighted share"},
        {"name": "Budget Left", "type": "number", "jsonPath": ".status.budgetRemaining",
         "description": "GPU-hours left this period"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "GPUUsage": [
        {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
        {"name": "Namespace", "type": "string", "jsonPath": ".spec.namespace"},
        {"name": "Job", "type": "string", "jsonPath": ".spec.job"},
        {"name": "GPUs", "type": "number", "jsonPath": ".spec.gpus"},
        {"name": "GPU-Seconds", "type": "number", "jsonPath": ".spec.gpuSeconds"},
        {"name": "End", "type": "date", "jsonPath": ".spec.end"},
    ],
    "ClusterTopology": [
        {"name": "Coarsest", "type": "string", "jsonPath": ".spec.levels[0].name"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}


def _structural(schema: dict, defs: dict) -> dict:
    """JSON Schema from pydantic -> a Kubernetes structural schema (no $ref, no null, int-or-string)."""
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        return _structural({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    out: dict[str, Any] = {}
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        types = {o.get("type") for o in options}
        if types >= {"integer", "string"}:
            out["x-kubernetes-int-or-string"] = True
        elif len(options) == 1:
            out.update(_structural(options[0], defs))
        else:
            raise ValueError(f"cannot express {schema} structurally")
    for key in ("type", "format", "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
                "enum"):
        if key in schema:
            out[key] = schema[key]
    if "exclusiveMinimum" in schema:  # JSON Schema's number; OpenAPI v3.0 (the CRD's dialect) a flag on minimum
        if schema.get("type") == "integer":
            out["minimum"] = schema["exclusiveMinimum"] + 1
        else:
            out["minimum"], out["exclusiveMinimum"] = schema["exclusiveMinimum"], True
    if "const" in schema:
        out["enum"] = [schema["const"]]
    if schema.get("default") is not None and schema["default"] != []:
        out["default"] = schema["default"]
    if "description" in schema:
        out["description"] = schema["description"]
    if out.get("type") == "object" or "properties" in schema:
        out["type"] = "object"
        props = schema.get("properties")
        if props:
            out["properties"] = {k: _structural(v, defs) for k, v in props.items()}
            req = [r for r in schema.get("required", []) if r in props]
            if req:
                out["required"] = req
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = _structural(extra, defs)
        elif not props:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "array" and "anyOf" not in schema:  # an optional list: its items came with its option
        out["items"] = _structural(schema.get("items", {}), defs)
    return out


def _schema(model: type[BaseModel]) -> dict:
    js = model.model_json_schema(mode="validation")
    return _structural(js, js.get("$defs", {}))


def _at(schema: dict, kind: str, path: str) -> dict | None:
    head, *fields = path.split(".")
    if head != kind:
        return None
    for f in fields:
        schema = schema["properties"][f]
    return schema


def _with_rules(schema: dict, kind: str) -> dict:
    for path, rules in RULES.items():
        if (node := _at(schema, kind, path)) is not None:
            node["x-kubernetes-validations"] = rules
    if (node := _at(schema, kind, "TrainingJob.spec.template")) is not None:
        node.update({k: v for k, v in TEMPLATE.items() if k != "description"})
    for path, default in DEFAULTS.items():
        if (node := _at(schema, kind, path)) is not None:
            node["default"] = default
    return schema


def _crd(kind: str, plural: str, scope: str, spec: type[BaseModel], status: type[BaseModel] | None,
         short: list[str], description: str) -> dict:
    props: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "superpod.dev/v1alpha1"},
        "kind": {"type": "string", "description": kind},
        "metadata": {"type": "object"},
        "spec": _schema(spec),
    }
    if status is not None:
        props["status"] = _schema(status)
    root = _with_rules({"type": "object", "description": description, "properties": props, "required": ["spec"]},
                       kind)
    version: dict[str, Any] = {"name": models.VERSION, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": root},
                               "additionalPrinterColumns": PRINTER_COLUMNS[kind]}
    if status is not None:
        version["subresources"] = {"status": {}}
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{models.GROUP}"},
        "spec": {"group": models.GROUP, "scope": scope, "names": names, "versions": [version]},
    }


def crds() -> dict[str, dict]:
    """File name in crds/ -> CustomResourceDefinition."""
    return {
        "superpod.dev_trainingjobs.yaml": _crd(
            "TrainingJob", "trainingjobs", "Namespaced", models.TrainingJobSpec, models.TrainingJobStatus, ["tj"],
            "A gang of replicas placed all at once, in the tightest topology domain that fits."),
        "superpod.dev_gpuqueues.yaml": _crd(
            "GPUQueue", "gpuqueues", "Cluster", models.GPUQueueSpec, models.GPUQueueStatus, ["gq"],
            "A tenant: guaranteed GPUs, a limit, lending and a weight for the surplus, a GPU-hour budget."),
        "superpod.dev_gpuusages.yaml": _crd(
            "GPUUsage", "gpuusages", "Cluster", models.GPUUsageSpec, None, ["gu"],
            "The GPU-seconds of one ended attempt of a TrainingJob: the record tenants are billed from."),
        "superpod.dev_clustertopologies.yaml": _crd(
            "ClusterTopology", "clustertopologies", "Cluster", models.ClusterTopologySpec, None, [],
            "The levels of the cluster's fabric, coarsest first, each named by a node label."),
    }
