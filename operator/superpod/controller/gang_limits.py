"""Pod gangs' runtime limits: the annotation superpod.dev/max-runtime-seconds on a gang's pods
(api/podgang.max_runtime_of), else its queue's default, never more than its queue's cap (QueueBook.runtime_limit),
counted from the gang's first start (PodGangs.first_start). A gang whose limit came is evicted as a drained one is
(DisruptionTarget with reason MaxRuntimeExceeded, graceful delete, a Warning); its owner decides what comes next.
A bound gang's limit is the one it was bound with (api/podgang.BOUND_WITH, on its pods: every leader reads it),
else what its pods ask; one whose annotation does not read (edited after binding: a gang is not bound with one) is
told once with a Warning. While a gang stays bound its limit never grows and its start never moves later (an
annotation edited up or away, members deleted and made again one by one, a new leader, keep the first ones)."""

from __future__ import annotations

from superpod.api.podgang import MAX_RUNTIME, bound_with_of, max_runtime_of
from superpod.api.resources import ConvertError
from superpod.controller.actions import Emit, Plan, pod_ref
from superpod.controller.deadlines import Deadlines
from superpod.controller.podgangs import PodGangs
from superpod.controller.queues import QueueBook
from superpod.controller.state import ClusterState
from superpod.core.gang_key import GangKey
from superpod.core.phases import Reason
from superpod.core.request import JobRequest
from superpod.core.runtime_limit import RuntimeLimit

ASKED_BY = f"annotation {MAX_RUNTIME}"


class GangLimits:
    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int]] = {}  # gang key -> (its change stamp, queue edits) its deadline is of
        self.told: dict[str, str] = {}  # gang key -> the unreadable annotation it was warned of
        self.kept: dict[str, RuntimeLimit | None] = {}  # gang key -> the least limit in force seen while bound

    def follow(self, state: ClusterState, gangs: PodGangs, queues: QueueBook, deadlines: Deadlines) -> list[Plan]:
        """The deadline of every bound gang whose pods or queues changed; a Warning for a limit that does not
        read."""
        plans, placed = [], {request.key: request for request in gangs.placed(state)}
        for key, request in placed.items():
            seen = (state.changes.get(key, 0), state.queue_edits)
            if self.seen.get(key) == seen:
                continue
            self.seen[key] = seen
            limit, problem = self.limit(state, gangs, queues, request)
            limit, started = self._keep(key, limit), gangs.first_start(state, key)
            deadlines.set(key, limit.deadline(started) if limit is not None and started is not None else None)
            if problem and self.told.get(key) != problem and (pods := gangs.bound(state, key)):
                self.told[key] = problem
                then = f"{limit.source} ({limit.seconds:.0f} s) applies" if limit else "it runs without a limit"
                said = Emit(pod_ref(pods[0]), "Warning", str(Reason.MAX_RUNTIME_IGNORED),
                            f"gang {key}: {problem}; ignored, {then}")
                plans.append(Plan(f"limit:{key.text}", [said]))
        for key in self.seen.keys() - placed.keys():
            del self.seen[key]
            self.told.pop(key, None)
            self.kept.pop(key, None)
            deadlines.set(key, None)
        return plans

    def _keep(self, key: GangKey, limit: RuntimeLimit | None) -> RuntimeLimit | None:
        """The least limit seen while the gang is bound, with this one (a queue's default or cap raised since)."""
        kept = self.kept.get(key)
        if kept is not None and (limit is None or kept.seconds < limit.seconds):
            limit = kept
        self.kept[key] = limit
        return limit

    def limit(self, state: ClusterState, gangs: PodGangs, queues: QueueBook,
              request: JobRequest) -> tuple[RuntimeLimit | None, str]:
        """The gang's limit in force, and why its annotation was ignored ("" when it reads)."""
        pods = gangs.bound(state, request.key)
        try:
            asked, problem = max_runtime_of(request.key, pods), ""
        except ConvertError as e:
            asked, problem = None, str(e).strip('"')
        if (said := bound_with_of(pods)) is not None:
            asked = said.max_runtime
        return queues.runtime_limit(request, asked, ASKED_BY), problem

    def stop(self, state: ClusterState, gangs: PodGangs, queues: QueueBook, deadlines: Deadlines, key: GangKey,
             now: float) -> Plan | None:
        """A gang whose deadline came: evicted if its limit (read again) has passed, else its deadline moved."""
        request = next((r for r in gangs.placed(state) if r.key == key), None)
        limit = self.limit(state, gangs, queues, request)[0] if request is not None else None
        limit, started = self._keep(key, limit), gangs.first_start(state, key)
        if limit is None or started is None:
            return None
        if now < limit.deadline(started):
            deadlines.set(key, limit.deadline(started))
            return None
        return gangs.drain(state, key, limit.message(), now, Reason.MAX_RUNTIME_EXCEEDED)
