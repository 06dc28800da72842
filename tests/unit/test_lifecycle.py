import pytest

from superpod.core.lifecycle import (
    CREATE_MISSING,
    FAILED,
    KEEP,
    QUEUED,
    RUNNING,
    STARTING,
    SUCCEEDED,
    TEARDOWN,
    Attempt,
    backoff,
    decide,
)

PLACEMENT = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}


def attempt(pods, phase=STARTING, lost=(), restarts=0, max_restarts=3, created=0.0, failures=0):
    return Attempt(replicas=4, phase=phase, created_at=created, startup_timeout=60, restarts=restarts,
                   max_restarts=max_restarts, startup_failures=failures, placement=PLACEMENT, pods=pods,
                   lost_nodes=frozenset(lost))


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
])
def test_decide(observed, now, phase, action, reason):
    v = decide(observed, now)
    assert (v.phase, v.action, v.reason) == (phase, action, reason)


def test_pod_failure_restarts_the_gang_with_backoff_and_names_the_replica():
    v = decide(attempt({**ALL_RUNNING, 2: "Failed"}, RUNNING, restarts=1), now=100)
    assert v.restarts == 2
    assert v.not_before == 100 + backoff(2)
    assert "replica 2 failed on node n2" in v.message and "restart 2 of 3" in v.message


def test_restarts_exhausted_fails_the_job():
    v = decide(attempt({**ALL_RUNNING, 0: "Failed"}, RUNNING, restarts=3), now=100)
    assert (v.phase, v.action, v.restarts) == (FAILED, TEARDOWN, 3)
    assert "maxRestarts (3) exhausted" in v.message


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
