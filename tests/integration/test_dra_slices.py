"""Simulated nodes publish the ResourceSlices NVIDIA's DRA driver would (hardware/dra_slices.py) on the real API
server: served as rendered, usable by kube-scheduler's own allocator, and gone with their nodes."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.core.dra.allocate import Allocator
from superpod.core.dra.model import allocated_devices, node_pools, read_claim, read_classes, read_slices
from superpod.hardware import dra_slices, nodes, presets
from tests.integration.operator_env import sim_cluster
from tests.integration.wait import wait_for

GROUP, VERSION = "resource.k8s.io", "v1"
H100 = "NVIDIA H100 80GB HBM3"


def _devices(slice_objs: list[dict]) -> list[tuple]:
    slices, errors = read_slices(slice_objs)
    assert not errors, errors
    return sorted((s.name, s.node_name, s.pool, d.driver, d.name, sorted(d.attributes.items(), key=str),
                   sorted(d.capacity.items())) for s in slices for d in s.devices)


def _gpu_claim(name: str, product: str, count: int) -> dict:
    """`count` GPUs named `product` of the driver's GPU class."""
    selector = {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{product}'"}}
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count,
                                           "selectors": [selector]}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}}}


def _pod(name: str, node: str, claims: dict[str, dict]) -> dict:
    """A pod pinned to `node` with `claims`: entry name -> resourceClaimName or resourceClaimTemplateName."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
                     "resourceClaims": [{"name": entry, **source} for entry, source in claims.items()],
                     "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"claims": [{"name": entry} for entry in claims]}}]}}


def test_simulated_nodes_publish_devices_kube_scheduler_allocates(cluster, namespace):
    custom, core = client.CustomObjectsApi(cluster.api), client.CoreV1Api(cluster.api)
    had_classes = {c["metadata"]["name"] for c in custom.list_cluster_custom_object(GROUP, VERSION,
                                                                                      "deviceclasses")["items"]}
    dgx, dgx_nodes = sim_cluster(cluster.api, "dgx-h100", 2, dra=True)
    gb200, gb200_nodes = sim_cluster(cluster.api, "gb200-nvl72", 2, dra=True)

    def served(name: str) -> list[dict]:
        return custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                                 label_selector=f"{presets.SIM_LABEL}={name}")["items"]
    try:
        node_objs = dgx_nodes + gb200_nodes
        uids = {n.metadata.name: n.metadata.uid for n in core.list_node(
            label_selector=f"{presets.SIM_LABEL} in ({dgx},{gb200})").items}
        slice_objs = served(dgx) + served(gb200)
        assert _devices(slice_objs) == _devices([s for n in node_objs for s in dra_slices.node_slices(n)])
        assert len(slice_objs) == 2 + 2 * 2, "a GPU slice per node, and a compute-domain one per GB200 tray"
        for body in slice_objs:
            owner = body["metadata"]["ownerReferences"][0]
            assert (body["spec"]["nodeName"], owner["kind"], owner["uid"]) == (
                owner["name"], "Node", uids[owner["name"]])
            assert body["spec"]["driver"] != "gpu.nvidia.com" or body["spec"]["pool"]["name"] == owner["name"]
        assert all(n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in gb200_nodes)

        class_objs = custom.list_cluster_custom_object(GROUP, VERSION, "deviceclasses")["items"]
        classes, errors = read_classes(class_objs)
        assert not errors
        rendered, _ = read_classes(dra_slices.device_classes())
        assert {name: classes[name].selectors for name in rendered} == {
            name: c.selectors for name, c in rendered.items()}

        versions = sorted(s["metadata"]["resourceVersion"] for s in slice_objs)
        assert nodes.create_nodes(cluster.api, dgx_nodes, dra=True) == 0
        assert sorted(s["metadata"]["resourceVersion"] for s in served(dgx) + served(gb200)) == versions, \
            "publishing again changes nothing"

        node = dgx_nodes[1]["metadata"]["name"]
        claim_obj = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                           _gpu_claim("gpus", H100, 8))
        all_slices, _ = read_slices(custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"])
        taken = allocated_devices(custom.list_cluster_custom_object(GROUP, VERSION, "resourceclaims")["items"])
        ours = Allocator(classes).allocate(node, node_pools(all_slices, node, dgx_nodes[1]["metadata"]["labels"]),
                                           taken, [read_claim(claim_obj)])
        assert isinstance(ours, list), ours
        expected = sorted((r, d) for r, d in ours[0].results)
        assert [device for _, device in expected] == [("gpu.nvidia.com", node, f"gpu-{i}") for i in range(8)]

        core.create_namespaced_pod(namespace, _pod("trainer", node, {"gpus": {"resourceClaimName": "gpus"}}))
        bound = wait_for(lambda: core.read_namespaced_pod("trainer", namespace).spec.node_name, 60, "the pod bound")
        allocation = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                         "gpus")["status"]["allocation"]
        results = allocation["devices"]["results"]
        assert bound == node
        assert sorted((r["request"], (r["driver"], r["pool"], r["device"])) for r in results) == expected

        tray = gb200_nodes[0]["metadata"]["name"]  # a ComputeDomain's workload pod: its tray's GPUs, an IMEX channel
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                               _gpu_claim("tray", "NVIDIA GB200", 4))
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates",
                                               dra_slices.compute_domain_claim_template(namespace, "imex", "cd-1"))
        core.create_namespaced_pod(namespace, _pod("worker", tray, {"gpus": {"resourceClaimName": "tray"},
                                                                    "imex": {"resourceClaimTemplateName": "imex"}}))
        wait_for(lambda: core.read_namespaced_pod("worker", namespace).spec.node_name, 60, "the GB200 pod bound")
        statuses = core.read_namespaced_pod("worker", namespace).status.resource_claim_statuses
        channel = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                      statuses[0].resource_claim_name)["status"]["allocation"]
        assert [(r["driver"], r["pool"], r["device"]) for r in channel["devices"]["results"]] == [
            ("compute-domain.nvidia.com", tray, "channel-0")]
    finally:
        for name in (dgx, gb200):
            nodes.delete_cluster(cluster.api, name)
        for body in dra_slices.device_classes():
            if body["metadata"]["name"] not in had_classes:
                _delete_class(custom, body["metadata"]["name"])
    assert not served(dgx) and not served(gb200), "a node's slices go with it"


def _delete_class(custom: client.CustomObjectsApi, name: str) -> None:
    try:
        custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)
    except ApiException as e:
        if e.status != 404:
            raise
