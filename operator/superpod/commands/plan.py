"""`superpod plan -f dump.yaml`: what would one scheduling cycle do with this cluster dump? Prints JSON.

Input: a Kubernetes List or multi-document YAML with Nodes, Pods, at most one ClusterTopology (else: nodes only) and
TrainingJobs, as `kubectl get nodes,pods,clustertopologies,trainingjobs -A -o yaml` prints; and, where GPUs are
claimed through DRA, ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates (the jobs' claims are
placed by the devices, as the operator places them). Bound non-terminal pods
take capacity; TrainingJobs without a phase or in phase Queued, Pending or Invalid are planned, in scheduling order,
by the operator's own cycle. Running TrainingJobs (with their pods) are the candidates for preemption: a job that
needs victims is `"placed": false`, its `reason` names them and `preempts` lists them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import yaml

from superpod.api.convert import ConvertError, describe, job_from_k8s, node_from_k8s, topology_from_k8s
from superpod.api.dumps import items_of, read_input
from superpod.controller.compute_domains import domain_pending
from superpod.controller.controller import Controller
from superpod.controller.job_status import NO_DETAILS, cause_details, reference
from superpod.controller.jobs import without_claims
from superpod.controller.state import ClusterState
from superpod.core.cycle import PriorityFifo
from superpod.core.phases import PENDING, Cause, Phase, Reason
from superpod.core.request import JobRequest
from superpod.k8s.api import CLUSTERTOPOLOGIES, DRA, NODES, PODS, SERVICES, TRAININGJOBS, object_key

KINDS = {kind.kind: kind for kind in (NODES, PODS, SERVICES, TRAININGJOBS, CLUSTERTOPOLOGIES, *DRA)}


def plan_objects(objs: list[dict], now: float | None = None) -> dict:
    """The plan for already-parsed objects, by the operator's own cycle (Controller.plan on a cache filled from the
    objects; nothing is written); raises ConvertError on malformed input."""
    state = ClusterState()
    seen: set[tuple[str, str]] = set()
    job_objs = []
    for o in objs:
        if not isinstance(o, dict):
            raise ConvertError(describe(o), "<root>", "expected a mapping")
        kind = KINDS.get(o.get("kind"))
        if kind is None:
            if not isinstance(o.get("kind"), str):
                raise ConvertError(describe(o), "kind", "missing")
            continue
        if kind is NODES:
            node_from_k8s(o)  # malformed input is an error here, not a node left out
        elif kind is TRAININGJOBS:
            job_objs.append(o)
        elif kind is CLUSTERTOPOLOGIES:
            topology_from_k8s(o)
        name = object_key(o) if isinstance(o.get("metadata"), dict) and o["metadata"].get("name") else ""
        if (kind.plural, name) in seen and kind is not PODS:
            raise ConvertError(describe(o), "metadata.name", f"duplicate {kind.kind.lower()}")
        seen.add((kind.plural, name))
        state.apply(kind, "ADDED", o, 0.0)
    if len(state.topologies) > 1:
        names = ", ".join(sorted(state.topologies))
        raise ConvertError(f"ClusterTopology {names}", "metadata.name", "more than one ClusterTopology; keep one")
    read = [_request(o, state) for o in job_objs]
    jobs, unread = [job for job, _ in read], {job.key: why for job, why in read if why}
    controller = Controller(state, api=None, leading=lambda: False)
    controller.plan(time.time() if now is None else now)
    decided = {d.job.key: d for d in controller.decisions}
    out = []
    for job in PriorityFifo().order(jobs):
        phase = (state.jobs[job.key].get("status") or {}).get("phase")
        if phase not in PENDING and phase != Phase.INVALID:
            continue
        d = decided.get(job.key)
        assign = d.placement.assignments if d and d.placement else {}
        why_unread = unread.get(job.key)
        reason = d.reason if d else (why_unread and why_unread.message) or controller.invalid.get(job.key) or \
            controller.held_back.get(job.key)
        code = d.cause.code if d and d.cause else why_unread.code if why_unread else \
            Reason.INVALID if job.key in controller.invalid else None
        preempts = [reference(key) for key in d.preempts] if d else []
        out.append({"namespace": job.namespace, "name": job.name, "placed": bool(assign),
                    "assignments": {k: assign[k] for k in sorted(assign)}, "reason": None if assign else reason,
                    "code": None if assign else code, "preempts": preempts,
                    **(cause_details(d) if d and not assign else NO_DETAILS)})
    return {"jobs": out}


def _request(obj: dict, state: ClusterState) -> tuple[JobRequest, Cause | None]:
    """A job's request (to order the jobs by), and why its claims do not read (None when they do: such a job is
    ordered without them): it waits for its ComputeDomain, or is Invalid. Raises ConvertError on a malformed job."""
    try:
        return job_from_k8s(obj, state.dra), None
    except ConvertError as error:
        request = without_claims(obj, obj.get("status") or {}, error)
        if isinstance(request, ConvertError):
            raise request from None
        return request, domain_pending(obj, error) or Cause(Reason.INVALID, str(error))


def plan_text(text: str) -> dict:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise ConvertError("input", "<yaml>", str(e).replace("\n", " ")) from None
    return plan_objects(items_of(docs))


def run(args: Any) -> int:
    try:
        result = plan_text(read_input(args.file))
    except OSError as e:
        print(f"superpod plan: {e}", file=sys.stderr)
        return 2
    except ConvertError as e:
        print(f"superpod plan: {e}", file=sys.stderr)
        return 1
    json.dump(result, sys.stdout, indent=2 if args.pretty else None)
    sys.stdout.write("\n")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="what-if: place the pending TrainingJobs of a cluster dump, print JSON")
    p.add_argument("-f", "--file", required=True, help="YAML dump (a List or multi-document), '-' for stdin")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.set_defaults(func=run)
