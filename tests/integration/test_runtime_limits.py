"""Runtime limits on the real control plane: a TrainingJob with spec.maxRuntimeSeconds runs, then the operator stops
it at its limit (within a cycle), Failed with reason MaxRuntimeExceeded and a Warning, its pods gone, not retried,
and the attempt's GPUUsage record written as for any ended attempt."""

from __future__ import annotations

import time

from kubernetes import client

from superpod.api.times import timestamp
from tests.integration.operator_env import GROUP, VERSION, sim_cluster, training_job
from tests.integration.wait import wait_for

LIMIT = 6  # seconds


def test_a_job_is_stopped_at_its_limit_its_pods_gone_and_its_attempt_billed(cluster, operator, jobs):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2)
    jobs.create(training_job("capped", sim, 2, gpus=8, maxRuntimeSeconds=LIMIT))
    running = jobs.wait_phase("capped", "Running", 60)
    assert running["admitted"]["maxRuntimeSeconds"] == LIMIT
    status = jobs.wait_phase("capped", "Failed", 60)
    said = f"stopped after {LIMIT} s: spec.maxRuntimeSeconds {LIMIT} reached"
    assert (status["reason"], status["message"]) == ("MaxRuntimeExceeded", said), status
    ran = timestamp(status["completionTime"]) - timestamp(running["attemptStartTime"])
    assert LIMIT <= ran <= LIMIT + 3, f"stopped {ran} s after its placement: not within a cycle of its limit"
    assert jobs.wait_event("capped", "MaxRuntimeExceeded", said)
    events = client.CoreV1Api(cluster.api).list_namespaced_event(
        jobs.ns, field_selector="involvedObject.name=capped,reason=MaxRuntimeExceeded").items
    assert {e.type for e in events} == {"Warning"}
    wait_for(lambda: not jobs.pods("capped", live=False), 60, "its pods deleted")
    uid = jobs.get("capped")["metadata"]["uid"]
    record = client.CustomObjectsApi(cluster.api).get_cluster_custom_object(GROUP, VERSION, "gpuusages", f"{uid}-a1")
    spec = record["spec"]
    assert (spec["job"], spec["namespace"], spec["attempt"], spec["gpus"]) == ("capped", jobs.ns, 1, 16)
    assert spec["gpuSeconds"] == status["finishedGpuSeconds"] > 0
    assert spec["gpuSeconds"] <= 16 * (ran + 1), "billed no more than the attempt ran"
    time.sleep(3)
    after = jobs.status("capped")
    assert (after["phase"], after["attempt"]) == ("Failed", 1), "not retried"
