"""A gang's identity: one key for TrainingJobs, pod gangs and pods alone, and its one written form."""

from __future__ import annotations

import pytest

from superpod.api.models import TrainingJobStatus
from superpod.api.podgang import grouping
from superpod.api.status import read_status
from superpod.core.gang_key import POD, POD_GANG, GangKey


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
