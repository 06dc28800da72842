"""The objects the operator writes for a TrainingJob: one pod per replica, bound to its node when it is created,
and a headless Service that gives replica 0 a stable DNS name for torchrun's rendezvous. This is the one renderer:
the core books for each replica exactly what `replica_requests` computes from the pod rendered here. Pure."""

from __future__ import annotations

import copy
import hashlib
import json

from superpod.api.compute_domain import with_channel
from superpod.api.models import GROUP, VERSION
from superpod.api.resources import ConvertError, pod_requests, quantity

SCHEDULER_NAME = "superpod-scheduler"
MAX_RUNTIME = "superpod.dev/max-runtime-seconds"  # a gang's runtime limit, as a TrainingJob's spec.maxRuntimeSeconds
JOB_LABEL = "superpod.dev/job-name"
INDEX_LABEL = "superpod.dev/replica-index"
ATTEMPT_LABEL = "superpod.dev/attempt"
WRITER_ANNOTATION = "superpod.dev/written-by"  # the operator replica (and its Lease term) that created the object
GANG_ANNOTATION = "superpod.dev/gang-spec"  # digest of the fields that define the gang, on each of its pods
GANG_FIELDS = ("replicas", "resources", "topology", "template")  # what a gang's pods are made of (fixed while placed)
MASTER_PORT = 29500
CLAIMS_SCHEDULER = "default-scheduler"  # binds a TrainingJob's pods that claim devices (DRA), on the node chosen


def owner_reference(job: dict) -> dict:
    meta = job["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "name": meta["name"],
            "uid": meta.get("uid") or "", "controller": True, "blockOwnerDeletion": True}


def pod_name(job_name: str, attempt: int, index: int) -> str:
    """Deterministic per attempt, so a write repeated after a crash meets AlreadyExists instead of duplicating."""
    return f"{job_name}-a{attempt}-{index}"


def is_replica(name: str, labels: dict) -> bool:
    """Whether a pod is named as the replica its labels say it is: names are unique in a namespace, so of the pods
    carrying one job's owner reference and labels, only the operator's has the replica's name while it lives."""
    try:
        return name == pod_name(str(labels[JOB_LABEL]), int(labels[ATTEMPT_LABEL]), int(labels[INDEX_LABEL]))
    except (KeyError, ValueError):
        return False


def gang_digest(spec: dict) -> str:
    """A digest of the spec fields that define the gang: pods whose digest is the job's were made from its spec as
    it is (a spec edited since, its priority aside, makes other pods)."""
    fields = {f: spec.get(f) for f in GANG_FIELDS}
    if spec.get("computeDomain") is not None:  # (only then: the digests of gangs without one stay what they were)
        fields["computeDomain"] = spec["computeDomain"]
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def replica_resources(spec: dict) -> dict[str, str]:
    """What spec.resources puts on each replica's first container: GPUs or one MIG slice, and cpu/memory if given."""
    res = spec.get("resources") or {}
    out = {k: str(res[k]) for k in ("cpu", "memory") if res.get(k) is not None}
    if res.get("migProfile"):
        out[f"nvidia.com/mig-{res['migProfile']}"] = "1"
    elif res.get("gpus"):
        out["nvidia.com/gpu"] = str(res["gpus"])
    return out


