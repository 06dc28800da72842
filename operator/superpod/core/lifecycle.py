"""The life of one placed gang attempt, decided from what is observed: its pods, its nodes and the clock.

Phases: Queued -> Starting (pods created, placement recorded) -> Running (every replica Running) -> Succeeded (every
replica Succeeded) or Failed. A failed pod, a lost node or a deleted pod restarts the whole gang, up to maxRestarts;
not all Running within the startup timeout tears the gang down and requeues it with backoff (not counted as a
restart). Pure: time is passed in, actions are returned, nothing is written here."""

from __future__ import annotations

from dataclasses import dataclass, field

QUEUED, STARTING, RUNNING, SUCCEEDED, FAILED = "Queued", "Starting", "Running", "Succeeded", "Failed"
ACTIVE = (STARTING, RUNNING)

KEEP = "keep"  # nothing to write but maybe the phase
CREATE_MISSING = "create-missing"  # finish a gang whose pods were partly written (an operator crash mid-write)
TEARDOWN = "teardown"  # delete every pod of the attempt


@dataclass(frozen=True)
class Attempt:
    """One gang attempt as observed. `pods` maps replica index to pod phase for the attempt's pods that exist and
    are not being deleted; `lost_nodes` are placed nodes that are gone or not Ready."""

    replicas: int
    phase: str
    created_at: float  # when the attempt was placed
    startup_timeout: float
    restarts: int
    max_restarts: int
    startup_failures: int = 0
    placement: dict[int, str] = field(default_factory=dict)
    pods: dict[int, str] = field(default_factory=dict)
    lost_nodes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Verdict:
    phase: str
    action: str = KEEP
    reason: str = ""
    message: str = ""
    restarts: int = 0
    startup_failures: int = 0
    not_before: float | None = None  # a requeued job is not placed again before this time


def backoff(failures: int, base: float = 10.0, cap: float = 300.0) -> float:
    """Seconds to wait before the next attempt after `failures` consecutive failures (1, 2, ...)."""
    return min(cap, base * 2 ** max(0, failures - 1))


def decide(a: Attempt, now: float) -> Verdict:
    if a.phase not in ACTIVE:
        return Verdict(a.phase, restarts=a.restarts, startup_failures=a.startup_failures)
    failed = sorted(i for i, ph in a.pods.items() if ph == "Failed")
    if failed:
        i = failed[0]
        return _restart(a, now, "PodFailed", f"replica {i} failed on node {a.placement.get(i, '?')}")
    lost = sorted({n for n in a.placement.values() if n in a.lost_nodes})
    if lost:
        return _restart(a, now, "NodeLost", f"node {lost[0]} is gone or not ready")
    missing = sorted(set(range(a.replicas)) - set(a.pods))
    if missing and a.phase == RUNNING:
        return _restart(a, now, "PodDeleted", f"replica {missing[0]}'s pod was deleted")
    if not missing and all(ph == "Succeeded" for ph in a.pods.values()):
        return _same(a, SUCCEEDED, reason="Completed", message=f"all {a.replicas} replicas succeeded")
    if not missing and all(ph in ("Running", "Succeeded") for ph in a.pods.values()):
        return _same(a, RUNNING, reason="Running", message=f"all {a.replicas} replicas running")
    if now - a.created_at > a.startup_timeout:
        running = sum(1 for ph in a.pods.values() if ph == "Running")
        failures = a.startup_failures + 1
        return Verdict(
            QUEUED, TEARDOWN, "StartupTimeout",
            f"only {running} of {a.replicas} replicas were running after {a.startup_timeout:.0f}s; "
            f"requeued, retry in {backoff(failures):.0f}s",
            a.restarts, failures, now + backoff(failures),
        )
    if missing:
        return _same(a, STARTING, CREATE_MISSING, "Starting", f"creating {len(missing)} missing pods")
    return _same(a, STARTING, reason="Starting", message=f"{len(a.pods)} pods created, waiting for all to run")


def _same(a: Attempt, phase: str, action: str = KEEP, reason: str = "", message: str = "") -> Verdict:
    return Verdict(phase, action, reason, message, a.restarts, a.startup_failures)


def _restart(a: Attempt, now: float, reason: str, what: str) -> Verdict:
    restarts = a.restarts + 1
    if restarts > a.max_restarts:
        return Verdict(FAILED, TEARDOWN, reason,
                       f"{what}; maxRestarts ({a.max_restarts}) exhausted", a.restarts, a.startup_failures)
    wait = backoff(restarts)
    return Verdict(QUEUED, TEARDOWN, reason, f"{what}; gang restart {restarts} of {a.max_restarts} in {wait:.0f}s",
                   restarts, a.startup_failures, now + wait)
