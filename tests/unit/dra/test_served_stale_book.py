"""Found by review: a pod that names a claim arriving after the claim resets DraStore._extended (claim_edits) but
not DraStore.generation, so the controller keeps the DeviceBook built with the claim read as kube-scheduler's
(DeviceBook.extended): the claim's GPUs stay out of the served node's pool booking, and nvidia.com/gpu they hold is
offered again."""

from __future__ import annotations

from superpod.controller.state.dra import EXTENDED_CLAIM
from superpod.k8s.api import PODS, RESOURCECLAIMS
from tests.unit.dra.test_served_gpus import served_cluster
from tests.unit.memory_cluster import MemoryCluster, run, training_job

NODE = "dgx-su01-n01"


def annotated_claim_allocated_before_its_pod_is_seen(c: MemoryCluster) -> None:
    run(c.admin.create(RESOURCECLAIMS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "team-a", "annotations": {EXTENDED_CLAIM: "true"}},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                       "count": 4}}]}}}))
    run(c.admin.patch_status(RESOURCECLAIMS, "mine", {"status": {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": NODE,
                                                "device": f"gpu-{i}"} for i in range(4)]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "f-0", "uid": "uid-f-0"}]}}, "team-a"))


def foreign_pod_naming_it(c: MemoryCluster) -> None:
    """kube-scheduler's pod (another scheduler) that uses `mine` by name, bound: its watch event came late."""
    run(c.admin.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "f-0", "namespace": "team-a"},
                              "spec": {"schedulerName": "default-scheduler", "nodeName": NODE,
                                       "containers": [{"name": "main", "image": "x"}],
                                       "resourceClaims": [{"name": "gpus", "resourceClaimName": "mine"}]}}))


def test_a_claim_read_as_kube_schedulers_until_its_pod_came_is_booked_once_its_pod_is_seen():
    c = served_cluster()
    annotated_claim_allocated_before_its_pod_is_seen(c)
    c.settle(2)  # a book built while no pod names `mine`
    foreign_pod_naming_it(c)
    c.settle(2)
    assert not c.state.dra.extended(c.state.dra.claims["team-a/mine"]), "the store reads it as the pod's now"
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    status = c.decided("classic")
    assert status["phase"] == "Queued", (
        f"placed on 8 nvidia.com/gpu of a node whose claim `mine` holds 4 of its 8 GPUs: {status['phase']}")


def test_control_a_fresh_operator_books_it():
    c = served_cluster()
    annotated_claim_allocated_before_its_pod_is_seen(c)
    foreign_pod_naming_it(c)
    c.settle(2)
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    assert c.decided("classic")["phase"] == "Queued", c.decided("classic")
