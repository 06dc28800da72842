"""The ResourceSlices NVIDIA's DRA driver (k8s-dra-driver-gpu) would publish for a simulated node.

Read from the node's GFD labels (hardware/presets.py sets them): one node-local slice of driver gpu.nvidia.com in
a pool named after the node, with a device per GPU (`gpu-<minor>`) or, for a GPU in MIG mode, a device per MIG
instance on it (`gpu-<minor>-mig-<profile>-<profile id>-<placement start>`, as the driver names static MIG
devices); and on nodes of a multi-node NVLink clique, the compute-domain.nvidia.com slice with the IMEX channel and
daemon devices that ComputeDomains claim. Attribute names, types and device names are the driver's; values the
simulator cannot know (UUIDs, PCI bus ids) are made up, deterministically from the node's name."""

from __future__ import annotations

import uuid

from superpod.core import mig_catalog
from superpod.hardware.presets import SIM_LABEL

GPU_DRIVER = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"  # the standard attribute the driver sets from the GPU's PCI address

# NVML's device names (what the driver publishes as productName) of the GFD product labels of hardware/presets.py:
# GFD writes the NVML name with dashes for spaces, so the reverse needs a table.
NVML_NAMES = {
    "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-H200": "NVIDIA H200",
    "NVIDIA-H20": "NVIDIA H20",
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA-GB200": "NVIDIA GB200",
}
# GFD's nvidia.com/gpu.family -> (NVML architecture name, CUDA compute capability as a version)
ARCHITECTURES = {"ampere": ("Ampere", "8.0.0"), "hopper": ("Hopper", "9.0.0"), "blackwell": ("Blackwell", "10.0.0")}
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # an HGX board's eight GPUs


def device_classes() -> list[dict]:
    """The DeviceClasses the driver's Helm chart installs (gpu, mig and vfio from the GPU plugin; the IMEX channel
    and daemon classes of ComputeDomains); `gpu.nvidia.com` also serves the extended resource nvidia.com/gpu."""
    def one(name: str, driver: str, kind: str, extra: str = "", **spec) -> dict:
        expression = f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{kind}'{extra}"
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}], **spec}}

    return [one("gpu.nvidia.com", GPU_DRIVER, "gpu", extendedResourceName="nvidia.com/gpu"),
            one("mig.nvidia.com", GPU_DRIVER, "mig"),
            one("vfio.gpu.nvidia.com", GPU_DRIVER, "vfio"),
            one("compute-domain-daemon.nvidia.com", COMPUTE_DOMAIN_DRIVER, "daemon"),
            one("compute-domain-default-channel.nvidia.com", COMPUTE_DOMAIN_DRIVER, "channel",
                f" && device.attributes['{COMPUTE_DOMAIN_DRIVER}'].id == 0")]


