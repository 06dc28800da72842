"""Pod gangs' runtime limits: the annotation superpod.dev/max-runtime-seconds on a gang's pods
(api/podgang.max_runtime_of), else its queue's default, never more than its queue's cap (QueueBook.runtime_limit),
counted from the first start of its bound pods. A gang whose limit came is evicted as a drained one is
(DisruptionTarget with reason MaxRuntimeExceeded, graceful delete, a Warning); its owner decides what comes next.
A bound gang whose annotation does not read (edited after binding: a gang is not bound with one) is told once with a
Warning, and its queue's default and cap apply. While a gang stays bound its limit never grows and its start never
moves later (an annotation edited up or away, members deleted and made again one by one, keep the first ones)."""

from __future__ import annotations

from superpod.api.podgang import MAX_RUNTIME, max_runtime_of
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
        self.kept: dict[str, tuple[RuntimeLimit | None, float | None]] = {}  # gang key -> (least limit, first start)

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
            limit, started = self._keep(key, limit, gangs.first_start(state, key))
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

    def _keep(self, key: GangKey, limit: RuntimeLimit | None,
              started: float | None) -> tuple[RuntimeLimit | None, float | None]:
        """The least limit and the first start seen while the gang is bound, with these."""
        kept_limit, kept_start = self.kept.get(key, (None, None))
        if kept_limit is not None and (limit is None or kept_limit.seconds < limit.seconds):
            limit = kept_limit
        if kept_start is not None and (started is None or kept_start < started):
            started = kept_start
        self.kept[key] = (limit, started)
        return limit, started

    def limit(self, state: ClusterState, gangs: PodGangs, queues: QueueBook,
              request: JobRequest) -> tuple[RuntimeLimit | None, str]:
        """The gang's limit in force, and why its annotation was ignored ("" when it reads)."""
        try:
            asked, problem = max_runtime_of(request.key, gangs.bound(state, request.key)), ""
        except ConvertError as e:
            asked, problem = None, str(e).strip('"')
        return queues.runtime_limit(request, asked, ASKED_BY), problem

    def stop(self, state: ClusterState, gangs: PodGangs, queues: QueueBook, deadlines: Deadlines, key: GangKey,
             now: float) -> Plan | None:
        """A gang whose deadline came: evicted if its limit (read again) has passed, else its deadline moved."""
        request = next((r for r in gangs.placed(state) if r.key == key), None)
        limit = self.limit(state, gangs, queues, request)[0] if request is not None else None
        limit, started = self._keep(key, limit, gangs.first_start(state, key))
        if limit is None or started is None:
            return None
        if now < limit.deadline(started):
            deadlines.set(key, limit.deadline(started))
            return None
        return gangs.drain(state, key, limit.message(), now, Reason.MAX_RUNTIME_EXCEEDED)
