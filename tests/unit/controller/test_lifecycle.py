from dataclasses import replace

import pytest

from superpod.core.lifecycle import (
    CONTAINER_ERROR_LIMIT,
    CREATE_MISSING,
    KEEP,
    REPLACE,
    TEARDOWN,
    Attempt,
    PodState,
    backoff,
    decide,
)
from superpod.core.phases import Phase

QUEUED, STARTING, RUNNING, SUCCEEDED, FAILED = (Phase.QUEUED, Phase.STARTING, Phase.RUNNING, Phase.SUCCEEDED,
                                                Phase.FAILED)
PLACEMENT = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}


def pods(phases: dict[int, str]) -> dict[int, PodState]:
    return {i: PodState(ph, PLACEMENT[i], exit_code=1 if ph == "Failed" else None) for i, ph in phases.items()}


def attempt(phases, phase=STARTING, lost=(), restarts=0, max_restarts=3, created=0.0, failures=0, not_ready=None,
            **more):
    return Attempt(replicas=4, phase=phase, created_at=created, startup_timeout=60, restarts=restarts,
                   max_restarts=max_restarts, startup_failures=failures, placement=PLACEMENT,
                   pods=phases if all(isinstance(p, PodState) for p in phases.values()) else pods(phases),
                   lost_nodes=frozenset(lost), not_ready=not_ready or {}, **more)


ALL_RUNNING = dict.fromkeys(range(4), "Running")


@pytest.mark.parametrize(("observed", "now", "phase", "action", "reason"), [
    (attempt(dict.fromkeys(range(4), "Pending")), 10, STARTING, KEEP, "Starting"),
    (attempt({0: "Running", 1: "Pending"}), 10, STARTING, CREATE_MISSING, "Starting"),
    (attempt(ALL_RUNNING), 10, RUNNING, KEEP, "Running"),
    (attempt({**ALL_RUNNING, 3: "Succeeded"}, RUNNING), 10, RUNNING, KEEP, "Running"),
    (attempt(dict.fromkeys(range(4), "Succeeded"), RUNNING), 10, SUCCEEDED, KEEP, "Completed"),
    (attempt({**ALL_RUNNING, 2: "Failed"}, RUNNING), 10, QUEUED, TEARDOWN, "PodFailed"),
    (attempt(ALL_RUNNING, RUNNING, lost={"n2"}), 10, QUEUED, TEARDOWN, "NodeLost"),
    (attempt({0: "Running", 1: "Running", 2: "Running"}, RUNNING), 10, QUEUED, TEARDOWN, "PodDeleted"),
    (attempt({0: "Running", 1: "Pending"}), 61, QUEUED, TEARDOWN, "StartupTimeout"),
    (attempt(ALL_RUNNING, RUNNING), 10_000, RUNNING, KEEP, "Running"),  # the timeout only guards startup
    (attempt(ALL_RUNNING, RUNNING, not_ready={"n2": 30.0}), 10, RUNNING, KEEP, "NodeNotReady"),
])
def test_decide(observed, now, phase, action, reason):
    v = decide(observed, now)
    assert (v.phase, v.action, v.reason) == (phase, action, reason)


def test_pod_failure_restarts_the_gang_with_backoff_and_names_the_replica_and_exit_code():
    v = decide(attempt({**ALL_RUNNING, 2: "Failed"}, RUNNING, restarts=1), now=100)
    assert v.restarts == 2
    assert v.not_before == 100 + backoff(2)
    assert "replica 2 failed on node n2 with exit code 1" in v.message and "restart 2 of 3" in v.message
    assert v.failure == {"reason": "PodFailed", "time": 100, "replica": 2, "node": "n2", "exitCode": 1}


def test_restarts_exhausted_fails_the_job():
    v = decide(attempt({**ALL_RUNNING, 0: "Failed"}, RUNNING, restarts=3), now=100)
    assert (v.phase, v.action, v.restarts) == (FAILED, TEARDOWN, 3)
    assert "maxRestarts (3) exhausted" in v.message


def test_interruptions_restart_without_spending_max_restarts():
    evicted = {**pods(ALL_RUNNING), 1: PodState("Failed", "n1", exit_code=137, disrupted=True, message="Evicted")}
    for observed in (attempt(evicted, RUNNING, restarts=3), attempt(ALL_RUNNING, RUNNING, lost={"n1"}, restarts=3)):
        v = decide(observed, now=100)
        assert (v.phase, v.action, v.restarts, v.interruptions) == (QUEUED, TEARDOWN, 3, 1)
        assert "not counted against maxRestarts" in v.message


