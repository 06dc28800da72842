"""Prometheus metrics, served on /metrics beside /healthz and /readyz (controller/health.py)."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter

from superpod.core.phases import Phase

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


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
        self.cycle_seconds = Histogram(
            "superpod_cycle_seconds", "Time of one whole cycle: observe, judge, decide and apply", registry=r,
            buckets=CYCLE_BUCKETS)
        self.plan_seconds = Histogram(
            "superpod_plan_seconds", "Time of a cycle's observe, judge and decide (its writes left out)", registry=r,
            buckets=CYCLE_BUCKETS)
        self.gpus_allocated = Gauge("superpod_gpus_allocated", "Whole GPUs requested by running pods, by product",
                                    ["product"], registry=r)
        self.gpus_free = Gauge("superpod_gpus_free", "Whole GPUs free on schedulable nodes, by product", ["product"],
                               registry=r)
        self.gang_restarts = PromCounter("superpod_gang_restarts", "Gang restarts, by cause: failure (a replica "
                                         "failed) or interruption (node lost, pod deleted or evicted)", ["cause"],
                                         registry=r)
        self.mig_reconfigurations = PromCounter("superpod_mig_reconfigurations",
                                                "Nodes given a new MIG geometry", registry=r)
        self.gpu_seconds = PromCounter("superpod_gpu_seconds", "GPU-seconds used by gang pods, growing while they "
                                       "run (MIG slices count g/7), by GPUQueue, namespace, flavor and service "
                                       "class", ["queue", "namespace", "flavor", "class"], registry=r)
        self.cycle_errors = PromCounter("superpod_cycle_errors", "Cycles or Lease renewals that failed and were "
                                        "retried", ["stage"], registry=r)
        self.object_errors = PromCounter("superpod_object_errors", "Objects a bug met while judging, deciding or "
                                         "applying (the rest scheduled on)", ["stage"], registry=r)
        self.writes = PromCounter("superpod_writes", "Writes the applier made, by action and outcome",
                                  ["action", "outcome"], registry=r)
        self.api_throttled = PromCounter("superpod_api_throttled", "Calls the API server turned away with 429 (API "
                                         "Priority and Fairness), each sent again after its Retry-After",
                                         registry=r)
        self.leading = Gauge("superpod_leader", "1 while this replica holds the Lease", registry=r)
        self.preemptions = PromCounter("superpod_preemptions", "Gangs preempted, by kind: priority (a job of higher "
                                       "priority in the same queue) or reclaim (a queue taking its guarantee back)",
                                       ["kind"], registry=r)
        self.queue_gpus = Gauge("superpod_queue_gpus", "GPUs of a GPUQueue per flavor: guaranteed, allocated (held by "
                                "its jobs and its children's) and borrowed (allocated beyond the guarantee)",
                                ["queue", "flavor", "kind"], registry=r)
        for cause in ("failure", "interruption"):  # every series exists from the start, at 0
            self.gang_restarts.labels(cause)
        for kind in ("priority", "reclaim"):
            self.preemptions.labels(kind)
        for stage in ("cycle", "lease", "resync"):
            self.cycle_errors.labels(stage)
        for stage in ("judge", "decide", "apply", "mig", "metering"):
            self.object_errors.labels(stage)

    def observe_cluster(self, state, phases: Counter) -> None:
        """The cluster gauges: jobs by phase (counted as jobs are read), GPUs allocated and free by product (kept as
        nodes and pods are stored: ClusterState.gpus)."""
        for phase in Phase:
            self.jobs.labels(phase).set(phases.get(phase, 0))
        offered, held = state.gpus.offered, state.gpus.held
        for product in offered.keys() | held.keys():
            self.gpus_allocated.labels(product).set(held[product])
            self.gpus_free.labels(product).set(max(0, offered[product] - held[product]))
