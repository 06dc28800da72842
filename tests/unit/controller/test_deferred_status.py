"""A placed gang's status is in force in the cache at once and written after its pods (Settings.status_delay): a
gang whose pods all run by then is written once, Running; one that still starts is written Starting; and a
replica that stops between the pods and the status leaves pods the next one finds (decide.recovered)."""

from __future__ import annotations

from superpod.hardware.kubelet import STAY_PENDING
from superpod.k8s.api import GPUUSAGES, PODS, TRAININGJOBS
from tests.unit.memory_cluster import MemoryCluster, run, training_job


def status_writes(c: MemoryCluster, name: str) -> int:
    return sum(1 for w in c.store.writes if w.kind == "trainingjobs" and w.key == f"team-a/{name}"
               and w.writer != "admin")


def test_a_gang_whose_pods_run_before_its_status_is_due_is_written_once_running():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("fast", 2, 8))
    c.cycle()
    assert len(c.pods("fast")) == 2 and c.status("fast") == {}  # the pods first; the status not sent yet
    assert c.decided("fast")["phase"] == "Starting"  # but in force: its nodes are booked
    c.tick()  # the pods run
    c.cycle()
    assert (c.status("fast")["phase"], c.status("fast")["attempt"]) == ("Running", 1)
    assert sorted(c.status("fast")["placement"]) == sorted(p["spec"]["nodeName"] for p in c.pods("fast"))
    assert status_writes(c, "fast") == 1


def test_a_gang_still_starting_when_its_status_is_due_is_written_starting():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("slow", 2, 8, annotations={STAY_PENDING: "true"}))
    c.cycle()
    for _ in range(int(c.settings.status_delay) - 1):
        c.tick()
        c.cycle()
    assert c.status("slow") == {}  # pods pending, not yet due
    c.tick()
    c.cycle()
    assert (c.status("slow")["phase"], c.status("slow")["ready"]) == ("Starting", "0/2")
    assert status_writes(c, "slow") == 1


def test_pods_written_before_their_status_are_found_by_the_next_operator():
    """The operator stops after writing a gang's pods and before their status: the next one writes the placement
    from the pods, and the gang goes on (without recovered, it deleted them and placed a second attempt)."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("gang", 2, 8))
    c.cycle()
    written = sorted(p["metadata"]["uid"] for p in c.pods("gang"))
    assert len(written) == 2 and c.status("gang") == {}  # the moment: pods bound, no status in the API
    c.start("op-2")  # a new process: its cache is what the API server has
    c.cycle()
    assert (c.status("gang")["phase"], c.status("gang")["attempt"]) == ("Starting", 1)
    c.settle(2)
    assert c.status("gang")["phase"] == "Running"
    assert sorted(p["metadata"]["uid"] for p in c.pods("gang")) == written  # the same pods: none made again


def test_part_of_a_gang_without_its_status_is_not_taken_for_the_gang():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("gang", 2, 8))
    c.cycle()
    c.store.delete_now(PODS, f"team-a/{c.pods('gang')[1]['metadata']['name']}")  # its create never landed
    c.tick()
    c.tick(20)  # the other runs meanwhile
    c.start("op-2")
    c.settle(3)
    assert (c.status("gang")["phase"], c.status("gang")["attempt"]) == ("Running", 2)
    assert {p["metadata"]["labels"]["superpod.dev/attempt"] for p in c.pods("gang")} == {"2"}
    [record, tail] = sorted(c.store.objects.get(GPUUSAGES, {}).values(), key=lambda r: "pod" in r["spec"])
    assert record["spec"]["attempt"] == 1 and record["spec"]["gpuSeconds"] >= 8 * 20  # what the part ran is billed
    assert tail["spec"]["start"] == record["spec"]["end"], "and its terminating time after the close, on its own"
    assert c.status("gang")["accountedAttempts"] == 1
    assert c.status("gang")["finishedGpuSeconds"] == record["spec"]["gpuSeconds"]


def test_pods_of_a_spec_edited_since_are_not_taken_for_the_gang():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("gang", 2, 8))
    c.cycle()
    job = c.job("gang")
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "trainer:v2"
    run(c.admin.replace(TRAININGJOBS, job))  # allowed: the API server has it Queued
    c.start("op-2")
    c.settle(3)
    assert (c.status("gang")["phase"], c.status("gang")["attempt"]) == ("Running", 2)
    assert {p["spec"]["containers"][0]["image"] for p in c.pods("gang")} == {"trainer:v2"}


def test_an_edit_of_the_job_while_its_status_waits_keeps_its_placement():
    """An edit that leaves the status as it was (a label) keeps the status the cache holds: it is written later,
    on the edited version, with the same pods."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("gang", 2, 8, annotations={STAY_PENDING: "true"}))
    c.cycle()
    written = sorted(p["metadata"]["uid"] for p in c.pods("gang"))
    job = c.job("gang")
    job["metadata"].setdefault("labels", {})["team"] = "a"
    run(c.admin.replace(TRAININGJOBS, job))
    c.cycle()
    assert c.status("gang") == {} and (c.decided("gang")["phase"], c.decided("gang")["attempt"]) == ("Starting", 1)
    c.settle(int(c.settings.status_delay) + 1)
    assert (c.status("gang")["phase"], c.status("gang")["attempt"]) == ("Starting", 1)
    assert sorted(p["metadata"]["uid"] for p in c.pods("gang")) == written
    assert c.job("gang")["metadata"]["labels"]["team"] == "a"


def test_a_gang_that_ended_before_the_next_operator_is_billed_once_and_not_run_again():
    """Its pods ran and succeeded while no operator led: the next one writes their placement, and the job ends
    Succeeded with its record (without finished pods counted, it ran the gang a second time, unbilled)."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("gang", 2, 8))
    c.cycle()
    c.tick()  # the pods start
    c.tick(30)
    for pod in c.pods("gang"):
        c.kubelet.finish(f"team-a/{pod['metadata']['name']}", 0)
    c.tick()
    assert c.status("gang") == {} and not c.pods("gang")  # the moment: the gang ended, its status never sent
    c.start("op-2")
    c.settle(3)
    assert (c.status("gang")["phase"], c.status("gang")["attempt"]) == ("Succeeded", 1)
    [record] = c.store.objects.get(GPUUSAGES, {}).values()
    assert record["spec"]["gpuSeconds"] == c.status("gang")["finishedGpuSeconds"] > 0
    assert {p["metadata"]["labels"]["superpod.dev/attempt"] for p in c.pods("gang", live=False)} == {"1"}
