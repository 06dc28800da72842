"""What users and damaged objects get wrong, as a user's cluster would present it, on the real control plane: a
template asking for more CPU than any node has or for a device no node has, an extended resource without a limit, an
image that cannot be pulled, a node annotation or a job status that cannot be read. Each is refused, reported in the
job's status or stepped around; none stops the operator."""

from __future__ import annotations

import time

from kubernetes import client

from tests.integration.operator_env import GROUP, VERSION, sim_cluster, training_job


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


def test_an_image_error_fails_the_job_instead_of_looping(cluster, operator, jobs):
    """An image typo looped through startup timeouts forever."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 1, nodes_per_unit=1)
    jobs.create(training_job("typo", sim, 1, gpus=8, annotations={"sim.superpod.dev/image-error": ""},
                             startupTimeoutSeconds=15))
    st = jobs.wait_phase("typo", "Failed", 150)
    assert "ErrImagePull" in st["message"], st["message"]
