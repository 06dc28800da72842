"""Runtime limits (core/runtime_limit.py) through the controller on the in-memory API: a TrainingJob placed
maxRuntimeSeconds ago is stopped within a cycle of its deadline (not before), Failed with reason MaxRuntimeExceeded, a
Warning, its attempt's record, never retried; a GPUQueue's default and cap; a pod gang's annotation, a bad one said
and never a crash."""

from __future__ import annotations

import pytest

from superpod.api.convert import queue_from_k8s
from superpod.api.manifests import MAX_RUNTIME
from superpod.api.resources import ConvertError
from superpod.api.times import timestamp
from superpod.core.estimates import LIMIT_GRACE
from superpod.core.gang_key import GangKey
from superpod.core.queues import Queue
from superpod.core.runtime_limit import RuntimeLimit, effective_limit
from superpod.k8s.api import EVENTS, GPUQUEUES, GPUUSAGES, PODS, TRAININGJOBS
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import create, pod, scheduled, stored
from tests.unit.queues.test_controller_queues import gpu_queue

STOPPED = "stopped after 30 s: spec.maxRuntimeSeconds 30 reached"


def job_in(name: str, namespace: str = "team-a", **spec) -> dict:
    body = training_job(name, 1, 8, **spec)
    body["metadata"]["namespace"] = namespace
    return body


def started(c: MemoryCluster, name: str, namespace: str = "team-a") -> float:
    return timestamp(c.job(name, namespace)["status"]["attemptStartTime"])


def run_until(c: MemoryCluster, moment: float) -> None:
    """Cycles a second apart, up to `moment` (the last cycle at it)."""
    while c.now < moment:
        c.tick(1)
        c.cycle()


def test_a_job_is_stopped_at_its_limit_not_before_failed_with_the_reason_the_event_and_its_record():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("capped", 1, 8, maxRuntimeSeconds=30))
    c.settle(3)
    status = c.status("capped")
    assert status["phase"] == "Running" and status["admitted"]["maxRuntimeSeconds"] == 30
    deadline = started(c, "capped") + 30
    run_until(c, deadline - 1)
    assert c.status("capped")["phase"] == "Running", "not before its limit"
    assert c.controller.steady, "a steady gang (not judged while nothing changes): the deadline must wake it"
    run_until(c, deadline)
    status = c.status("capped")
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "MaxRuntimeExceeded", STOPPED)
    assert status["failures"][-1]["reason"] == "MaxRuntimeExceeded"
    assert ("MaxRuntimeExceeded", STOPPED) in c.events("capped")
    assert any(e["type"] == "Warning" and e["reason"] == "MaxRuntimeExceeded"
               for e in c.store.objects[EVENTS].values())
    c.settle(5)
    assert c.pods("capped") == [], "its pods were deleted"
    assert c.status("capped")["attempt"] == 1 and c.status("capped")["phase"] == "Failed", "not retried"
    [record] = [r for r in c.store.objects.get(GPUUSAGES, {}).values() if not r["spec"].get("pod")]
    assert record["spec"]["attempt"] == 1
    assert record["spec"]["gpuSeconds"] == c.status("capped")["finishedGpuSeconds"] > 8 * 25


