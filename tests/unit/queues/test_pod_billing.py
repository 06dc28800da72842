"""Every GPU-second billed to exactly one queue: pod gangs, pods a deleted TrainingJob orphaned, and GPU pods another
scheduler (or spec.nodeName) placed in a queue's namespace each get a GPUUsage record of their own, count against
their queue's limits and budget, and are billed until their GPUs are free (a graceful delete's terminating time
included, for a TrainingJob's pods too)."""

from __future__ import annotations

import asyncio
import math

import pytest
from prometheus_client import CollectorRegistry

from superpod.commands.usage import gather
from superpod.controller.metrics import Metrics
from superpod.hardware.kubelet import TERMINATE_AFTER
from superpod.k8s.api import GPUQUEUES, GPUUSAGES, NODES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import create, pod, scheduled
from tests.unit.queues.test_controller_queues import gpu_queue, message, phase, queue_status, submit

BUDGET = {"gpuHours": 1, "period": "720h", "onExhausted": "HoldAndDrain"}


def records(c: MemoryCluster) -> list[dict]:
    return list(c.store.objects.get(GPUUSAGES, {}).values())


def uid_of(c: MemoryCluster, key: str) -> str:
    return c.store.peek(PODS, key)["metadata"]["uid"]


def orphan(c: MemoryCluster, job: str, namespace: str = "team-a", seen_between: bool = True) -> list[str]:
    """`kubectl delete trainingjob --cascade=orphan`: the job goes, then the garbage collector strips its pods' owner
    references and leaves them running (`seen_between`: the operator cycles in between)."""
    keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in c.pods(job)]
    c.store._owned.pop(c.job(job, namespace)["metadata"]["uid"], None)
    c.store.delete_now(TRAININGJOBS, f"{namespace}/{job}")
    if seen_between:
        c.cycle()
    for key in keys:
        obj = c.store.peek(PODS, key)
        obj["metadata"]["ownerReferences"] = []
        c.store._store(PODS, obj, "update")
    return keys


def ran(c: MemoryCluster) -> dict[str, float]:
    """Each pod's own GPU-time from the store's history (no operator involved): pod uid -> GPU-seconds from its
    start until its GPUs were free (its containers' finish, its removal) or now."""
    start, end, gpus = {}, {}, {}
    for event in c.store.events:
        if event.kind is not PODS:
            continue
        obj, uid = event.obj, event.obj["metadata"]["uid"]
        status = obj.get("status") or {}
        limits = obj["spec"]["containers"][0].get("resources", {}).get("limits") or {}
        gpus[uid] = float(limits.get("nvidia.com/gpu", 0))
        if status.get("startTime") and uid not in start:
            start[uid] = event.time
        if uid in start and uid not in end and (status.get("phase") in ("Succeeded", "Failed")
                                                or event.type == "DELETED"):
            end[uid] = event.time
    return {uid: gpus[uid] * (end.get(uid, c.now) - start[uid]) for uid in start if gpus[uid]}


def billed(c: MemoryCluster) -> dict[str, float]:
    """Per queue: the records plus the usage running now, as `superpod usage` sums them."""
    found, problems = asyncio.run(gather(c.store.client(), c.now))
    assert problems == []
    out: dict[str, float] = {}
    for record in found:
        out[record.queue] = out.get(record.queue, 0.0) + record.gpu_seconds
    return out


