"""Usage records and GPU-hour budgets through the controller on the in-memory API: each ended attempt leaves one
GPUUsage record (also when the close is retried), a spent budget holds new jobs with words naming it, HoldAndDrain
stops the running ones, the budget renews each period, and `superpod usage` sums the records and running attempts."""

from __future__ import annotations

import asyncio

from superpod.commands.usage import gather, table
from superpod.k8s.api import GPUQUEUES, GPUUSAGES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run
from tests.unit.queues.test_controller_queues import finish, gpu_queue, message, phase, queue_status, submit


def records(c: MemoryCluster) -> list[dict]:
    return list(c.store.objects.get(GPUUSAGES, {}).values())


def budgeted(c: MemoryCluster, gpu_hours: float, on_exhausted: str = "Hold", period: str = "720h") -> None:
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, budget={"gpuHours": gpu_hours, "period": period,
                                                               "onExhausted": on_exhausted})))


def test_an_ended_attempt_leaves_one_record_equal_to_the_jobs_accounting():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    submit(c, "a", "j")
    c.settle(20)
    finish(c, "a", "j")
    c.settle(2)
    status = c.job("j")["status"]
    assert status["phase"] == "Succeeded"
    [record] = records(c)
    uid = c.job("j")["metadata"]["uid"]
    assert record["metadata"]["name"] == f"{uid}-a1"
    spec = record["spec"]
    assert (spec["queue"], spec["namespace"], spec["job"], spec["flavor"], spec["serviceClass"], spec["gpus"]) == (
        "a", "team-a", "j", "*", "spot", 8)
    assert spec["gpuSeconds"] == status["gpuSeconds"] == status["finishedGpuSeconds"] > 8 * 15
    assert queue_status(c, "a")["gpuSeconds"] == [{"flavor": "*", "serviceClass": "spot",
                                                   "gpuSeconds": round(spec["gpuSeconds"], 1)}]


def test_a_close_whose_status_write_failed_is_retried_without_a_second_record():
    """The record is written before the status write that closes the attempt; when that write fails, the next
    cycle's record meets AlreadyExists and the close goes through."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    submit(c, "a", "j")
    c.settle(10)
    failed = []

    def fault(verb, kind, obj, writer):
        closing = kind is TRAININGJOBS and verb == "update" and (obj.get("status") or {}).get("accountedAttempts")
        if closing and not failed:
            failed.append(len(records(c)))
            raise ApiError(500, "InternalError", "etcd is having a bad day")

    c.store.fault = fault
    finish(c, "a", "j")
    c.settle(3)
    assert failed == [1], "the close failed after its record was written"
    assert c.status("j")["phase"] == "Succeeded" and c.status("j")["accountedAttempts"] == 1
    assert len(records(c)) == 1


def test_a_close_retried_by_a_replica_that_saw_less_closes_at_the_amount_billed():
    """The close's status write fails after its record; the pods are gone before the next operator lists (it never
    saw them run): it closes the attempt at the record's amount, not at the nothing it knows of (records billed more
    than the statuses that closed them)."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    submit(c, "a", "j")
    c.settle(10)
    failed = []

    def fault(verb, kind, obj, writer):
        if kind is TRAININGJOBS and verb == "update" and (obj.get("status") or {}).get("accountedAttempts"):
            failed.append(verb)
            raise ApiError(500, "InternalError", "the operator dies right after its record")

    c.store.fault = fault
    finish(c, "a", "j")
    c.cycle()
    c.store.fault = None
    [record] = records(c)
    assert failed and record["spec"]["gpuSeconds"] > 0 and c.status("j").get("accountedAttempts", 0) == 0
    for pod in c.pods("j", live=False):
        c.store.delete_now(PODS, f"team-a/{pod['metadata']['name']}")
    c.start("op-2")  # knows the record, not the pods' runs
    c.settle(3)
    assert c.status("j")["accountedAttempts"] == 1
    assert c.status("j")["finishedGpuSeconds"] == record["spec"]["gpuSeconds"]


