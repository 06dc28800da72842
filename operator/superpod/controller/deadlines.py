"""When each placed gang's runtime limit ends (core/runtime_limit.py), for TrainingJobs and pod gangs alike. A running
gang judged steady is not judged again while nothing of it changes, so its limit must wake it: the cycle takes the
gangs whose deadline has come (`due`) and judges or stops them then; the simulator asks for the next one (`next`) as
an instant to cycle at, as the operator cycles every second."""

from __future__ import annotations

import heapq


class Deadlines:
    def __init__(self) -> None:
        self.at: dict[str, float] = {}  # gang key -> when its limit ends (seconds since the epoch)
        self._heap: list[tuple[float, str]] = []  # (deadline, key); entries no longer in `at` are skipped

    def set(self, key: str, deadline: float | None) -> None:
        """The gang's deadline from now on (None: it has none, or is no longer placed)."""
        if deadline is None:
            self.at.pop(key, None)
        elif self.at.get(key) != deadline:
            self.at[key] = deadline
            heapq.heappush(self._heap, (deadline, key))

    def due(self, now: float) -> list[str]:
        """The gangs whose deadline has come, each once (set again to be told again), soonest first."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            deadline, key = heapq.heappop(self._heap)
            if self.at.get(key) == deadline:
                del self.at[key]
                out.append(key)
        return out

    def next(self) -> float | None:
        """The soonest deadline still to come (None: none)."""
        while self._heap and self.at.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None