def test_a_pod_gang_is_billed_counts_against_its_budget_and_is_drained():
    """Review H4: a pod gang ran 10 h on a 1 GPU-hour HoldAndDrain budget with nothing billed or spent."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, budget=BUDGET)))
    c.settle(1)
    create(c, pod("long", gpus=8))
    c.settle(3)
    uid = uid_of(c, "team-a/long")
    for _ in range(10):
        c.settle(1, seconds=60)  # 8 GPUs: the budget (3,600 GPU-seconds) is spent after 7.5 minutes
    assert c.store.peek(PODS, "team-a/long") is None, "drained: evicted, as preemption evicts"
    [record] = records(c)
    spec = record["spec"]
    assert record["metadata"]["name"] == f"{uid}-pod"
    assert (spec["queue"], spec["namespace"], spec["job"], spec["pod"], spec["gpus"]) == ("a", "team-a", "long",
                                                                                         "long", 8)
    assert math.isclose(spec["gpuSeconds"], ran(c)[uid], abs_tol=8 * 1.0)
    assert spec["gpuSeconds"] >= 3600
    assert queue_status(c, "a")["budgetRemaining"] < 0
    assert any(reason == "BudgetExhausted" for reason, _ in c.events("long"))
    create(c, pod("long", gpus=8))  # its owner makes it again: it waits on the budget
    submit(c, "a", "after")
    c.settle(3)
    assert scheduled(c, "long")[2].startswith("queue a has spent its budget of 1 GPU-hours")
    assert phase(c, "a", "after") == "Queued" and "spent its budget" in message(c, "a", "after")


@pytest.mark.parametrize("seen_between", [True, False])
def test_a_pod_orphaned_by_its_deleted_training_job_is_billed_from_the_jobs_record_on_never_twice(seen_between):
    """Review H4: the pod of a TrainingJob deleted with --cascade=orphan ran on unbilled. Its job's record covers it
    up to when the deletion was seen; its own record from there until its GPUs are free. (When the operator sees the
    deletion only with the owner reference already stripped, the job's record has no pod to bill: the pod's own
    record bills all of it.)"""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    submit(c, "a", "j")
    c.settle(4)
    job_uid = c.job("j", "team-a")["metadata"]["uid"]
    [key] = orphan(c, "j", seen_between=seen_between)
    pod_uid = uid_of(c, key)
    c.settle(2)
    for _ in range(6):
        c.settle(1, seconds=600)
    c.kubelet.finish(key, 0)
    c.settle(2)
    by_name = {r["metadata"]["name"]: r["spec"] for r in records(c)}
    own = by_name.pop(f"{pod_uid}-pod")
    assert (own["queue"], own["job"], own["attempt"], own["jobUid"], own["pod"]) == ("a", "j", 1, "", key[7:])
    if seen_between:
        job = by_name.pop(f"{job_uid}-a1")
        assert own["start"] == job["end"], "the orphan's billing starts where its job's record ends"
        assert math.isclose(job["gpuSeconds"] + own["gpuSeconds"], ran(c)[pod_uid], abs_tol=8 * 1.0)
    else:
        assert math.isclose(own["gpuSeconds"], ran(c)[pod_uid], abs_tol=8 * 1.0)
    assert by_name == {}
    assert c.store.peek(PODS, key)["status"]["phase"] == "Succeeded"


def test_an_orphaned_pod_counts_against_the_budget_and_is_drained():
    """Review H4: after --cascade=orphan and 10 h, 0.0 GPU-hours were billed and the budget was untouched."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, budget=BUDGET)))
    c.settle(1)
    submit(c, "a", "j")
    c.settle(4)
    [key] = orphan(c, "j")
    for _ in range(10):
        c.settle(1, seconds=60)
    assert c.store.peek(PODS, key) is None, "drained under HoldAndDrain"
    total = sum(r["spec"]["gpuSeconds"] for r in records(c))
    assert total >= 3600 and math.isclose(total, sum(ran(c).values()), abs_tol=8 * 1.0)
    assert queue_status(c, "a")["budgetRemaining"] < 0


