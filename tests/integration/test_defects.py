"""Defects found in a review of the first operator, each reproduced as a user's cluster would present it, on the
real control plane. Black-box: they use only the API and `superpod run`, so each runs unchanged against the operator
of any commit (every one of them failed on 7f3cb97)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from kubernetes import client

from superpod.localcluster.cluster import LocalCluster
from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.wait import wait_for

GROUP, VERSION = "superpod.dev", "v1alpha1"


def container(resources: dict) -> dict:
    return {"name": "main", "image": "trainer", "resources": resources}


def with_containers(body: dict, *containers: dict) -> dict:
    body["spec"]["template"]["spec"]["containers"] = list(containers)
    return body


def test_a_node_with_a_damaged_annotation_stops_neither_the_operator_nor_the_others(cluster, operator, jobs):
    """One node whose superpod.dev/mig-expect annotation is not JSON made the operator exit at start-up."""
    core = client.CoreV1Api(cluster.api)
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    bad = objs[0]["metadata"]["name"]  # as a reconfiguration the MIG manager reported done, with damaged bookkeeping
    core.patch_node(bad, {"metadata": {"annotations": {"superpod.dev/mig-expect": "{not json"},
                                       "labels": {"nvidia.com/mig.config.state": "success"}}})
    try:
        operator.kill()
        operator.start()
        jobs.create(training_job("beside", sim, 1, gpus=8))
        st = jobs.wait_phase("beside", "Running", 60)
        assert bad not in st["placement"], "the node that cannot be read is left out"
        assert operator.proc.poll() is None
    finally:
        core.delete_node(bad)


def test_a_damaged_status_does_not_stop_scheduling(cluster, operator, jobs):
    """A TrainingJob whose status.notBefore was "soon" made every scheduling cycle fail."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    operator.kill()  # the operator meets the damaged job at start, before it could write the status itself
    try:
        jobs.create(training_job("damaged", sim, 1, gpus=8, annotations={"sim.superpod.dev/stay-pending": ""}))
        try:
            jobs.custom.patch_namespaced_custom_object_status(GROUP, VERSION, jobs.ns, "trainingjobs", "damaged",
                                                              {"status": {"phase": "Queued", "notBefore": "soon"}})
        except client.ApiException as e:
            assert e.status == 422 and "date-time" in e.body  # the schema refuses it now; the operator copes anyway
    finally:
        operator.start()
    jobs.create(training_job("healthy", sim, 1, gpus=8))
    jobs.wait_phase("healthy", "Running", 60)
    jobs.custom.delete_namespaced_custom_object(GROUP, VERSION, jobs.ns, "trainingjobs", "damaged")


def test_a_template_asking_more_cpu_than_any_node_has_is_not_bound(cluster, operator, jobs):
    """A pod template asking 20 cpu was bound to a 16-cpu node (booked 40 of 16): the core booked only
    spec.resources."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)  # 224 cpu per node
    jobs.create(with_containers(training_job("hungry", sim, 1, gpus=8), container({"requests": {"cpu": "300"}})))
    jobs.wait_message("hungry", "cpu")
    time.sleep(3)
    assert jobs.pods("hungry") == [] and jobs.phase("hungry") == "Queued"


def test_pods_requesting_a_device_no_node_has_are_not_bound(cluster, operator, jobs):
    """Pods requesting rdma/ib were bound to nodes that have none."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    rdma = {"rdma/ib": "1"}
    jobs.create(with_containers(training_job("rdma", sim, 1, gpus=8), container({"requests": rdma, "limits": rdma})))
    jobs.wait_message("rdma", "rdma/ib")
    assert jobs.pods("rdma") == []


def test_an_extended_resource_without_a_limit_is_refused_not_retried_forever(cluster, operator, jobs):
    """An extended resource requested without a limit made every pod write fail with 422, and the job retried
    forever saying only "2 of 2 pod writes failed (Unprocessable Entity)"."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    body = with_containers(training_job("nolimit", sim, 2, gpus=8), container({"requests": {"rdma/ib": "1"}}))
    try:
        jobs.create(body)
    except client.ApiException as e:
        assert e.status == 422 and "requested without a limit" in e.body
        return
    st = jobs.wait_phase("nolimit", "Invalid", 30)
    assert "Limit must be set" in st["message"]


def test_a_deleted_service_is_recreated(cluster, operator, jobs):
    """A Service missing after a crash was never recreated: torchrun's rendezvous name did not resolve."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    jobs.create(training_job("svc", sim, 2, gpus=8))
    jobs.wait_phase("svc", "Running", 60)
    core = client.CoreV1Api(cluster.api)
    core.delete_namespaced_service("svc", jobs.ns)
    wait_for(lambda: core.list_namespaced_service(jobs.ns, field_selector="metadata.name=svc").items, 30,
             "the headless Service back")


