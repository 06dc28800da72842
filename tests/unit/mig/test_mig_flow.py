"""Dynamic MIG in the controller: never a node that is busy, placed or reserved; stuck reconfigurations reverted;
only the mixed strategy; idle slices back to whole GPUs; damaged bookkeeping never stops a cycle."""

from __future__ import annotations

import json

import yaml

from superpod.controller.state import MIG_EXPECT, MIG_FAILED, MIG_REQUESTED_AT
from superpod.k8s.api import CONFIGMAPS, NODES
from tests.unit.memory_cluster import MemoryCluster, run, training_job

H100 = "NVIDIA-H100-80GB-HBM3"
CONFIG = "nvidia.com/mig.config"


def mig_job(name: str, replicas: int, priority: int = 0) -> dict:
    body = training_job(name, replicas, mig="3g.40gb", priority=priority)
    body["spec"]["resources"]["gpuProduct"] = H100
    return body


def h100_job(name: str, replicas: int = 1, gpus: int = 8, priority: int = 0) -> dict:
    body = training_job(name, replicas, gpus, priority=priority)
    body["spec"]["resources"]["gpuProduct"] = H100
    return body


def rental(nodes: int = 6) -> MemoryCluster:
    """rental-mixed: rent-h100-01 (not opted in), rent-h100-02 (opted in), ..."""
    return MemoryCluster("rental-mixed", nodes)