def test_gpu_pods_another_scheduler_placed_count_in_their_namespace_queue_and_are_billed():
    """Review L4: a pod bound by spec.nodeName (or another scheduler) in a queue's namespace holds GPUs no queue
    counted: the queue's limit let a TrainingJob in beside it, and nobody was billed."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    c.settle(1)
    foreign = pod("inference", gpus=8)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    foreign["spec"]["nodeName"] = sorted(c.store.objects[NODES])[0]
    create(c, foreign)
    c.settle(3)
    uid = uid_of(c, "team-a/inference")
    submit(c, "a", "j")
    c.settle(3)
    assert phase(c, "a", "j") == "Queued"
    assert message(c, "a", "j") == "queue a is at its limit of 8 GPUs (8 in use)"
    assert queue_status(c, "a")["allocated"] == 8
    c.settle(1, seconds=120)
    c.kubelet.finish("team-a/inference", 0)
    c.settle(3)
    assert phase(c, "a", "j") == "Running", "its GPUs are free: the job fits the limit"
    [record] = [r["spec"] for r in records(c) if r["metadata"]["name"] == f"{uid}-pod"]
    assert (record["queue"], record["job"], record["pod"]) == ("a", "inference", "inference")
    assert math.isclose(record["gpuSeconds"], ran(c)[uid], abs_tol=8 * 1.0)


def test_a_graceful_deletes_terminating_time_is_billed_for_pod_gangs_and_training_jobs():
    """Review L2: billing stopped at the delete request, though the pod held its GPUs until it was gone."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    gang = pod("g", gpus=8)
    gang["metadata"]["annotations"][TERMINATE_AFTER] = "60s"
    gang["spec"]["terminationGracePeriodSeconds"] = 300
    create(c, gang)
    c.submit(training_job("j", 1, 8, annotations={TERMINATE_AFTER: "60s"}))
    c.settle(5)
    c.settle(1, seconds=100)
    run(c.admin.delete(PODS, "g", "team-a"))
    run(c.admin.delete(TRAININGJOBS, "j", "team-a"))
    for _ in range(8):
        c.settle(1, seconds=10)
    assert c.pods() == [] and not c.store.objects.get(PODS), "all gone"
    truth = ran(c)
    assert len(truth) == 2 and all(seconds > 8 * 125 for seconds in truth.values()), truth
    assert math.isclose(sum(r["spec"]["gpuSeconds"] for r in records(c)), sum(truth.values()), abs_tol=2 * 8 * 1.0)


def test_every_gpu_second_of_a_mixed_cluster_is_in_exactly_one_queue():
    """TrainingJobs (one finished, one deleted while its pods terminate, one orphaned), pod gangs (one finished, one
    running), and a pod another scheduler placed (deleted gracefully): per queue, the records plus what runs now
    equal the GPU-time of the pods themselves, and so does the GPU-seconds counter."""
    c = MemoryCluster(nodes=6, nodes_per_unit=3)
    counter = c.controller.meter.counter = Metrics(CollectorRegistry()).gpu_seconds
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 24)))
    run(c.admin.create(GPUQUEUES, gpu_queue("b", 24)))
    c.settle(1)
    submit(c, "a", "done")
    submit(c, "a", "orph")
    c.submit(training_job("torn", 1, 8, annotations={TERMINATE_AFTER: "20s"}))

    def in_b(body: dict) -> dict:
        body["metadata"]["namespace"] = "team-b"
        return body

    create(c, in_b(pod("g-0", "g", 2, gpus=4, index=0)), in_b(pod("g-1", "g", 2, gpus=4, index=1)),
           in_b(pod("short", gpus=4)))
    foreign = in_b(pod("web", gpus=8))
    foreign["spec"].update(schedulerName="default-scheduler", nodeName=sorted(c.store.objects[NODES])[-1],
                           terminationGracePeriodSeconds=120)
    foreign["metadata"]["annotations"][TERMINATE_AFTER] = "40s"
    create(c, foreign)
    c.settle(5)
    assert len([p for p in c.store.objects[PODS].values() if p["spec"].get("nodeName")]) == 7
    c.settle(6, seconds=10)
    c.kubelet.finish(f"team-a/{c.pods('done')[0]['metadata']['name']}", 0)
    c.kubelet.finish("team-b/short", 0)
    orphan(c, "orph")
    run(c.admin.delete(PODS, "web", "team-b"))
    c.settle(3, seconds=5)
    run(c.admin.delete(TRAININGJOBS, "torn", "team-a"))
    for _ in range(10):
        c.settle(1, seconds=10)
    truth: dict[str, float] = {"a": 0.0, "b": 0.0}
    queue_of = {}
    for event in c.store.events:
        if event.kind is PODS:
            queue_of[event.obj["metadata"]["uid"]] = event.obj["metadata"]["namespace"][-1]
    for uid, seconds in ran(c).items():
        truth[queue_of[uid]] += seconds
    found = billed(c)
    assert set(found) == {"a", "b"}, found
    for queue in ("a", "b"):
        assert math.isclose(found[queue], truth[queue], abs_tol=8.0), (queue, found[queue], truth[queue])
    counted: dict[str, float] = {}
    for sample in counter.collect()[0].samples:
        if sample.name.endswith("_total"):
            counted[sample.labels["queue"]] = counted.get(sample.labels["queue"], 0.0) + sample.value
    for queue in ("a", "b"):
        assert math.isclose(counted[queue], truth[queue], abs_tol=8.0), (queue, counted[queue], truth[queue])