def test_a_spent_budget_holds_new_jobs_with_its_words_and_running_ones_go_on():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    budgeted(c, 0.05)  # 180 GPU-seconds: an 8-GPU job spends it in 22.5 s
    submit(c, "a", "first")
    c.settle(40)
    assert phase(c, "a", "first") == "Running", "Hold: the running job goes on past the budget"
    submit(c, "a", "second")
    c.settle(3)
    assert phase(c, "a", "second") == "Queued"
    assert message(c, "a", "second").startswith("queue a has spent its budget of 0.05 GPU-hours for this period; "
                                                "it renews at ")
    c.settle(60)
    assert queue_status(c, "a")["budgetRemaining"] < 0
    finish(c, "a", "first")
    c.settle(3)
    assert phase(c, "a", "second") == "Queued", "a record keeps the budget spent"


def test_hold_and_drain_stops_the_running_jobs_and_the_budget_renews_each_period():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    budgeted(c, 0.05, "HoldAndDrain", period="300s")
    submit(c, "a", "j")
    c.settle(40)
    status = c.status("j")
    assert status["phase"] == "Queued" and "queue a has spent its budget" in status["message"]
    assert any(reason == "BudgetExhausted" and "HoldAndDrain" in text for reason, text in c.events("j"))
    assert c.pods("j") == [], "its pods were deleted"
    [record, tail] = sorted(records(c), key=lambda r: "pod" in r["spec"])
    assert 180 <= record["spec"]["gpuSeconds"] == status["finishedGpuSeconds"] <= 180 + 3 * 8
    assert tail["spec"]["start"] == record["spec"]["end"], "its pod's terminating time after the close, on its own"
    for _ in range(30):
        c.settle(9, seconds=10.0)
        if phase(c, "a", "j") in ("Starting", "Running"):
            break
    assert c.status("j")["attempt"] == 2, "it ran again once the period renewed"


def test_usage_sums_records_and_running_attempts_by_queue_and_job():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    submit(c, "a", "done")
    submit(c, "a", "running")
    c.settle(20)
    finish(c, "a", "done")
    c.settle(10)
    records_now, problems = asyncio.run(gather(c.store.client(), c.now))
    assert problems == []
    rows = {row["job"]: row for row in table(records_now, 0, c.now, "job")}
    done = c.job("done")["status"]["gpuSeconds"]
    assert rows["done"]["gpuSeconds"] == done
    assert rows["running"]["gpuSeconds"] > done, "the running attempt counts up to now"
    [queue] = table(records_now, 0, c.now, "queue")
    assert queue["queue"] == "a" and queue["attempts"] == 2


def test_a_placed_job_deleted_while_running_leaves_its_record():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    submit(c, "a", "j")
    c.settle(20)
    uid = c.job("j")["metadata"]["uid"]
    run(c.admin.delete(TRAININGJOBS, "j", "team-a"))
    c.settle(2)
    [record, tail] = sorted(records(c), key=lambda r: "pod" in r["spec"])
    assert record["metadata"]["name"] == f"{uid}-a1"
    assert 8 * 15 <= record["spec"]["gpuSeconds"] <= 8 * 22
    assert (tail["spec"]["jobUid"], tail["spec"]["start"]) == (uid, record["spec"]["end"]), "then its pod terminated"


def test_a_queue_with_a_zero_budget_period_is_refused_and_every_other_limit_holds():
    """Defect: a GPUQueue with `budget.period: 0h` (written before the CRD refused it) divided by zero in the queues
    step, and the cycle went on with no queue policy at all: another queue's three jobs ran past its limit."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    run(c.admin.create(GPUQUEUES, gpu_queue("z", 0, budget={"gpuHours": 10, "period": "0h"})))
    c.settle(1)
    for name in ("a1", "a2", "a3"):
        submit(c, "a", name)
    c.settle(5)
    assert sorted(phase(c, "a", name) for name in ("a1", "a2", "a3")) == ["Queued", "Queued", "Running"]
    assert "queue a is at its limit of 8 GPUs" in message(c, "a", "a2")
    active = next(x for x in queue_status(c, "z")["conditions"] if x["type"] == "Active")
    assert active["status"] == "False" and "budget.period must be longer than 0" in active["message"]
    submit(c, "z", "z1")
    c.settle(2)
    assert phase(c, "z", "z1") == "Queued", "a refused queue admits nothing"
