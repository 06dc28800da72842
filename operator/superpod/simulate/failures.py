"""Node failures for the replay (`superpod simulate --node-mtbf`): each node fails after an exponential time of mean
`mtbf` (seconds of that node's uptime, seeded), stays away `repair` seconds (its Node object deleted, as a lost node
looks to the operator), then comes back and may fail again. Training saves its progress every `checkpoint` seconds
of a gang's run: a gang stopped (a failure or a preemption) or a replica replaced resumes from its last checkpoint;
with no checkpoint every stop starts the run over."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

FAILURE, REPAIR = "fail", "repair"


@dataclass(frozen=True)
class FailureModel:
    mtbf: float  # mean seconds of a node's uptime between failures
    repair: float = 4 * 3600.0  # seconds a failed node stays away
    checkpoint: float | None = None  # seconds of a gang's run between saves of its progress (None: never)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.mtbf > 0 or not self.repair >= 0 or (self.checkpoint is not None and not self.checkpoint > 0):
            raise ValueError("node failures: the MTBF and checkpoint interval must be positive, the repair time not "
                             "negative")

    def kept(self, ran: float) -> float:
        """Of `ran` seconds of a gang's run, what its last checkpoint kept."""
        return 0.0 if self.checkpoint is None else math.floor(ran / self.checkpoint) * self.checkpoint


class NodeFailures:
    """The failures and repairs to come, by time; the same seed and nodes give the same sequence."""

    def __init__(self, model: FailureModel, nodes: list[str]) -> None:
        self.model = model
        self.random = random.Random(model.seed)
        self.events: list[tuple[float, str, str]] = []  # heap of (time, FAILURE | REPAIR, node)
        for node in sorted(nodes):
            self._schedule_failure(node, 0.0)

    def next_time(self) -> float | None:
        return self.events[0][0] if self.events else None

    def due(self, now: float) -> list[tuple[str, str]]:
        """The (FAILURE | REPAIR, node) due by `now`, in order; each failure schedules its repair, each repair the
        node's next failure."""
        out = []
        while self.events and self.events[0][0] <= now:
            _, what, node = heapq.heappop(self.events)
            out.append((what, node))
            if what == FAILURE:
                heapq.heappush(self.events, (now + self.model.repair, REPAIR, node))
            else:
                self._schedule_failure(node, now)
        return out

    def _schedule_failure(self, node: str, now: float) -> None:
        heapq.heappush(self.events, (now + self.random.expovariate(1.0 / self.model.mtbf), FAILURE, node))
