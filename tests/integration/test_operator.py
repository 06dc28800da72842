"""The operator end to end on the real API server with simulated SuperPOD nodes: gang placement, topology,
waiting with a reason, lifecycle, restarts, bad input."""

from __future__ import annotations

import time
import urllib.request
from collections import Counter, defaultdict

from kubernetes import client

from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.wait import wait_for


def node_labels(cluster, name: str) -> dict:
    return client.CoreV1Api(cluster.api).read_node(name).metadata.labels


def test_two_jobs_compete_for_one_leaf_one_waits_with_a_reason_then_both_complete(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, nodes_per_unit=4)
    # (first runs long enough for an older blocked job an earlier test left in a namespace still being deleted to go:
    # it holds the one reservation of the group until then)
    jobs.create(training_job("first", sim, 4, gpus=8, annotations={"sim.superpod.dev/run-for": "40s"},
                             topology={"required": "leaf"}))
    jobs.wait_phase("first", "Running")
    jobs.create(training_job("second", sim, 4, gpus=8, annotations={"sim.superpod.dev/run-for": "6s"},
                             topology={"required": "leaf"}))
    wait_for(lambda: jobs.status("second").get("message"), 30, "a reason on the waiting job")
    waiting = jobs.status("second")
    assert waiting["phase"] == "Queued"
    assert "needs 4 nodes with 8 free NVIDIA-H100-80GB-HBM3 GPUs inside one leaf" in waiting["message"]
    # the leaf its first job holds: it is big enough to reserve at once
    held = wait_for(lambda: jobs.status("second").get("reservation"), 40, "the reservation of the waiting job")
    assert waiting["reason"] == "NoRoom" and "leaf su-" in held["domain"] and held["nodeCount"] == 4, waiting
    jobs.wait_event("second", "NoRoom", "inside one leaf")
    assert jobs.pods("second") == [], "a queued job holds no pods"

    first = jobs.wait_phase("first", "Succeeded", 90)
    assert first["gpuSeconds"] > 0 and first["completionTime"]
    assert {p.status.phase for p in jobs.pods("first")} == {"Succeeded"}
    jobs.wait_phase("second", "Running", 60)
    jobs.wait_phase("second", "Succeeded", 60)
    for reason in ("Placed", "Completed"):  # starting and running are in its conditions, not Events
        jobs.wait_event("second", reason)


def test_required_leaf_keeps_the_gang_in_one_scalable_unit_with_torchrun_env(cluster, operator, jobs):
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 16, nodes_per_unit=4)
    # Occupy 2 nodes of each of three leaves: only su-3 has 4 whole nodes left, 10 nodes are free in all.
    busy = [o["metadata"]["name"] for o in objs if o["metadata"]["labels"]["superpod.dev/leaf"] != "su-3"][::2]
    core = client.CoreV1Api(cluster.api)
    for i, node in enumerate(busy):
        core.create_namespaced_pod(jobs.ns, {"metadata": {"name": f"other-{i}"}, "spec": {
            "nodeName": node, "containers": [{"name": "c", "image": "x", "resources": {
                "limits": {"nvidia.com/gpu": "8"}}}]}})
    jobs.create(training_job("unit", sim, 4, gpus=8, topology={"required": "leaf"}))
    st = jobs.wait_phase("unit", "Running", 60)
    pods = jobs.pods("unit")
    leaves = {node_labels(cluster, p.spec.node_name)["superpod.dev/leaf"] for p in pods}
    assert leaves == {"su-3"} and st["domain"] == "leaf su-3"
    assert len({p.spec.node_name for p in pods}) == 4
    env = {p.metadata.labels["superpod.dev/replica-index"]: {e.name: e.value for e in p.spec.containers[0].env}
           for p in pods}
    assert env["2"]["RANK"] == "2" and env["2"]["WORLD_SIZE"] == "4"
    assert env["0"]["MASTER_ADDR"] == f"unit-a1-0.unit.{jobs.ns}.svc"  # replica 0 of this attempt
    assert all(p.spec.scheduler_name == "superpod-scheduler" for p in pods)
    svc = core.read_namespaced_service("unit", jobs.ns)
    assert svc.spec.cluster_ip == "None"


