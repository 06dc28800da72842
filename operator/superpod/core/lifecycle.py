"""The life of one placed gang attempt, judged from what is observed: its pods, its nodes and the clock.

Queued -> Starting (placement recorded, pods created) -> Running (every replica Running) -> Succeeded (every replica
Succeeded) or Failed. A replica that exits non-zero is the user's failure: the whole gang restarts, up to
maxRestarts. A node that is gone or stays NotReady past a grace period, or a replica deleted or evicted by someone
else, is an interruption by the infrastructure: the gang restarts without using up maxRestarts; a gang that asks
for it (`replace`) has only the replicas of a lost node made again elsewhere, unless none survives or no node was
found for them by `replace_by`. Image and container
config errors tear the attempt down at once and fail the job after CONTAINER_ERROR_LIMIT attempts; not all replicas
Running within the startup timeout requeues with backoff. An attempt placed longer ago than its runtime limit is
stopped and the job fails (MaxRuntimeExceeded): a limit reached is no failure to retry. Pure: time is passed in, the
verdict is data."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from superpod.core.phases import ACTIVE, Phase, Reason
from superpod.core.runtime_limit import RuntimeLimit

KEEP = "keep"  # nothing to do but maybe write the phase
CREATE_MISSING = "create-missing"  # finish a gang whose pods were partly written (an operator crash mid-write)
TEARDOWN = "teardown"  # delete every live pod of the attempt
REPLACE = "replace"  # make the replicas of lost nodes (Verdict.lost) again on other nodes; the others run on

CONTAINER_ERROR_LIMIT = 3
NOT_READY_GRACE = 300.0  # as Kubernetes' default toleration of an unreachable or not-ready node
INTERRUPTION_LIMIT = 20  # a gang interrupted this often in a row fails: something keeps taking it apart
STABLE_RUN = 600.0  # an attempt that ran this long before its interruption starts a new row (backoff and limit)
# Waiting reasons a kubelet reports when the pod spec itself cannot run (the image name, a missing ConfigMap...).
CONTAINER_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                              "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})


@dataclass(frozen=True)
class PodState:
    """One replica's pod as observed."""

    phase: str  # Pending | Running | Succeeded | Failed
    node: str | None = None
    exit_code: int | None = None  # of the first container that terminated non-zero
    message: str = ""  # termination message, status message or waiting message
    waiting_reason: str = ""  # a container's waiting reason (ErrImagePull, ...)
    disrupted: bool = False  # evicted, preempted or rejected by the kubelet: not the user's failure


@dataclass(frozen=True)
class Attempt:
    """One gang attempt as observed. `pods` maps replica index to the attempt's pods that exist and are not being
    deleted; `lost_nodes` are placed nodes that are gone or NotReady past the grace period; `not_ready` are placed
    nodes NotReady within it (node -> seconds since)."""

    replicas: int
    phase: str
    created_at: float  # when the attempt was placed
    startup_timeout: float
    max_restarts: int
    restarts: int = 0
    interruptions: int = 0
    startup_failures: int = 0
    container_errors: int = 0
    interruptions_in_a_row: int = 0
    placement: dict[int, str] = field(default_factory=dict)
    pods: dict[int, PodState] = field(default_factory=dict)
    lost_nodes: frozenset[str] = frozenset()
    not_ready: dict[str, float] = field(default_factory=dict)
    not_ready_grace: float = NOT_READY_GRACE
    deleted: frozenset[int] = frozenset()  # replicas whose pods someone else is deleting (or evicting)
    limit: RuntimeLimit | None = None  # how long after created_at it is stopped (None: never)
    replace: bool = False  # spec.nodeFailure Replace: the replicas of a lost node are made again on another
    replacing: frozenset[int] = frozenset()  # replicas being made again on their new node (their pods may be missing)
    replaced_at: float | None = None  # when the last replacement was decided: its pods' startup counts from then
    replace_by: float | None = None  # lost replicas wait for a node until then; then the gang restarts
    # why a node of `lost_nodes` failed, when not gone or not ready (tainted, a failure condition, GPUs lost, drained);
    # why one of `not_ready` is waited for, when it is ready (fewer GPUs than the gang holds there, within the grace)
    lost_why: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    phase: str
    action: str = KEEP
    reason: str = ""
    message: str = ""
    restarts: int = 0
    interruptions: int = 0
    startup_failures: int = 0
    container_errors: int = 0
    not_before: float | None = None  # a requeued job is not placed again before this time
    failure: dict | None = None  # what ended the attempt, for status.failures
    lost: tuple[int, ...] = ()  # REPLACE: the replicas whose nodes are lost
    interruptions_in_a_row: int | None = None  # set by an interruption (None: as it was)

    @property
    def ends_attempt(self) -> bool:
        return self.action == TEARDOWN or self.phase not in ACTIVE


def backoff(failures: int, base: float = 10.0, cap: float = 300.0) -> float:
    """Seconds to wait before the next attempt after `failures` consecutive failures (1, 2, ...)."""
    return min(cap, base * 2 ** max(0, failures - 1))


def decide(a: Attempt, now: float) -> Verdict:
    if a.phase not in ACTIVE:
        return _same(a, a.phase)
    missing = sorted(set(range(a.replicas)) - set(a.pods))
    done = {i for i, pod in a.pods.items() if pod.phase == "Succeeded"}
    if not missing and len(done) == a.replicas:  # finished, whatever happens to its nodes from now on
        return _same(a, Phase.SUCCEEDED, reason=Reason.COMPLETED, message=f"all {a.replicas} replicas succeeded")
    if a.limit is not None and now >= a.limit.deadline(a.created_at):  # whatever else befell it meanwhile
        message = a.limit.message()
        return Verdict(Phase.FAILED, TEARDOWN, Reason.MAX_RUNTIME_EXCEEDED, message, a.restarts, a.interruptions,
                       a.startup_failures, a.container_errors,
                       failure=_failure(Reason.MAX_RUNTIME_EXCEEDED, now, message=message))
    for i, pod in sorted(a.pods.items()):
        if pod.phase == "Failed" and not (a.replace and pod.disrupted and a.placement.get(i) in a.lost_nodes):
            return _pod_failed(a, now, i, pod)  # (one its failed node evicted is replaced with the node)
    for i, pod in sorted(a.pods.items()):
        if pod.waiting_reason in CONTAINER_ERRORS:
            return _container_error(a, now, i, pod)
    working = {a.placement[i] for i in range(a.replicas) if i not in done and i in a.placement}
    lost = sorted(working & a.lost_nodes)
    if lost:
        return _node_lost(a, now, lost, done)
    gone = sorted(a.deleted) or ([i for i in missing if i not in a.replacing] if a.phase == Phase.RUNNING else [])
    if gone:  # a Starting gang's missing pods are merely not written yet; a deleted one was taken from it
        i = gone[0]
        return _restart(a, now, Reason.POD_DELETED, f"replica {i}'s pod was deleted", replica=i,
                        node=a.placement.get(i))
    down = {node: seconds for node, seconds in a.not_ready.items() if node in working}
    if down:  # the message names the deadline, not a count of seconds: it stays the same while the node is down
        node, seconds = max(down.items(), key=lambda x: (x[1], x[0]))
        deadline = _clock(now - seconds + a.not_ready_grace)
        return _same(a, a.phase, KEEP, Reason.NODE_NOT_READY, f"node {node} {a.lost_why.get(node, 'is not ready')}; "
                     f"the gang restarts elsewhere at {deadline} unless it is back by then")
    if not missing and all(p.phase in ("Running", "Succeeded") for p in a.pods.values()):
        return _same(a, Phase.RUNNING, reason=Reason.RUNNING, message=f"all {a.replicas} replicas running")
    remade = sorted(i for i in a.replacing if i not in a.pods or a.pods[i].phase != "Running")
    started = max(a.created_at, a.replaced_at or 0.0) if remade else a.created_at
    if now - started > a.startup_timeout:
        running = sum(1 for p in a.pods.values() if p.phase == "Running")
        failures = a.startup_failures + 1
        return Verdict(
            Phase.QUEUED, TEARDOWN, Reason.STARTUP_TIMEOUT,
            f"only {running} of {a.replicas} replicas were running after {a.startup_timeout:.0f}s; "
            f"requeued, retry in {backoff(failures):.0f}s",
            a.restarts, a.interruptions, failures, a.container_errors, now + backoff(failures),
            _failure(Reason.STARTUP_TIMEOUT, now, message=f"{running} of {a.replicas} running"),
        )
    if remade:
        return _same(a, a.phase, CREATE_MISSING if missing else KEEP, Reason.REPLACING,
                     f"replica{'s' if len(remade) > 1 else ''} {', '.join(map(str, remade))} being made again on "
                     "another node; the others run on")
    if missing:
        return _same(a, Phase.STARTING, CREATE_MISSING, Reason.STARTING, f"creating {len(missing)} missing pods")
    return _same(a, Phase.STARTING, reason=Reason.STARTING,
                 message=f"{len(a.pods)} pods created, waiting for all to run")


