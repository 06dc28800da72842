"""`superpod cluster up/down` of the local control plane: healthy after up, nothing left behind after down."""

from __future__ import annotations

import os

import pytest

from superpod.localcluster.cluster import COMPONENTS, LocalCluster, Ports, _alive, _port_in_use

pytestmark = pytest.mark.skipif(bool(os.environ.get("KUBECONFIG")), reason="tests the local control plane itself")

PORTS = Ports(etcd=12679, etcd_peer=12680, apiserver=16743, controller_manager=20557, scheduler=20559, kwok=20547)


def test_up_is_healthy_and_down_leaves_no_process_or_port(cluster, tmp_path):
    local = LocalCluster(tmp_path / "cluster", PORTS)
    bin_dir = cluster.local.build(quiet=True) if cluster.local else local.build(quiet=True)
    local.up(bin_dir)
    status = local.status()
    pids = [status[c]["pid"] for c in COMPONENTS]
    assert all(status[c]["running"] for c in COMPONENTS), status
    assert status["kube-apiserver"]["ready"]
    assert local.kubeconfig.exists()
    assert {f"{c}.log" for c in COMPONENTS} <= {p.name for p in local.logs.iterdir()}

    local.up(bin_dir)  # a second `up` on a healthy cluster changes nothing
    assert [local.status()[c]["pid"] for c in COMPONENTS] == pids

    local.down()
    assert not any(_alive(pid) for pid in pids)
    assert not any(_port_in_use(p) for p in PORTS.all().values())
    assert not local.running()


def test_after_a_restart_kwok_runs_pods_on_existing_nodes_at_once(cluster, tmp_path):
    from kubernetes import client

    from superpod.hardware import nodes, presets
    from superpod.k8s.client import load
    from tests.integration.wait import wait_for

    local = LocalCluster(tmp_path / "cluster", PORTS)
    bin_dir = cluster.local.build(quiet=True) if cluster.local else local.build(quiet=True)
    local.up(bin_dir)
    try:
        node = presets.preset_nodes("dgx-h100", 1, "restart")[0]
        nodes.create_nodes(load(local.kubeconfig), [node])
        core = client.CoreV1Api(load(local.kubeconfig))
        name = node["metadata"]["name"]
        wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                             for c in core.read_node(name).status.conditions or []), 60, "node Ready")
        local.down()
        local.up(bin_dir)  # same etcd data: the node and its lease, held by the previous KWOK, are still there
        core = client.CoreV1Api(load(local.kubeconfig))
        core.create_namespaced_pod("default", {"metadata": {"name": "after-restart"}, "spec": {
            "nodeName": name, "containers": [{"name": "c", "image": "x"}]}})
        wait_for(lambda: core.read_namespaced_pod("after-restart", "default").status.phase == "Running", 30,
                 "the pod Running without waiting for the old node lease to expire")
    finally:
        local.down()
