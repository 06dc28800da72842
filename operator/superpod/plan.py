"""`superpod plan -f dump.yaml`: what would one scheduling cycle do with this cluster dump? Prints JSON.

Input: a Kubernetes List or multi-document YAML with Nodes, Pods, at most one ClusterTopology (else: nodes only) and
TrainingJobs, as `kubectl get nodes,pods,clustertopologies,trainingjobs -A -o yaml` prints. Bound non-terminal pods
take capacity; TrainingJobs without a phase or in phase Queued/Pending are planned, in scheduling order.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

from superpod.api.convert import ConvertError, describe, job_from_k8s, node_from_k8s, pod_from_k8s, topology_from_k8s
from superpod.core.cycle import schedule
from superpod.core.model import Snapshot, Topology

PENDING = (None, "", "Queued", "Pending")


def _items(docs: list[Any]) -> list[dict]:
    out: list[dict] = []
    for n, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ConvertError(f"document {n + 1}", "<root>", f"expected a mapping, got {type(doc).__name__}")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items")
            if not isinstance(items, list):
                raise ConvertError(f"{kind} (document {n + 1})", "items", "expected a list")
            out.extend(_items(items))
        else:
            out.append(doc)
    return out


def plan_objects(objs: list[dict]) -> dict:
    """The plan for already-parsed objects; raises ConvertError on malformed input."""
    nodes, pods, topos, jobs = [], [], [], []
    for o in objs:
        if not isinstance(o, dict):
            raise ConvertError(describe(o), "<root>", "expected a mapping")
        kind = o.get("kind")
        if kind == "Node":
            nodes.append(node_from_k8s(o))
        elif kind == "Pod":
            if (p := pod_from_k8s(o)) is not None:
                pods.append(p)
        elif kind == "ClusterTopology":
            topos.append((o.get("metadata", {}).get("name", ""), topology_from_k8s(o)))
        elif kind == "TrainingJob":
            j = job_from_k8s(o)
            phase = (o.get("status") or {}).get("phase")
            if phase in PENDING:
                jobs.append(j)
        elif not isinstance(kind, str):
            raise ConvertError(describe(o), "kind", "missing")
    if len(topos) > 1:
        names = ", ".join(sorted(n for n, _ in topos))
        raise ConvertError(f"ClusterTopology {names}", "metadata.name", "more than one ClusterTopology; keep one")
    topology = topos[0][1] if topos else Topology()
    seen = set()
    for n in nodes:
        if n.name in seen:
            raise ConvertError(f"Node {n.name}", "metadata.name", "duplicate node")
        seen.add(n.name)
    snap = Snapshot(nodes, topology, pods)
    out = []
    for d in schedule(snap, jobs):
        assign = d.placement.assignments if d.placement else {}
        out.append(
            {
                "namespace": d.job.namespace,
                "name": d.job.name,
                "placed": d.placed,
                "assignments": {k: assign[k] for k in sorted(assign)},
                "reason": d.reason,
            }
        )
    return {"jobs": out}


def plan_text(text: str) -> dict:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise ConvertError("input", "<yaml>", str(e).replace("\n", " ")) from None
    return plan_objects(_items(docs))


def run(args: Any) -> int:
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        result = plan_text(text)
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
