"""Create and delete simulated GPU nodes on a cluster (KWOK drives their status)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.hardware import dra_slices
from superpod.hardware.presets import SIM_LABEL

DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"


def create_nodes(api: client.ApiClient, nodes: list[dict], workers: int = 24, dra: bool = False,
                 dra_only: bool = False) -> int:
    """Create `nodes` in parallel; nodes that already exist are left as they are. Returns how many were created.
    `dra`: each node also publishes the ResourceSlices NVIDIA's DRA driver would (created or replaced), and the
    driver's DeviceClasses are put in place; `dra_only`: so, and the nodes advertise no nvidia.com/gpu (no device
    plugin: the DeviceClass gpu.nvidia.com serves it from their devices)."""
    dra = dra or dra_only
    if dra_only:
        nodes = [without_device_plugin(node) for node in nodes]
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    if dra:
        for body in dra_slices.device_classes():
            _put(custom, "deviceclasses", body)

    def create(node: dict) -> int:
        name, created = node["metadata"]["name"], 1
        try:
            made = core.create_node(body=node, _preload_content=False).json()
        except ApiException as e:
            if e.status != 409:
                raise
            made, created = (core.read_node(name, _preload_content=False).json() if dra else None), 0
        if dra:
            for body in dra_slices.published_slices(node, made["metadata"]["uid"]):
                _put(custom, "resourceslices", body)
        return created

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(create, nodes))


def without_device_plugin(node: dict) -> dict:
    """`node` advertising no nvidia.com/gpu."""
    status = {key: ({k: v for k, v in value.items() if k != "nvidia.com/gpu"} if key in ("capacity", "allocatable")
                    else value) for key, value in node["status"].items()}
    return {**node, "status": status}


def _put(custom: client.CustomObjectsApi, plural: str, body: dict) -> None:
    """Create the cluster-scoped DRA object `body`, or replace the one of its name when it differs."""
    try:
        custom.create_cluster_custom_object(DRA_GROUP, DRA_VERSION, plural, body)
        return
    except ApiException as e:
        if e.status != 409:
            raise
    name = body["metadata"]["name"]
    served = custom.get_cluster_custom_object(DRA_GROUP, DRA_VERSION, plural, name)
    if _same(served, body):
        return
    body = {**body, "metadata": {**body["metadata"], "resourceVersion": served["metadata"]["resourceVersion"]}}
    custom.replace_cluster_custom_object(DRA_GROUP, DRA_VERSION, plural, name, body)


def _same(served: dict, body: dict) -> bool:
    meta, wanted = served["metadata"], body["metadata"]
    return served.get("spec") == body["spec"] and all(meta.get(key) == wanted.get(key)
                                                      for key in ("labels", "ownerReferences"))


def delete_cluster(api: client.ApiClient, cluster: str) -> int:
    """Delete exactly the nodes of simulated cluster `cluster`, and the ResourceSlices they publish. Returns how many
    nodes were deleted."""
    core = client.CoreV1Api(api)
    selector = f"{SIM_LABEL}={cluster}"
    count = len(core.list_node(label_selector=selector, _preload_content=False).json().get("items", []))
    if count:
        core.delete_collection_node(label_selector=selector)
    try:
        client.CustomObjectsApi(api).delete_collection_cluster_custom_object(
            DRA_GROUP, DRA_VERSION, "resourceslices", label_selector=selector)
    except ApiException as e:
        if e.status != 404:  # a cluster that serves no resource.k8s.io/v1 has none
            raise
    return count


def list_clusters(api: client.ApiClient) -> dict[str, int]:
    core = client.CoreV1Api(api)
    items = core.list_node(label_selector=SIM_LABEL, _preload_content=False).json().get("items", [])
    out: dict[str, int] = {}
    for n in items:
        name = n["metadata"]["labels"][SIM_LABEL]
        out[name] = out.get(name, 0) + 1
    return out
