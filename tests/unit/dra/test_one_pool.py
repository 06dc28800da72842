"""A node that advertises nvidia.com/gpu and publishes the same GPUs as DRA devices (a device plugin beside a DRA
driver, as the project's simulated nodes do) is one pool: what classic pods hold and what claims hold are booked
against each other. Found by review (M2): a classic 8-GPU job and an 8-GPU claiming gang both landed on one 8-GPU
node."""

from __future__ import annotations

from superpod.k8s.api import EVENTS, PODS
from tests.unit.memory_cluster import training_job
from tests.unit.podgangs.test_pod_gang_claims import claiming, create_claiming, devices, dra_cluster


def test_a_claiming_gang_is_not_placed_on_the_gpus_a_classic_job_holds():
    c = dra_cluster(1, nodes_per_unit=1)
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    [node] = [p["spec"].get("nodeName") for p in c.pods("classic")]
    assert node, "the dangerous moment: the classic job holds the node's 8 GPUs"
    create_claiming(c, claiming("d-0", "d", 1, 0))
    c.settle(4)
    assert not c.store.peek(PODS, "team-a/d-0")["spec"].get("nodeName"), "bound on GPUs the classic job holds"
    assert not devices(c, "d-0")


def test_a_classic_job_is_not_placed_on_the_gpus_claims_hold():
    c = dra_cluster(1, nodes_per_unit=1)
    create_claiming(c, claiming("d-0", "d", 1, 0))
    c.settle(4)
    assert len(devices(c, "d-0")) == 8, "the dangerous moment: the gang's claim holds the node's 8 GPUs"
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(4)
    assert c.decided("classic").get("phase") == "Queued", c.decided("classic")
    assert not any(p["spec"].get("nodeName") for p in c.pods("classic"))


def test_half_a_pooled_node_each_way_fits_both():
    c = dra_cluster(1, nodes_per_unit=1)
    c.submit(training_job("classic", 1, gpus=4))
    c.settle(3)
    body = claiming("d-0", "d", 1, 0)
    create_claiming(c, body)
    c.settle(4)
    assert c.decided("classic").get("phase") in ("Starting", "Running")
    assert not c.store.peek(PODS, "team-a/d-0")["spec"].get("nodeName"), "8 GPUs claimed where 4 are free"


def test_a_node_publishing_its_gpus_both_ways_is_warned_of_once():
    c = dra_cluster(2, nodes_per_unit=2)
    c.settle(3)
    warned = [(e["involvedObject"]["name"], e["message"]) for e in c.store.objects.get(EVENTS, {}).values()
              if e["reason"] == "GpusPublishedTwice"]
    assert sorted(name for name, _ in warned) == ["dgx-su01-n01", "dgx-su01-n02"], warned
    assert "advertises 8 nvidia.com/gpu and publishes its GPUs as DRA devices too" in warned[0][1]