def test_a_pods_record_is_written_once_through_a_lost_answer_and_a_restart():
    """The record's name is the pod's uid: a retried write meets AlreadyExists, and the next operator, which lists the
    record with the finished pod, writes nothing."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    create(c, pod("once", gpus=8))
    c.settle(3)
    uid = uid_of(c, "team-a/once")
    lost = []

    def fault(verb, kind, obj, writer):
        if kind is GPUUSAGES and verb == "create" and not lost:
            lost.append(obj["metadata"]["name"])
            return "lose-answer"
        return None

    c.store.fault = fault
    c.settle(1, seconds=30)
    c.kubelet.finish("team-a/once", 0)
    c.settle(3)
    assert lost == [f"{uid}-pod"]
    c.start("op-2")
    c.settle(3)
    [record] = records(c)
    assert record["metadata"]["name"] == f"{uid}-pod"
    assert math.isclose(record["spec"]["gpuSeconds"], ran(c)[uid], abs_tol=1e-6)
    assert not [w for w in c.store.writes if w.writer == "op-2" and w.kind == "gpuusages"]


def test_a_pod_whose_training_job_is_gone_is_billed_though_nobody_deletes_it():
    """Found by the machine's billing invariant: a TrainingJob deleted while the garbage collector had yet to come to
    its running pod left that pod billed by nobody — its attempt's record ends at the deletion, and a pod is billed
    on its own only once it is being deleted — so a pod that finished before the collector came was never billed."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    c.settle(1)
    submit(c, "a", "j")
    c.settle(3)
    c.settle(1, seconds=100)
    [replica] = c.pods("j")
    key = f"team-a/{replica['metadata']['name']}"
    c.store._owned.clear()  # the garbage collector lags
    c.store.delete_now(TRAININGJOBS, "team-a/j")
    c.settle(2)
    c.settle(1, seconds=200)
    assert not c.store.peek(PODS, key)["metadata"].get("deletionTimestamp"), "the dangerous moment: it runs on"
    c.kubelet.finish(key, 0)
    c.settle(3)
    truth = sum(ran(c).values())
    assert math.isclose(billed(c)["a"], truth, abs_tol=8.0), (billed(c), truth)


def test_a_starting_gangs_pod_made_again_under_its_name_bills_the_one_that_was_gone_too():
    """A Starting gang's pod that vanished (removed at once, its deletion never seen in progress) is made again under
    its name: the attempt's close bills both the first pod's run and its successor's. Found by the two-tenant
    machine (queue b billed 0 GPU-s of 20 its pod ran): the successor's run replaced the first's."""
    c = MemoryCluster(nodes=2)
    c.submit(training_job("j", 2, 4, annotations={"sim.superpod.dev/run-for": "300s"}))
    c.cycle()
    c.now += 1
    c.kubelet.step(pods=["team-a/j-a1-0"])  # replica 0 runs from t+1, replica 1 waits
    c.cycle()
    c.now += 4
    c.store.delete_now(PODS, "team-a/j-a1-0")  # gone at t+5, after 4 s of 4 GPUs
    c.cycle()
    assert len(c.pods("j")) == 2 and c.decided("j")["phase"] == "Starting"  # made again
    c.now += 5
    c.kubelet.step()  # both run from t+10
    c.cycle()
    c.now += 10
    c.store.delete_now(TRAININGJOBS, "team-a/j")
    c.cycle()
    records = c.store.objects[GPUUSAGES]
    assert [r["spec"]["gpuSeconds"] for r in records.values()] == [4 * 4 + 2 * 4 * 10]


