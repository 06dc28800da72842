"""The core Snapshot a cycle decides on: the usable nodes, the topology, and everything that holds capacity —
every bound pod that has not finished (whoever scheduled it), plus, for each placed gang, the replicas whose pods are
not observed yet (assumed: a gang holds its nodes from the moment it is placed). Kept across cycles and updated by
difference: pods as they come and go, a changed node in place (Snapshot.replace_node); rebuilt only when a node is
added, removed or unreadable, or the topology changes. `superpod plan` builds its snapshot here too."""

from __future__ import annotations

from superpod.controller.state import ClusterState
from superpod.core.model import Pod, Snapshot
from superpod.core.request import JobRequest

ASSUMED = "#"  # assumed replicas are keyed "<namespace>/<job>#<replica>", as core Snapshot.assume keys them


def assumed_key(job_key: str, index: int) -> str:
    return f"{job_key}{ASSUMED}{index}"


class SnapshotCache:
    def __init__(self) -> None:
        self._snap: Snapshot | None = None
        self._version = self._layout = -1
        self.rebuilds = 0

    def build(self, state: ClusterState, holdings: dict[str, Pod]) -> Snapshot:
        """The snapshot holding exactly `holdings` (pod key -> what it holds)."""
        if self._snap is not None and self._layout == state.layout and self._version != state.version:
            changed = sorted(name for name, stamp in state.node_stamps.items() if stamp > self._version)
            if all(self._snap.replace_node(state.nodes[name].node) for name in changed):
                self._version = state.version
        if self._snap is None or self._layout != state.layout or self._version != state.version:
            self._snap = Snapshot(state.usable_nodes(), state.topology()[0], holdings.values())
            self._version, self._layout = state.version, state.layout
            self.rebuilds += 1
            return self._snap
        snap, held = self._snap, self._snap.pods
        snap.update(held.keys() - holdings.keys(),
                    [pod for key, pod in holdings.items() if (now := held.get(key)) is not pod and now != pod])
        return snap


def holdings(state: ClusterState, placed: dict[str, tuple[JobRequest, str, int, dict[int, str]]],
             memo: dict[str, tuple[int, list[Pod]]] | None = None) -> dict[str, Pod]:
    """Observed pods, plus the replicas of placed gangs not observed yet. `placed`: job key -> (request, job uid,
    attempt, replica -> node). `memo` (job key -> (its change stamp, its assumed replicas)) keeps each job's answer
    until the job or its pods change."""
    out = state.holding_pods()
    memo = {} if memo is None else memo
    for job_key, (request, uid, attempt, nodes) in placed.items():
        stamp = state.changes.get(job_key, 0)
        known = memo.get(job_key)
        if known is None or known[0] != stamp:
            seen = {p.index for p in state.pods_of(job_key) if p.owner == uid and p.attempt == attempt}
            known = memo[job_key] = (stamp, [Pod(assumed_key(job_key, index), node, request.requests)
                                             for index, node in nodes.items() if index not in seen])
        for pod in known[1]:
            out[pod.key] = pod
    for job_key in memo.keys() - placed.keys():
        del memo[job_key]
    return out
