"""The core Snapshot a cycle decides on: the usable nodes, the topology, and everything that holds capacity —
every bound pod that has not finished (whoever scheduled it), plus, for each placed gang, the replicas whose pods are
not observed yet (assumed: a gang holds its nodes from the moment it is placed). Kept across cycles and updated by
difference: pods as they come and go, a changed node in place (Snapshot.replace_node); rebuilt only when a node is
added, removed or unreadable, or the topology changes. `superpod plan` builds its snapshot here too."""

from __future__ import annotations

from collections.abc import Collection

from superpod.controller.state import ClusterState
from superpod.core.gang_key import GangKey
from superpod.core.model import Pod, Snapshot
from superpod.core.request import JobRequest

ASSUMED = "#"  # assumed replicas are keyed "<the gang key's text>#<replica>", as core Snapshot.assume keys them


def assumed_key(job: GangKey, index: int) -> str:
    return f"{job.text}{ASSUMED}{index}"


class SnapshotCache:
    """The kept snapshot and what it must hold (`held`: pod key -> what it holds), both followed by difference: the
    nodes that changed and the pods whose holding changed (ClusterState.nodes_changed, .holding_changed, taken
    here), the placed gangs touched since the last build, the pod gangs' bindings in flight, and what the last cycle
    assumed on the snapshot itself. At fleet size comparing every holding, or every node's stamp, at each cycle was
    a fifth of the operator's CPU."""

    def __init__(self) -> None:
        self._snap: Snapshot | None = None
        self._version = self._layout = -1
        self.rebuilds = 0
        self.held: dict[str, Pod] = {}
        self._assumed: dict[str, tuple[int, list[Pod]]] = {}  # job key -> (its change stamp, its assumed replicas)
        self._gangs: dict[str, Pod] = {}  # the pod gangs' holdings in `held`
        self._whole = True  # the next build starts from scratch (the first, or after an error)

    def build(self, state: ClusterState, placed: dict[str, tuple[JobRequest, str, int, dict[int, str]]],
              gangs: dict[str, Pod] | None = None, touched: Collection[str] | None = None) -> Snapshot:
        """The snapshot holding the observed pods, the replicas of the `placed` gangs (job key -> (request, job
        uid, attempt, replica -> node)) not observed yet, and `gangs` (pod gangs' bindings in flight; an observed
        pod of the same key wins). `touched`: the jobs changed since the last build (None: all may have)."""
        whole, self._whole = self._whole or touched is None, True  # until this build ends
        changed = self._follow(state, placed, gangs or {}, touched, whole)
        nodes, state.nodes_changed = state.nodes_changed, set()
        if whole:
            self._snap = None  # built anew: nothing kept is trusted
        if self._snap is not None and self._layout == state.layout and self._version != state.version and all(
                self._snap.replace_node(state.nodes[name].node) for name in sorted(nodes) if name in state.nodes):
            self._version = state.version
        if self._snap is None or self._layout != state.layout or self._version != state.version:
            self._snap = Snapshot(state.usable_nodes(), state.topology()[0], self.held.values())
            self._version, self._layout = state.version, state.layout
            self.rebuilds += 1
        else:
            snap, held = self._snap, self.held
            keys = changed | snap.assumed
            snap.update([key for key in keys if key not in held and key in snap.pods],
                        [held[key] for key in keys if key in held and (now := snap.pods.get(key)) is not held[key]
                         and now != held[key]])
        self._snap.assumed.clear()
        self._whole = False
        return self._snap

    def _follow(self, state: ClusterState, placed, gangs: dict[str, Pod], touched: Collection[str] | None,
                whole: bool) -> set[str]:
        """Bring `held` up to date; the keys whose holding may have changed."""
        observed, state.holding_changed = state.holding_changed, set()
        if whole:  # from scratch
            self.held, self._assumed, self._gangs = {}, {}, {}
            observed = state.holding.keys()
        held = self.held
        changed = set(observed)
        changed.update(key for key in gangs.keys() | self._gangs.keys() if gangs.get(key) != self._gangs.get(key))
        self._gangs = dict(gangs)
        for key in changed:
            pod = state.holding.get(key)
            pod = gangs.get(key) if pod is None else pod
            if pod is None:
                held.pop(key, None)
            else:
                held[key] = pod
        jobs = placed.keys() if whole else [key for key in touched if key in placed or key in self._assumed]
        for job_key in jobs:
            before = self._assumed.get(job_key)
            stamp = state.changes.get(job_key, 0)
            if job_key not in placed:
                after = None
            elif before is not None and before[0] == stamp:
                continue
            else:
                request, uid, attempt, nodes = placed[job_key]
                seen = {p.index for p in state.pods_of(job_key) if p.owner == uid and p.attempt == attempt
                        and p.node == nodes.get(p.index)}  # a replaced replica's pod left on its lost node: not it
                after = (stamp, [Pod(assumed_key(job_key, index), node, request.member_requests(index))
                                 for index, node in nodes.items() if index not in seen])
            for pod in before[1] if before is not None else ():
                held.pop(pod.key, None)
                changed.add(pod.key)
            if after is None:
                self._assumed.pop(job_key, None)
                continue
            self._assumed[job_key] = after
            for pod in after[1]:
                held[pod.key] = pod
                changed.add(pod.key)
        return changed
