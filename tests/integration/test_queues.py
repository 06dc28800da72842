"""GPUQueues on the real control plane: three tenants on their own 96 simulated GPUs (guarantees 32/32/0) — one
borrows up to its limit, a surplus-only tenant runs on what is left, and when the second tenant submits, its
guaranteed work starts at once on GPUs taken back from the borrower (its lowest-priority gangs first); a tenant
whose GPU-hour budget is spent waits with the budget in its message, and `superpod usage` agrees with the pods' run
times. The queues are deleted at the end: with none in the cluster, the other tests' jobs are admitted as before."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime

from kubernetes import client

from tests.integration.operator_env import GROUP, VERSION, Jobs, sim_cluster, training_job
from tests.integration.wait import wait_for


def test_borrowing_limits_surplus_and_a_guarantee_taken_back(cluster, operator):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 12, nodes_per_unit=4)  # 96 GPUs of this test's own
    core, custom = client.CoreV1Api(cluster.api), client.CustomObjectsApi(cluster.api)
    run = uuid.uuid4().hex[:6]
    tenants = {name: f"q{run}-{name}" for name in ("a", "b", "c")}
    shapes = {"a": (32, 80), "b": (32, None), "c": (0, None)}
    for name, namespace in tenants.items():
        core.create_namespace({"metadata": {"name": namespace}})
        guaranteed, limit = shapes[name]
        custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue", "metadata": {"name": namespace},
            "spec": {"namespaces": [namespace], "resources": [
                {"flavor": "*", "guaranteed": guaranteed, **({"limit": limit} if limit else {})}]}})
    jobs = {name: Jobs(cluster.api, namespace) for name, namespace in tenants.items()}

    def queue(name: str) -> dict:
        return custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", tenants[name]).get("status") or {}

    try:
        for i in range(12):
            jobs["a"].create(training_job(f"a{i:02d}", sim, 1, gpus=8))
        wait_for(lambda: sum(jobs["a"].phase(f"a{i:02d}") == "Running" for i in range(12)) == 10, 60,
                 "a borrowing up to its limit of 80")
        jobs["a"].wait_message("a11", "queue " + tenants["a"] + " is at its limit of 80 GPUs (80 in use)")
        wait_for(lambda: queue("a").get("allocated") == 80 and queue("a").get("borrowed") == 48, 30,
                 "a's status: 80 allocated, 48 borrowed")
        for i in range(2):
            jobs["c"].create(training_job(f"c{i}", sim, 1, gpus=8, priority=10))
        for i in range(2):
            jobs["c"].wait_phase(f"c{i}", "Running", 60)  # surplus-only: runs on what a left
        for i in range(3):
            jobs["b"].create(training_job(f"b{i}", sim, 1, gpus=8))
        jobs["c"].create(training_job("c2", sim, 1, gpus=8, priority=10))
        for i in range(3):  # the cluster is full: b takes its guarantee back from what a borrows
            jobs["b"].wait_phase(f"b{i}", "Running", 90)
        preempted = [f"a{i:02d}" for i in range(12) if jobs["a"].status(f"a{i:02d}").get("preemptions")]
        assert len(preempted) == 3, preempted
        assert jobs["c"].phase("c0") == jobs["c"].phase("c1") == "Running", "a's priority-0 gangs went first"
        assert jobs["c"].phase("c2") == "Queued", "the cluster is full: no surplus for c"
        wait_for(lambda: (queue("b").get("allocated"), queue("b").get("pending"), queue("a").get("allocated"),
                          queue("a").get("borrowed")) == (24, 0, 56, 24), 30,
                 "b's status: 24 allocated, none pending; a's: 56 allocated, 24 borrowed")
        header = cluster.kubectl("get", "gq", tenants["b"]).stdout.splitlines()
        assert header[0].split() == ["NAME", "GUARANTEED", "ALLOCATED", "BORROWED", "PENDING", "SHARE", "BUDGET",
                                     "LEFT", "AGE"]
        assert header[1].split()[1:5] == ["32", "24", "0", "0"], header
    finally:
        for namespace in tenants.values():
            custom.delete_cluster_custom_object(GROUP, VERSION, "gpuqueues", namespace)
            core.delete_namespace(namespace)


def _ran(pod) -> float:
    """Seconds the pod ran, from its own start and its container's finish."""
    terminated = pod.status.container_statuses[0].state.terminated
    return (terminated.finished_at - (terminated.started_at or pod.status.start_time)).total_seconds()


def test_a_spent_budget_holds_the_tenant_and_usage_matches_the_pods(cluster, operator):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2)
    core, custom = client.CoreV1Api(cluster.api), client.CustomObjectsApi(cluster.api)
    namespace = f"q{uuid.uuid4().hex[:6]}-budget"
    core.create_namespace({"metadata": {"name": namespace}})
    custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue", "metadata": {"name": namespace},
        "spec": {"namespaces": [namespace], "resources": [{"flavor": "*", "guaranteed": 16}],
                 "budget": {"gpuHours": 0.02, "period": "720h"}}})  # 72 GPU-seconds
    jobs = Jobs(cluster.api, namespace)
    shapes = {"wide": (8, "9s"), "narrow": (4, "6s")}  # 8 x 9 + 4 x 6 = 96 GPU-seconds
    try:
        for name, (gpus, run_for) in shapes.items():
            jobs.create(training_job(name, sim, 1, gpus=gpus, annotations={"sim.superpod.dev/run-for": run_for}))
        for name in shapes:
            jobs.wait_phase(name, "Succeeded", 60)
        jobs.create(training_job("late", sim, 1, gpus=1))
        message = jobs.wait_message("late", "has spent its budget")
        assert message.startswith(f"queue {namespace} has spent its budget of 0.02 GPU-hours for this period; "
                                  "it renews at "), message
        assert jobs.phase("late") == "Queued"
        out = subprocess.run([sys.executable, "-m", "superpod.cli", "usage", "--kubeconfig", str(cluster.kubeconfig),
                              "--by", "job", "-o", "json"], capture_output=True, text=True, check=True).stdout
        rows = {row["job"]: row for row in json.loads(out)["rows"] if row["namespace"] == namespace}
        for name, (gpus, _) in shapes.items():
            [pod] = jobs.pods(name, live=False)
            actual = gpus * _ran(pod)
            print(f"{name}: superpod usage {rows[name]['gpuSeconds']} GPU-s, pods ran {actual} GPU-s")
            assert abs(rows[name]["gpuSeconds"] - actual) <= 1.0, (name, rows[name], actual)
        wait_for(lambda: (custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", namespace).get("status")
                          or {}).get("budgetRemaining", 1) < 0, 90, "the queue's status showing the budget overrun")
        status = custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", namespace)["status"]
        assert datetime.fromisoformat(status["budgetRenews"].replace("Z", "+00:00")).year >= 2026
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "gpuqueues", namespace)
        core.delete_namespace(namespace)
