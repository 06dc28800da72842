"""Reservations with a predicted start, on the real control plane with simulated nodes of its own: a blocked gang
reserves the leaf predicted to free first and says when it expects to start; a job whose limit ends before that
start runs inside the reservation, one whose limit does not waits; the reserved gang starts when predicted. The
runtimes the estimator learned come back from the GPUUsage records after the operator restarts."""

from __future__ import annotations

import re
import time

from superpod.api.times import timestamp
from tests.integration.operator_env import Jobs, sim_cluster, training_job
from tests.integration.wait import wait_for

RUN = "sim.superpod.dev/run-for"


def expected_seconds(message: str) -> float:
    found = re.search(r"expected to start in about (\d+) (s|min|h)", message)
    assert found, message
    return float(found[1]) * {"s": 1, "min": 60, "h": 3600}[found[2]]


def test_a_job_that_ends_before_the_reserved_start_runs_inside_the_reservation(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 8, nodes_per_unit=4)  # 2 leaves of 4 nodes
    jobs = Jobs(cluster.api, namespace)
    jobs.create(training_job("hold", sim, 4, gpus=8, topology={"required": "leaf"}, maxRuntimeSeconds=3600,
                             annotations={RUN: "600s"}))  # one leaf, long
    jobs.wait_phase("hold", "Running")
    jobs.create(training_job("soon", sim, 3, gpus=8, topology={"required": "leaf"}, maxRuntimeSeconds=100,
                             annotations={RUN: "80s"}))  # three nodes of the other leaf, predicted to end by 100 s
    jobs.wait_phase("soon", "Running")
    soon_start = timestamp(jobs.status("soon")["attemptStartTime"])
    jobs.create(training_job("big", sim, 4, gpus=8, topology={"required": "leaf"}))
    message = jobs.wait_message("big", "reserved for it", timeout=60)  # "leaf su-2 is" or "4 nodes of leaf su-2 are"
    assert f"when {namespace}/soon ends" in message, message
    predicted = soon_start + 100
    assert abs(time.time() + expected_seconds(message) - predicted) < 35, message  # "about 1 min" is 60-89 s
    jobs.create(training_job("slow", sim, 1, gpus=8, maxRuntimeSeconds=3600, annotations={RUN: "600s"}))
    slow = jobs.wait_message("slow", "fits only inside", timeout=30)  # the one free node is inside big's reservation
    assert "reserved for " + f"{namespace}/big" in slow, slow
    # after slow is told: created with it, in the same second, quick would come first (its name) and take the node
    jobs.create(training_job("quick", sim, 1, gpus=8, maxRuntimeSeconds=10, annotations={RUN: "5s"}))  # 10 + 30 s
    jobs.wait_phase("quick", "Running", timeout=30)  # on the one free node: inside big's reservation
    assert jobs.phase("big") == "Queued" and "reserved" in jobs.status("big").get("message", "")
    big = jobs.wait_phase("big", "Running", timeout=150)
    started = timestamp(big["attemptStartTime"])
    assert started <= predicted + 10, f"big started {started - predicted:.0f} s after its predicted start"
    assert jobs.phase("slow") == "Queued"
    jobs.wait_phase("quick", "Succeeded", timeout=30)


def test_the_estimators_history_survives_a_restart(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, nodes_per_unit=4)  # one leaf
    jobs = Jobs(cluster.api, namespace)
    key = {"superpod.dev/estimate-key": "pretrain"}
    first = training_job("pretrain-1", sim, 4, gpus=8, annotations={RUN: "20s"})
    first["metadata"]["labels"] = key
    jobs.create(first)
    jobs.wait_phase("pretrain-1", "Succeeded", timeout=90)
    operator.kill()
    operator.start()
    second = training_job("pretrain-2", sim, 4, gpus=8, annotations={RUN: "120s"})
    second["metadata"]["labels"] = key
    jobs.create(second)
    jobs.wait_phase("pretrain-2", "Running", timeout=60)
    jobs.create(training_job("next", sim, 4, gpus=8, topology={"required": "leaf"}))
    message = jobs.wait_message("next", "reserved for it", timeout=60)
    assert f"when {namespace}/pretrain-2 ends" in message, message  # predicted from pretrain-1's 20 s
    assert expected_seconds(message) <= 30, message
    wait_for(lambda: jobs.phase("pretrain-2") in ("Running", "Succeeded"), 5, "pretrain-2 runs on")
