"""The replay: the operator's own Controller (cache, cycle, applier, queue policy) against MemoryAPI and the
simulated kubelet, on a virtual clock that jumps from one event (a submit, a gang's end) to the next.
Single-threaded and deterministic: no wall clock, no threads; the same inputs give the same records.

Per instant: submit what is due, then settle — deliver watch events to the cache, run a cycle, let the kubelet
start or remove pods — until an instant writes nothing more. A gang starts when all its pods run; it ends when its
runtime (runtime.py) has passed: its pods exit 0 (or 1 at the trace's failure time) and the operator does the rest;
a requeued job's backoff end (status.notBefore) and a placed gang's runtime limit (Controller.next_deadline) are
instants too (the operator cycles at least every second), and so are node failures and repairs (failures.py): a failed
node's Node object is deleted and made again when repaired; a replica the operator replaces on another node holds its
gang's end until it runs, then the gang resumes from its last checkpoint. A gang the operator stopped at its limit
ends its attempt with outcome MaxRuntimeExceeded, and its job ends.
A finished job is deleted once its end is recorded, as a user's cleanup (or a TTL) would, so the cache holds what
runs and waits, not the whole history; Events are dropped at each instant, as the API server's event TTL would."""

from __future__ import annotations

import asyncio
import copy
import heapq
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from superpod.api.manifests import ATTEMPT_LABEL, JOB_LABEL
from superpod.api.times import timestamp
from superpod.controller.controller import Controller
from superpod.controller.judge import Settings
from superpod.controller.mig import MigFlow
from superpod.controller.state import ClusterState
from superpod.core.cycle import QueuePolicy
from superpod.core.phases import FINISHED, Reason
from superpod.hardware.kubelet import SimKubelet
from superpod.k8s.api import CLUSTERTOPOLOGIES, EVENTS, GPUQUEUES, NODES, PODS, TRAININGJOBS, WATCHED, object_key
from superpod.k8s.memory import MemoryAPI
from superpod.simulate.estimates import estimator
from superpod.simulate.failures import FAILURE, FailureModel, NodeFailures
from superpod.simulate.runtime import RuntimeModel
from superpod.simulate.trace import TraceJob

log = logging.getLogger(__name__)
EPOCH = 1_800_000_000.0  # virtual time 0, as a wall-clock instant (status times are RFC 3339)
SETTLE_ROUNDS = 50  # cycles at one instant before giving up on it settling (a safeguard: a few suffice)


@dataclass
class Attempt:
    start: float
    nodes: dict[str, int]  # node -> replicas
    end: float | None = None
    outcome: str = ""
    work: float | None = None  # with node failures: seconds of the trace's duration it did and kept


@dataclass
class JobRecord:
    job: TraceJob
    attempts: list[Attempt] = field(default_factory=list)
    end: float | None = None
    phase: str = ""
    reason: str = ""  # status.reason, as last seen
    kept: float = 0.0  # seconds of its trace duration its checkpoints saved from attempts that stopped
    replacements: int = 0  # replicas replaced on another node while its gang ran


@dataclass
class Sample:
    """The cluster at one instant (after it settled), held until the next sample."""

    time: float
    busy_gpus: int  # GPUs of gangs that run
    free_gpus: int  # GPUs no pod holds
    unusable_gpus: int  # free GPUs while some job waits


@dataclass
class _Gang:
    key: str
    attempt: str
    pods: dict[str, str] = field(default_factory=dict)  # pod key -> node, of the pods seen running
    end: float | None = None  # when its runtime has passed
    fails: bool = False  # the trace fails this attempt at its end
    attempt_record: Attempt | None = None  # set when it starts
    factor: float = 1.0  # its runtime factor (runtime.py) on the nodes it started on
    working_since: float = 0.0  # when its current stretch of work began (after the startup delay)
    work_left: float = 0.0  # wall seconds of work left at working_since
    saved: float = 0.0  # wall seconds of its work its checkpoints saved when its work stopped
    stalled_since: float | None = None  # a replica lost with its node: since when the others wait for it