def manager_applies(c: MemoryCluster, node: str) -> None:
    """The MIG manager and device plugin finish a reconfiguration: success, and the expected resources show."""
    def done(obj):
        expect = json.loads(obj["metadata"]["annotations"][MIG_EXPECT])
        obj["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
        alloc = {k: v for k, v in obj["status"]["allocatable"].items() if not k.startswith("nvidia.com/")}
        obj["status"]["allocatable"] = {**alloc, **{k: str(v) for k, v in expect.items()}}
    c.update_node(node, done)


def requested(c: MemoryCluster) -> list[str]:
    return sorted(n for n, o in c.store.objects[NODES].items() if MIG_EXPECT in o["metadata"].get("annotations", {}))


def test_a_mig_job_repartitions_an_idle_opted_in_node_then_runs():
    c = rental()
    c.submit(mig_job("slices", 2))
    c.cycle()
    assert requested(c) == ["rent-h100-02"]
    assert c.status("slices")["reason"] == "MigReconfiguring"
    config = c.store.peek(NODES, "rent-h100-02")["metadata"]["labels"][CONFIG]
    doc = yaml.safe_load(c.store.peek(CONFIGMAPS, "superpod-system/superpod-mig-parted-config")["data"]["config.yaml"])
    assert config in doc["mig-configs"]
    manager_applies(c, "rent-h100-02")
    c.settle(3)
    assert c.status("slices")["phase"] == "Running" and requested(c) == []


def test_a_node_given_a_gang_in_the_same_cycle_is_never_repartitioned():
    """Defect: the planner treated a node as busy only when pods were observed, so in the same cycle it
    repartitioned a node that was just given a gang."""
    c = MemoryCluster("rental-mixed", 6)
    c.submit(h100_job("whole", 1, 8, priority=10))  # takes an H100 node this cycle
    c.submit(mig_job("slices", 1))
    c.cycle()
    placed = next(iter(c.decided("whole")["placement"]))
    assert placed not in requested(c)


def test_reserved_nodes_are_never_repartitioned():
    """Defect: the MIG planner ignored the head-of-line reservation."""
    c = rental(6)  # H100 nodes: rent-h100-01 and rent-h100-02 (opted in)
    c.submit(h100_job("blocker", 2, 8))
    c.cycle()
    c.settle(2)
    c.submit(h100_job("big", 2, 8))  # cannot fit: both H100s are busy; it reserves them (no higher priority)
    c.submit(mig_job("slices", 1))
    c.cycle()
    assert "reserved for it" in c.status("big")["message"]
    assert requested(c) == []


def test_a_reconfiguration_that_never_finishes_is_reverted_and_the_node_marked():
    """Defect: a timed-out reconfiguration kept its requested label."""
    c = rental()
    c.submit(mig_job("slices", 2))
    c.cycle()
    assert c.store.peek(NODES, "rent-h100-02")["metadata"]["labels"][CONFIG] != "all-disabled"
    c.tick(61)  # the flow's timeout is 60s here; the manager never answered
    c.cycle()
    node = c.store.peek(NODES, "rent-h100-02")["metadata"]
    assert node["labels"][CONFIG] == "all-disabled", "the previous config is put back"
    assert "did not report success within 60s" in node["annotations"][MIG_FAILED]
    assert ("MigFailed", "node rent-h100-02: the MIG manager did not report success within 60s for config "
            f"{node['annotations'][MIG_FAILED].split('config ')[1][:-1]}; reverted, replanning elsewhere") in \
        c.events("slices")


def test_nodes_on_the_single_strategy_are_not_repartitioned_and_the_job_says_so():
    """Defect: nodes on the single MIG strategy (the GPU Operator default) timed out forever."""
    c = rental()
    c.update_node("rent-h100-02", lambda n: n["metadata"]["labels"].update({"nvidia.com/mig.strategy": "single"}))
    c.submit(mig_job("slices", 1))
    c.settle(2)
    assert requested(c) == []
    assert "use a MIG strategy other than mixed" in c.status("slices")["message"]


def test_idle_slices_return_to_whole_gpus_when_whole_gpu_jobs_wait():
    """Defect: GPUs never returned to whole."""
    c = rental()
    c.submit(mig_job("slices", 2, priority=5))
    c.cycle()
    manager_applies(c, "rent-h100-02")
    c.settle(2)
    c.store.delete_now(*_job_key("slices"))  # the MIG job is done: its slices idle
    c.settle(2)
    c.submit(h100_job("whole", 2, 8))  # needs both H100 nodes whole
    c.cycle()
    assert requested(c) == ["rent-h100-02"]
    assert json.loads(c.store.peek(NODES, "rent-h100-02")["metadata"]["annotations"][MIG_EXPECT]) == {
        "nvidia.com/gpu": 8}
    manager_applies(c, "rent-h100-02")
    c.settle(3)
    assert c.status("whole")["phase"] == "Running"


def test_damaged_bookkeeping_and_a_config_map_that_is_no_mapping_never_stop_a_cycle():
    """Defects: a non-numeric superpod.dev/mig-requested-at and a MIG ConfigMap that is not a mapping each stopped
    every cycle."""
    c = rental()
    run(c.admin.create(CONFIGMAPS, {"metadata": {"name": "superpod-mig-parted-config", "namespace": "superpod-system"},
                                    "data": {"config.yaml": "- just\n- a list\n"}}))
    c.submit(mig_job("slices", 2))
    c.cycle()
    c.update_node("rent-h100-02", lambda n: n["metadata"]["annotations"].update({MIG_REQUESTED_AT: "yesterday"}))
    c.submit(h100_job("other", 1, 8))
    c.cycle()
    assert "damaged" in c.store.peek(NODES, "rent-h100-02")["metadata"]["annotations"][MIG_FAILED]
    assert c.decided("other")["phase"] == "Starting"


def _job_key(name: str):
    from superpod.k8s.api import TRAININGJOBS

    return TRAININGJOBS, f"team-a/{name}"


def test_slices_are_never_reclaimed_from_a_node_placed_on_in_the_same_cycle():
    """Review finding: reclaiming idle slices looked only at observed MIG pods, so a node whose slices a MIG job
    was given in the same cycle (or that a whole-GPU pod used) could be set back to whole GPUs under it."""
    c = rental()
    c.submit(mig_job("first", 2, priority=5))
    c.cycle()
    manager_applies(c, "rent-h100-02")
    c.settle(2)
    c.store.delete_now(*_job_key("first"))
    c.settle(2)
    c.submit(mig_job("second", 1, priority=5))  # takes an idle slice of rent-h100-02 in this cycle
    c.submit(h100_job("whole", 2, 8))  # waits for whole H100s
    c.cycle()
    assert "rent-h100-02" in c.decided("second")["placement"]
    assert requested(c) == []


def test_a_failed_reconfiguration_keeps_the_node_held_until_the_previous_config_is_back():
    """Review finding: a failed node was placeable at once, while the MIG manager was still putting it back."""
    c = rental()
    c.submit(mig_job("slices", 2))
    c.cycle()
    c.update_node("rent-h100-02", lambda n: n["metadata"]["labels"].update({"nvidia.com/mig.config.state": "failed"}))
    c.cycle()
    node = c.store.peek(NODES, "rent-h100-02")["metadata"]
    assert node["labels"][CONFIG] == "all-disabled" and json.loads(node["annotations"][MIG_EXPECT]) == {
        "nvidia.com/gpu": 8}
    assert c.state.nodes["rent-h100-02"].node.held
    manager_applies(c, "rent-h100-02")
    c.cycle()
    c.cycle()
    assert not c.state.nodes["rent-h100-02"].node.held and MIG_FAILED in node["annotations"]


def test_a_gpu_count_label_that_is_no_number_leaves_only_that_node_out_of_mig_plans():
    """Defect: a non-integer nvidia.com/gpu.count label stopped every cycle (the MIG flow parsed it unguarded)."""
    c = rental()
    c.update_node("rent-h100-02", lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.count": "eight"}))
    c.update_node("rent-h100-01", lambda n: n["metadata"]["labels"].update({"superpod.dev/mig-dynamic": "true"}))
    c.submit(mig_job("slices", 1))
    c.cycle()
    assert requested(c) == ["rent-h100-01"], "planned on the node that can be read; the cycle went on"
