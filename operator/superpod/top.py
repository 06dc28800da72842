"""`superpod top`: the fleet in a terminal. Domains coarsest first (e.g. spine, then leaf), each node with a bar of
its GPUs (█ in use, ░ free), flags for nodes out of placement (! not ready, x cordoned, m being repartitioned for
MIG, ? unreadable) and the job holding most of it; larger fleets one line per domain; then each GPUQueue against
its guarantee. Reads the cluster through the API, or a dump (`-f`, as `kubectl get nodes,pods,trainingjobs,
gpuqueues,clustertopologies -A -o yaml` prints it)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from typing import Any

import yaml

from superpod.api.convert import ConvertError
from superpod.controller.state import ClusterState, NodeEntry
from superpod.core.request import GPU, MIG_PREFIX
from superpod.k8s.api import CLUSTERTOPOLOGIES, GPUQUEUES, NODES, PODS, TRAININGJOBS
from superpod.plan import items_of, read_input

KINDS = (NODES, PODS, TRAININGJOBS, GPUQUEUES, CLUSTERTOPOLOGIES)
PER_NODE_UP_TO = 128  # nodes shown one by one; above this, one line per domain
CELL = 38  # characters of one node's cell


def load_dump(text: str) -> ClusterState:
    state = ClusterState()
    by_kind = {kind.kind: kind for kind in KINDS}
    for obj in items_of(list(yaml.safe_load_all(text))):
        kind = by_kind.get(obj.get("kind")) if isinstance(obj, dict) else None
        if kind is not None and isinstance(obj.get("metadata"), dict):
            state.apply(kind, "ADDED", obj, 0.0)
    return state


async def load_cluster(api) -> ClusterState:
    state = ClusterState()
    for kind in KINDS:
        items, version = await api.list(kind)
        state.resync(kind, items, version, time.time())
    return state


def render(state: ClusterState, width: int = 120) -> str:
    labelled = [entry.obj["metadata"].get("labels") or {} for entry in state.nodes.values()]
    levels = [level for level in state.topology()[0].domain_levels
              if level.label != "kubernetes.io/hostname" and any(level.label in labels for labels in labelled)]
    used, jobs = _usage(state)
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, entry in sorted(state.nodes.items()):
        labels = entry.obj["metadata"].get("labels") or {}
        groups.setdefault(tuple(labels.get(level.label, "-") for level in levels), []).append(name)
    total = sum(_gpus(entry) for entry in state.nodes.values())
    lines = [f"{len(state.nodes)} nodes, {sum(used.values()):g} of {total:g} GPUs in use"]
    per_node = len(state.nodes) <= PER_NODE_UP_TO
    for domain, names in sorted(groups.items()):
        have = sum(_gpus(state.nodes[n]) for n in names)
        busy = sum(used.get(n, 0) for n in names)
        out = sum(1 for n in names if _flag(state.nodes[n]) != " ")
        where = " / ".join(f"{level.name} {value}" for level, value in zip(levels, domain, strict=True)) or "all"
        head = f"{where}: {busy:g}/{have:g} GPUs" + (f", {out} node(s) out of placement" if out else "")
        if not per_node:
            lines.append(f"{_bar(busy, have, 30)} {head}")
            continue
        lines.append(head)
        cells = [_cell(name, state.nodes[name], used.get(name, 0), jobs.get(name)) for name in names]
        per_row = max(1, width // (CELL + 2))
        for start in range(0, len(cells), per_row):
            lines.append("  " + "  ".join(cells[start:start + per_row]).rstrip())
    lines += _queues(state)
    return "\n".join(line[:width] for line in lines)


def _usage(state: ClusterState) -> tuple[Counter, dict[str, str]]:
    """GPUs in use per node (MIG slices as their share of a GPU), and the job holding most of each node."""
    used: Counter = Counter()
    holders: dict[str, Counter] = {}
    for key, pod in state.holding.items():
        gpus = sum(q if r == GPU else q * int(r[len(MIG_PREFIX):].split("g", 1)[0]) / 7
                   for r, q in pod.requests if r == GPU or r.startswith(MIG_PREFIX))
        if gpus:
            used[pod.node] += gpus
            info = state.pods.get(key)
            job = (info.job.split("/", 1)[1] if info and info.job else key.split("/", 1)[1].rsplit("-", 1)[0])
            holders.setdefault(pod.node, Counter())[job] += gpus
    return used, {node: counts.most_common(1)[0][0] for node, counts in holders.items()}


def _gpus(entry: NodeEntry) -> int:
    alloc = (entry.obj.get("status") or {}).get("allocatable") or {}
    try:
        return int(alloc.get(GPU, 0)) or sum(int(v) for k, v in alloc.items() if k.startswith(MIG_PREFIX))
    except (TypeError, ValueError):
        return 0


def _flag(entry: NodeEntry) -> str:
    if entry.node is None:
        return "?"
    if not entry.node.ready:
        return "!"
    if entry.node.unschedulable:
        return "x"
    return "m" if entry.node.held else " "


def _bar(busy: float, have: float, size: int) -> str:
    full = round(size * busy / have) if have else 0
    return "█" * full + "░" * (size - full)


def _cell(name: str, entry: NodeEntry, busy: float, job: str | None) -> str:
    have = _gpus(entry)
    short = name.rsplit("-", 1)[-1] if len(name) > 12 else name
    text = f"{short:>4}{_flag(entry)}{_bar(busy, have, min(have, 8) or 1)} {job or ''}"
    return text[:CELL].ljust(CELL)


def _queues(state: ClusterState) -> list[str]:
    if not state.queues:
        return []
    lines = ["", f"{'queue':<24} {'guaranteed':>10} {'allocated':>9} {'borrowed':>8} {'pending':>7} "
                 f"{'budget left':>11}"]
    for name, obj in sorted(state.queues.items()):
        status = obj.get("status") or {}
        left = status.get("budgetRemaining")
        lines.append(f"{name[:24]:<24} {status.get('guaranteed', 0):>10g} {status.get('allocated', 0):>9g} "
                     f"{status.get('borrowed', 0):>8g} {status.get('pending', 0):>7} "
                     f"{'-' if left is None else f'{left:g} GPU-h':>11}")
    return lines


def register(sub: Any) -> None:
    p = sub.add_parser("top", help="the fleet in a terminal: domains, nodes, GPUs in use, jobs, queues")
    p.add_argument("-f", "--file", help="a dump (YAML) instead of the cluster; '-' for stdin")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--watch", type=float, default=0, help="redraw every this many seconds")
    p.add_argument("--width", type=int, default=120)
    p.set_defaults(func=run)


def run(args) -> int:
    while True:
        try:
            if args.file:
                state = load_dump(read_input(args.file))
            else:
                from superpod.k8s.client import load
                from superpod.k8s.kube import KubeAPI

                state = asyncio.run(load_cluster(KubeAPI(load(args.kubeconfig), workers=4)))
        except (OSError, ConvertError, yaml.YAMLError) as e:
            print(f"superpod top: {e}", file=sys.stderr)
            return 1
        if args.watch:
            print("\033[H\033[2J", end="")
        print(render(state, args.width), flush=True)
        if not args.watch or args.file == "-":
            return 0
        time.sleep(args.watch)
