"""Preemption on the real control plane, with simulated nodes of its own: a priority-100 gang that needs a whole leaf
evicts exactly the cheapest set of priority-0 gangs (the leaf with one gang, not the leaf with two, nor the leaf with
a reserved gang), starts once they are gone, and its victim runs again later; a queue below its guarantee reclaims
what another queue borrows. Throughout, a sampler checks that no node holds more GPUs than it has and that no
Running job has fewer pods (not being deleted) than replicas."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

from kubernetes import client

from tests.integration.operator_env import GROUP, LEAF_LABEL, VERSION, Jobs, sim_cluster, training_job

RUN = "sim.superpod.dev/run-for"


class Sampler:
    """Samples pods and jobs of a namespace until stopped; keeps every violation seen."""

    def __init__(self, api: client.ApiClient, namespace: str, gpus_per_node: int = 8) -> None:
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.gpus_per_node = namespace, gpus_per_node
        self.samples, self.violations = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            # Jobs on both sides of the pods: Running at the first read, its pods were all made; Running in the same
            # attempt at the second, none of them was being deleted at the pods' read (a stop writes status first).
            before = self._running()
            pods = self.core.list_namespaced_pod(self.namespace).items
            jobs = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "trainingjobs")["items"]
            held: Counter = Counter()
            live: Counter = Counter()
            for pod in pods:
                labels = pod.metadata.labels or {}
                if not pod.metadata.deletion_timestamp:  # a pod that finished still counts for its gang
                    live[(labels.get("superpod.dev/job-name"), labels.get("superpod.dev/attempt"))] += 1
                if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
                    held[pod.spec.node_name] += sum(int((c.resources.requests or {}).get("nvidia.com/gpu", 0))
                                                    for c in pod.spec.containers)
            for node, gpus in held.items():
                if gpus > self.gpus_per_node:
                    self.violations.append(f"node {node} holds {gpus} GPUs")
            for job in jobs:
                status = job.get("status") or {}
                if status.get("phase") == "Running" and before.get(job["metadata"]["name"]) == status.get("attempt"):
                    have = live[(job["metadata"]["name"], str(status.get("attempt")))]
                    if have < job["spec"]["replicas"]:
                        self.violations.append(f"{job['metadata']['name']} Running with {have} pods")
            self.samples += 1

    def _running(self) -> dict[str, int]:
        """Job name -> attempt, of the jobs Running now."""
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "trainingjobs")["items"]
        return {job["metadata"]["name"]: (job.get("status") or {}).get("attempt") for job in items
                if (job.get("status") or {}).get("phase") == "Running"}


def on_leaf(body: dict, leaf: str) -> dict:
    """`body` with its pods kept to leaf `leaf`: the gangs set up for a test are where it says, whatever the operator
    has seen of the nodes when each is created (a node not seen Ready yet sends a gang to the next leaf)."""
    body["spec"]["template"]["spec"]["nodeSelector"][LEAF_LABEL] = leaf
    return body


def test_a_leaf_gang_evicts_the_cheapest_set_and_the_victim_runs_again(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 12, nodes_per_unit=4)  # 3 leaves of 4 nodes (32 GPUs each)
    jobs = Jobs(cluster.api, namespace)
    leaf = {"topology": {"required": "leaf"}}
    with Sampler(cluster.api, namespace) as sampler:
        jobs.create(on_leaf(training_job("kept", sim, 1, gpus=8, serviceClass="reserved"), "su-1"))
        jobs.wait_phase("kept", "Running")
        jobs.create(on_leaf(training_job("three", sim, 3, gpus=8, **leaf), "su-1"))  # the leaf of "kept"
        jobs.wait_phase("three", "Running")
        for name in ("pair-1", "pair-2"):  # the second leaf: two gangs
            jobs.create(on_leaf(training_job(name, sim, 2, gpus=8, **leaf), "su-2"))
            jobs.wait_phase(name, "Running")
        jobs.create(on_leaf(training_job("whole", sim, 4, gpus=8, **leaf), "su-3"))  # the third leaf: one gang
        jobs.wait_phase("whole", "Running")
        leaves = {name: jobs.status(name)["domains"]["leaf"] for name in ("kept", "three", "pair-1", "pair-2", "whole")}
        assert leaves == {"kept": ["su-1"], "three": ["su-1"], "pair-1": ["su-2"], "pair-2": ["su-2"],
                          "whole": ["su-3"]}, leaves

        jobs.create(training_job("urgent", sim, 4, gpus=8, priority=100, **leaf, annotations={RUN: "8s"}))
        jobs.wait_event("urgent", "Preempting", "whole")
        nominated = jobs.status("urgent").get("nomination") or {}
        assert nominated.get("victims") in (None, [f"{namespace}/whole"]), nominated
        jobs.wait_phase("urgent", "Running", 90)
        urgent = jobs.status("urgent")
        assert urgent["domains"]["leaf"] == leaves["whole"], "the leaf whose eviction costs one gang"
        victim = jobs.status("whole")
        assert victim["preemptions"] == 1 and victim["restarts"] == 0
        assert any(c["type"] == "Preempted" and f"{namespace}/urgent" in c["message"]
                   for c in victim["conditions"])
        for name in ("kept", "three", "pair-1", "pair-2"):
            status = jobs.status(name)
            assert status["phase"] == "Running" and not status.get("preemptions"), name
        jobs.wait_phase("urgent", "Succeeded", 60)
        jobs.wait_phase("whole", "Running", 90)
        assert jobs.status("whole")["attempt"] == 2
    print(f"nomination {nominated}; {sampler.samples} samples, {len(sampler.violations)} violations")
    assert sampler.samples > 20 and sampler.violations == [], sampler.violations[:5]


def test_a_queue_below_its_guarantee_reclaims_borrowed_gpus(cluster, operator):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, nodes_per_unit=4)  # 32 GPUs
    core, custom = client.CoreV1Api(cluster.api), client.CustomObjectsApi(cluster.api)
    run = uuid.uuid4().hex[:6]
    tenants = {"lender": f"r{run}-lender", "borrower": f"r{run}-borrower"}
    guarantees = {"lender": 24, "borrower": 8}
    for name, namespace in tenants.items():
        core.create_namespace({"metadata": {"name": namespace}})
        custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue", "metadata": {"name": namespace},
            "spec": {"namespaces": [namespace], "resources": [{"flavor": "*", "guaranteed": guarantees[name]}]}})
    borrower, lender = Jobs(cluster.api, tenants["borrower"]), Jobs(cluster.api, tenants["lender"])
    try:
        with Sampler(cluster.api, tenants["borrower"]) as sampler:
            for i in range(4):
                borrower.create(training_job(f"b{i}", sim, 1, gpus=8))
            for i in range(4):
                borrower.wait_phase(f"b{i}", "Running")  # 24 of the 32 GPUs borrowed
            for i in range(2):
                lender.create(training_job(f"l{i}", sim, 1, gpus=8, annotations={RUN: "6s"}))
            for i in range(2):
                lender.wait_phase(f"l{i}", "Running", 90)
            preempted = [i for i in range(4) if borrower.status(f"b{i}").get("preemptions")]
            assert len(preempted) == 2, "exactly what the lender's guarantee needs"
            for i in range(2):
                lender.wait_phase(f"l{i}", "Succeeded", 60)
            for i in preempted:
                borrower.wait_phase(f"b{i}", "Running", 90)  # the borrowed GPUs are free again
        assert sampler.violations == [], sampler.violations[:5]
    finally:
        for namespace in tenants.values():
            custom.delete_cluster_custom_object(GROUP, VERSION, "gpuqueues", namespace)
            core.delete_namespace(namespace)
