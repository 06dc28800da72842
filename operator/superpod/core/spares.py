"""Spare nodes: in each domain of one level, the last `count` nodes (in name order) whose GPUs are all free, booked
whole on the snapshot so that no waiting job is placed there; only a replacement (core/replace.py) takes them, after
`release`. The booking is kept on the snapshot (`Snapshot.spares`) and changed only where the choice changed. Pure."""

from __future__ import annotations

from superpod.core.model import UNLABELLED, Pod, Snapshot
from superpod.core.request import GPU

SPARE = "spare#"  # a spare's booking is keyed "spare#<node>" (no pod's key or assumed replica's: those hold a "/")


def choose(snap: Snapshot, level: int, count: int) -> list[int]:
    """The spare nodes: per domain of `level` (one of a label, not a node alone), the last `count` usable nodes whose
    GPUs are all free but for a spare's booking."""
    out: list[int] = []
    for domain in snap.domains_by_level[level] if 0 < level < len(snap.domains_by_level) else ():
        if snap.domains[domain].name.startswith(UNLABELLED):
            continue
        free = [node for node in sorted(snap.nodes_under(domain)) if _free(snap, node)]
        out += free[max(len(free) - count, 0):]
    return out


def keep(snap: Snapshot, level: int, count: int) -> None:
    """Book the spares `choose` gives on `snap`, each taking what its node has free; drop the bookings of nodes no
    longer chosen."""
    wanted: dict[str, Pod] = {}
    for node in choose(snap, level, count):
        name = snap.nodes[node].name
        free = dict(snap.free[node])
        for resource, amount in snap.spares[name].requests if name in snap.spares else ():
            free[resource] = free.get(resource, 0) + amount
        wanted[name] = Pod(f"{SPARE}{name}", name, tuple(sorted((r, v) for r, v in free.items() if v > 0)))
    for name, pod in list(snap.spares.items()):
        if wanted.get(name) != pod:
            snap.remove_pod(pod.key)
            del snap.spares[name]
    for name, pod in wanted.items():
        if name not in snap.spares:
            snap.add_pod(pod)
            snap.spares[name] = pod


def release(snap: Snapshot) -> list[str]:
    """Free the spares for a replacement: their node names (`keep` books those left again)."""
    names = sorted(snap.spares)
    for name in names:
        snap.remove_pod(snap.spares.pop(name).key)
    return names


def _free(snap: Snapshot, node: int) -> bool:
    info = snap.nodes[node]
    gpus = info.allocatable.get(GPU, 0)
    if gpus <= 0 or not info.ready or info.unschedulable or info.held or any(
            taint.effect == "NoExecute" for taint in info.taints):  # not one being drained or failing
        return False
    booked = snap.spares.get(info.name)
    return snap.free[node].get(GPU, 0) + (dict(booked.requests).get(GPU, 0) if booked else 0) >= gpus
