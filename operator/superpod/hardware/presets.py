"""Simulated SuperPOD presets: KWOK Node objects that carry what real GPU servers carry.

These are stand-ins for hardware. Each node has the labels NVIDIA GPU Feature Discovery sets (`nvidia.com/gpu.*`,
`nvidia.com/mig.*`), the capacity the device plugin advertises (`nvidia.com/gpu`), and our topology labels
(`superpod.dev/spine`, `superpod.dev/leaf`, `nvidia.com/gpu.clique` on multi-node NVLink racks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

SIM_LABEL = "sim.superpod.dev/cluster"
KWOK_LABEL = ("type", "kwok")


@dataclass(frozen=True)
class Server:
    """One kind of GPU server, with the values GFD and the device plugin report for it."""

    product: str  # nvidia.com/gpu.product
    gpus: int
    gpu_memory_mib: int  # nvidia.com/gpu.memory
    family: str  # nvidia.com/gpu.family
    machine: str  # nvidia.com/gpu.machine
    cpu: str
    memory: str
    mig_capable: bool = True


DGX_H100 = Server("NVIDIA-H100-80GB-HBM3", 8, 81559, "hopper", "DGXH100", "224", "2063937772Ki")
HGX_H200 = Server("NVIDIA-H200", 8, 143771, "hopper", "HGX-H200", "192", "2063937772Ki")
HGX_H20 = Server("NVIDIA-H20", 8, 97871, "hopper", "HGX-H20", "192", "2063937772Ki")
HGX_A100 = Server("NVIDIA-A100-SXM4-80GB", 8, 81920, "ampere", "HGX-A100", "128", "1056758840Ki")
# One GB200 compute tray: 2 Grace CPUs (72 cores each) and 4 Blackwell GPUs.
GB200_TRAY = Server("NVIDIA-GB200", 4, 189471, "blackwell", "GB200-NVL72", "144", "884763648Ki")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    server: Server
    topology: dict[str, str]
    extra_labels: dict[str, str] = field(default_factory=dict)


def node_object(spec: NodeSpec, cluster: str) -> dict:
    s = spec.server
    labels = {
        KWOK_LABEL[0]: KWOK_LABEL[1],
        SIM_LABEL: cluster,
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": s.machine,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": s.product,
        "nvidia.com/gpu.count": str(s.gpus),
        "nvidia.com/gpu.memory": str(s.gpu_memory_mib),
        "nvidia.com/gpu.family": s.family,
        "nvidia.com/gpu.machine": s.machine,
        "nvidia.com/mig.capable": str(s.mig_capable).lower(),
        "nvidia.com/mig.strategy": "mixed",
        **spec.topology,
        **spec.extra_labels,
    }
    resources = {"cpu": s.cpu, "memory": s.memory, "pods": "110", "ephemeral-storage": "30Ti",
                 "nvidia.com/gpu": str(s.gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def topology(name: str = "default") -> dict:
    """The ClusterTopology over the labels the presets set (the levels of the chart's default topology)."""
    levels = [("spine", "superpod.dev/spine"), ("leaf", "superpod.dev/leaf"), ("nvlink", "nvidia.com/gpu.clique"),
              ("node", "kubernetes.io/hostname")]
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "ClusterTopology", "metadata": {"name": name},
            "spec": {"levels": [{"name": level, "nodeLabel": label} for level, label in levels]}}


def _topology(spine: str, leaf: str, clique: str | None = None) -> dict[str, str]:
    """Domain names are unique across presets, so several presets can share one cluster and one topology."""
    labels = {"superpod.dev/spine": spine, "superpod.dev/leaf": leaf}
    if clique:
        labels["nvidia.com/gpu.clique"] = clique
    return labels


