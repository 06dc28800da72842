"""The objects the operator writes for a TrainingJob: one pod per replica, already bound to its node, and a headless
Service that gives replica 0 a stable DNS name for torchrun's rendezvous. Pure functions: no API calls."""

from __future__ import annotations

import copy

GROUP = "superpod.dev"
VERSION = "v1alpha1"
SCHEDULER_NAME = "superpod-scheduler"
JOB_LABEL = "superpod.dev/job-name"
INDEX_LABEL = "superpod.dev/replica-index"
ATTEMPT_LABEL = "superpod.dev/attempt"
MASTER_PORT = 29500


def owner_reference(job: dict) -> dict:
    meta = job["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_name(job_name: str, attempt: int, index: int) -> str:
    """Deterministic per attempt, so a write repeated after a crash meets AlreadyExists instead of duplicating."""
    return f"{job_name}-a{attempt}-{index}"


def replica_resources(spec: dict) -> dict[str, str]:
    """What each replica requests, from spec.resources: GPUs or one MIG slice, and cpu/memory when given."""
    res = spec.get("resources") or {}
    out = {k: str(res[k]) for k in ("cpu", "memory") if res.get(k) is not None}
    if res.get("migProfile"):
        out[f"nvidia.com/mig-{res['migProfile']}"] = "1"
    elif res.get("gpus"):
        out["nvidia.com/gpu"] = str(res["gpus"])
    return out


def pod(job: dict, attempt: int, index: int, node: str, scheduler_name: str = SCHEDULER_NAME) -> dict:
    """Replica `index` of `job`'s gang attempt `attempt`, bound to `node`."""
    meta, spec = job["metadata"], job["spec"]
    name, replicas = meta["name"], int(spec["replicas"])
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.get("metadata") or {}
    pspec = template.get("spec") or {}
    labels = {**(tmeta.get("labels") or {}), JOB_LABEL: name, INDEX_LABEL: str(index), ATTEMPT_LABEL: str(attempt)}
    env = [
        {"name": "MASTER_ADDR", "value": f"{name}-0.{name}.{meta['namespace']}.svc"},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "WORLD_SIZE", "value": str(replicas)},
        {"name": "RANK", "value": str(index)},
        {"name": "NODE_RANK", "value": str(index)},
        {"name": "REPLICA_INDEX", "value": str(index)},
    ]
    containers = pspec.get("containers") or []
    for i, c in enumerate(containers):
        names = {e["name"] for e in env}
        c["env"] = [e for e in c.get("env") or [] if e.get("name") not in names] + env
        if i == 0:  # the replica's resources go on the first container
            res = c.setdefault("resources", {})
            wanted = replica_resources(spec)
            gpus = {k: v for k, v in wanted.items() if k.startswith("nvidia.com/")}
            res["limits"] = {**(res.get("limits") or {}), **gpus}
            res["requests"] = {**(res.get("requests") or {}), **wanted}
    pspec.update(
        {
            "nodeName": node,
            "schedulerName": scheduler_name,
            "hostname": f"{name}-{index}",
            "subdomain": name,
            "restartPolicy": "Never",
            "containers": containers,
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, attempt, index),
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pspec,
    }


def headless_service(job: dict) -> dict:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {JOB_LABEL: meta["name"]},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: meta["name"]},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }
