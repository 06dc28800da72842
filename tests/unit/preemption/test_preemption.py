"""Preemption through the controller on the in-memory API: a higher-priority gang evicts the cheapest set of
lower-priority gangs, holds its nodes while they stop (gracefully, with their preemptionGracePeriodSeconds) and
starts there; victims requeue at their own priority with no restart counted and run again later; reserved and
equal-priority gangs are never victims, a gang inside minRuntimeSeconds is protected; a write that failed after the
nomination is finished by the next cycle with the same victims; a queue below its guarantee reclaims what another
queue borrows."""

from __future__ import annotations

from superpod.k8s.api import GPUQUEUES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.queues.test_controller_queues import gpu_queue, phase, queue_status, submit

SLOW_TO_STOP = {"sim.superpod.dev/terminate-after": "1000s"}  # its pods take their whole grace period


def job(name: str, replicas: int = 1, priority: int = 0, **spec) -> dict:
    return training_job(name, replicas, 8, priority=priority, annotations=SLOW_TO_STOP, **spec)


def live_pods(c: MemoryCluster, name: str) -> list[dict]:
    return [p for p in c.store.objects.get(PODS, {}).values()
            if p["metadata"]["labels"].get("superpod.dev/job-name") == name
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def test_a_higher_priority_gang_evicts_the_cheapest_set_waits_for_it_and_the_victims_run_again():
    c = MemoryCluster(nodes=3, nodes_per_unit=3)
    c.submit(job("low-a", priority=0, preemptionGracePeriodSeconds=5))
    c.submit(job("low-b", priority=0))
    c.submit(job("mid", priority=5))
    c.settle(5)
    for name in ("low-a", "low-b", "mid"):
        assert c.status(name)["phase"] == "Running"
    c.tick(100)
    c.submit(job("big", replicas=2, priority=100))
    c.cycle()
    big = c.status("big")
    assert big["reason"] == "Preempting" and set(big["nomination"]["victims"]) == {"team-a/low-a", "team-a/low-b"}
    assert big["message"].startswith("preempting team-a/low-a (priority 0), team-a/low-b (priority 0) to start on")
    for name in ("low-a", "low-b"):
        status = c.status(name)
        assert (status["phase"], status["reason"], status["preemptions"], status["restarts"]) == (
            "Queued", "Preempted", 1, 0)
        assert status["message"] == "preempted by team-a/big (priority 100); it waits to run again"
        assert any(cond["type"] == "Preempted" and cond["status"] == "True" for cond in status["conditions"])
        assert status["finishedGpuSeconds"] > 0, "the attempt was closed and accounted"
    assert c.status("mid")["phase"] == "Running", "the priority-5 gang is not needed"
    [pod] = live_pods(c, "low-a")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 5, "its own preemptionGracePeriodSeconds"
    [pod] = live_pods(c, "low-b")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30, "the default"
    nominated = set(big["nomination"]["nodes"])
    c.settle(7)
    assert live_pods(c, "low-a") == [] and live_pods(c, "low-b"), "low-a stopped after 5 s, low-b has 30 s"
    assert c.status("big")["phase"] == "Queued" and "it preempted to stop" in c.status("big")["message"]
    c.settle(30)
    big = c.status("big")
    assert big["phase"] == "Running" and set(big["placement"]) == nominated and "nomination" not in big
    assert ("Preempting", "preempted team-a/low-a to start") in c.events("big")
    assert c.status("low-a")["phase"] == "Queued", "it waits: the cluster is full"
    for pod in c.pods("big"):
        c.kubelet.finish(f"team-a/{pod['metadata']['name']}", 0)
    c.settle(5)
    for name in ("low-a", "low-b"):
        assert (c.status(name)["phase"], c.status(name)["attempt"]) == ("Running", 2)


def test_equal_priority_reserved_and_young_gangs_are_never_victims():
    c = MemoryCluster(nodes=3, nodes_per_unit=3)
    c.submit(job("equal", priority=100))
    c.submit(job("reserved", priority=0, serviceClass="reserved"))
    c.submit(job("young", priority=0, minRuntimeSeconds=600))
    c.settle(5)
    c.submit(job("big", priority=100))
    c.settle(3)
    assert c.status("big")["phase"] == "Queued" and "nomination" not in c.status("big")
    assert {c.status(name)["phase"] for name in ("equal", "reserved", "young")} == {"Running"}
    c.tick(600)
    c.settle(2)
    assert c.status("young").get("preemptions") == 1, "once it has run its minRuntimeSeconds"
    assert c.status("reserved")["phase"] == c.status("equal")["phase"] == "Running"


def test_a_failed_eviction_is_finished_with_the_same_victims_and_no_second_wave():
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(job("low-a"))
    c.submit(job("low-b"))
    c.settle(5)
    failed = []

    def fault(verb, kind, obj, writer):  # the first victim write of the cycle fails
        if kind is TRAININGJOBS and verb == "update" and obj["metadata"]["name"].startswith("low") and not failed:
            failed.append(obj["metadata"]["name"])
            raise ApiError(500, "InternalError", "etcd is having a bad day")

    c.store.fault = fault
    c.submit(job("big", priority=100))
    c.cycle()
    assert failed, "the eviction write failed after the nomination was written"
    victims = c.status("big")["nomination"]["victims"]
    assert len(victims) == 1
    assert c.status(victims[0].split("/")[1])["phase"] == "Running", "the victim still runs"
    c.store.fault = None
    c.settle(40)
    assert c.status("big")["phase"] == "Running"
    other = ({"low-a", "low-b"} - {victims[0].split("/")[1]}).pop()
    assert c.status(other)["phase"] == "Running" and "preemptions" not in c.status(other), "no second wave"


def test_a_queue_below_its_guarantee_reclaims_what_another_queue_borrows():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)  # 32 GPUs
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8)))
    run(c.admin.create(GPUQUEUES, gpu_queue("b", 16)))
    for i in range(4):
        submit(c, "a", f"a{i}")
    c.settle(5)
    assert sum(phase(c, "a", f"a{i}") == "Running" for i in range(4)) == 4, "a borrows b's idle guarantee"
    submit(c, "b", "b0")
    submit(c, "b", "b1")
    c.settle(40)
    assert phase(c, "b", "b0") == phase(c, "b", "b1") == "Running", "b took its guarantee back"
    preempted = [i for i in range(4) if (c.job(f"a{i}", "team-a")["status"].get("preemptions") or 0)]
    assert len(preempted) == 2
    assert queue_status(c, "a")["allocated"] == 16 and queue_status(c, "b")["allocated"] == 16


