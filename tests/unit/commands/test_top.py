"""`superpod top`: a 128-node SuperPOD fits 120 columns, node by node, with the jobs holding each node, the nodes out
of placement flagged and the queues against their guarantees; a larger fleet is one line per domain."""

from __future__ import annotations

import yaml

from superpod.commands.top import load_dump, render
from superpod.k8s.api import GPUQUEUES, NODES
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.queues.test_controller_queues import gpu_queue, submit


def test_a_superpod_node_by_node_in_120_columns():
    c = MemoryCluster(nodes=128)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 64, budget={"gpuHours": 100})))
    submit(c, "a", "train-0")
    body = training_job("big-llm", 16, 8)
    c.submit(body)
    c.update_node("dgx-su01-n01", lambda node: node.setdefault("spec", {}).update({"unschedulable": True}))
    c.settle(3)
    out = render(c.state)
    lines = out.splitlines()
    assert lines[0] == "128 nodes, 136 of 1024 GPUs in use"
    assert max(len(line) for line in lines) <= 120
    assert "spine dgx-spine-1 / leaf su-1: 136/256 GPUs, 1 node(s) out of placement" in lines, "the first leaf"
    assert "spine dgx-spine-1 / leaf su-2: 0/256 GPUs" in lines
    assert sum("big-llm" in line for line in lines) == 6, "16 nodes, three to a row"
    assert any("dgx-su01-n01x░░░░░░░░" in line for line in lines), "cordoned"
    assert any(line.startswith("a ") and line.split()[1:5] == ["64", "136", "72", "0"] for line in lines)


def test_a_larger_fleet_is_one_line_per_domain_and_a_dump_reads_the_same():
    c = MemoryCluster(nodes=160)
    c.settle(1)
    dump = yaml.safe_dump_all(list(c.store.objects[NODES].values()) + [
        {"apiVersion": "superpod.dev/v1alpha1", "kind": "ClusterTopology", "metadata": {"name": "default"},
         "spec": {"levels": [{"name": "spine", "nodeLabel": "superpod.dev/spine"},
                             {"name": "leaf", "nodeLabel": "superpod.dev/leaf"}]}}])
    lines = render(load_dump(dump)).splitlines()
    assert lines[0] == "160 nodes, 0 of 1280 GPUs in use"
    assert len(lines) == 1 + 5 and lines[1].endswith("0/256       spine dgx-spine-1 / leaf su-1")


def test_pod_gangs_mig_layouts_and_reservations_are_shown():
    from tests.unit.podgangs.test_pod_gangs import create, pod

    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    create(c, *[pod(f"llm-{i}", "llm", 2, index=i) for i in range(2)])
    c.submit(training_job("small", 3, 8))
    c.submit(training_job("whole", 8, 8, topology={"required": "leaf"}))  # can never fit a leaf of 4: Invalid
    c.submit(training_job("wide", 4, 8, topology={"required": "leaf"}))  # waits for a leaf: reserves one
    c.update_node("dgx-su02-n04", lambda node: node["status"]["allocatable"].update(
        {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "1"}))
    c.settle(3)
    out = render(c.state)
    assert "llm" in out, out
    assert "MIG layouts (slices in use / advertised):" in out
    assert "  dgx-su02-n04: 1g.10gb 0/1, 3g.40gb 0/2" in out
    assert "Reservations:" in out and "team-a/wide: leaf su-" in out, out
