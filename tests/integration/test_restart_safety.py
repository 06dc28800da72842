"""The operator may be killed at any instant: after a restart it converges to one whole gang per job, with no
duplicate pods and no GPU booked twice. Two operator replicas never both schedule."""

from __future__ import annotations

from collections import Counter

from kubernetes import client

from superpod.k8s import manifests
from tests.integration.operator_env import OperatorProcess, sim_cluster, training_job
from tests.integration.wait import wait_for


def gpus_per_node(pods) -> Counter:
    out: Counter = Counter()
    for p in pods:
        if p.status.phase not in ("Succeeded", "Failed") and not p.metadata.deletion_timestamp:
            out[p.spec.node_name] += int((p.spec.containers[0].resources.limits or {}).get("nvidia.com/gpu", 0))
    return out


def test_restart_after_half_a_gang_was_written_completes_that_gang(cluster, operator, jobs):
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 8, nodes_per_unit=8)
    operator.kill()
    try:
        job = jobs.create(training_job("half", sim, 8, gpus=8))
        # The state a crash between the 4th and 5th pod write leaves: placement recorded, 4 of 8 pods exist.
        placement = {o["metadata"]["name"]: [i] for i, o in enumerate(objs)}
        jobs.custom.patch_namespaced_custom_object_status(
            "superpod.dev", "v1alpha1", jobs.ns, "trainingjobs", "half",
            {"status": {"phase": "Starting", "attempt": 1, "placement": placement,
                        "attemptStartTime": job["metadata"]["creationTimestamp"]}})
        job = jobs.get("half")
        core = client.CoreV1Api(cluster.api)
        for i, o in enumerate(objs[:4]):
            core.create_namespaced_pod(jobs.ns, manifests.pod(job, 1, i, o["metadata"]["name"]))
    finally:
        operator.start()
    jobs.wait_phase("half", "Running", 60)
    pods = jobs.pods("half")
    assert sorted(p.metadata.name for p in pods) == sorted(f"half-a1-{i}" for i in range(8))
    assert {p.spec.node_name: int(p.metadata.labels["superpod.dev/replica-index"]) for p in pods} == {
        o["metadata"]["name"]: i for i, o in enumerate(objs)}
    assert jobs.status("half")["attempt"] == 1


def test_killed_while_writing_a_big_gang_converges_to_one_whole_gang(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 40, nodes_per_unit=40)
    jobs.create(training_job("big", sim, 32, gpus=8))
    wait_for(lambda: jobs.pods("big"), 60, "the first pod of the gang")
    operator.kill()
    written = len(jobs.pods("big"))
    operator.start()
    jobs.wait_phase("big", "Running", 90)
    pods = jobs.pods("big")
    assert len(pods) == 32 and len({p.metadata.name for p in pods}) == 32
    assert {p.metadata.labels["superpod.dev/attempt"] for p in pods} == {"1"}
    assert max(gpus_per_node(pods).values()) == 8
    # Every GPU is booked once: the 8 free nodes take exactly one more 8-node gang, and nothing beyond it.
    jobs.create(training_job("fits", sim, 8, gpus=8))
    jobs.create(training_job("overflow", sim, 1, gpus=8))
    jobs.wait_phase("fits", "Running", 60)
    wait_for(lambda: (jobs.status("overflow").get("message") or "").startswith("needs"), 30, "overflow waits")
    all_pods = jobs.pods("big") + jobs.pods("fits")
    assert max(gpus_per_node(all_pods).values()) == 8
    print(f"killed after {written} of 32 pods were written")


def test_two_operator_replicas_never_both_schedule(cluster, operator, jobs, tmp_path):
    second = OperatorProcess(cluster.kubeconfig, tmp_path / "second.log")
    second.start()
    try:
        sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, nodes_per_unit=4)
        for i in range(3):
            jobs.create(training_job(f"pair-{i}", sim, 1, gpus=8))
        for i in range(3):
            jobs.wait_phase(f"pair-{i}", "Running", 60)
        pods = [p for i in range(3) for p in jobs.pods(f"pair-{i}")]
        assert len(pods) == 3 and len({p.spec.node_name for p in pods}) == 3
        lease = client.CoordinationV1Api(cluster.api).read_namespaced_lease("superpod-scheduler", "superpod-system")
        assert lease.spec.holder_identity
    finally:
        second.stop()
