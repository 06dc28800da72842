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