def test_replicas_are_deleted_gracefully_and_the_next_attempt_keeps_off_their_nodes(cluster, operator, jobs):
    """Pods were force-deleted (grace 0): no SIGTERM, no checkpoint, and the next attempt could be bound while the
    old containers still held the GPUs."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, nodes_per_unit=4)
    body = training_job("gentle", sim, 2, gpus=8, annotations={"sim.superpod.dev/terminate-after": "15s"})
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 45
    jobs.create(body)
    jobs.wait_phase("gentle", "Running", 60)
    first = {p.metadata.name: p.spec.node_name for p in jobs.pods("gentle")}
    victim = sorted(first)[0]
    client.CoreV1Api(cluster.api).patch_namespaced_pod(
        victim, jobs.ns, {"metadata": {"annotations": {"sim.superpod.dev/fail-after": "0s"}}})
    survivor = sorted(first)[1]
    dying = wait_for(lambda: next((p for p in jobs.pods("gentle", live=False) if p.metadata.name == survivor
                                   and p.metadata.deletion_timestamp), None), 30, "the survivor being deleted")
    assert dying.metadata.deletion_grace_period_seconds == 45, "deleted with the template's grace period"
    wait_for(lambda: jobs.status("gentle").get("attempt") == 2 and jobs.phase("gentle") == "Running", 60,
             "attempt 2 running")
    second = {p.spec.node_name for p in jobs.pods("gentle") if p.metadata.labels["superpod.dev/attempt"] == "2"}
    assert first[survivor] not in second, "not on the node where attempt 1 still terminated"


def test_a_not_ready_blip_does_not_restart_the_gang(cluster, operator, jobs):
    """Any NotReady blip restarted a gang at once (a 1,000-node gang for a 5-second network hiccup)."""
    core = client.CoreV1Api(cluster.api)
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 3, nodes_per_unit=3)
    jobs.create(training_job("steady", sim, 2, gpus=8))
    jobs.wait_phase("steady", "Running", 60)
    node = jobs.pods("steady")[0].spec.node_name
    core.patch_node(node, {"metadata": {"labels": {"type": "unmanaged"}}})  # KWOK lets go of its status
    try:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                                 "reason": "NodeStatusUnknown",
                                                                 "lastHeartbeatTime": now,
                                                                 "lastTransitionTime": now}]}})
        time.sleep(8)
        assert jobs.status("steady")["attempt"] == 1 and jobs.phase("steady") == "Running"
    finally:
        core.patch_node(node, {"metadata": {"labels": {"type": "kwok"}}})
    wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in core.read_node(node).status.conditions),
             30, "the node Ready again")
    time.sleep(3)
    assert jobs.status("steady")["attempt"] == 1


def test_an_image_error_fails_the_job_instead_of_looping(cluster, operator, jobs):
    """An image typo looped through startup timeouts forever."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 1, nodes_per_unit=1)
    jobs.create(training_job("typo", sim, 1, gpus=8, annotations={"sim.superpod.dev/image-error": ""},
                             startupTimeoutSeconds=15))
    st = jobs.wait_phase("typo", "Failed", 150)
    assert "ErrImagePull" in st["message"], st["message"]


def test_the_operator_keeps_scheduling_after_the_api_server_restarts(cluster, operator, jobs):
    """One urllib3 MaxRetryError ended the scheduling task for good while the pod stayed "healthy" (lease.step sat
    outside the loop's try)."""
    local = cluster.local or _local_from_kubeconfig(cluster.kubeconfig)
    if local is None:
        pytest.skip("needs the local control plane, to restart its API server")
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    pid = int((local.root / "run" / "kube-apiserver.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    time.sleep(8)  # the operator meets refused connections for a while
    local.up()  # restarts the stopped component (and, with it, the control plane)
    jobs.create(training_job("after", sim, 1, gpus=8))
    jobs.wait_phase("after", "Running", 90)
    assert operator.proc.poll() is None


def _local_from_kubeconfig(kubeconfig: Path) -> LocalCluster | None:
    root = Path(kubeconfig).parent
    return LocalCluster(root) if (root / "run" / "kube-apiserver.pid").exists() else None
