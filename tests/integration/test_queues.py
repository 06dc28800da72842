"""GPUQueues on the real control plane: three tenants on their own 96 simulated GPUs — one borrows up to its limit,
a surplus-only tenant runs on what is left, and when capacity frees the tenant with waiting guaranteed work gets it
first, ahead of a higher-priority borrower. The queues are deleted at the end: with none in the cluster, the other
tests' jobs are admitted as before."""

from __future__ import annotations

import uuid

from kubernetes import client

from tests.integration.operator_env import GROUP, VERSION, Jobs, sim_cluster, training_job
from tests.integration.wait import wait_for


def test_borrowing_limits_and_guaranteed_work_first_as_capacity_frees(cluster, operator):
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
        jobs["b"].wait_message("b0", "GPU")  # the cluster is full: b waits for room
        jobs["c"].wait_phase("c2", "Queued", 30)
        assert jobs["b"].phase("b0") == "Queued"
        custom.delete_namespaced_custom_object(GROUP, VERSION, tenants["a"], "trainingjobs", "a00")
        jobs["b"].wait_phase("b0", "Running", 60)  # guaranteed work first, ahead of the priority-10 borrower
        assert jobs["c"].phase("c2") == "Queued"
        wait_for(lambda: queue("b").get("allocated") == 8 and queue("b").get("pending") == 2, 30,
                 "b's status: 8 allocated, 2 pending")
        header = cluster.kubectl("get", "gq", tenants["b"]).stdout.splitlines()
        assert header[0].split() == ["NAME", "GUARANTEED", "ALLOCATED", "BORROWED", "PENDING", "SHARE", "AGE"]
        assert header[1].split()[1:5] == ["32", "8", "0", "2"], header
    finally:
        for namespace in tenants.values():
            custom.delete_cluster_custom_object(GROUP, VERSION, "gpuqueues", namespace)
            core.delete_namespace(namespace)
