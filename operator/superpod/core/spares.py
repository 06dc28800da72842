"""Spare nodes: in each domain of one level, the last `count` nodes (in name order) whose GPUs are all free, booked
whole on the snapshot so that no waiting job is placed there; a replacement (core/replace.py) takes them, after
`release`, and so may a short job (`lends_to`: its enforced runtime limit ends it within `Snapshot.spare_runtime`,
so a spare it takes is free again before a replacement waiting for it gives up), only when nothing else holds it
(`lend`). Spares never make a waiting job unplaceable: a domain (of that level or a coarser one) whose usable nodes
could hold a waiting job that requires its level, but not without its spares, keeps none. A job's GPUs are those it
asks through nvidia.com/gpu and those its claims take; a node's, the more of its nvidia.com/gpu and of the GPUs its
own DRA devices are (the device book's), as queues count them. The booking is kept on the snapshot
(`Snapshot.spares`) and changed only where the choice changed. Pure."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable

from superpod.core.model import UNLABELLED, Pod, Snapshot
from superpod.core.placement import Placement
from superpod.core.request import GPU, JobRequest

SPARE = "spare#"  # a spare's booking is keyed "spare#<node>" (no pod's key or assumed replica's: those hold a "/")


def needs(snap: Snapshot, level: int, jobs: Iterable[JobRequest]) -> dict[int, list[float]]:
    """Of the waiting `jobs` whose domain is `level` or coarser (0: anywhere), the GPUs each asks for in all, by the
    depth of its required level: distinct, sorted."""
    out: dict[int, set[float]] = {}
    for job in jobs:
        depth = snap.topology.index(job.required) if job.required else 0
        gpus = job.total_requests.get(GPU, 0) + job.total_claimed
        if depth is not None and depth <= level and gpus > 0:
            out.setdefault(depth, set()).add(gpus)
    return {depth: sorted(amounts) for depth, amounts in sorted(out.items())}


def choose(snap: Snapshot, level: int, count: int, waiting: dict[int, list[float]] | None = None) -> list[int]:
    """The spare nodes: per domain of `level` (one of a label, not a node alone), the last `count` usable nodes whose
    GPUs are all free but for a spare's booking; none under a domain that only its spares keep from a job `waiting`
    (`needs`) needs."""
    out: list[int] = []
    for domain in snap.domains_by_level[level] if 0 < level < len(snap.domains_by_level) else ():
        if snap.domains[domain].name.startswith(UNLABELLED):
            continue
        free = [node for node in sorted(snap.nodes_under(domain)) if _free(snap, node)]
        out += free[max(len(free) - count, 0):]
    return _lent(snap, out, waiting) if out and waiting else out


def keep(snap: Snapshot, level: int, count: int, waiting: dict[int, list[float]] | None = None) -> None:
    """Book the spares `choose` gives on `snap`, each taking what its node has free; drop the bookings of nodes no
    longer chosen."""
    wanted: dict[str, Pod] = {}
    for node in choose(snap, level, count, waiting):
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


def lends_to(snap: Snapshot, job: JobRequest) -> bool:
    """Whether `job` may run on spares: some are booked and its runtime limit (enforced, in its shape) is at most
    `snap.spare_runtime`. A predicted runtime is not enough: a job may outlive it."""
    return bool(snap.spares) and job.limit is not None and snap.spare_runtime is not None \
        and job.limit <= snap.spare_runtime


def lend(snap: Snapshot, place: Callable[[], Placement | None]) -> Placement | None:
    """`place()` with the spares freed; those it does not use booked again. What did not fit still does not: the
    spares are booked as before or taken."""
    booked, unfit = dict(snap.spares), snap.unfit
    release(snap)
    placement = None
    try:
        placement = place()
    finally:
        used = placement.assignments if placement is not None else {}
        for name, pod in booked.items():
            if name not in used:
                snap.add_pod(pod)
                snap.spares[name] = pod
        snap.unfit = unfit
    return placement


def _lent(snap: Snapshot, chosen: list[int], waiting: dict[int, list[float]]) -> list[int]:
    """`chosen` but the spares under each domain whose usable nodes hold as many GPUs as a waiting job requiring its
    level asks for, but not once its spares are set aside: a spare is never why a job cannot run."""
    spare = set(chosen)
    for depth, amounts in waiting.items():
        for domain in snap.domains_by_level[depth]:
            under = snap.nodes_under(domain)
            if spare.isdisjoint(under):
                continue
            usable = outside = 0.0
            for node in under:
                gpus = _usable_gpus(snap, node)
                usable += gpus
                outside += gpus if node not in spare else 0.0
            if bisect_right(amounts, usable) > bisect_right(amounts, outside):  # some job needs (outside, usable]
                spare.difference_update(under)
    return [node for node in chosen if node in spare]


def _usable_gpus(snap: Snapshot, node: int) -> float:
    """The GPUs of a node that takes pods (ready, not cordoned, not being drained or failing), else 0: the more of its
    nvidia.com/gpu and its DRA GPUs (a driver may serve one through the other)."""
    info = snap.nodes[node]
    if not info.ready or info.unschedulable or info.held or any(taint.effect == "NoExecute" for taint in info.taints):
        return 0.0
    gpus = info.allocatable.get(GPU, 0)
    return max(gpus, snap.published_gpus(info.name)[0]) if snap.devices is not None else gpus


def _free(snap: Snapshot, node: int) -> bool:
    """A node with GPUs that takes pods, whose GPUs are all free (but for a spare's booking): its nvidia.com/gpu, and
    its DRA GPUs no claim holds."""
    info = snap.nodes[node]
    if not _usable_gpus(snap, node):
        return False
    booked = dict(snap.spares[info.name].requests) if info.name in snap.spares else {}
    if snap.free[node].get(GPU, 0) + booked.get(GPU, 0) < info.allocatable.get(GPU, 0):
        return False
    _, devices = snap.published_gpus(info.name)
    return not devices or snap.devices is None or snap.devices.taken.isdisjoint(devices)