def test_the_pods_of_an_attempt_its_status_never_knew_are_billed_though_they_were_being_deleted():
    """Found by the machine's billing invariant: a leader wrote a gang's pods and stopped before their status; the
    pods ran, and were being deleted when the next leader came. It took only pods not being deleted for that unknown
    attempt, so nobody closed it: its pods' GPU-time was billed by nobody (and its number could be used again)."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    c.settle(1)
    body = training_job("j", 2, 8, annotations={TERMINATE_AFTER: "30s"})
    body["metadata"]["namespace"] = "team-a"
    c.submit(body)
    c.deliver()
    c.cycle()
    c.tick()  # its pods start; its status is not sent
    c.tick(60)
    pods = c.pods("j")
    assert len(pods) == 2 and not (c.job("j", "team-a").get("status") or {}).get("placement"), "the moment"
    for replica in pods:
        run(c.admin.delete(PODS, replica["metadata"]["name"], "team-a"))
    c.start("op-2")  # a new leader: the pods it finds are being deleted
    for _ in range(6):
        c.settle(1, seconds=10)
    truth = sum(ran(c).values())
    assert truth > 2 * 8 * 60, truth
    assert math.isclose(billed(c).get("a", 0.0), truth, abs_tol=2 * 8.0), (billed(c), truth)


def _lost_teardown(c: MemoryCluster) -> str:
    """A 2-replica gang whose replica 0 fails and whose teardown's delete of replica 1 is lost: replica 1's key, its
    attempt closed (billed), the job in its backoff."""
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    c.settle(1)
    body = training_job("t", 2, 4, maxRestarts=2)
    body["metadata"]["namespace"] = "team-a"
    c.submit(body)
    c.settle(3)
    c.settle(1, seconds=30)
    first, second = sorted(f"team-a/{p['metadata']['name']}" for p in c.pods("t"))
    lost: list[str] = []

    def lose_deletes(verb, kind, what, writer):
        if verb == "delete" and kind is PODS:
            lost.append(str(what))
            raise ApiError(500, "InternalError", "injected")
        return None
    c.store.fault = lose_deletes
    c.kubelet.finish(first, 137)
    c.settle(1)
    c.store.fault = None
    assert lost and c.status("t")["accountedAttempts"] == 1 and "gang restart" in c.status("t")["message"], \
        "the moment: its attempt closed, one pod runs on"
    assert not c.store.peek(PODS, second)["metadata"].get("deletionTimestamp")
    return second


def test_a_pod_a_lost_teardown_left_running_is_stopped_within_the_backoff():
    """Found by the two-tenant machine: a job in its backoff had nothing of it looked at, so a pod its lost teardown
    left ran on until the backoff ended."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    second = _lost_teardown(c)
    c.settle(1, seconds=1)
    left = c.store.peek(PODS, second)
    assert left is None or left["metadata"].get("deletionTimestamp"), "stopped within the backoff"


def test_a_pod_of_a_closed_attempt_that_ends_on_its_own_is_billed():
    """Found by the two-tenant machine: a pod of an attempt already closed (its teardown's delete lost) that ended by
    itself was never billed for what it ran after the close: only pods being deleted were billed on their own."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    second = _lost_teardown(c)
    c.tick(5)
    c.kubelet.finish(second, 1)  # before anything stops it, within the backoff (nothing deletes a finished pod there)
    c.settle(2)
    assert c.status("t")["phase"] == "Queued" and c.store.peek(PODS, second)["status"]["phase"] == "Failed"
    truth = sum(ran(c).values())
    assert truth > 2 * 4 * 30 + 4 * 5, truth
    assert math.isclose(billed(c)["a"], truth, abs_tol=2 * 4.0), (billed(c), truth)


def test_the_pods_of_a_finished_job_leave_the_bills_once_nothing_is_due():
    """Found by the simulator's profile: the pods of a succeeded job stay (until the job is deleted), ended, each
    with nothing to bill past its attempt's record; they were kept as due and billed again every cycle (the replay of
    1,500 jobs spent 85 % of its time there)."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("done", replicas=2, gpus=8))
    c.settle(3)
    for pod_obj in c.pods("done"):
        c.kubelet.finish(f"{pod_obj['metadata']['namespace']}/{pod_obj['metadata']['name']}", 0)
    c.settle(3)
    kept = [key for key in c.store.objects[PODS] if "/done-" in key]
    assert c.status("done")["phase"] == "Succeeded" and len(kept) == 2, kept  # its pods stay until it is deleted
    assert c.controller.bills.ended == {} and c.state.unbilled == {}