def _node_lost(a: Attempt, now: float, lost: list[str], done: set[int]) -> Verdict:
    """Replicas on `lost` nodes: made again elsewhere when the gang asks for it and some replica runs on, until
    `replace_by`; else the gang restarts."""
    what = f"node {lost[0]} {a.lost_why.get(lost[0], 'is gone or stayed not ready')}"
    replicas = tuple(i for i in range(a.replicas) if i not in done and a.placement.get(i) in a.lost_nodes)
    if a.replace and len(replicas) < a.replicas - len(done):
        if a.replace_by is None or now < a.replace_by:
            return Verdict(a.phase, REPLACE, Reason.NODE_LOST, what, a.restarts, a.interruptions,
                           a.startup_failures, a.container_errors, lost=replicas)
        what += f" and no node to replace it was found by {_clock(a.replace_by)}"
    return _restart(a, now, Reason.NODE_LOST, what, node=lost[0])


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _same(a: Attempt, phase: str, action: str = KEEP, reason: str = "", message: str = "") -> Verdict:
    return Verdict(phase, action, reason, message, a.restarts, a.interruptions, a.startup_failures, a.container_errors)


def _failure(reason: str, now: float, replica: int | None = None, node: str | None = None,
             exit_code: int | None = None, message: str = "") -> dict:
    out = {"reason": str(reason), "time": now, "replica": replica, "node": node, "exitCode": exit_code,
           "message": message[:512]}
    return {k: v for k, v in out.items() if v is not None and v != ""}


def _pod_failed(a: Attempt, now: float, i: int, pod: PodState) -> Verdict:
    where = f"replica {i} failed on node {pod.node or a.placement.get(i, '?')}"
    if pod.exit_code is not None:
        where += f" with exit code {pod.exit_code}"
    if pod.message:
        where += f": {pod.message}"
    if pod.disrupted:
        return _restart(a, now, Reason.POD_DELETED, where, replica=i, node=pod.node, message=pod.message)
    return _restart(a, now, Reason.POD_FAILED, where, replica=i, node=pod.node, exit_code=pod.exit_code,
                    message=pod.message)


def _container_error(a: Attempt, now: float, i: int, pod: PodState) -> Verdict:
    errors = a.container_errors + 1
    what = f"replica {i} cannot start: {pod.waiting_reason}" + (f": {pod.message}" if pod.message else "")
    failure = _failure(Reason.CONTAINER_ERROR, now, i, pod.node, message=f"{pod.waiting_reason}: {pod.message}")
    if errors >= CONTAINER_ERROR_LIMIT:
        return Verdict(Phase.FAILED, TEARDOWN, Reason.CONTAINER_ERROR,
                       f"{what}; gave up after {errors} attempts", a.restarts, a.interruptions, a.startup_failures,
                       errors, failure=failure)
    wait = backoff(errors)
    return Verdict(Phase.QUEUED, TEARDOWN, Reason.CONTAINER_ERROR,
                   f"{what}; attempt {errors} of {CONTAINER_ERROR_LIMIT}, retry in {wait:.0f}s", a.restarts,
                   a.interruptions, a.startup_failures, errors, now + wait, failure)


def _restart(a: Attempt, now: float, reason: Reason, what: str, replica: int | None = None,
             node: str | None = None, exit_code: int | None = None, message: str = "") -> Verdict:
    failure = _failure(reason, now, replica, node, exit_code, message)
    if reason != Reason.POD_FAILED:  # the infrastructure's fault: does not use up maxRestarts
        interruptions = a.interruptions + 1
        # a long job loses nodes now and then: only interruptions in a row back off and use up the limit
        in_a_row = 1 if now - a.created_at >= STABLE_RUN else a.interruptions_in_a_row + 1
        if in_a_row >= INTERRUPTION_LIMIT:
            return Verdict(Phase.FAILED, TEARDOWN, reason, f"{what}; interrupted {in_a_row} times in a row, giving up",
                           a.restarts, interruptions, a.startup_failures, a.container_errors, failure=failure,
                           interruptions_in_a_row=in_a_row)
        wait = backoff(in_a_row)
        return Verdict(Phase.QUEUED, TEARDOWN, reason, f"{what}; gang restarts in {wait:.0f}s (interruption "
                       f"{interruptions}, not counted against maxRestarts)", a.restarts, interruptions,
                       a.startup_failures, a.container_errors, now + wait, failure, interruptions_in_a_row=in_a_row)
    restarts = a.restarts + 1
    if restarts > a.max_restarts:
        return Verdict(Phase.FAILED, TEARDOWN, reason, f"{what}; maxRestarts ({a.max_restarts}) exhausted",
                       a.restarts, a.interruptions, a.startup_failures, a.container_errors, failure=failure)
    wait = backoff(restarts)
    return Verdict(Phase.QUEUED, TEARDOWN, reason,
                   f"{what}; gang restart {restarts} of {a.max_restarts} in {wait:.0f}s", restarts,
                   a.interruptions, a.startup_failures, a.container_errors, now + wait, failure)