def test_a_limits_step_that_fails_keeps_the_deadline_and_tries_again():
    """A bug met while computing a job's limit must not cost the job its deadline (it would then run on unstopped
    until something of it changed)."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("capped", 1, 8, maxRuntimeSeconds=30))
    c.settle(3)
    deadline = started(c, "capped") + 30
    book, failed = c.controller.queues, []

    def broken(view):
        failed.append(view.key)
        raise RuntimeError("a bug in the limits step")

    book.job_limit = broken
    run(c.admin.patch(TRAININGJOBS, "capped", {"metadata": {"labels": {"seen": "again"}}}, "team-a"))  # judged anew
    c.tick(1)
    c.cycle()
    assert failed == [GangKey("team-a", "capped")], "the limits step was reached, and failed"
    del book.job_limit
    run_until(c, deadline)
    assert c.status("capped")["phase"] == "Failed" and c.status("capped")["reason"] == "MaxRuntimeExceeded"


def test_a_placed_job_whose_spec_turns_unreadable_keeps_its_queues_default_limit():
    """A tenant's edit that makes the spec unreadable must not free its running job from the queue's limit."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 32, defaultMaxRuntimeSeconds=20, maxRuntimeSeconds=40)))
    c.submit(job_in("plain", "team-a"))
    c.settle(2)
    deadline = started(c, "plain") + 20
    run(c.admin.patch(TRAININGJOBS, "plain", {"spec": {"resources": {"gpus": "all of them"}}}, "team-a"))
    c.tick(1)
    c.cycle()
    view = c.controller.reader.by_key[GangKey("team-a", "plain")]
    assert isinstance(view.request, ConvertError) and view.phase == "Running", "placed, with an unreadable spec"
    run_until(c, deadline)
    assert c.status("plain")["reason"] == "MaxRuntimeExceeded", c.status("plain")


def test_the_queue_default_applies_to_jobs_asking_none_and_its_cap_to_jobs_asking_more():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 32, defaultMaxRuntimeSeconds=20, maxRuntimeSeconds=40)))
    c.submit(job_in("plain", "team-a"))
    c.submit(job_in("greedy", "team-a", maxRuntimeSeconds=100))
    c.submit(job_in("modest", "team-a", maxRuntimeSeconds=10))
    c.settle(2)
    views = c.controller.reader.by_key
    assert [c.controller.queues.max_runtime(views[GangKey("team-a", name)])
            for name in ("plain", "greedy", "modest")] == [20, 40, 10]
    ends = {name: started(c, name) + seconds for name, seconds in (("plain", 20), ("greedy", 40), ("modest", 10))}
    for name, source in (("modest", "spec.maxRuntimeSeconds 10"),
                         ("plain", "queue a's defaultMaxRuntimeSeconds 20"),
                         ("greedy", "queue a's maxRuntimeSeconds 40")):
        run_until(c, ends[name] - 1)
        assert c.status(name)["phase"] == "Running", name
        run_until(c, ends[name])
        assert c.status(name)["reason"] == "MaxRuntimeExceeded", name
        assert c.status(name)["message"].endswith(f": {source} reached"), c.status(name)["message"]


def test_a_cap_lowered_while_a_job_runs_stops_it_at_the_new_cap():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    c.submit(job_in("long"))
    c.settle(10)
    assert c.status("long")["phase"] == "Running"
    assert c.controller.queues.max_runtime(c.controller.reader.by_key[GangKey("team-a", "long")]) is None
    run(c.admin.patch(GPUQUEUES, "a", {"spec": {"maxRuntimeSeconds": 30}}))
    c.cycle()
    run_until(c, started(c, "long") + 29)
    assert c.status("long")["phase"] == "Running"
    run_until(c, started(c, "long") + 30)
    assert c.status("long")["message"] == "stopped after 30 s: queue a's maxRuntimeSeconds 30 reached"


@pytest.mark.parametrize(("asked", "default", "cap", "expected"), [
    (None, None, None, None),
    (50, None, None, RuntimeLimit(50, "spec.maxRuntimeSeconds")),
    (None, 20, None, RuntimeLimit(20, "queue q's defaultMaxRuntimeSeconds")),
    (None, None, 40, RuntimeLimit(40, "queue q's maxRuntimeSeconds")),
    (None, 20, 40, RuntimeLimit(20, "queue q's defaultMaxRuntimeSeconds")),
    (100, 20, 40, RuntimeLimit(40, "queue q's maxRuntimeSeconds")),
    (10, 20, 40, RuntimeLimit(10, "spec.maxRuntimeSeconds")),
])
def test_the_limit_in_force_is_the_jobs_else_the_queue_default_never_above_the_cap(asked, default, cap, expected):
    queue = Queue("q", default_max_runtime=default, max_runtime=cap)
    assert effective_limit(asked, "spec.maxRuntimeSeconds", queue) == expected


