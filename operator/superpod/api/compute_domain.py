"""A TrainingJob's ComputeDomain: multi-node NVLink (GB200 NVL72) through NVIDIA's DRA driver. The operator creates
the ComputeDomain (resource.nvidia.com/v1beta1) a job with spec.computeDomain asks for; the driver's controller makes
from it the ResourceClaimTemplate of one IMEX channel, and every replica claims its channel through that template,
like any other DRA claim (api/claims.py). This is the one place that says what the job's pods claim for it. Pure."""

from __future__ import annotations

import copy

from superpod.api.resources import ConvertError

GROUP, VERSION, PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
CHANNEL_CLAIM = "compute-domain-channel"  # the entry each replica's pod spec and containers get
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # GFD's label of a node's NVLink clique: an IMEX domain joins one clique
CHANNEL_FIELD = f"spec.template.spec.resourceClaims[{CHANNEL_CLAIM}]"  # where a job's errors about it point


def wanted(job: dict) -> bool:
    """Whether the job asks for a ComputeDomain (spec.computeDomain set)."""
    return isinstance((job.get("spec") or {}).get("computeDomain"), dict)


def channel_template(job: dict) -> str:
    """The ResourceClaimTemplate the job's ComputeDomain names for its channel (the driver makes it). The job's uid
    is in the name: a template left by an earlier job of the same name is never this one's."""
    meta = job["metadata"]
    return f"{meta['name']}-{(meta.get('uid') or '')[:8]}-channel"


def compute_domain(job: dict, owner: dict) -> dict:
    """The ComputeDomain of `job` (named as the job; `owner`: the job's owner reference, so it goes when the job
    does). numNodes stays 0, as the driver recommends: the gang's pods, not the domain, say when all have joined."""
    meta = job["metadata"]
    mode = job["spec"]["computeDomain"].get("allocationMode") or "Single"
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ComputeDomain",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace") or "default",
                         "ownerReferences": [owner]},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": channel_template(job)},
                                                "allocationMode": mode}}}


def with_channel(job: dict, pod_spec: dict, where: str) -> dict:
    """`pod_spec` (a template's, not changed) with the job's IMEX channel claimed by the pod and each of its
    containers, when the job asks for a ComputeDomain. Raises ConvertError if the template already uses the name."""
    if not wanted(job):
        return pod_spec
    entries = pod_spec.get("resourceClaims") or []
    if not isinstance(entries, list):
        return pod_spec  # not a list: the claims' reader says why
    if any(isinstance(e, dict) and e.get("name") == CHANNEL_CLAIM for e in entries):
        raise ConvertError(where, CHANNEL_FIELD,
                           "this name is the ComputeDomain's channel claim (spec.computeDomain): use another")
    out = copy.deepcopy(pod_spec)
    out["resourceClaims"] = [*entries, {"name": CHANNEL_CLAIM,
                                        "resourceClaimTemplateName": channel_template(job)}]
    for container in out.get("containers") or ():
        if isinstance(container, dict):
            resources = container.get("resources")
            resources = container["resources"] = dict(resources) if isinstance(resources, dict) else {}
            given = resources.get("claims")
            resources["claims"] = [*(given if isinstance(given, list) else ()), {"name": CHANNEL_CLAIM}]
    return out
