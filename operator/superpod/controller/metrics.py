"""Prometheus metrics served on /metrics."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
from prometheus_client import Counter as PromCounter

from superpod.core.request import GPU, PRODUCT_LABEL

PHASES = ("Queued", "Starting", "Running", "Succeeded", "Failed", "Invalid")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("superpod_jobs", "TrainingJobs by phase", ["phase"], registry=r)
        self.queue_wait_seconds = Histogram(
            "superpod_queue_wait_seconds", "Time from queued to placed", registry=r,
            buckets=(1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600))
        self.placement_seconds = Histogram(
            "superpod_placement_seconds", "Time of one scheduling decision over the pending queue", registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5))
        self.gpus_allocated = Gauge("superpod_gpus_allocated", "Whole GPUs requested by running pods, by product",
                                    ["product"], registry=r)
        self.gpus_free = Gauge("superpod_gpus_free", "Whole GPUs free on schedulable nodes, by product", ["product"],
                               registry=r)
        self.gang_restarts = PromCounter("superpod_gang_restarts", "Gang restarts after pod failure or node loss",
                                         registry=r)
        self.mig_reconfigurations = PromCounter("superpod_mig_reconfigurations",
                                                "Nodes given a new MIG geometry", registry=r)
        self.gpu_seconds = PromCounter("superpod_gpu_seconds", "GPU-seconds used by finished gang attempts",
                                       ["namespace"], registry=r)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def observe_cluster(self, state) -> None:
        phases = Counter((j.get("status") or {}).get("phase") or "Queued" for j in state.jobs.values())
        for phase in PHASES:
            self.jobs.labels(phase).set(phases.get(phase, 0))
        total: Counter = Counter()
        used: Counter = Counter()
        for n in state.nodes.values():
            product = n.labels.get(PRODUCT_LABEL, "unknown")
            if n.ready and not n.unschedulable:
                total[product] += n.allocatable.get(GPU, 0)
        for p in state.pods.values():
            if p.holds is not None and p.node in state.nodes:
                product = state.nodes[p.node].labels.get(PRODUCT_LABEL, "unknown")
                used[product] += dict(p.holds.requests).get(GPU, 0)
        for product in set(total) | set(used):
            self.gpus_allocated.labels(product).set(used[product])
            self.gpus_free.labels(product).set(max(0, total[product] - used[product]))