def test_a_queue_whose_default_exceeds_its_cap_is_refused_with_both_named():
    body = gpu_queue("a", 8, defaultMaxRuntimeSeconds=50, maxRuntimeSeconds=40)
    with pytest.raises(ConvertError, match=r"defaultMaxRuntimeSeconds \(50\) must not exceed maxRuntimeSeconds"):
        queue_from_k8s(body)


def limited(name: str, gang: str, seconds: str | None) -> dict:
    body = pod(name, gang, 2)
    if seconds is not None:
        body["metadata"]["annotations"]["superpod.dev/max-runtime-seconds"] = seconds
    return body


def disruption(c: MemoryCluster, name: str) -> dict | None:
    return next((x for x in (stored(c, name).get("status") or {}).get("conditions") or []
                 if x["type"] == "DisruptionTarget"), None)


def test_a_pod_gang_is_evicted_at_its_annotated_limit_and_a_bad_annotation_is_said_never_a_crash():
    c = MemoryCluster(nodes=4)
    create(c, limited("ok-0", "ok", "30"), limited("ok-1", "ok", "30"))
    create(c, limited("typo-0", "typo", "1h"), limited("typo-1", "typo", "1h"))
    create(c, limited("split-0", "split", "30"), limited("split-1", "split", None))
    c.settle(3)
    assert "metadata.annotations[superpod.dev/max-runtime-seconds]: expected whole seconds of at least 1" in \
        scheduled(c, "typo-0")[2] and "'1h'" in scheduled(c, "typo-0")[2]
    assert "its pods disagree: none (split-1), 30 (split-0)" in scheduled(c, "split-0")[2]
    assert not stored(c, "typo-0")["spec"].get("nodeName") and not stored(c, "split-0")["spec"].get("nodeName")
    assert stored(c, "ok-0")["spec"]["nodeName"] and stored(c, "ok-1")["spec"]["nodeName"]
    first = min(timestamp(stored(c, f"ok-{i}")["status"]["startTime"]) for i in range(2))
    run_until(c, first + 29)
    assert disruption(c, "ok-0") is None and not stored(c, "ok-0")["metadata"].get("deletionTimestamp")
    run_until(c, first + 30)
    for i in range(2):
        target = disruption(c, f"ok-{i}")
        assert target["reason"] == "MaxRuntimeExceeded", target
        assert "stopped after 30 s: annotation superpod.dev/max-runtime-seconds 30 reached" in target["message"]
    assert stored(c, "ok-0") is None or stored(c, "ok-0")["metadata"].get("deletionTimestamp")
    assert any(reason == "MaxRuntimeExceeded" for reason, _ in c.events("ok-0"))