def test_a_not_ready_node_within_the_grace_keeps_the_gang():
    v = decide(attempt(ALL_RUNNING, RUNNING, not_ready={"n1": 120.0}, not_ready_grace=300), now=100)
    assert (v.phase, v.action) == (RUNNING, KEEP)
    assert v.message == ("node n1 is not ready; the gang restarts elsewhere at 1970-01-01T00:04:40Z unless it is back "
                         "by then"), "the deadline (since 100-120, plus 300s): the same message every cycle"


def test_a_finished_gang_is_finished_whatever_happens_to_its_nodes_then():
    """Review finding: a completed gang whose node went away (an autoscaler, a rental node powered off while the
    operator was down) was restarted and ran a second time."""
    done = dict.fromkeys(range(4), "Succeeded")
    v = decide(attempt(done, RUNNING, lost={"n1", "n2"}), now=100)
    assert (v.phase, v.reason) == (SUCCEEDED, "Completed")
    half = {0: "Succeeded", 1: "Succeeded", 2: "Running", 3: "Running"}
    assert decide(attempt(half, RUNNING, lost={"n1"}), now=100).phase == RUNNING, "n1's replicas are done"
    assert decide(attempt(half, RUNNING, lost={"n2"}), now=100).reason == "NodeLost"


def test_interruptions_in_a_row_are_capped():
    from superpod.core.lifecycle import INTERRUPTION_LIMIT

    v = decide(attempt(ALL_RUNNING, RUNNING, lost={"n1"}, interruptions=INTERRUPTION_LIMIT - 1,
                       interruptions_in_a_row=INTERRUPTION_LIMIT - 1), now=100)
    assert (v.phase, v.action) == (FAILED, TEARDOWN) and "interrupted 20 times in a row" in v.message


def test_a_long_job_that_loses_a_node_now_and_then_restarts_at_once_however_often_it_did_before():
    """A 54-day run on thousands of nodes is interrupted hundreds of times: each restart after a stable run waits the
    first backoff and starts a new row, so the job never runs out of interruptions."""
    from superpod.core.lifecycle import STABLE_RUN, backoff

    lifetime, in_a_row, now = 0, 0, 0.0
    for _ in range(100):
        now += STABLE_RUN + 3600
        v = decide(attempt(ALL_RUNNING, RUNNING, lost={"n1"}, created=now - STABLE_RUN - 3600,
                           interruptions=lifetime, interruptions_in_a_row=in_a_row), now=now)
        lifetime, in_a_row = v.interruptions, v.interruptions_in_a_row
        assert (v.phase, v.not_before, in_a_row) == (QUEUED, now + backoff(1), 1)
    assert lifetime == 100
    quick = decide(attempt(ALL_RUNNING, RUNNING, lost={"n1"}, created=now - 60, interruptions=lifetime,
                           interruptions_in_a_row=3), now=now)
    assert (quick.interruptions, quick.interruptions_in_a_row, quick.not_before) == (101, 4, now + backoff(4))


def test_container_errors_fail_the_job_after_a_few_attempts():
    bad = {**pods(ALL_RUNNING), 3: PodState("Pending", "n2", waiting_reason="ImagePullBackOff",
                                            message='Back-off pulling image "trainr"')}
    v = decide(attempt(bad), now=5)
    assert (v.phase, v.action, v.container_errors) == (QUEUED, TEARDOWN, 1)
    assert 'replica 3 cannot start: ImagePullBackOff: Back-off pulling image "trainr"' in v.message
    v = decide(attempt(bad, container_errors=CONTAINER_ERROR_LIMIT - 1), now=5)
    assert (v.phase, v.action) == (FAILED, TEARDOWN)
    assert f"gave up after {CONTAINER_ERROR_LIMIT} attempts" in v.message


def test_startup_timeout_requeues_without_spending_a_restart():
    v = decide(attempt({0: "Running"}, failures=2), now=61)
    assert (v.restarts, v.startup_failures) == (0, 3)
    assert v.not_before == 61 + backoff(3)
    assert "only 1 of 4 replicas were running after 60s" in v.message


def test_finished_phases_are_left_alone():
    for phase in (SUCCEEDED, FAILED, QUEUED):
        v = decide(attempt({0: "Failed"}, phase), now=1e9)
        assert (v.phase, v.action) == (phase, KEEP)


