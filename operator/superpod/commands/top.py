"""`superpod top`: the fleet in a terminal. Domains coarsest first (e.g. spine, then leaf), each node with a bar of
its GPUs (█ in use, ░ free), a flag for nodes out of placement (! not ready, x cordoned, m being repartitioned for
MIG, F its MIG reconfiguration failed, ? unreadable) or held (n nominated for a preemptor), and the job (or pod gang)
holding most of it; larger fleets one line per domain; then the MIG layouts, the reservations of blocked jobs, and
each GPUQueue against its guarantee. Reads the cluster through the API, or a dump (`-f`, as `kubectl get
nodes,pods,trainingjobs,gpuqueues,clustertopologies -A -o yaml` prints it)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from typing import Any

import yaml

from superpod.api.convert import ConvertError
from superpod.api.dumps import items_of, read_input
from superpod.controller.state import MIG_FAILED, ClusterState, NodeEntry
from superpod.core.request import GPU, MIG_PREFIX
from superpod.k8s.api import CLUSTERTOPOLOGIES, GPUQUEUES, NODES, PODS, TRAININGJOBS

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


def render(state: ClusterState, width: int = 120, selector: dict[str, str] | None = None) -> str:
    """The view, of the nodes whose labels match `selector` (all by default)."""
    nodes = {name: entry for name, entry in state.nodes.items()
             if all((entry.obj["metadata"].get("labels") or {}).get(k) == v for k, v in (selector or {}).items())}
    labelled = [entry.obj["metadata"].get("labels") or {} for entry in nodes.values()]
    levels = [level for level in state.topology()[0].domain_levels
              if level.label != "kubernetes.io/hostname" and any(level.label in labels for labels in labelled)]
    used, jobs = _usage(state)
    nominated = _nominated(state)
    jobs.update(nominated)
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, entry in sorted(nodes.items()):
        labels = entry.obj["metadata"].get("labels") or {}
        groups.setdefault(tuple(labels.get(level.label, "-") for level in levels), []).append(name)
    total = sum(_gpus(entry) for entry in nodes.values())
    lines = [f"{len(nodes)} nodes, {_num(sum(used.get(n, 0) for n in nodes))} of {_num(total)} GPUs in use"]
    per_node = len(nodes) <= PER_NODE_UP_TO
    for domain, names in sorted(groups.items()):
        have = sum(_gpus(nodes[n]) for n in names)
        busy = sum(used.get(n, 0) for n in names)
        out = sum(1 for n in names if _flag(nodes[n]) not in " n")
        where = " / ".join(f"{level.name} {_short(value)}" for level, value in zip(levels, domain, strict=True)
                           if value != "-") or "all"
        head = f"{where}: {_num(busy)}/{_num(have)} GPUs" + (f", {out} node(s) out of placement" if out else "")
        if not per_node:  # the figures first: a long domain name is what the width cuts
            holders = Counter(jobs[n] for n in names if n in jobs)
            lines.append(f"{_bar(busy, have, 20)} {_num(busy):>6}/{_num(have):<5}{f' {out}!' if out else '':4} {where}"
                         f"{'  ' + ', '.join(job for job, _ in holders.most_common(3)) if holders else ''}")
            continue
        lines.append(head)
        cells = [_cell(name, nodes[name], used.get(name, 0), jobs.get(name), name in nominated)
                 for name in names]
        per_row = max(1, width // (CELL + 2))
        for start in range(0, len(cells), per_row):
            lines.append("  " + "  ".join(cells[start:start + per_row]).rstrip())
    lines += _mig_layouts(state, nodes) + _reservations(state) + _queues(state)
    return "\n".join(line[:width] for line in lines)


def _usage(state: ClusterState) -> tuple[Counter, dict[str, str]]:
    """GPUs in use per node (MIG slices as their share of a GPU), and the job holding most of each node."""
    used: Counter = Counter()
    holders: dict[str, Counter] = {}
    for key, pod in state.holding.items():
        gpus = sum(q if r == GPU else q * _share(r) for r, q in pod.requests if r == GPU or r.startswith(MIG_PREFIX))
        if gpus:
            used[pod.node] += gpus
            info = state.pods.get(key)
            job = (info.job.name if info and info.job else
                   key.split("/", 1)[1].rsplit("-", 1)[0])
            holders.setdefault(pod.node, Counter())[job] += gpus
    return used, {node: counts.most_common(1)[0][0] for node, counts in holders.items()}


def _gpus(entry: NodeEntry) -> float:
    """Whole GPUs, plus MIG slices as their share of a GPU (a 3g slice is 3/7)."""
    alloc = (entry.obj.get("status") or {}).get("allocatable") or {}
    try:
        return int(alloc.get(GPU, 0)) + sum(int(v) * _share(k) for k, v in alloc.items() if k.startswith(MIG_PREFIX))
    except (TypeError, ValueError):
        return 0


def _share(resource: str) -> float:
    """The share of a GPU one slice of a MIG resource is (nvidia.com/mig-3g.40gb: 3/7)."""
    try:
        return int(resource[len(MIG_PREFIX):].split("g", 1)[0]) / 7
    except ValueError:
        return 1 / 7


def _short(name: str, most: int = 16) -> str:
    """A domain's name, its end kept when it is long (NVLink clique ids are UUIDs with the rack at the end)."""
    return name if len(name) <= most else "…" + name[-(most - 1):]


