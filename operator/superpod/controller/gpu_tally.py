"""GPUs offered and held, by product, kept as nodes and pods are stored: the cluster gauges read them, and no cycle
sums over every node or pod (node heartbeats and pod updates move them at every cycle)."""

from __future__ import annotations

from collections import Counter

from superpod.core.model import Node, Pod
from superpod.core.request import GPU, PRODUCT_LABEL


def product(node: Node) -> str:
    return node.labels.get(PRODUCT_LABEL, "unknown")


class GpuTally:
    def __init__(self) -> None:
        self.offered: Counter = Counter()  # product -> GPUs of the ready, schedulable nodes
        self.held: Counter = Counter()  # product -> GPUs pods hold on readable nodes
        self._held_on: Counter = Counter()  # node name -> GPUs pods hold on it (readable or not)
        self._products: dict[str, str] = {}  # node name -> its product, of the readable nodes

    def node(self, name: str, old: Node | None, new: Node | None) -> None:
        """A node stored (`new`) or deleted (None) whose model was `old`."""
        for model, sign in ((old, -1), (new, 1)):
            if model is not None and model.ready and not model.unschedulable:
                self.offered[product(model)] += sign * model.allocatable.get(GPU, 0)
        before, after = self._products.get(name), product(new) if new is not None else None
        if before == after:
            return
        held = self._held_on.get(name, 0)
        if before is not None:
            self.held[before] -= held
            del self._products[name]
        if after is not None:
            self.held[after] += held
            self._products[name] = after

    def pod(self, old: Pod | None, new: Pod | None) -> None:
        """A pod's holding changed from `old` to `new` (None: holds nothing)."""
        for pod, sign in ((old, -1), (new, 1)):
            gpus = sum(amount for resource, amount in pod.requests if resource == GPU) if pod is not None else 0
            if gpus:
                self._held_on[pod.node] += sign * gpus
                if not self._held_on[pod.node]:
                    del self._held_on[pod.node]
                if (name := self._products.get(pod.node)) is not None:
                    self.held[name] += sign * gpus
