"""Create and delete simulated GPU nodes on a cluster (KWOK drives their status)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.hardware.presets import SIM_LABEL


def create_nodes(api: client.ApiClient, nodes: list[dict], workers: int = 24) -> int:
    """Create `nodes` in parallel; nodes that already exist are left as they are. Returns how many were created."""
    core = client.CoreV1Api(api)

    def create(node: dict) -> int:
        try:
            core.create_node(body=node, _preload_content=False)
            return 1
        except ApiException as e:
            if e.status == 409:
                return 0
            raise

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(create, nodes))


def delete_cluster(api: client.ApiClient, cluster: str) -> int:
    """Delete exactly the nodes of simulated cluster `cluster`. Returns how many were deleted."""
    core = client.CoreV1Api(api)
    selector = f"{SIM_LABEL}={cluster}"
    count = len(core.list_node(label_selector=selector, _preload_content=False).json().get("items", []))
    if count:
        core.delete_collection_node(label_selector=selector)
    return count


def list_clusters(api: client.ApiClient) -> dict[str, int]:
    core = client.CoreV1Api(api)
    items = core.list_node(label_selector=SIM_LABEL, _preload_content=False).json().get("items", [])
    out: dict[str, int] = {}
    for n in items:
        name = n["metadata"]["labels"][SIM_LABEL]
        out[name] = out.get(name, 0) + 1
    return out
