"""A gang's identity: one key for TrainingJobs, pod gangs and pods alone, and its one written form."""

from __future__ import annotations

from collections import Counter

import pytest

from superpod.api.models import TrainingJobStatus
from superpod.api.podgang import grouping
from superpod.api.status import read_status
from superpod.core.gang_key import POD, POD_GANG, GangKey
from superpod.k8s.api import PODS, TRAININGJOBS
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import create, pod, stored


def test_a_job_a_pod_gang_and_a_pod_alone_of_one_name_are_three_gangs():
    labelled = {"metadata": {"name": "p-0", "namespace": "ns", "labels": {"superpod.dev/gang": "x"}}}
    grouped = {"metadata": {"name": "p-1", "namespace": "ns", "labels": {"scheduling.x-k8s.io/pod-group": "x"}}}
    alone = {"metadata": {"name": "x", "namespace": "ns"}}
    keys = {GangKey("ns", "x"), grouping(labelled).key("ns"), grouping(grouped).key("ns"), grouping(alone).key("ns")}
    assert keys == {GangKey("ns", "x"), GangKey("ns", "x", POD_GANG), GangKey("ns", "x", POD)}, \
        "a labelled gang and a PodGroup of one name are one gang"
    assert {str(key) for key in keys} == {"ns/x"}, "people are told its namespace and name"


@pytest.mark.parametrize("key", [GangKey("ns", "x"), GangKey("ns", "x", POD_GANG), GangKey("ns", "x", POD)])
def test_the_written_form_reads_back_as_the_same_key(key):
    assert GangKey.parse(key.text) == key


@pytest.mark.parametrize("text", ["", "ns", "ns/", "/x", "ns/x/y", "ns/x@", "ns/x@job", "ns/x@pods@pods"])
def test_a_written_form_the_operator_did_not_write_is_refused(text):
    with pytest.raises(ValueError, match="not a gang"):
        GangKey.parse(text)


def test_a_nomination_naming_a_victim_that_is_no_gang_is_dropped_as_damaged_not_followed():
    status = {"phase": "Queued", "nomination": {"nodes": ["n1"], "victims": ["ns/x@nothing"], "time":
                                                "2026-12-05T00:00:00Z"}}
    read, _, problems = read_status({"status": status})
    assert read.nomination is None and problems and problems[0].startswith("status.nomination.victims")
    ok = TrainingJobStatus.model_validate({"nomination": {**status["nomination"], "victims": ["ns/x@pods", "ns/y"],
                                                          "attempts": {"ns/y": 2}}})
    assert ok.nomination.gangs() == (GangKey("ns", "x", POD_GANG), GangKey("ns", "y"))
    assert ok.nomination.attempt_of(GangKey("ns", "y")) == 2
    assert ok.nomination.pods_of(GangKey("ns", "x", POD_GANG)) == []


def _gpus_bound(c: MemoryCluster) -> Counter:
    per_node: Counter = Counter()
    for body in c.store.objects[PODS].values():
        if node := body["spec"].get("nodeName"):
            per_node[node] += int(body["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0))
    return per_node


def test_a_job_and_a_pod_gang_of_one_name_never_share_the_gpus_assumed_for_either():
    """Found by review: replicas assumed before their pods exist were keyed by namespace/name alone, so the pod gang
    `g` placed after the TrainingJob `g` replaced its assumed replica and a third gang was placed on the same GPUs."""
    c = MemoryCluster(nodes=2)  # two 8-GPU nodes, three 8-GPU gangs
    c.submit(training_job("g", 1))
    create(c, pod("g-0", "g", 1))
    c.submit(training_job("h", 1))
    c.settle(4)
    assert max(_gpus_bound(c).values()) <= 8, _gpus_bound(c)
    assert c.status("h").get("phase") == "Queued" or c.status("g").get("phase") == "Queued"


def test_a_job_and_a_pod_gang_of_one_name_and_shape_leave_the_waiting_line_each_in_turn():
    """Found by review: their places in the waiting line compared equal (no kind), the line removed only the first
    of equals, and a request left behind was placed again each cycle until the cycle failed for everyone."""
    c = MemoryCluster(nodes=2)
    c.submit(training_job("b", 1))
    c.cycle()
    c.tick(5)
    c.submit(training_job("g", 1))
    create(c, pod("g-0", "g", 1))  # the same name, shape and second as the TrainingJob g
    for _ in range(3):
        c.cycle()
        c.tick()
    run(c.admin.delete(TRAININGJOBS, "g", "team-a"))
    run(c.admin.delete(TRAININGJOBS, "b", "team-a"))
    c.submit(training_job("n", 1))
    c.settle(4)
    assert c.status("n").get("phase") in ("Starting", "Running"), c.status("n")
    assert stored(c, "g-0")["spec"].get("nodeName"), "the pod gang g is bound"
    assert not c.controller.room.line.jobs, "nothing is left waiting"