def dgx_h100(nodes: int = 128, nodes_per_unit: int = 32, units_per_spine: int = 4) -> Iterator[NodeSpec]:
    """DGX H100 SuperPOD: scalable units of 32 nodes, one rail-optimised leaf group per unit."""
    for i in range(nodes):
        unit = i // nodes_per_unit + 1
        spine = (unit - 1) // units_per_spine + 1
        yield NodeSpec(f"dgx-su{unit:02d}-n{i % nodes_per_unit + 1:02d}", DGX_H100,
                       _topology(f"dgx-spine-{spine}", f"su-{unit}"))


def hgx_h20(nodes: int = 140, nodes_per_leaf: int = 20) -> Iterator[NodeSpec]:
    """The 140-server HGX H20 cluster (96 GB GPUs): leaf groups of 20 servers under one spine."""
    for i in range(nodes):
        leaf = i // nodes_per_leaf + 1
        yield NodeSpec(f"h20-l{leaf:02d}-n{i % nodes_per_leaf + 1:02d}", HGX_H20,
                       _topology("h20-spine-1", f"h20-leaf-{leaf}"))


def gb200_nvl72(nodes: int = 144, trays_per_rack: int = 18, racks_per_leaf: int = 4) -> Iterator[NodeSpec]:
    """GB200 NVL72 pod: racks of 18 trays x 4 GPUs, one NVLink clique (`<ClusterUUID>.<CliqueID>`) per rack."""
    cluster_uuid = "5f1e3c2a-72aa-4b6e-9d1c-000000000072"
    for i in range(nodes):
        rack = i // trays_per_rack + 1
        leaf = (rack - 1) // racks_per_leaf + 1
        yield NodeSpec(f"gb200-r{rack:02d}-t{i % trays_per_rack + 1:02d}", GB200_TRAY,
                       _topology("gb200-spine-1", f"gb200-leaf-{leaf}", f"{cluster_uuid}.{rack}"))


def rental_mixed(nodes: int = 12) -> Iterator[NodeSpec]:
    """A small mixed rental pool: H100, H200 and A100 80GB servers in turn; every other server of each product
    is opted in to dynamic MIG with MIG currently disabled."""
    servers = (DGX_H100, HGX_H200, HGX_A100)
    for i in range(nodes):
        server = servers[i % 3]
        short = {DGX_H100: "h100", HGX_H200: "h200", HGX_A100: "a100"}[server]
        extra = {"nvidia.com/mig.config": "all-disabled"}
        if (i // 3) % 2 == 1:
            extra["superpod.dev/mig-dynamic"] = "true"
        yield NodeSpec(f"rent-{short}-{i // 3 + 1:02d}", server,
                       _topology("rent-spine-1", f"rent-leaf-{i // 6 + 1}"), extra)


PRESETS: dict[str, tuple[Callable[..., Iterator[NodeSpec]], str]] = {
    "dgx-h100": (dgx_h100, "DGX H100 SuperPOD: 4 scalable units x 32 nodes x 8 H100 80GB, one spine"),
    "hgx-h20": (hgx_h20, "140 HGX H20 servers (8 x 96 GB), leaf groups of 20"),
    "gb200-nvl72": (gb200_nvl72, "GB200 NVL72: 8 racks x 18 trays x 4 GPUs, one NVLink clique per rack"),
    "rental-mixed": (rental_mixed, "12 rental servers: H100, H200, A100 80GB; half opted in to dynamic MIG"),
}


def preset_nodes(preset: str, nodes: int | None = None, cluster: str | None = None, **shape: int) -> list[dict]:
    """Node objects of `preset`. A cluster named other than the preset prefixes its node names with that name, so
    several simulated clusters of one preset can live side by side. `shape`: the preset's own sizes, e.g.
    nodes_per_unit=4 for dgx-h100."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    make = PRESETS[preset][0]
    specs = make(**shape) if nodes is None else make(nodes, **shape)
    cluster = cluster or preset
    if cluster != preset:
        specs = (replace(s, name=f"{cluster}-{s.name}") for s in specs)
    return [node_object(s, cluster) for s in specs]