def test_backoff_doubles_and_is_capped():
    assert [backoff(n) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert backoff(50) == 300


def test_an_attempt_whose_pod_names_an_earlier_job_still_holds_is_placed_again_under_a_new_one():
    """Found by bench/state_machine.py (2,000 examples): a job deleted and made again under its name while its old
    pods terminated, placed while the operator had not seen them (events lost), took attempt 1 again: its pods'
    names were the old pods', every create was refused, and the gang held its nodes creating "missing" pods until
    the old pods were gone or its startup timed out. Placed again at once, under an attempt no pod has."""
    from superpod.k8s.api import PODS, TRAININGJOBS
    from tests.unit.memory_cluster import MemoryCluster, run, training_job

    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("j4", 3, 4))
    c.settle(3)
    old = c.job("j4")
    assert c.status("j4")["phase"] == "Running"
    c.store.delete_now(TRAININGJOBS, "team-a/j4")  # its pods terminate (30 s of grace)
    c.submit({key: old[key] for key in ("apiVersion", "kind", "spec")} | {"metadata": {"name": "j4",
                                                                                     "namespace": "team-a"}})
    made = c.job("j4")
    placed = {"phase": "Starting", "attempt": 1, "placement": old["status"]["placement"], "reason": "Placed",
              "attemptStartTime": old["status"]["attemptStartTime"], "queuedAt": old["status"]["queuedAt"]}
    run(c.admin.replace_status(TRAININGJOBS, {**made, "status": placed}))  # as written while the old pods were unseen
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in c.store.objects[PODS].values()} == {
        old["metadata"]["uid"]}, "the dangerous moment: attempt 1's names belong to the old job's pods"
    c.settle(5)
    status, uid = c.status("j4"), c.job("j4")["metadata"]["uid"]
    mine = [p for p in c.store.objects[PODS].values() if p["metadata"]["ownerReferences"][0]["uid"] == uid
            and not p["metadata"].get("deletionTimestamp")]
    assert status["phase"] == "Running" and status["attempt"] >= 2 and len(mine) == 3, status
    assert any(reason == "WriteFailed" for reason, _ in c.events("j4"))


def test_a_lost_node_of_a_gang_that_replaces_names_its_replicas_and_keeps_the_attempt():
    v = decide(attempt(ALL_RUNNING, RUNNING, lost=("n2",), replace=True), 100)
    assert (v.phase, v.action, v.lost, v.interruptions) == (RUNNING, REPLACE, (2, 3), 0)
    v = decide(attempt(ALL_RUNNING, RUNNING, lost=("n2",)), 100)
    assert (v.phase, v.action) == (QUEUED, TEARDOWN), "RestartGang: the whole gang"


def test_replace_restarts_when_no_replica_survives_or_the_deadline_passed():
    v = decide(attempt(ALL_RUNNING, RUNNING, lost=("n1", "n2"), replace=True), 100)
    assert (v.action, v.reason) == (TEARDOWN, "NodeLost"), "nothing left to keep"
    v = decide(attempt(ALL_RUNNING, RUNNING, lost=("n2",), replace=True, replace_by=100.0), 100)
    assert v.action == TEARDOWN and "no node to replace it was found by" in v.message and v.interruptions == 1
    v = decide(attempt(ALL_RUNNING, RUNNING, lost=("n2",), replace=True, replace_by=101.0), 100)
    assert v.action == REPLACE


def test_a_replica_being_made_again_is_created_not_a_deletion_and_starts_from_its_replacement():
    observed = attempt({0: "Running", 1: "Running", 3: "Running"}, RUNNING, replace=True, replacing=frozenset({2}),
                       replaced_at=1000.0)
    v = decide(observed, 1030)
    assert (v.phase, v.action, v.reason) == (RUNNING, CREATE_MISSING, "Replacing"), "not PodDeleted"
    v = decide(replace_attempt(observed, {**ALL_RUNNING, 2: "Pending"}), 1030)
    assert (v.action, v.reason) == (KEEP, "Replacing"), "the startup timeout counts from the replacement"
    assert decide(replace_attempt(observed, {**ALL_RUNNING, 2: "Pending"}), 1061).reason == "StartupTimeout"
    assert decide(attempt({0: "Running", 1: "Running", 3: "Running"}, RUNNING), 100).reason == "PodDeleted"


def replace_attempt(observed: Attempt, phases: dict[int, str]) -> Attempt:
    return replace(observed, pods=pods(phases))