@dataclass
class FailureCounts:
    """What node failures cost in a replay (with a FailureModel)."""

    node_failures: int = 0
    replacements: int = 0  # replicas replaced while their gang ran on
    restarts: int = 0  # gangs stopped by a failure and placed again as a new attempt
    redone_gpu_seconds: float = 0.0  # work lost since the last checkpoint of a gang stopped or a replica replaced
    stalled_gpu_seconds: float = 0.0  # GPUs of a gang held while it waited for a replica's replacement


def training_job(job: TraceJob, node_failure: str | None = None) -> dict:
    """The TrainingJob a trace's job is submitted as (`node_failure`: its spec.nodeFailure, None: the default)."""
    body = {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": job.name, "namespace": job.namespace},
            "spec": {"replicas": job.replicas, "resources": {"gpus": job.gpus}, "priority": job.priority,
                     "template": {"spec": {"containers": [{"name": "main", "image": "trace"}]}}}}
    if job.required:
        body["spec"]["topology"] = {"required": job.required}
    if job.limit:
        body["spec"]["maxRuntimeSeconds"] = math.ceil(job.limit)
    if node_failure:
        body["spec"]["nodeFailure"] = node_failure
    return body


class Simulation:
    def __init__(self, nodes: list[dict], topology: dict, jobs: list[TraceJob], policy: QueuePolicy,
                 runtime: RuntimeModel, startup_delay: float = 0.0, queues: list[dict] = (),
                 estimates: str = "history", failures: FailureModel | None = None,
                 node_failure: str | None = None) -> None:
        self.now = 0.0
        self.loop = asyncio.new_event_loop()  # its own: the controller's writes are coroutines, run one at a time
        self.store = MemoryAPI(clock=self._clock)
        self.admin = self.store.client("trace")
        self.kubelet = SimKubelet(self.store)
        for node in nodes:
            self._run(self.admin.create(NODES, copy.deepcopy(node)))
        self._run(self.admin.create(CLUSTERTOPOLOGIES, copy.deepcopy(topology)))
        for queue in queues:  # GPUQueues: the operator admits under them (controller/queues.py)
            self._run(self.admin.create(GPUQUEUES, copy.deepcopy(queue)))
        self.kubelet.step()
        self.state = ClusterState(topology["metadata"]["name"])
        api = self.store.client("simulator")
        self.controller = Controller(self.state, api, lambda: True, Settings(),
                                     MigFlow(self.state, "superpod-system", "superpod-mig-parted-config", 300),
                                     policy=policy, clock=self._clock)
        self.controller.estimator = estimator(estimates, self.state, policy.ordering,
                                              self.controller.queues.max_runtime, jobs)
        for kind in WATCHED:
            items, version = self._run(api.list(kind))
            self.state.resync(kind, items, version, self._clock())
        self.store.events.clear()
        self.runtime, self.startup_delay = runtime, startup_delay
        self.capacity = runtime.capacity
        self.upcoming = sorted(jobs, key=lambda job: (job.submit, job.namespace, job.name))
        keys = [f"{job.namespace}/{job.name}" for job in self.upcoming]
        if len(set(keys)) != len(keys):
            twice = sorted({key for key in keys if keys.count(key) > 1})
            raise ValueError(f"the trace names a job more than once: {', '.join(twice[:5])}")
        self.next_submit = 0
        self.records: dict[str, JobRecord] = {}
        self.samples: list[Sample] = []
        self.writes: dict[str, int] = {}  # "<verb> <resource>" -> count, the operator's API writes
        self.cycles = 0
        self._gangs: dict[tuple[str, str], _Gang] = {}
        self._ends: list[tuple[float, str, str]] = []  # heap of (end, job key, attempt)
        self._wakes: list[float] = []  # heap of times a requeued job may be placed again
        self._busy = 0
        self._held = 0  # GPUs requested by pods that are bound and not finished
        self._held_by: dict[str, int] = {}  # pod key -> GPUs it holds
        self._waiting: set[str] = set()
        self._finished: list[str] = []
        self._ended: set[tuple[str, str]] = set()  # (job key, attempt) of gangs that ended
        self._backoff: dict[str, float] = {}  # job key -> end of its backoff (status.notBefore)
        self._touched: set[str] = set()  # pods changed since the kubelet last looked
        self.failure_model, self.node_failure = failures, node_failure
        self.failures = NodeFailures(failures, [n["metadata"]["name"] for n in nodes]) if failures else None
        self.failure_counts = FailureCounts()
        self._node_objects = {node["metadata"]["name"]: copy.deepcopy(node) for node in nodes} if failures else {}
        self._down: set[str] = set()  # nodes failed and not yet repaired

    def _clock(self) -> float:
        return EPOCH + self.now

    def _run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def run(self, progress: Callable[[float, int], None] | None = None,
            until: float = float("inf")) -> dict[str, JobRecord]:
        """Replay every job (or up to simulated time `until`); `progress(simulated seconds, jobs ended)` is called
        after each instant."""
        while True:
            while self.next_submit < len(self.upcoming) and self.upcoming[self.next_submit].submit <= self.now:
                self._submit(self.upcoming[self.next_submit])
                self.next_submit += 1
            self._settle()
            self._sample()
            if progress:
                progress(self.now, len(self.records) - len(self._waiting) - len(self._gangs))
            while self._wakes and self._wakes[0] <= self.now:
                heapq.heappop(self._wakes)
            following = [self._ends[0][0]] if self._ends else []
            following += self._wakes[:1]
            deadline = self.controller.next_deadline()
            if deadline is not None and deadline - EPOCH > self.now:  # (one come already was met at this instant)
                following.append(deadline - EPOCH)
            if self.next_submit < len(self.upcoming):
                following.append(self.upcoming[self.next_submit].submit)
            if self.failures and (self._gangs or self.next_submit < len(self.upcoming) or self._down):
                following.append(self.failures.next_time())  # (none once nothing runs, comes or is away)
            if not following or min(following) > until:
                self.loop.close()
                return self.records  # nothing can change any more (what still waits waits for good), or time is up
            self.now = max(self.now, min(following))
            self._finish_due()
            self._fail_due()

    def _submit(self, job: TraceJob) -> None:
        self._run(self.admin.create(TRAININGJOBS, training_job(job, self.node_failure)))
        key = f"{job.namespace}/{job.name}"
        self.records[key] = JobRecord(job)
        self._wait(key)

    def _settle(self) -> None:
        for _ in range(SETTLE_ROUNDS):
            self._deliver()
            self._run(self.controller.cycle(self._clock()))
            self.cycles += 1
            self._deliver()
            self._kubelet()
            if not self.store.events:
                break
            self._deliver()
        else:
            log.warning("the cluster did not settle at %.0fs after %d cycles; moving on", self.now, SETTLE_ROUNDS)
        self._collect()

    def _kubelet(self) -> None:
        """The simulated kubelet, on the pods whose objects changed since it last looked."""
        touched, self._touched = self._touched, set()
        self.kubelet.step(sorted(touched))

    def _deliver(self) -> None:
        """Watch events to the operator's cache (the store's event copies are its own), and to the bookkeeping."""
        events, self.store.events[:] = list(self.store.events), []
        for event in events:
            if event.kind is EVENTS:  # the operator watches no Events (each would stay in its cache's versions)
                continue
            self.state.apply(event.kind, event.type, event.obj, self._clock())
            if event.kind is PODS:
                self._touched.add(object_key(event.obj))
                self._pod(event.type, event.obj)
            elif event.kind is TRAININGJOBS:
                self._job(event.type, event.obj)
        for write in self.store.writes:
            if write.writer == "simulator":
                name = f"{write.verb} {write.kind}"
                self.writes[name] = self.writes.get(name, 0) + 1
        self.store.writes.clear()

    def _pod(self, kind: str, pod: dict) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        phase = (pod.get("status") or {}).get("phase")
        gpus = int(((pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get(
            "nvidia.com/gpu", 0))
        holds = kind != "DELETED" and bool(pod["spec"].get("nodeName")) and phase not in ("Succeeded", "Failed")
        self._held += (gpus if holds else 0) - self._held_by.pop(key, 0)
        if holds:
            self._held_by[key] = gpus
        labels = meta.get("labels") or {}
        job_key, attempt = f"{meta['namespace']}/{labels.get(JOB_LABEL)}", labels.get(ATTEMPT_LABEL)
        record = self.records.get(job_key)
        if record is None or (job_key, attempt) in self._ended:
            return
        gang = self._gangs.get((job_key, attempt))
        if kind == "DELETED" or meta.get("deletionTimestamp") or phase == "Failed":
            if gang is not None and gang.attempt_record is not None and self._replaced(gang, key, pod):
                return
            if gang is not None and gang.attempt_record is not None:  # torn down before its runtime passed
                limited = record.phase in FINISHED and record.reason == Reason.MAX_RUNTIME_EXCEEDED
                self._end(gang, Reason.MAX_RUNTIME_EXCEEDED.value if limited else "Interrupted")
            return
        if phase != "Running":
            return
        if gang is None:
            gang = self._gangs[(job_key, attempt)] = _Gang(job_key, attempt)
        gang.pods[key] = pod["spec"]["nodeName"]
        if len(gang.pods) == record.job.replicas:
            if gang.attempt_record is None:
                self._start(record, gang)
            elif gang.stalled_since is not None:
                self._resume(record, gang)

    def _start(self, record: JobRecord, gang: _Gang) -> None:
        nodes = _replicas_by_node(gang)
        job = record.job
        gang.factor = self.runtime.factor(job, list(nodes))
        gang.working_since, gang.work_left = self.now + self.startup_delay, (job.duration - record.kept) * gang.factor
        runtime = self.startup_delay + gang.work_left
        if job.fail_after is not None and not record.attempts and self.startup_delay + job.fail_after < runtime:
            runtime, gang.fails = self.startup_delay + job.fail_after, True
        gang.end = self.now + runtime
        heapq.heappush(self._ends, (gang.end, gang.key, gang.attempt))
        gang.attempt_record = Attempt(self.now, nodes)
        record.attempts.append(gang.attempt_record)
        self._busy += job.total_gpus
        self._waiting.discard(gang.key)

    def _job(self, kind: str, obj: dict) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        record = self.records.get(key)
        phase = (obj.get("status") or {}).get("phase") or ""
        if record is None or kind == "DELETED":
            return
        record.phase, record.reason = phase, (obj.get("status") or {}).get("reason") or ""
        not_before = (obj.get("status") or {}).get("notBefore")
        if not_before and timestamp(not_before) - EPOCH > self.now:  # a requeued job: a cycle when its backoff ends
            heapq.heappush(self._wakes, timestamp(not_before) - EPOCH)
            self._backoff[key] = timestamp(not_before) - EPOCH
        if phase in FINISHED and record.end is None:
            record.end = self.now
            self._waiting.discard(key)
            self._finished.append(key)

    def _finish_due(self) -> None:
        """Gangs whose runtime has passed: their pods exit (1 at the trace's failure time, else 0)."""
        while self._ends and self._ends[0][0] <= self.now:
            _, key, attempt = heapq.heappop(self._ends)
            gang = self._gangs.get((key, attempt))
            if gang is None or gang.end != self.now:
                continue  # ended earlier (interrupted)
            for pod_key in sorted(gang.pods):
                if pod_key in self.store.objects.get(PODS, {}):
                    self.kubelet.finish(pod_key, 1 if gang.fails else 0)
            self._end(gang, "Failed" if gang.fails else "Succeeded")

    def _replaced(self, gang: _Gang, key: str, pod: dict) -> bool:
        """Whether a pod of a running gang went with its failed node and the gang runs on (the operator replaces it):
        the gang holds its end, keeping what its last checkpoint saved, until the replica runs again."""
        if self.node_failure != "Replace" or pod["spec"].get("nodeName") not in self._down or key not in gang.pods \
                or len(gang.pods) == 1:  # (its last replica: the gang is stopped, as the operator restarts it)
            return False
        del gang.pods[key]
        if gang.stalled_since is None:
            self._stop_work(gang)
            gang.stalled_since, gang.end = self.now, None
        return True

    def _resume(self, record: JobRecord, gang: _Gang) -> None:
        """Every replica runs again after a replacement: the gang's work goes on from its last checkpoint."""
        counts, gpus = self.failure_counts, record.job.total_gpus
        counts.replacements += 1
        record.replacements += 1
        counts.stalled_gpu_seconds += gpus * (self.now - gang.stalled_since)
        gang.stalled_since = None
        gang.working_since = self.now + self.startup_delay
        gang.end = gang.working_since + gang.work_left
        heapq.heappush(self._ends, (gang.end, gang.key, gang.attempt))
        gang.attempt_record.nodes = _replicas_by_node(gang)

    def _stop_work(self, gang: _Gang) -> None:
        """A gang's work stops now: what its last checkpoint saved is kept, the rest is counted as to be redone."""
        if self.failure_model is None or gang.stalled_since is not None:
            return
        ran = min(max(0.0, self.now - gang.working_since), gang.work_left)
        kept = self.failure_model.kept(ran)
        self.failure_counts.redone_gpu_seconds += self.records[gang.key].job.total_gpus * (ran - kept)
        gang.work_left -= kept
        gang.saved += kept

    def _fail_due(self) -> None:
        """Nodes that fail now lose their Node object; those repaired now get it back, Ready."""
        for what, node in self.failures.due(self.now) if self.failures else ():
            if what == FAILURE:
                self.failure_counts.node_failures += 1
                self._down.add(node)
                self._run(self.admin.delete(NODES, node))
            else:
                self._down.discard(node)
                self._run(self.admin.create(NODES, copy.deepcopy(self._node_objects[node])))
                self.kubelet.set_ready(node, True)

    def _end(self, gang: _Gang, outcome: str) -> None:
        record = self.records[gang.key]
        if self.failure_model is not None and outcome == "Succeeded":
            gang.attempt_record.work = record.job.duration - record.kept
        elif self.failure_model is not None:  # it starts over from its last checkpoint
            self._stop_work(gang)
            gang.attempt_record.work = gang.saved / gang.factor
            record.kept += gang.attempt_record.work
            if self._down & set(gang.attempt_record.nodes):
                self.failure_counts.restarts += 1
        gang.attempt_record.end, gang.attempt_record.outcome = self.now, outcome
        del self._gangs[(gang.key, gang.attempt)]
        self._ended.add((gang.key, gang.attempt))
        self._busy -= self.records[gang.key].job.total_gpus
        if outcome != "Succeeded" and self.records[gang.key].end is None:  # (a job stopped at its limit has ended)
            self._wait(gang.key)

    def _wait(self, key: str) -> None:
        """A job that waits for GPUs, if it could ever run here (a job larger than any domain it may use does not
        make free GPUs unusable)."""
        if self.runtime.could_ever_run(self.records[key].job):
            self._waiting.add(key)

    def _collect(self) -> None:
        """Finished jobs are deleted (their pods go with them); Events are dropped."""
        for key in self._finished:
            namespace, name = key.split("/", 1)
            self._run(self.admin.delete(TRAININGJOBS, name, namespace))
        self._finished.clear()
        self.store.objects.pop(EVENTS, None)
        if self.store.events:
            self._deliver()
            self._kubelet()
            self._deliver()

    def _sample(self) -> None:
        free = self.capacity - self._held
        waiting = any(self._backoff.get(key, 0.0) <= self.now for key in self._waiting)
        sample = Sample(self.now, self._busy, free, free if waiting else 0)
        if self.samples and self.samples[-1].time == self.now:
            self.samples[-1] = sample
        elif not self.samples or (self.samples[-1].busy_gpus, self.samples[-1].free_gpus,
                                  self.samples[-1].unusable_gpus) != (sample.busy_gpus, free, sample.unusable_gpus):
            self.samples.append(sample)


def _replicas_by_node(gang: _Gang) -> dict[str, int]:
    """Node -> how many of the gang's running replicas it holds."""
    nodes: dict[str, int] = {}
    for node in gang.pods.values():
        nodes[node] = nodes.get(node, 0) + 1
    return nodes
