"""The core Snapshot a cycle decides on: the usable nodes, the topology, and everything that holds capacity —
every bound pod that has not finished (whoever scheduled it), plus, for each placed gang, the replicas whose pods are
not observed yet (assumed: a gang holds its nodes from the moment it is placed). Kept across cycles and updated by
difference; rebuilt only when nodes or the topology change. `superpod plan` builds its snapshot here too."""

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
        self._version = -1

    def build(self, state: ClusterState, holdings: dict[str, Pod]) -> Snapshot:
        """The snapshot holding exactly `holdings` (pod key -> what it holds)."""
        if self._snap is None or self._version != state.version:
            self._snap = Snapshot(state.usable_nodes(), state.topology()[0], holdings.values())
            self._version = state.version
            return self._snap
        snap = self._snap
        for key in [k for k in snap.pods if k not in holdings]:
            snap.remove_pod(key)
        for key, pod in holdings.items():
            if snap.pods.get(key) != pod:
                snap.add_pod(pod)
        return snap


def holdings(state: ClusterState, placed: dict[str, tuple[JobRequest, str, int, dict[int, str]]]) -> dict[str, Pod]:
    """Observed pods, plus the replicas of placed gangs not observed yet. `placed`: job key -> (request, job uid,
    attempt, replica -> node)."""
    out = state.holding_pods()
    for job_key, (request, uid, attempt, nodes) in placed.items():
        seen = {p.index for p in state.pods_of(job_key) if p.owner == uid and p.attempt == attempt}
        for index, node in nodes.items():
            if index not in seen:
                key = assumed_key(job_key, index)
                out[key] = Pod(key, node, request.requests)
    return out
