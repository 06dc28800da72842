"""Replacement nodes for the replicas of a placed gang whose nodes were lost, keeping every topology rule the gang was
placed under: the required domain of the surviving replicas, and each slice whole in one domain of its level.

The search is the placement solver's (core/placement.py), asked for the lost replicas only, with everything outside
one domain excluded. It tries the deepest domain holding the surviving replicas first (those of the replica's own
slice, when slices bind), then each level up to the domain the gang is bound to (the required one, or the slice's);
inside a domain the solver's objective holds: fewest domains, first fit among domains, best fit among nodes, the
domain's spare nodes (core/spares.py) tried before its others. A slice whose every member was lost may go to any
domain of its level inside the required one, whole. With no such node, `preempting` chooses the running gangs to
evict for them (core/preempt.py's exact search, inside the domain the lost replicas are bound to). Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from superpod.core.model import Snapshot
from superpod.core.placement import FIRST_FIT, Solver, solve
from superpod.core.preempt import Preemption, Victim
from superpod.core.preempt import choose as choose_victims
from superpod.core.request import JobRequest


def choose(snap: Snapshot, job: JobRequest, placement: Mapping[int, str], lost: Collection[int],
           fit: str = FIRST_FIT, held: Collection[str] = (), spares: Collection[str] = ()) -> dict[int, str] | None:
    """Replica -> its new node, for each of `lost` (replicas of `placement`, replica -> node, whose nodes are lost),
    booked on `snap` (Snapshot.assume, as a placement is); None, booking nothing, when some replica has no node that
    keeps the gang's rules, or no replica survives to keep the gang's place. `held`: nodes not to take (those
    nominated to preemptors); `spares`: nodes kept free for replacements, taken first."""
    lost = sorted(set(lost))
    lost_nodes = frozenset(snap.index[placement[i]] for i in lost if placement.get(i) in snap.index) | frozenset(
        snap.index[node] for node in held if node in snap.index)
    kept = {i: snap.index[node] for i, node in placement.items() if i not in lost and node in snap.index}
    if not lost or not kept:
        return None
    spare = frozenset(snap.index[node] for node in spares if node in snap.index)
    topology = snap.topology
    required = topology.index(job.required) if job.required else 0
    slice_level = topology.index(job.slice_required) if job.slice_required else None
    size = job.slice_size or 1
    binds = slice_level is not None and slice_level > required and size > 1
    chosen: dict[int, str] = {}
    for group in _groups(lost, size if binds else 0):
        mates = [kept[i] for i in range(group[0] // size * size, group[0] // size * size + size) if i in kept] \
            if binds else []
        if mates:  # the rest of its slice survives: it goes where they are
            found = _place(snap, job, group, mates, slice_level, False, lost_nodes, fit, spare)
        else:
            found = _place(snap, job, group, list(kept.values()), required, binds, lost_nodes, fit,
                           spare)
        if found is None:
            _unbook(snap, job, chosen)
            return None
        snap.assume(job, by_node(found))
        chosen.update(found)
    return chosen


def preempting(snap: Snapshot, job: JobRequest, placement: Mapping[int, str], lost: Collection[int],
               candidates: list[Victim], held: Collection[str] = (),
               limits: dict[str, float] | None = None) -> Preemption | None:
    """The cheapest set of `candidates` whose eviction makes room for `lost` (core/preempt.choose, for the lost
    replicas' shape), inside the domain they are bound to: their slice's, where the rest of it survives, else the
    required domain holding the surviving replicas (the cluster when none is required). None when no set does, or
    when the lost replicas belong to two slices bound apart (each would need its own search)."""
    lost = sorted(set(lost))
    kept = {i: snap.index[node] for i, node in placement.items() if i not in lost and node in snap.index}
    if not lost or not kept or not candidates:
        return None
    topology = snap.topology
    required = topology.index(job.required) if job.required else 0
    slice_level = topology.index(job.slice_required) if job.slice_required else None
    size = job.slice_size or 1
    sub = replace(job, replicas=len(lost), others=(), required=None, preferred=None, slice_size=None,
                  slice_required=None)
    level, anchor = required, next(iter(kept.values()))
    if slice_level is not None and slice_level > required and size > 1:
        if len({i // size for i in lost}) > 1:
            return None
        first = lost[0] // size * size
        mates = [kept[i] for i in range(first, first + size) if i in kept]
        if mates:  # it goes where the rest of its slice is
            level, anchor = slice_level, mates[0]
        else:  # a whole slice, kept to one domain of its level
            sub = replace(sub, slice_size=len(lost), slice_required=job.slice_required)
    exclude = frozenset(range(len(snap.nodes))) - frozenset(snap.nodes_under(snap.ancestors[anchor][level]))
    exclude |= frozenset(snap.index[placement[i]] for i in lost if placement.get(i) in snap.index)
    exclude |= frozenset(snap.index[node] for node in held if node in snap.index)
    return choose_victims(snap, sub, candidates, exclude, limits=limits)


def _groups(lost: list[int], size: int) -> list[list[int]]:
    """The lost replicas placed together: each slice's (`size` > 0), else all of them."""
    if not size:
        return [lost]
    groups: dict[int, list[int]] = {}
    for i in lost:
        groups.setdefault(i // size, []).append(i)
    return list(groups.values())


def _place(snap: Snapshot, job: JobRequest, group: list[int], anchors: list[int], limit: int, whole: bool,
           lost_nodes: frozenset[int], fit: str, spare: frozenset[int]) -> dict[int, str] | None:
    """Nodes for `group`, inside the deepest domain holding every node of `anchors`, else each domain above it down to
    level `limit`, on the domain's `spare` nodes first; `whole`: the group is a whole slice and keeps to one domain
    of the slice level."""
    paths = [snap.ancestors[node] for node in anchors]
    depth = 0
    while depth + 1 < len(paths[0]) and all(path[depth + 1] == paths[0][depth + 1] for path in paths):
        depth += 1
    sub = replace(job, replicas=len(group), others=(), required=None, preferred=None,
                  slice_size=len(group) if whole else None, slice_required=job.slice_required if whole else None)
    for level in range(depth, limit - 1, -1):
        domain = paths[0][level]
        outside = _outside(snap, domain)
        found, under = None, frozenset(snap.nodes_under(domain)) if spare else frozenset()
        if under & spare:  # the domain's spares alone first
            found = solve(Solver(snap, sub, outside, exclude_nodes=lost_nodes | (under - spare), fit=fit))
        if found is None:
            found = solve(Solver(snap, sub, outside, exclude_nodes=lost_nodes, fit=fit))
        if found is not None:
            ranks = sorted((rank, node) for node, ranks in found.assignments.items() for rank in ranks)
            return {group[rank]: node for rank, node in ranks}
    return None


def _outside(snap: Snapshot, domain: int) -> frozenset[int]:
    """The domains to exclude so that only `domain`'s subtree stays open: the siblings of it and of its ancestors."""
    out: set[int] = set()
    while domain > 0:
        parent = snap.domains[domain].parent
        out.update(d for d in snap.child_domains[parent] if d != domain)
        domain = parent
    return frozenset(out)


def by_node(placement: Mapping[int, str]) -> dict[str, list[int]]:
    """A placement's replicas by node (replica -> node in, node -> its replicas out)."""
    out: dict[str, list[int]] = {}
    for i, node in sorted(placement.items()):
        out.setdefault(node, []).append(i)
    return out


def _unbook(snap: Snapshot, job: JobRequest, chosen: Mapping[int, str]) -> None:
    prefix = f"{job.key.text}#"
    for i in chosen:
        snap.remove_pod(f"{prefix}{i}")
        snap.assumed.add(f"{prefix}{i}")