def compute_domain_claim_template(namespace: str, name: str, domain_uid: str, allocation_mode: str = "Single") -> dict:
    """The ResourceClaimTemplate a ComputeDomain's controller makes for its workload pods (the name is the
    ComputeDomain's spec.channel.resourceClaimTemplate.name): one IMEX channel, with the domain in its config."""
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
                  "domainID": domain_uid, "allocationMode": allocation_mode}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": namespace, "name": name,
                         "labels": {"resource.nvidia.com/computeDomain": domain_uid,
                                    "resource.nvidia.com/computeDomainTarget": "Workload"}},
            "spec": {"spec": {"devices": {
                "requests": [{"name": "channel",
                              "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}],
                "config": [{"requests": ["channel"],
                            "opaque": {"driver": COMPUTE_DOMAIN_DRIVER, "parameters": parameters}}]}}}}


def node_slices(node: dict, mig: dict[int, list[tuple[str, int]]] | None = None, generation: int = 1,
                driver_version: str = "570.86.15", cuda_driver_version: str = "12.8.0") -> list[dict]:
    """The slices for `node` (a Node object). `mig`: for GPUs in MIG mode, their instances as (profile name,
    placement start); those GPUs are published as their MIG devices only, as the driver does."""
    labels = node["metadata"]["labels"]
    name = node["metadata"]["name"]
    common = _common_attributes(labels, driver_version, cuda_driver_version)
    memory_mib = int(labels["nvidia.com/gpu.memory"])
    devices = []
    for minor in range(int(labels["nvidia.com/gpu.count"])):
        parent_uuid = _uuid("GPU", name, f"gpu-{minor}")
        attributes = {**common, PCI_BUS_ID: {"string": _pci_bus_id(minor)}}
        instances = (mig or {}).get(minor)
        if instances:
            product = mig_catalog.product(labels["nvidia.com/gpu.product"])
            devices.extend(_mig_device(name, minor, parent_uuid, attributes, product, profile, start)
                           for profile, start in instances)
        else:
            devices.append({"name": f"gpu-{minor}",
                            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": parent_uuid}, **attributes},
                            "capacity": {"memory": {"value": str(memory_mib * 2 ** 20)}}})
    slices = [_slice(name, GPU_DRIVER, generation, devices)]
    if labels.get("nvidia.com/gpu.clique"):
        slices.append(_slice(name, COMPUTE_DOMAIN_DRIVER, generation, [
            {"name": f"{kind}-0", "attributes": {"type": {"string": kind}, "id": {"int": 0}}}
            for kind in ("channel", "daemon")]))
    return slices


def published_slices(node: dict, node_uid: str, mig: dict[int, list[tuple[str, int]]] | None = None,
                     generation: int = 1) -> list[dict]:
    """`node`'s slices as the simulator publishes them: owned by the Node (as the driver's kubelet plugin makes
    them, so they go with it) and labelled with its simulated cluster (so `hardware delete` finds them). `mig`,
    `generation`: as node_slices takes them."""
    owner = {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"], "uid": node_uid,
             "controller": True}
    cluster = node["metadata"]["labels"].get(SIM_LABEL)
    out = node_slices(node, mig, generation)
    for body in out:
        body["metadata"]["ownerReferences"] = [owner]
        if cluster:
            body["metadata"]["labels"] = {SIM_LABEL: cluster}
    return out


def _common_attributes(labels: dict, driver_version: str, cuda_driver_version: str) -> dict:
    product = labels["nvidia.com/gpu.product"]
    architecture, capability = ARCHITECTURES.get(labels.get("nvidia.com/gpu.family", ""), ("Unknown", "0.0.0"))
    return {"productName": {"string": NVML_NAMES.get(product, product.replace("-", " "))},
            "brand": {"string": "Nvidia"}, "architecture": {"string": architecture},
            "cudaComputeCapability": {"version": capability}, "driverVersion": {"version": driver_version},
            "cudaDriverVersion": {"version": cuda_driver_version}}


def _mig_device(node: str, minor: int, parent_uuid: str, attributes: dict, product, profile_name: str,
                start: int) -> dict:
    profile = product.profile(profile_name)
    if start not in profile.starts:
        raise ValueError(f"{profile_name} cannot start at memory slice {start} on {product.key}")
    # the driver's canonical name: dots dropped from the profile, other characters outside [a-z0-9-] made dashes
    short = "".join(c if c.isalnum() or c == "-" else "-" for c in profile.name.replace(".", "").lower()).strip("-")
    name = f"gpu-{minor}-mig-{short}-{profile.id}-{start}"
    gigabytes = int(profile.name.split(".")[1].removesuffix("gb").split("+")[0])
    capacity = {"memory": {"value": str(gigabytes * 10 ** 9)}}  # the profile's nominal size: NVML's exact MiB vary
    capacity.update({f"memorySlice{i}": {"value": "1"} for i in range(start, start + profile.memory)})
    return {"name": name, "attributes": {"type": {"string": "mig"}, "uuid": {"string": _uuid("MIG", node, name)},
                                         "parentUUID": {"string": parent_uuid},
                                         "profile": {"string": profile.name}, **attributes},
            "capacity": capacity}


def _slice(node: str, driver: str, generation: int, devices: list[dict]) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}, "devices": devices}}


def _uuid(prefix: str, node: str, device: str) -> str:
    return f"{prefix}-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{device}.{node}.sim.superpod.dev')}"


def _pci_bus_id(minor: int) -> str:
    bus = PCI_BUSES[minor] if minor < len(PCI_BUSES) else 0x100 - len(PCI_BUSES) + minor
    return f"0000:{bus:02x}:00.0"
