"""The replay: the operator's own Controller (cache, cycle, applier) against MemoryAPI and the simulated kubelet, on
a virtual clock that jumps from one event (a submit, a gang's end) to the next. Single-threaded, deterministic."""

from __future__ import annotations

import asyncio
import copy
from collections import defaultdict, deque
from dataclasses import dataclass, field

from superpod.api.manifests import ATTEMPT_LABEL, JOB_LABEL
from superpod.controller.controller import Controller
from superpod.controller.judge import Settings
from superpod.controller.mig import MigFlow
from superpod.controller.state import ClusterState
from superpod.k8s.api import CLUSTERTOPOLOGIES, NODES, PODS, TRAININGJOBS, WATCHED
from superpod.k8s.memory import MemoryAPI
from superpod.sim.kubelet import SimKubelet
from superpod.simulate.trace import TraceJob

EPOCH = 1_800_000_000.0  # virtual time 0, as a wall-clock instant (status times are RFC 3339)
SETTLE_ROUNDS = 20
# Runtime multiplier for each level a gang's placement crosses beyond its compact level (work in progress: to be
# sourced from published measurements, e.g. Pollux's 1.0–2.3x cross-node slowdowns).
SLOWDOWN = {"node": 1.25, "nvlink": 1.25, "leaf": 1.5, "spine": 1.5}


@dataclass
class Attempt:
    start: float
    nodes: dict[str, int]
    end: float | None = None
    outcome: str = ""


@dataclass
class JobRecord:
    submit: float
    gpus: int
    attempts: list[Attempt] = field(default_factory=list)
    end: float | None = None


class Simulation:
    def __init__(self, nodes: list[dict], topology: dict, jobs: list[TraceJob], slowdown: dict | None = None):
        self.now = 0.0
        self.store = MemoryAPI(clock=lambda: EPOCH + self.now)
        self.admin = self.store.client("trace")
        self.kubelet = SimKubelet(self.store)
        for node in nodes:
            self._run(self.admin.create(NODES, copy.deepcopy(node)))
        self._run(self.admin.create(CLUSTERTOPOLOGIES, copy.deepcopy(topology)))
        self.kubelet.step()
        self.state = ClusterState(topology["metadata"]["name"])
        api = self.store.client("simulator")
        self.controller = Controller(self.state, api, lambda: True, Settings(),
                                     MigFlow(self.state, "superpod-system", "superpod-mig-parted-config", 300),
                                     clock=lambda: EPOCH + self.now)
        for kind in WATCHED:
            items, version = self._run(api.list(kind))
            self.state.resync(kind, items, version, EPOCH + self.now)
        self.delivered = len(self.store.events)
        self.levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
        self.level_names = [level["name"] for level in topology["spec"]["levels"]]
        self.labels = {node["metadata"]["name"]: node["metadata"].get("labels") or {} for node in nodes}
        self.slowdown = slowdown or SLOWDOWN
        self.queue = deque(sorted(jobs, key=lambda job: job.submit))
        self.trace = {f"{job.namespace}/{job.name}": job for job in jobs}
        self.records: dict[str, JobRecord] = {}
        self.ends: dict[tuple[str, str], float] = {}  # (job key, attempt) -> when its pods finish

    @staticmethod
    def _run(coroutine):
        return asyncio.get_event_loop().run_until_complete(coroutine)

    def run(self) -> dict[str, JobRecord]:
        while self.queue or self.ends or self._unfinished():
            while self.queue and self.queue[0].submit <= self.now:
                self._submit(self.queue.popleft())
            self._settle()
            self._observe()
            upcoming = [job.submit for job in list(self.queue)[:1]] + list(self.ends.values())
            if not upcoming:
                break  # nothing can change any more: the rest wait forever
            self.now = max(self.now, min(upcoming))
            self._finish_due()
        return self.records

    def _submit(self, job: TraceJob) -> None:
        body = {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": job.name, "namespace": job.namespace},
                "spec": {"replicas": job.replicas, "resources": {"gpus": job.gpus}, "priority": job.priority,
                         "template": {"spec": {"containers": [{"name": "main", "image": "trace"}]}}}}
        if job.required:
            body["spec"]["topology"] = {"required": job.required}
        self._run(self.admin.create(TRAININGJOBS, body))
        self.records[f"{job.namespace}/{job.name}"] = JobRecord(job.submit, job.total_gpus)

    def _settle(self) -> None:
        """Cycles and kubelet steps at this instant until nothing more happens."""
        for _ in range(SETTLE_ROUNDS):
            before = len(self.store.events)
            self._deliver()
            self._run(self.controller.cycle(EPOCH + self.now))
            self._deliver()
            self.kubelet.step()
            self._deliver()
            if len(self.store.events) == before:
                return

    def _deliver(self) -> None:
        for event in self.store.events[self.delivered:]:
            self.state.apply(event.kind, event.type, copy.deepcopy(event.obj), EPOCH + self.now)
        self.delivered = len(self.store.events)

    def _observe(self) -> None:
        """Gangs whose pods all run now get an end time from the runtime model; finished jobs get their end."""
        gangs = defaultdict(list)
        for pod in self.store.objects.get(PODS, {}).values():
            labels = pod["metadata"].get("labels") or {}
            key = f"{pod['metadata']['namespace']}/{labels.get(JOB_LABEL)}"
            if key in self.trace and (pod.get("status") or {}).get("phase") == "Running":
                gangs[(key, labels.get(ATTEMPT_LABEL))].append(pod)
        for (key, attempt), pods in gangs.items():
            job = self.trace[key]
            if (key, attempt) in self.ends or len(pods) < job.replicas:
                continue
            nodes = defaultdict(int)
            for pod in pods:
                nodes[pod["spec"]["nodeName"]] += 1
            runtime = job.duration * self._factor(job, list(nodes))
            if job.fail_after is not None and not self.records[key].attempts:
                runtime = min(runtime, job.fail_after)
            self.ends[(key, attempt)] = self.now + runtime
            self.records[key].attempts.append(Attempt(self.now, dict(nodes)))
        for key, record in self.records.items():
            phase = ((self.store.peek(TRAININGJOBS, key) or {}).get("status") or {}).get("phase")
            if record.end is None and phase in ("Succeeded", "Failed"):
                record.end = self.now

    def _factor(self, job: TraceJob, nodes: list[str]) -> float:
        """The runtime multiplier of a placement: each level it crosses beyond the finest one that shares it."""
        factor = 1.0
        for label, name in zip(self.levels[::-1], self.level_names[::-1], strict=True):
            if len({self.labels[node].get(label) for node in nodes}) > 1:
                factor *= self.slowdown.get(name, 1.0) if job.replicas > 1 or name != "node" else 1.0
        return factor

    def _finish_due(self) -> None:
        for (key, attempt), end in list(self.ends.items()):
            if end > self.now:
                continue
            job = self.trace[key]
            failed = job.fail_after is not None and len(self.records[key].attempts) == 1
            for pod_key, pod in list(self.store.objects.get(PODS, {}).items()):
                labels = pod["metadata"].get("labels") or {}
                if (f"{pod['metadata']['namespace']}/{labels.get(JOB_LABEL)}" == key
                        and labels.get(ATTEMPT_LABEL) == attempt
                        and (pod.get("status") or {}).get("phase") == "Running"):
                    self.kubelet.finish(pod_key, 1 if failed else 0)
            record = self.records[key].attempts[-1]
            record.end, record.outcome = self.now, "Failed" if failed else "Succeeded"
            del self.ends[(key, attempt)]

    def _unfinished(self) -> bool:
        return any(record.end is None for record in self.records.values()) and bool(self.ends)
