"""A whole cluster in memory for controller tests: MemoryAPI (the API's semantics), simulated nodes from a preset, the
simulated kubelet, and the real Controller with its cache, on a virtual clock. Watch events are delivered when the
test says so (`deliver`), so tests can hold them back, repeat them or drop them."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter

from superpod.api.manifests import pod as rendered_pod
from superpod.api.resources import pod_requests, quantity
from superpod.controller.controller import Controller
from superpod.controller.judge import Settings
from superpod.controller.mig import MigFlow
from superpod.controller.state import ClusterState
from superpod.core.gang_key import GangKey
from superpod.hardware.kubelet import SimKubelet
from superpod.hardware.presets import preset_nodes
from superpod.k8s.api import CLUSTERTOPOLOGIES, DRA, EVENTS, NODES, PODS, TRAININGJOBS, WATCHED
from superpod.k8s.memory import MemoryAPI

START = 1_800_000_000.0
TOPOLOGY = {"apiVersion": "superpod.dev/v1alpha1", "kind": "ClusterTopology", "metadata": {"name": "default"},
            "spec": {"levels": [{"name": "spine", "nodeLabel": "superpod.dev/spine"},
                                {"name": "leaf", "nodeLabel": "superpod.dev/leaf"},
                                {"name": "nvlink", "nodeLabel": "nvidia.com/gpu.clique"},
                                {"name": "node", "nodeLabel": "kubernetes.io/hostname"}]}}


def run(coro):
    return asyncio.run(coro)


def training_job(name: str, replicas: int, gpus: int | None = 8, mig: str | None = None, annotations=None,
                 containers=None, **spec) -> dict:
    resources = {"gpus": gpus} if gpus and not mig else {"migProfile": mig}
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"replicas": replicas, "resources": resources, **spec, "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"containers": containers or [{"name": "main", "image": "trainer"}]}}}}


class MemoryCluster:
    def __init__(self, preset: str = "dgx-h100", nodes: int = 8, identity: str = "op-1",
                 settings: Settings | None = None, **shape) -> None:
        self.now = START
        self.store = MemoryAPI(clock=lambda: self.now)
        self.admin = self.store.client("admin")
        self.kubelet = SimKubelet(self.store)
        for obj in preset_nodes(preset, nodes, **shape):
            run(self.admin.create(NODES, obj))
        run(self.admin.create(CLUSTERTOPOLOGIES, copy.deepcopy(TOPOLOGY)))
        self.kubelet.step()
        self.settings = settings or Settings(not_ready_grace=300)
        self.leading = True
        self.delivered = 0
        self.start(identity)

    def start(self, identity: str = "op-1") -> None:
        """A fresh operator process: empty cache filled by a full list, then watch events from now on."""
        self.state = ClusterState()
        self.api = self.store.client(identity, guard=lambda: self.leading)
        self.controller = Controller(self.state, self.api, lambda: self.leading, self.settings,
                                     MigFlow(self.state, "superpod-system", "superpod-mig-parted-config", 60),
                                     clock=lambda: self.now)
        for kind in (*WATCHED, *DRA):  # (the DRA kinds: watched where served, as here)
            items, version = run(self.api.list(kind))
            self.state.resync(kind, items, version, self.now)
        self.delivered = len(self.store.events)

    def deliver(self, limit: int | None = None) -> int:
        """Watch events not yet delivered, in order (at most `limit`)."""
        events = self.store.events[self.delivered:][:limit]
        for ev in events:
            self.state.apply(ev.kind, ev.type, copy.deepcopy(ev.obj), self.now)
        self.delivered += len(events)
        return len(events)

    def cycle(self):
        self.deliver()
        outcome = run(self.controller.cycle(self.now))
        self.deliver()
        return outcome

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds
        self.kubelet.step()

    def settle(self, steps: int = 10, seconds: float = 1.0) -> None:
        for _ in range(steps):
            self.cycle()
            self.tick(seconds)
        self.cycle()

    # ---- users ----------------------------------------------------------------------------------------------------
    def submit(self, body: dict) -> dict:
        return run(self.admin.create(TRAININGJOBS, body))

    def update_node(self, name: str, change) -> None:
        """Change a node object in place, as its kubelet or an admin would (a watch event follows)."""
        node = self.store.objects[NODES][name]
        change(node)
        self.store._store(NODES, node, "update")

    def job(self, name: str, namespace: str = "team-a") -> dict:
        return self.store.peek(TRAININGJOBS, f"{namespace}/{name}")

    def status(self, name: str) -> dict:
        return (self.job(name) or {}).get("status") or {}

    def decided(self, name: str, namespace: str = "team-a") -> dict:
        """The status in force in the operator's cache: written, or decided and not sent yet (a placement waits for
        its gang's next status write, ClusterState.unsent)."""
        return (self.state.jobs.get(GangKey(namespace, name)) or {}).get("status") or {}

    def pods(self, name: str | None = None, live: bool = True) -> list[dict]:
        out = []
        for pod in self.store.objects.get(PODS, {}).values():
            labels = pod["metadata"].get("labels") or {}
            if name is not None and labels.get("superpod.dev/job-name") != name:
                continue
            if live and (pod["metadata"].get("deletionTimestamp")
                         or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")):
                continue
            out.append(pod)
        return out

    def events(self, name: str) -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in self.store.objects.get(EVENTS, {}).values()
                if e["involvedObject"]["name"] == name]



def requests_of(pod: dict) -> Counter:
    """What a pod requests, in the operator's units (a GPU 1, a CPU 1000)."""
    return Counter(pod_requests(pod["spec"], lambda f, q: {r: quantity(v, r) for r, v in q.items()}))


def unwritten(job: dict, pods: dict[str, dict]) -> dict[str, Counter]:
    """Node -> the requests of the replicas a placed TrainingJob booked there whose pods do not exist yet."""
    status = job.get("status") or {}
    if status.get("phase") not in ("Starting", "Running") or not status.get("placement"):
        return {}
    out: dict[str, Counter] = {}
    request = None
    for node, ranks in status["placement"].items():
        for rank in ranks:
            pod = pods.get(f"{job['metadata']['namespace']}/{job['metadata']['name']}-a{status['attempt']}-{rank}")
            if pod is None or pod["spec"].get("nodeName") != node:  # (a replaced replica's pod left on its lost node)
                if request is None:
                    request = requests_of(rendered_pod(job, 0, 0, ""))
                out.setdefault(node, Counter()).update(request)
    return out


def node_ready(node: dict | None) -> bool:
    return node is not None and any(c.get("type") == "Ready" and c.get("status") == "True"
                                    for c in (node.get("status") or {}).get("conditions") or [])
