"""A TrainingJob's status changes only through controller/job_status.py: a change naming a field the model does not
have is refused when it is made, and every status its setters make reads back whole as the model says."""

from __future__ import annotations

import pytest

from superpod.api.status import read_status
from superpod.controller import job_status
from superpod.controller.job_status import Change, Closing, applied
from superpod.core.gang_key import GangKey
from superpod.core.lifecycle import TEARDOWN, Verdict
from superpod.core.phases import Cause, Condition, Phase, Reason

NOW = 1_700_000_000.0
RESERVED = {"reservation": {"domain": "leaf su-1", "nodes": ["n1"], "nodeCount": 1},
            "blockedBy": [{"kind": "TrainingJob", "namespace": "team-a", "name": "b"}]}
WAITING = {"phase": "Queued", "reason": "NoRoom", "message": "waiting", "queuedAt": "2023-11-14T22:00:00Z",
           "attempt": 2, "accountedAttempts": 1, "finishedGpuSeconds": 10.0, **RESERVED}


def changes() -> dict[str, Change]:
    failed = Verdict(Phase.FAILED, TEARDOWN, Reason.POD_FAILED, "replica 0 failed", restarts=3,
                     failure={"reason": "PodFailed", "time": NOW, "replica": 0, "node": "n1", "exitCode": 1})
    requeued = Verdict(Phase.QUEUED, TEARDOWN, Reason.STARTUP_TIMEOUT, "not all ran", startup_failures=1,
                       not_before=NOW + 10)
    status = read_status({"status": WAITING})[0]
    closing = Closing(2, 30.5)
    return {
        "as read": job_status.NO_CHANGE,
        "faulted": job_status.faulted(WAITING, "a bug"),
        "invalid": job_status.invalid(Reason.INVALID, "cannot run"),
        "waiting": job_status.waiting(WAITING, Cause(Reason.NO_ROOM, "room for 3"), RESERVED, "16 GPUs", 2, NOW),
        "preempting": job_status.waiting(WAITING, Cause(Reason.PREEMPTING, "preempts b"), job_status.NO_DETAILS,
                                         "16 GPUs", 2, NOW, job_status.nominating(["n1"], [GangKey("team-a", "b")],
                                                                                  {GangKey("team-a", "b"): 1}, {},
                                                                                  NOW)),
        "nomination dropped": job_status.nomination_dropped("decided again"),
        "placed": job_status.placed(WAITING, 3, {"n1": [0, 1]}, {"leaf": ["su-1"]}, "leaf su-1", "placed", "16 GPUs",
                                    2, {"queue": "q", "priority": 0}, NOW),
        "refused": job_status.refused("the API server refused the replica pod"),
        "write failed": job_status.write_failed("writing the gang failed", 1, NOW + 10),
        "failed": job_status.judged(status, WAITING, failed, 1, 2, NOW, closing) | job_status.used(30.5),
        "timed out": job_status.judged(status, WAITING, requeued, 0, 2, NOW, closing),
        "requeued": job_status.requeued(Reason.PREEMPTED, "preempted", closing)
        | job_status.preempted(status, "preempted", NOW),
        "abandoned": job_status.abandoned(3, closing),
    }


@pytest.mark.parametrize("name", list(changes()))
def test_every_status_a_setter_makes_reads_back_whole(name):
    status = applied(WAITING, changes()[name], NOW, 4)
    model, raw, problems = read_status({"status": status})
    assert not problems and raw == status
    assert model.observedGeneration == 4


def test_a_change_naming_a_field_the_status_does_not_have_is_refused():
    with pytest.raises(ValueError, match="phaze"):
        Change({"phaze": Phase.QUEUED})
    with pytest.raises(ValueError, match="conditions"):  # set by `applied`, from the change's conditions
        Change({"conditions": []})


def test_a_job_that_stops_waiting_keeps_no_details_of_why_it_waited():
    assert applied(WAITING, changes()["waiting"], NOW, 1)["reservation"] == RESERVED["reservation"]
    for name in ("invalid", "placed", "failed"):
        assert not applied(WAITING, changes()[name], NOW, 1).keys() & RESERVED.keys(), name


def test_a_regular_write_clears_an_operator_error_and_a_fault_is_said_once():
    faulted = applied(WAITING, job_status.faulted(WAITING, "a bug"), NOW, 1)
    assert [c["type"] for c in faulted["conditions"]] == [Condition.OPERATOR_ERROR]
    assert job_status.faulted(faulted, "a bug") is None
    assert job_status.faulted(faulted, "another bug") is not None
    assert "conditions" not in applied(faulted, job_status.NO_CHANGE, NOW, 1)


def test_the_books_of_an_attempt_are_closed_in_the_write_that_ends_it():
    status = applied(WAITING, changes()["requeued"], NOW, 1)
    assert (status["accountedAttempts"], status["finishedGpuSeconds"], status["gpuSeconds"]) == (2, 30.5, 30.5)
    assert (status["preemptions"], status["phase"]) == (1, Phase.QUEUED)
    assert {c["type"] for c in status["conditions"]} == {Condition.RUNNING, Condition.PREEMPTED}
    assert "placement" not in status and "attemptStartTime" not in status