def test_nvl72_slices_stay_inside_one_nvlink_clique(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "gb200-nvl72", 12, trays_per_rack=6)  # 2 racks of 6 trays x 4 GPUs
    jobs.create(training_job("tp", sim, 8, gpus=4,
                             topology={"required": "spine", "sliceSize": 4, "sliceRequired": "nvlink"}))
    jobs.wait_phase("tp", "Running", 60)
    cliques = defaultdict(set)
    for p in jobs.pods("tp"):
        rank = int(p.metadata.labels["superpod.dev/replica-index"])
        cliques[rank // 4].add(node_labels(cluster, p.spec.node_name)["nvidia.com/gpu.clique"])
    assert sorted(len(c) for c in cliques.values()) == [1, 1], cliques


def test_pod_failure_restarts_the_gang_until_max_restarts_then_fails(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    jobs.create(training_job("flaky", sim, 2, gpus=8, maxRestarts=1))
    jobs.wait_phase("flaky", "Running")
    core = client.CoreV1Api(cluster.api)

    def fail_one(attempt: int) -> None:
        pod = next(p for p in jobs.pods("flaky") if p.metadata.labels["superpod.dev/attempt"] == str(attempt))
        core.patch_namespaced_pod(pod.metadata.name, jobs.ns,
                                  {"metadata": {"annotations": {"sim.superpod.dev/fail-after": "0s"}}})

    fail_one(1)
    wait_for(lambda: jobs.status("flaky").get("attempt") == 2 and jobs.phase("flaky") == "Running", 90,
             "gang restarted as attempt 2")
    st = jobs.status("flaky")
    assert st["restarts"] == 1
    wait_for(lambda: {p.metadata.labels["superpod.dev/attempt"] for p in jobs.pods("flaky")} == {"2"}, 30,
             "attempt 1's pods gone once attempt 2 started")
    jobs.wait_event("flaky", "PodFailed")
    fail_one(2)
    st = jobs.wait_phase("flaky", "Failed", 60)
    assert "maxRestarts (1) exhausted" in st["message"]
    wait_for(lambda: {p.status.phase for p in jobs.pods("flaky")} == {"Failed"}, 30,
             "a failed job's running pods removed, the failed one kept with its reason")
    st = jobs.status("flaky")
    assert [(f["attempt"], f["reason"], f["exitCode"]) for f in st["failures"]] == [(1, "PodFailed", 1),
                                                                                    (2, "PodFailed", 1)]


def test_node_deletion_restarts_the_gang_elsewhere(cluster, operator, jobs):
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 3, nodes_per_unit=3)
    jobs.create(training_job("lost", sim, 2, gpus=8))
    jobs.wait_phase("lost", "Running")
    victim = jobs.pods("lost")[0].spec.node_name
    client.CoreV1Api(cluster.api).delete_node(victim)
    wait_for(lambda: jobs.status("lost").get("attempt") == 2 and jobs.phase("lost") == "Running", 90,
             "gang restarted on the remaining nodes")
    assert victim not in {p.spec.node_name for p in jobs.pods("lost")}
    jobs.wait_event("lost", "NodeLost")


def test_unknown_level_is_invalid_until_the_spec_is_fixed(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 1, nodes_per_unit=1)
    jobs.create(training_job("typo", sim, 1, gpus=8, topology={"required": "rack"}))
    st = jobs.wait_phase("typo", "Invalid", 30)
    assert "'rack'" in st["message"] and "leaf" in st["message"]
    jobs.wait_event("typo", "Invalid")
    jobs.patch("typo", {"spec": {"topology": {"required": "leaf"}}})
    jobs.wait_phase("typo", "Running", 30)


def test_product_no_node_has_is_invalid(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 1, nodes_per_unit=1)
    body = training_job("b300b", sim, 1, gpus=8)
    body["spec"]["resources"]["gpuProduct"] = "NVIDIA-B300"
    jobs.create(body)
    st = jobs.wait_phase("b300b", "Invalid", 30)
    assert "no node has GPU product 'NVIDIA-B300'" in st["message"]


def test_startup_timeout_tears_down_and_requeues_with_backoff(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
    jobs.create(training_job("stuck", sim, 2, gpus=8, annotations={"sim.superpod.dev/stay-pending": ""},
                             startupTimeoutSeconds=3))
    wait_for(lambda: jobs.status("stuck").get("startupFailures") == 1, 60, "startup timeout")
    st = jobs.status("stuck")
    assert st["phase"] == "Queued" and st["reason"] == "StartupTimeout" and st["restarts"] == 0
    assert "only 0 of 2 replicas were running after 3s" in st["message"] and st["notBefore"]
    jobs.wait_event("stuck", "StartupTimeout")
    wait_for(lambda: jobs.status("stuck").get("attempt") == 2, 60, "a second attempt after the backoff")


def test_deleting_a_job_removes_its_pods_and_service(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 1, nodes_per_unit=1)
    jobs.create(training_job("bye", sim, 2, gpus=4))  # two replicas: a single one has no Service
    jobs.wait_phase("bye", "Running")
    jobs.custom.delete_namespaced_custom_object("superpod.dev", "v1alpha1", jobs.ns, "trainingjobs", "bye")
    core = client.CoreV1Api(cluster.api)
    wait_for(lambda: not jobs.pods("bye", live=False), 60, "pods garbage-collected")
    wait_for(lambda: not core.list_namespaced_service(jobs.ns, field_selector="metadata.name=bye").items, 60,
             "service garbage-collected")


def test_metrics_report_jobs_gpus_and_latency(cluster, operator, jobs):
    """Defect: the metrics were only checked to be > 0. Here each is checked against what the API says."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 1, nodes_per_unit=1)
    jobs.create(training_job("measured", sim, 1, gpus=8, annotations={"sim.superpod.dev/run-for": "3s"}))
    st = jobs.wait_phase("measured", "Succeeded", 60)

    def scrape() -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5).read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line and not line.startswith("#")}

    def phases_match():
        everywhere = jobs.custom.list_cluster_custom_object("superpod.dev", "v1alpha1", "trainingjobs")["items"]
        counts = Counter((j.get("status") or {}).get("phase") or "Queued" for j in everywhere)
        m = scrape()
        return all(m[f'superpod_jobs{{phase="{p}"}}'] == counts.get(p, 0) for p in ("Running", "Succeeded")) and m
    m = wait_for(phases_match, 30, "superpod_jobs equal to the phases the API shows")
    # 3s of 8 GPUs by the pod's start and finish times (whole seconds), and the counter no less than the status
    assert 8 * 2 <= st["finishedGpuSeconds"] <= 8 * 4 and st["gpuSeconds"] == st["finishedGpuSeconds"]
    counted = m[f'superpod_gpu_seconds_total{{class="spot",flavor="*",namespace="{jobs.ns}",queue=""}}']
    assert st["finishedGpuSeconds"] - 8 <= counted <= st["finishedGpuSeconds"] + 8 * 2, (counted, st)
    assert m["superpod_placement_seconds_count"] >= 1 and m["superpod_queue_wait_seconds_count"] >= 1
    node = client.CoreV1Api(cluster.api).list_node(label_selector=f"sim.superpod.dev/cluster={sim}").items[0]
    assert m['superpod_gpus_free{product="NVIDIA-H100-80GB-HBM3"}'] >= int(node.status.allocatable["nvidia.com/gpu"])
    assert m['superpod_gang_restarts_total{cause="failure"}'] >= 0 and "superpod_mig_reconfigurations_total" in m
    assert m['superpod_cycle_errors_total{stage="cycle"}'] == 0 and m["superpod_leader"] == 1
    assert m['superpod_writes_total{action="CreatePods",outcome="ok"}'] >= 1


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
