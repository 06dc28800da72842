"""Parity: the simulator runs the operator's own code, so one scenario gives the same placements in a replay and
on the real control plane (the operator process, the API server, KWOK nodes)."""

from __future__ import annotations

import uuid

from kubernetes import client

from superpod.core.baselines import POLICIES
from superpod.core.phases import WAITING
from superpod.hardware import nodes, presets
from superpod.simulate.engine import Simulation, training_job
from superpod.simulate.runtime import RuntimeModel
from superpod.simulate.trace import TraceJob
from tests.integration.operator_env import TOPOLOGY
from tests.integration.wait import wait_for

SHAPES = [(1, 1, ""), (1, 2, ""), (1, 4, ""), (1, 8, ""), (2, 8, "leaf"), (3, 8, "leaf"), (1, 3, ""),
          (4, 8, "leaf"), (1, 1, ""), (2, 4, "")]  # (replicas, GPUs each, required)


def scenario(namespace: str) -> list[TraceJob]:
    """36 jobs of mixed shapes, more than the 128 GPUs hold: some are placed, the rest wait (one holding a
    reservation), so ordering, best fit, reservation and backfill all take part."""
    return [TraceJob(0.0, f"job-{index:02d}", namespace, replicas, gpus, 10_000.0, required)
            for index, (replicas, gpus, required) in enumerate(SHAPES[index % len(SHAPES)] for index in range(36))]


def own_cluster(api: client.ApiClient) -> tuple[str, list[dict]]:
    """16 nodes (4 leaves of 4) whose leaf and spine names are this test's own."""
    name = f"p{uuid.uuid4().hex[:6]}"
    objs = presets.preset_nodes("dgx-h100", 16, name, nodes_per_unit=4)
    for obj in objs:
        labels = obj["metadata"]["labels"]
        labels["superpod.dev/leaf"] = f"{name}-{labels['superpod.dev/leaf']}"
        labels["superpod.dev/spine"] = f"{name}-{labels['superpod.dev/spine']}"
    nodes.create_nodes(api, objs)
    core = client.CoreV1Api(api)
    wait_for(lambda: sum(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                         for n in core.list_node(label_selector=f"{presets.SIM_LABEL}={name}").items) == len(objs),
             60, "the nodes Ready")
    return name, objs


def test_a_replay_places_a_scenario_exactly_as_the_operator_on_the_real_control_plane(cluster, operator, jobs):
    name, objs = own_cluster(cluster.api)
    trace = scenario(jobs.ns)
    operator.kill()  # every job is there when the operator starts, as they are at the replay's first instant
    try:
        for job in trace:  # created in name order: the same FIFO order as the replay's
            body = training_job(job)
            body["spec"]["template"]["spec"]["nodeSelector"] = {presets.SIM_LABEL: name}
            jobs.create(body)
    finally:
        operator.start()

    def settled():
        statuses = [jobs.status(job.name) for job in trace]
        decided = all(s.get("phase") == "Running" or s.get("reason") in WAITING for s in statuses)
        return decided and statuses
    first = wait_for(settled, 90, "every job Running or waiting with a reason")
    real = {job.name: _counts(status.get("placement")) for job, status in zip(trace, first, strict=True)}
    assert wait_for(settled, 30, "the same") and real == {job.name: _counts(jobs.status(job.name).get("placement"))
                                                         for job in trace}, "settled: a second look agrees"

    simulation = Simulation(objs, TOPOLOGY, trace, POLICIES["superpod"](0), RuntimeModel.of(TOPOLOGY, objs))
    simulation.run(until=0.0)
    replayed = {key.split("/", 1)[1]: record.attempts[-1].nodes if record.attempts else {}
                for key, record in simulation.records.items()}
    placed = sum(1 for counts in real.values() if counts)
    assert placed >= 12 and len(trace) - placed >= 12, f"{placed} of {len(trace)} placed: both outcomes take part"
    assert replayed == real


def _counts(placement: dict | None) -> dict[str, int]:
    return {node: len(ranks) for node, ranks in sorted((placement or {}).items())}