def test_a_bound_gangs_limit_edited_to_nonsense_or_up_is_warned_once_and_never_grows():
    """A hostile review: a bound gang's annotation edited (to nonsense, or up to its queue's cap) was honoured, so a
    gang let into a reservation by its limit could hold it longer. Its limit now never grows while it is bound."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 32, maxRuntimeSeconds=40)))
    create(c, limited("g-0", "g", "20"), limited("g-1", "g", "20"))
    c.settle(3)
    assert stored(c, "g-0")["spec"]["nodeName"]
    first = min(timestamp(stored(c, f"g-{i}")["status"]["startTime"]) for i in range(2))
    run(c.admin.patch(PODS, "g-0", {"metadata": {"annotations": {"superpod.dev/max-runtime-seconds": "1e999"}}},
                      "team-a"))
    run(c.admin.patch(PODS, "g-1", {"metadata": {"annotations": {"superpod.dev/max-runtime-seconds": "40"}}},
                      "team-a"))
    run_until(c, first + 19)
    warned = [text for reason, text in c.events("g-0") if reason == "MaxRuntimeIgnored"]
    assert len(warned) == 1 and "'1e999'" in warned[0], warned
    assert "annotation superpod.dev/max-runtime-seconds (20 s) applies" in warned[0]
    assert disruption(c, "g-0") is None
    run_until(c, first + 20)
    assert disruption(c, "g-0")["reason"] == "MaxRuntimeExceeded"
    assert "superpod.dev/max-runtime-seconds 20 reached" in disruption(c, "g-1")["message"]


def test_a_gang_stopped_at_its_limit_gets_the_limit_grace_not_its_pods_own_and_its_pods_carry_its_limit():
    """A hostile review: a job let into a reservation by its limit, with a year of termination grace, held the
    reserved nodes for that year after its limit; and its template's annotation set the limit its pods would keep as
    a pod gang once orphaned. Its pods now carry the job's own limit, and are deleted with LIMIT_GRACE."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    body = training_job("stubborn", 1, 8, maxRuntimeSeconds=30,
                        annotations={"superpod.dev/max-runtime-seconds": "999999999"})
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 31_536_000
    c.submit(body)
    c.settle(3)
    [pod_key] = [key for key in c.store.objects[PODS] if "/stubborn-" in key]
    assert c.store.peek(PODS, pod_key)["metadata"]["annotations"]["superpod.dev/max-runtime-seconds"] == "30"
    run_until(c, started(c, "stubborn") + 30)
    assert c.status("stubborn")["reason"] == "MaxRuntimeExceeded"
    assert c.store.peek(PODS, pod_key)["metadata"]["deletionGracePeriodSeconds"] == LIMIT_GRACE


@pytest.mark.parametrize("edited", [None, "999999"], ids=["removed", "raised"])
def test_a_bound_gangs_limit_outlives_the_leader_whatever_its_pods_say_since(edited):
    """M1 of the DRA review: the tenant removed (or raised) the annotation on its bound pods, and after a leader change
    the gang ran without its limit. What a gang was bound with is recorded by its binding, where no tenant writes."""
    c = MemoryCluster(nodes=4)
    create(c, limited("g-0", "g", "600"), limited("g-1", "g", "600"))
    c.settle(3)
    assert stored(c, "g-0")["spec"]["nodeName"]
    first = min(timestamp(stored(c, f"g-{i}")["status"]["startTime"]) for i in range(2))
    for i in range(2):  # what the chart's admission policy refuses; the in-memory API does not
        run(c.admin.patch(PODS, f"g-{i}", {"metadata": {"annotations": {MAX_RUNTIME: edited}}}, "team-a"))
    run_until(c, first + 100)
    c.start("op-2")  # a new leader
    run_until(c, first + 599)
    assert disruption(c, "g-0") is None, "not before its limit"
    run_until(c, first + 600)
    assert "superpod.dev/max-runtime-seconds 600 reached" in disruption(c, "g-0")["message"]


def test_a_bound_gangs_first_start_outlives_the_leader_though_its_pods_are_made_again_one_by_one():
    """M1 of the DRA review: a gang's first start was kept only in the leader's memory; its members deleted and made
    again one by one started later, and after a leader change its limit ran from the last of them."""
    c = MemoryCluster(nodes=4)
    create(c, limited("g-0", "g", "600"), limited("g-1", "g", "600"))
    c.settle(3)
    first = min(timestamp(stored(c, f"g-{i}")["status"]["startTime"]) for i in range(2))
    for i, moment in ((0, first + 100), (1, first + 200)):
        run_until(c, moment)
        c.store.delete_now(PODS, f"team-a/g-{i}")  # its owner makes it again, as a Job or a StatefulSet does
        create(c, limited(f"g-{i}", "g", "600"))
        c.settle(3)
        assert timestamp(stored(c, f"g-{i}")["status"]["startTime"]) > moment, "the dangerous moment: it starts anew"
    c.start("op-2")  # a new leader
    run_until(c, first + 600)
    assert "superpod.dev/max-runtime-seconds 600 reached" in disruption(c, "g-0")["message"]
