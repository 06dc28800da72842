"""The local control plane is real: API server with RBAC and service-account tokens, controller-manager, scheduler,
and KWOK driving simulated GPU nodes and their pods."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.hardware import nodes, presets
from tests.integration.wait import wait_for


def pod(name: str, node: str | None = None, annotations: dict | None = None, owner: dict | None = None) -> dict:
    meta = {"name": name, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec = {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def phase(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    try:
        return core.read_namespaced_pod(name, ns).status.phase
    except ApiException as e:
        if e.status == 404:
            return None
        raise


@pytest.fixture(scope="module")
def dgx(cluster):
    api = cluster.api
    objs = presets.preset_nodes("dgx-h100", nodes=8, cluster="it-dgx")
    nodes.create_nodes(api, objs)
    core = client.CoreV1Api(api)
    wait_for(lambda: all(_ready(core, o["metadata"]["name"]) for o in objs), 60, "simulated nodes Ready")
    yield [o["metadata"]["name"] for o in objs]
    nodes.delete_cluster(api, "it-dgx")


def _ready(core: client.CoreV1Api, name: str) -> bool:
    conds = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conds)


def test_api_server_reports_the_built_version(cluster):
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.")
    if cluster.local:
        assert version["serverVersion"]["gitVersion"] == "v1.37.2"
        assert version["clientVersion"]["gitVersion"] == "v1.37.2"


def test_preset_nodes_carry_gpu_capacity_and_topology(cluster, dgx):
    out = json.loads(cluster.kubectl("get", "nodes", "-l", "sim.superpod.dev/cluster=it-dgx", "-o", "json").stdout)
    items = out["items"]
    assert sorted(n["metadata"]["name"] for n in items) == sorted(dgx)
    for n in items:
        labels = n["metadata"]["labels"]
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert n["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["superpod.dev/leaf"] == "su-1"
        assert labels["superpod.dev/spine"] == "dgx-spine-1"
        assert labels["kubernetes.io/hostname"] == n["metadata"]["name"]
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", "KWOK initialised the node"
    table = cluster.kubectl("get", "nodes", "-l", "sim.superpod.dev/cluster=it-dgx").stdout
    assert "Ready" in table and dgx[0] in table


def test_bound_pod_runs_and_finishing_pod_succeeds(cluster, dgx, namespace):
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_pod(namespace, pod("runs", dgx[0]))
    core.create_namespaced_pod(namespace, pod("finishes", dgx[1], {"sim.superpod.dev/run-for": "1s"}))
    core.create_namespaced_pod(namespace, pod("fails", dgx[2], {"sim.superpod.dev/fail-after": "1s"}))
    wait_for(lambda: phase(core, namespace, "runs") == "Running", 30, "pod Running")
    wait_for(lambda: phase(core, namespace, "finishes") == "Succeeded", 30, "pod Succeeded")
    wait_for(lambda: phase(core, namespace, "fails") == "Failed", 30, "pod Failed")
    assert phase(core, namespace, "runs") == "Running", "a pod with no finish annotation keeps running"
    core.delete_namespaced_pod("runs", namespace)
    wait_for(lambda: phase(core, namespace, "runs") is None, 30, "deleted pod gone")


def test_garbage_collector_deletes_owned_pods(cluster, dgx, namespace):
    core = client.CoreV1Api(cluster.api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_pod(namespace, pod("owned", dgx[3], owner=ref))
    wait_for(lambda: phase(core, namespace, "owned") == "Running", 30, "owned pod Running")
    core.delete_namespaced_config_map("owner", namespace)
    wait_for(lambda: phase(core, namespace, "owned") is None, 60, "garbage collector to delete the owned pod")


def test_deployment_gets_scheduled_running_pods(cluster, dgx, namespace):
    apps = client.AppsV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "web", "image": "nginx"}],
                     "nodeSelector": {"sim.superpod.dev/cluster": "it-dgx"}}}}})

    def running():
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        ok = [p for p in pods if p.status.phase == "Running" and p.spec.node_name in dgx]
        return len(ok) == 3
    wait_for(running, 60, "3 Deployment pods scheduled by kube-scheduler and Running")
    assert apps.read_namespaced_deployment("web", namespace).status.ready_replicas == 3


def _as_token(cluster, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    base = cluster.api.configuration
    cfg.host, cfg.ssl_ca_cert, cfg.verify_ssl = base.host, base.ssl_ca_cert, base.verify_ssl
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def test_rbac_refuses_and_token_request_authenticates(cluster, namespace):
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    req = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}})
    token = req.status.token
    assert token.count(".") == 2, "a signed JWT"
    as_sa = _as_token(cluster, token)
    review = client.AuthenticationV1Api(as_sa).create_self_subject_review({})
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:nobody"
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(as_sa).list_namespaced_pod(namespace)
    assert refused.value.status == 403
    with pytest.raises(ApiException) as anonymous:
        client.CoreV1Api(_as_token(cluster, "not-a-token")).list_namespaced_pod(namespace)
    assert anonymous.value.status == 401


def test_deleting_a_simulated_cluster_removes_exactly_its_nodes(cluster, dgx):
    api = cluster.api
    other = presets.preset_nodes("gb200-nvl72", nodes=20, cluster="it-gb200")
    assert nodes.create_nodes(api, other) == 20
    assert nodes.list_clusters(api)["it-gb200"] == 20
    assert nodes.delete_cluster(api, "it-gb200") == 20
    core = client.CoreV1Api(api)
    wait_for(lambda: not core.list_node(label_selector="sim.superpod.dev/cluster=it-gb200").items, 30, "nodes gone")
    assert len(core.list_node(label_selector="sim.superpod.dev/cluster=it-dgx").items) == len(dgx)
