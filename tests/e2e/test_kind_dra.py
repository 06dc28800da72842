"""Dynamic Resource Allocation on kind, for real: the DRA example driver's kubelet plugin publishes each worker's
simulated GPUs as a ResourceSlice, and a real kubelet starts a pod whose ResourceClaim was allocated, handing the
allocated device to its container through CDI (containerd applies the spec the plugin wrote)."""

from __future__ import annotations

import re
import time

from kubernetes import client

from tests.e2e.conftest import DRA_DRIVER, report
from tests.integration.wait import wait_for

CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
# What the driver's CDI spec puts in a container's environment for each device it holds.
PRINT_DEVICES = 'env | grep -E "^(GPU_DEVICE_|DRA_RESOURCE_DRIVER_NAME=|KUBERNETES_NODE_NAME=)" | sort; exec sleep 3600'


def claim_template(name: str) -> dict:
    return {"metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]}}}}


def pod_with_claim(name: str, template: str, image: str) -> dict:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", PRINT_DEVICES],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "claims": [{"name": "gpu"}]}}
    return {"metadata": {"name": name},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1,
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}}


def running(core: client.CoreV1Api, namespace: str, name: str):
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase == "Running" else None


def test_kube_scheduler_allocates_a_claim_and_the_container_sees_its_device(kind, dra_example_driver, namespace):
    core, resource = client.CoreV1Api(kind.api), client.ResourceV1Api(kind.api)
    workers = {node.metadata.name for node in core.list_node(label_selector=f"!{CONTROL_PLANE}").items}
    assert set(dra_example_driver) == workers and all(len(devices) == 8 for devices in dra_example_driver.values())
    report(f"DRA example driver: {len(workers)} ResourceSlices, devices {dra_example_driver[min(workers)]}")
    resource.create_namespaced_resource_claim_template(namespace, claim_template("one-gpu"))
    started = time.monotonic()
    core.create_namespaced_pod(namespace, pod_with_claim("sees-a-gpu", "one-gpu", kind.operator_image))
    try:
        pod = wait_for(lambda: running(core, namespace, "sees-a-gpu"), 60, "the pod with a claim Running")
        report(f"pod with a gpu.example.com claim Running in {time.monotonic() - started:.1f}s on {pod.spec.node_name}")
        claim = resource.read_namespaced_resource_claim(pod.status.resource_claim_statuses[0].resource_claim_name,
                                                        namespace)
        (result,) = claim.status.allocation.devices.results
        assert (result.driver, result.pool) == (DRA_DRIVER, pod.spec.node_name), result
        logs = wait_for(lambda: core.read_namespaced_pod_log("sees-a-gpu", namespace), 30, "the container's env")
        report(f"claim allocated {result.pool}/{result.device}; the container's env: {' '.join(logs.split())}")
        env = dict(line.split("=", 1) for line in logs.splitlines())
        index = result.device.removeprefix("gpu-")
        assert [name for name in env if re.fullmatch(r"GPU_DEVICE_\d+", name)] == [f"GPU_DEVICE_{index}"], env
        assert env[f"GPU_DEVICE_{index}"] == result.device
        assert env[f"GPU_DEVICE_{index}_RESOURCE_CLAIM"] == claim.metadata.uid
        assert env["KUBERNETES_NODE_NAME"] == pod.spec.node_name
    finally:
        core.delete_namespaced_pod("sees-a-gpu", namespace, grace_period_seconds=0)