def _num(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def _flag(entry: NodeEntry, nominated: bool = False) -> str:
    if entry.node is None:
        return "?"
    if not entry.node.ready:
        return "!"
    if entry.node.unschedulable:
        return "x"
    if (entry.obj["metadata"].get("annotations") or {}).get(MIG_FAILED):
        return "F"
    if entry.node.held:
        return "m"
    return "n" if nominated else " "


def _nominated(state: ClusterState) -> dict[str, str]:
    """Nodes a preempting job holds while its victims stop (its status.nomination) -> "→ <job>"."""
    out = {}
    for key, job in state.jobs.items():
        nomination = (job.get("status") or {}).get("nomination") or {}
        for node in nomination.get("nodes") or [] if isinstance(nomination, dict) else []:
            out[str(node)] = f"→ {key.name}"
    return out


def _mig_layouts(state: ClusterState, nodes: dict) -> list[str]:
    """Each node partitioned into MIG slices: per profile, slices in use of those it advertises."""
    used: dict[str, Counter] = {}
    for pod in state.holding.values():
        for resource, amount in pod.requests:
            if resource.startswith(MIG_PREFIX):
                used.setdefault(pod.node, Counter())[resource[len(MIG_PREFIX):]] += amount
    lines = []
    for name, entry in sorted(nodes.items()):
        alloc = (entry.obj.get("status") or {}).get("allocatable") or {}
        slices = {r[len(MIG_PREFIX):]: v for r, v in alloc.items() if r.startswith(MIG_PREFIX) and str(v) != "0"}
        if slices:
            have = used.get(name, Counter())
            lines.append(f"  {name}: " + ", ".join(f"{profile} {have[profile]}/{count}"
                                                   for profile, count in sorted(slices.items())))
    return ["", "MIG layouts (slices in use / advertised):", *lines] if lines else []


def _reservations(state: ClusterState) -> list[str]:
    """What the first blocked jobs hold while they wait for room (status.reservation)."""
    lines = []
    for key, job in sorted(state.jobs.items()):
        held = (job.get("status") or {}).get("reservation")
        if isinstance(held, dict) and held.get("domain"):
            start = f", expected to start {held['expectedStart']}" if held.get("expectedStart") else ""
            lines.append(f"  {key}: {held['domain']} reserved for it{start}")
    return ["", "Reservations:", *lines] if lines else []


def _bar(busy: float, have: float, size: int) -> str:
    full = round(size * busy / have) if have else 0
    return "█" * full + "░" * (size - full)


def _cell(name: str, entry: NodeEntry, busy: float, job: str | None, nominated: bool = False) -> str:
    have = _gpus(entry)
    short = name.rsplit("-", 1)[-1] if len(name) > 12 else name
    text = f"{short:>4}{_flag(entry, nominated)}{_bar(busy, have, min(round(have), 8) or 1)} {job or ''}"
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
    p.add_argument("-l", "--selector", type=_selector, default={},
                   help="only the nodes with these labels, e.g. superpod.dev/spine=dgx-spine-1 (k=v,k=v)")
    p.set_defaults(func=run)


def _selector(text: str) -> dict[str, str]:
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    if any(len(pair) != 2 or not pair[0] for pair in pairs):
        raise ValueError(f"not a label selector of k=v pairs: {text!r}")
    return {key: value for key, value in pairs}


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
        print(render(state, args.width, args.selector), flush=True)
        if not args.watch or args.file == "-":
            return 0
        time.sleep(args.watch)
