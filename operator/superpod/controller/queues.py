"""GPUQueues in the cycle: the queue tree read from the cache (again only when a GPUQueue changed), the admission
policy for one cycle (core/queues.py) on what the placed gangs hold, and each queue's status. A cluster without
GPUQueues keeps the configured policy: single-tenant clusters work unchanged."""

from __future__ import annotations

from superpod.api.convert import queue_from_k8s
from superpod.api.resources import ConvertError
from superpod.api.status import condition
from superpod.controller.actions import Emit, Plan, WriteQueueStatus
from superpod.controller.jobs import JobView
from superpod.controller.metering import Labels, outside_queues
from superpod.controller.state import ClusterState
from superpod.core.cycle import Decision
from superpod.core.model import Snapshot
from superpod.core.phases import Condition, Reason
from superpod.core.queues import FairQueues, QueueTree, Usage, capacity
from superpod.core.request import JobRequest


class QueueBook:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._tree: tuple[int, QueueTree, dict[str, str]] | None = None  # (queue edits, tree, unreadable -> why)

    def tree(self) -> tuple[QueueTree, dict[str, str]]:
        """The queues in force, and the GPUQueues that cannot be read (name -> why)."""
        if self._tree is None or self._tree[0] != self.state.queue_edits:
            queues, unreadable = [], {}
            for name, obj in sorted(self.state.queues.items()):
                try:
                    queues.append(queue_from_k8s(obj))
                except (ConvertError, ValueError) as e:
                    unreadable[name] = str(e)
            self._tree = (self.state.queue_edits, QueueTree.of(queues), unreadable)
        return self._tree[1], self._tree[2]

    def policy(self, snap: Snapshot, placed: list[JobRequest], inner=None) -> FairQueues | None:
        """The admission policy for this cycle, or None when the cluster has no GPUQueue. `inner`: the configured
        policy, whose placement runs under the queues."""
        if not self.state.queues:
            return None
        tree, _ = self.tree()
        flavors = {quota.flavor for queue in tree.queues.values() for quota in queue.quotas}
        return FairQueues(tree, Usage(tree.running(placed)), capacity(snap.nodes, flavors), inner)

    def labels(self, view: JobView) -> Labels:
        """The GPU-seconds counter's labels of a job: its queue and the flavor it counts against, when it has one."""
        outside = outside_queues(view)
        if not self.state.queues or not isinstance(view.request, JobRequest):
            return outside
        queue, flavor, problem = self.tree()[0].classify(view.request)
        return (queue or "", outside[1], flavor or outside[2], outside[3]) if not problem else outside

    def status_plans(self, fair: FairQueues | None, decisions: list[Decision], now: float) -> list[Plan]:
        """Each GPUQueue's status, written when it changed; a Warning on a queue that is not in force."""
        if not self.state.queues:
            return []
        tree, unreadable = self.tree()
        pending: dict[str, int] = {}
        if fair is not None:
            fair.count([d for d in decisions if d.placed])  # what the cycle placed after its last admission
            for decision in decisions:
                queue = fair.where_of(decision.job)[0]
                if queue and not decision.placed:
                    pending[queue] = pending.get(queue, 0) + 1
        plans = []
        for name, obj in sorted(self.state.queues.items()):
            problem = unreadable.get(name) or tree.problems.get(name)
            status = dict(obj.get("status") or {})
            if problem:
                new = {**status, "conditions": condition(status.get("conditions") or [], Condition.ACTIVE, "False",
                                                         Reason.QUEUE_REFUSED, problem, now)}
            else:
                new = {**_figures(tree, fair, name, pending), "conditions": condition(
                    status.get("conditions") or [], Condition.ACTIVE, "True", Reason.QUEUE_ACTIVE, "in force", now)}
            if new != status:
                plan = Plan(f"queue:{name}", [WriteQueueStatus(name, new)])
                if problem:
                    plan.then(Emit(_ref(obj), "Warning", Reason.QUEUE_REFUSED, f"not in force: {problem}"))
                plans.append(plan)
        return plans


def _figures(tree: QueueTree, fair: FairQueues | None, name: str, pending: dict[str, int]) -> dict:
    queue = tree.queues[name]
    flavors = []
    for quota in queue.quotas:
        allocated = fair.subtree.get((name, quota.flavor), 0.0) if fair else 0.0
        flavors.append({"flavor": quota.flavor, "guaranteed": quota.guaranteed, "allocated": _round(allocated),
                        "borrowed": _round(max(0.0, allocated - quota.guaranteed))})
    return {"guaranteed": _round(sum(f["guaranteed"] for f in flavors)),
            "allocated": _round(sum(f["allocated"] for f in flavors)),
            "borrowed": _round(sum(f["borrowed"] for f in flavors)),
            "pending": sum(pending.get(leaf, 0) for leaf in tree.leaves[name]),
            "fairShare": _round(fair.shares.get(name, 0.0)) if fair else 0.0,
            "flavors": flavors}


def _round(value: float) -> float:
    return round(value, 4)


def _ref(obj: dict) -> dict:
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "name": obj["metadata"]["name"],
            "uid": obj["metadata"].get("uid")}