def test_a_long_grace_period_keeps_the_nomination_and_no_second_set_is_chosen():
    """The victims take an hour to stop: past NOMINATION_TIMEOUT the preemptor still holds its nodes and evicts
    no one else."""
    c = MemoryCluster(nodes=4, nodes_per_unit=2)
    for name, priority in (("v1", 0), ("v2", 0), ("w1", 10), ("w2", 10)):
        c.submit(job(name, priority=priority, preemptionGracePeriodSeconds=3600))
    c.settle(5)
    c.tick(100)
    c.submit(job("big", replicas=2, priority=100, topology={"required": "leaf"}))
    c.cycle()
    assert c.status("big")["nomination"]["victims"] == ["team-a/v1", "team-a/v2"]
    for seconds in (300, 301, 1, 1):
        c.tick(seconds)
        c.cycle()
    assert live_pods(c, "v1") and c.status("big")["phase"] == "Queued", "the victims still stop, 603 s on"
    assert c.status("big")["nomination"]["victims"] == ["team-a/v1", "team-a/v2"]
    assert c.status("w1")["phase"] == c.status("w2")["phase"] == "Running", "no second set of victims"


def test_a_victim_placed_again_elsewhere_is_not_stopped_a_second_time():
    c = MemoryCluster(nodes=4, nodes_per_unit=2)
    for name, priority in (("v", 0), ("x1", 50), ("w", 50), ("x2", 50)):
        c.submit(job(name, priority=priority, preemptionGracePeriodSeconds=20))
    c.settle(5)
    leaf = {name: next(iter(c.status(name)["placement"])).split("-n")[0] for name in ("v", "x1", "w", "x2")}
    assert leaf["v"] != leaf["w"], "layout: v and w on different leaves, each with one of x1, x2"
    for name in ("x1", "x2"):
        run(c.admin.delete(TRAININGJOBS, name, "team-a"))
    c.settle(3)
    c.tick(100)
    c.submit(job("big", replicas=2, priority=100, topology={"required": "leaf"}))
    for _ in range(12):
        c.cycle()
        c.tick(1)
    victim = c.status("v")
    assert victim["attempt"] == 2 and victim["phase"] == "Running", "placed again on the other leaf"
    assert victim["preemptions"] == 1, "its new attempt is not the one that was preempted"


def test_preemptions_are_counted_by_kind_once_written():
    from prometheus_client import CollectorRegistry

    from superpod.controller.metrics import Metrics

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    registry = CollectorRegistry()
    c.controller.metrics = Metrics(registry)
    c.submit(job("low"))
    c.settle(3)
    c.submit(job("big", replicas=2, priority=100))
    c.cycle()
    assert registry.get_sample_value("superpod_preemptions_total", {"kind": "priority"}) == 1
    assert registry.get_sample_value("superpod_preemptions_total", {"kind": "reclaim"}) == 0
