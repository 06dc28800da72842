"""Fluent builders for core tests: node("n1").gpus(8).leaf("l1").spine("s1"), job("a").replicas(2).gpus(8)."""

from __future__ import annotations

from superpod.core.model import Level, Node, Pod, Snapshot, Topology
from superpod.core.request import GPU, PRODUCT_LABEL, JobRequest, Taint, Toleration, make_request

SPINE = Level("spine", "superpod.dev/spine")
LEAF = Level("leaf", "superpod.dev/leaf")
NVLINK = Level("nvlink", "nvidia.com/gpu.clique")
NODE = Level("node", "kubernetes.io/hostname")
TOPO3 = Topology((SPINE, LEAF, NVLINK, NODE))
TOPO = Topology((SPINE, LEAF, NODE))


class NodeBuilder:
    def __init__(self, name: str):
        self.n = Node(name, labels={"kubernetes.io/hostname": name}, allocatable={"cpu": 64000, "memory": 1 << 40})

    def gpus(self, n: int, product: str = "NVIDIA-H100-80GB-HBM3") -> NodeBuilder:
        self.n.allocatable[GPU] = n
        self.n.labels[PRODUCT_LABEL] = product
        return self

    def mig(self, profile: str, n: int) -> NodeBuilder:
        self.n.allocatable[f"nvidia.com/mig-{profile}"] = n
        return self

    def cpu(self, millis: int) -> NodeBuilder:
        self.n.allocatable["cpu"] = millis
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self.n.labels[key] = value
        return self

    def spine(self, v: str) -> NodeBuilder:
        return self.label(SPINE.label, v)

    def leaf(self, v: str) -> NodeBuilder:
        return self.label(LEAF.label, v)

    def nvlink(self, v: str) -> NodeBuilder:
        return self.label(NVLINK.label, v)

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        self.n.taints = self.n.taints + (Taint(key, value, effect),)
        return self

    def cordoned(self) -> NodeBuilder:
        self.n.unschedulable = True
        return self

    def not_ready(self) -> NodeBuilder:
        self.n.ready = False
        return self

    def build(self) -> Node:
        return self.n


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class JobBuilder:
    def __init__(self, name: str, namespace: str = "default"):
        self.kw: dict = {"namespace": namespace, "name": name, "replicas": 1}
        self.req: dict[str, int] = {}

    def replicas(self, n: int) -> JobBuilder:
        self.kw["replicas"] = n
        return self

    def gpus(self, n: int, product: str | None = None) -> JobBuilder:
        self.req[GPU] = n
        if product:
            self.kw["gpu_product"] = product
        return self

    def mig(self, profile: str) -> JobBuilder:
        self.req[f"nvidia.com/mig-{profile}"] = 1
        return self

    def cpu(self, millis: int) -> JobBuilder:
        self.req["cpu"] = millis
        return self

    def required(self, level: str) -> JobBuilder:
        self.kw["required"] = level
        return self

    def preferred(self, level: str) -> JobBuilder:
        self.kw["preferred"] = level
        return self

    def slices(self, size: int, level: str) -> JobBuilder:
        self.kw["slice_size"], self.kw["slice_required"] = size, level
        return self

    def priority(self, p: int, submitted: float = 0.0) -> JobBuilder:
        self.kw["priority"], self.kw["submitted"] = p, submitted
        return self

    def selector(self, **labels: str) -> JobBuilder:
        self.kw["node_selector"] = tuple(sorted(labels.items()))
        return self

    def tolerate(self, key: str, operator: str = "Exists") -> JobBuilder:
        self.kw["tolerations"] = self.kw.get("tolerations", ()) + (Toleration(key=key, operator=operator),)
        return self

    def queue(self, name: str | None = None, service_class: str = "spot") -> JobBuilder:
        self.kw["queue"], self.kw["service_class"] = name, service_class
        return self

    def build(self) -> JobRequest:
        return make_request(requests=self.req, **self.kw)


def job(name: str, namespace: str = "default") -> JobBuilder:
    return JobBuilder(name, namespace)


def snapshot(
    nodes: list[NodeBuilder | Node], topology: Topology = TOPO, used: dict[str, int] | None = None
) -> Snapshot:
    """Snapshot with `used` GPUs per node taken by foreign pods."""
    built = [n.build() if isinstance(n, NodeBuilder) else n for n in nodes]
    pods = [Pod(f"other/{name}", name, ((GPU, g),)) for name, g in (used or {}).items() if g]
    return Snapshot(built, topology, pods)


# A ClusterTopology object as kubectl prints it: spine, leaf, node.
TOPOLOGY_OBJECT = {
    "apiVersion": "superpod.dev/v1alpha1",
    "kind": "ClusterTopology",
    "metadata": {"name": "default"},
    "spec": {
        "levels": [
            {"name": "spine", "nodeLabel": "superpod.dev/spine"},
            {"name": "leaf", "nodeLabel": "superpod.dev/leaf"},
            {"name": "node", "nodeLabel": "kubernetes.io/hostname"},
        ]
    },
}