def pod(job: dict, attempt: int, index: int, node: str, scheduler_name: str = SCHEDULER_NAME,
        writer: str = "", served: bool = False) -> dict:
    """Replica `index` of `job`'s gang attempt `attempt`, bound to `node`; or pinned to it, for kube-scheduler to bind,
    when it claims DRA devices, or asks nvidia.com/gpu of a node whose DRA devices serve it (`served`: a pod bound by
    name there would be given none). Raises ConvertError on a template that cannot be rendered (a field of the wrong
    type)."""
    meta, spec = job["metadata"], job["spec"]
    where = f"TrainingJob {meta.get('namespace')}/{meta['name']}"
    name, replicas = meta["name"], int(spec["replicas"])
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = _mapping(template.get("metadata"), where, "spec.template.metadata")
    pspec = with_channel(job, _mapping(template.get("spec"), where, "spec.template.spec"), where)
    labels = {**_strings(tmeta.get("labels"), where, "spec.template.metadata.labels"),
              JOB_LABEL: name, INDEX_LABEL: str(index), ATTEMPT_LABEL: str(attempt)}
    annotations = {**_strings(tmeta.get("annotations"), where, "spec.template.metadata.annotations"),
                   GANG_ANNOTATION: gang_digest(spec)}
    annotations.pop(MAX_RUNTIME, None)  # the job's own limit, never the template's: it follows a pod orphaned
    if spec.get("maxRuntimeSeconds"):  # (a pod gang then) and let the job into reservations (core/cycle.py)
        annotations[MAX_RUNTIME] = str(spec["maxRuntimeSeconds"])
    if writer:
        annotations[WRITER_ANNOTATION] = writer
    # Each attempt's pods have their own host names (the pod names): a terminating pod of the last attempt is never
    # what MASTER_ADDR resolves to.
    # A single replica has no Service (nothing to rendezvous with): it is its own master.
    master = f"{pod_name(name, attempt, 0)}.{name}.{meta['namespace']}.svc" if has_service(job) else "127.0.0.1"
    env = [{"name": "MASTER_ADDR", "value": master},
           {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
           {"name": "WORLD_SIZE", "value": str(replicas)},
           {"name": "RANK", "value": str(index)},
           {"name": "NODE_RANK", "value": str(index)},
           {"name": "REPLICA_INDEX", "value": str(index)}]
    ours = {e["name"] for e in env}
    containers = pspec.get("containers") or []
    if not isinstance(containers, list):
        raise ConvertError(where, "spec.template.spec.containers", "expected a list")
    for i, container in enumerate(containers):
        field = f"spec.template.spec.containers[{i}]"
        container = _mapping(container, where, field)
        given = container.get("env") or []
        if not isinstance(given, list) or not all(isinstance(e, dict) for e in given):
            raise ConvertError(where, f"{field}.env", "expected a list of name/value mappings")
        container["env"] = [e for e in given if e.get("name") not in ours] + env
        if i == 0:  # the replica's resources go on the first container
            res = container["resources"] = _mapping(container.get("resources"), where, f"{field}.resources")
            wanted = replica_resources(spec)
            gpus = {k: v for k, v in wanted.items() if k.startswith("nvidia.com/")}
            res["limits"] = {**_mapping(res.get("limits"), where, f"{field}.resources.limits"), **gpus}
            res["requests"] = {**_mapping(res.get("requests"), where, f"{field}.resources.requests"), **wanted}
    pspec.update({"nodeName": node, "schedulerName": scheduler_name, "hostname": pod_name(name, attempt, index),
                  "restartPolicy": "Never", "containers": containers})
    if pspec.get("resourceClaims") or served and _asks_gpus(pspec):
        # kube-scheduler allocates its claims, or makes one for its nvidia.com/gpu (PreBind), on the node chosen, then
        # binds it
        del pspec["nodeName"]
        pspec["schedulerName"] = CLAIMS_SCHEDULER
        pspec["affinity"] = pinned(_mapping(pspec.get("affinity"), where, "spec.template.spec.affinity"), node)
    if has_service(job):
        pspec["subdomain"] = name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(name, attempt, index), "namespace": meta["namespace"], "labels": labels,
                         "annotations": annotations, "ownerReferences": [owner_reference(job)]},
            "spec": pspec}


def _asks_gpus(pspec: dict) -> bool:
    """Whether any container of the pod asks nvidia.com/gpu (a request or a limit)."""
    return any(isinstance(container, dict) and isinstance(resources := container.get("resources"), dict) and any(
        isinstance(amounts := resources.get(field), dict) and "nvidia.com/gpu" in amounts
        for field in ("requests", "limits"))
        for container in (*(pspec.get("containers") or ()), *(pspec.get("initContainers") or ())))


def pinned(affinity: dict, node: str) -> dict:
    """`affinity` with every required node selector term also requiring the node named `node` (a term of its own when
    there is none), as a DaemonSet pins its pods."""
    here = {"key": "metadata.name", "operator": "In", "values": [node]}
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(term) for term in required.get("nodeSelectorTerms") or ()] or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or ()), here]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    return {**affinity, "nodeAffinity": node_affinity}


def pinned_to(pod_spec: dict) -> str | None:
    """The node `pinned` pins a pod to (its required node affinity naming one node by metadata.name), or None."""
    try:
        terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        named = {value for term in terms for field in term.get("matchFields") or ()
                 if field.get("key") == "metadata.name" and field.get("operator") == "In"
                 for value in field.get("values") or ()}
    except (KeyError, TypeError, AttributeError):
        return None
    return next(iter(named)) if len(named) == 1 else None


def replica_requests(job: dict) -> dict[str, int]:
    """What one replica's pod requests of its node (canonical units), from the rendered pod itself."""
    where = f"TrainingJob {job['metadata'].get('namespace')}/{job['metadata']['name']}"
    rendered = pod(job, 0, 0, "")

    def parse(field: str, quantities: dict) -> dict[str, int]:
        field = field.replace("spec.", "spec.template.spec.", 1)
        if not isinstance(quantities, dict):
            raise ConvertError(where, field, "expected a mapping of quantities")
        return {str(r): quantity(v, str(r), where, f"{field}.{r}") for r, v in quantities.items()}

    return pod_requests(rendered["spec"], parse)


def has_service(job: dict) -> bool:
    """Whether the job's replicas get a headless Service (their DNS names, MASTER_ADDR): gangs of two or more."""
    return int(job["spec"].get("replicas") or 1) > 1


def headless_service(job: dict) -> dict:
    meta = job["metadata"]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": {JOB_LABEL: meta["name"]},
                         "ownerReferences": [owner_reference(job)]},
            "spec": {"clusterIP": "None", "selector": {JOB_LABEL: meta["name"]}, "publishNotReadyAddresses": True,
                     "ports": [{"name": "rendezvous", "port": MASTER_PORT}]}}


def _strings(value, where: str, field: str) -> dict:
    """Labels and annotations: a mapping of strings to strings, as a pod's metadata must be."""
    found = _mapping(value, where, field)
    for k, v in found.items():
        if not isinstance(v, str):
            raise ConvertError(where, f"{field}.{k}", f"expected a string, got {v!r}")
    return found


def _mapping(value, where: str, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConvertError(where, field, "expected a mapping")
    return value
