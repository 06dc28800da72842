"""A TrainingJob's status changes, in one place (as Kueue's pkg/workload): every status write the operator makes is
one of the typed changes below, applied to the status as read (api/status.py). Nothing else names a status field it
writes, and a change naming a field `TrainingJobStatus` does not have is refused when it is made."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from superpod.api.models import TrainingJobStatus
from superpod.api.status import condition, updated
from superpod.api.times import rfc3339
from superpod.core.cycle import Decision
from superpod.core.gang_key import GangKey
from superpod.core.lifecycle import Verdict
from superpod.core.phases import Cause, Condition, Phase, Reason

FIELDS = frozenset(TrainingJobStatus.model_fields) - {"conditions", "observedGeneration"}  # `applied` sets these
NO_DETAILS = {"reservation": None, "blockedBy": None}  # the status fields that detail why a job waits
UNPLACED = {"placement": None, "domain": None, "domains": None, "replacing": None,
            "replacementDeadline": None}  # a gang no longer placed
UNDONE = {**UNPLACED, "attemptStartTime": None, "nomination": None}  # an attempt that no longer runs
LISTED = 64  # the most nodes status.reservation names (nodeCount says how many it holds), and jobs blockedBy
MAX_FAILURES = 5  # failure records kept in status.failures
MAX_REPLACED = 5  # replacement records kept in status.replaced
KEPT_PREEMPTIONS = 4  # times kept in status.preemptedAt
_ENDED = (Phase.SUCCEEDED, Phase.FAILED)  # a verdict of these ends the job
_RAN = (Phase.RUNNING, Phase.SUCCEEDED)  # a verdict of these says condition Running True

ConditionSet = tuple[str, str, str, str]  # (type, status, reason, message)


@dataclass(frozen=True, slots=True)
class Change:
    """What one status write changes: fields (None removes one) and conditions set."""

    fields: Mapping[str, object] = field(default_factory=dict)
    conditions: tuple[ConditionSet, ...] = ()

    def __post_init__(self) -> None:
        if not self.fields.keys() <= FIELDS:
            raise ValueError(f"not fields of a TrainingJob's status: {sorted(self.fields.keys() - FIELDS)}")

    def __or__(self, other: Change) -> Change:
        """Both changes, `other`'s fields over these."""
        return Change({**self.fields, **other.fields}, self.conditions + other.conditions)

    def differs(self, raw: dict) -> bool:
        """Whether a field it sets differs from the status as read."""
        return any(raw.get(name) != value for name, value in self.fields.items())


NO_CHANGE = Change()  # a write of the status as read (its damaged fields dropped); or nothing more


def applied(raw: dict, change: Change, now: float, generation: int | None) -> dict:
    """The whole new status: the readable old fields, the change, the generation it was computed from."""
    fields = change.fields
    if fields.get("phase") not in (None, Phase.QUEUED):  # what it waited for ends with the waiting
        fields = {**NO_DETAILS, **fields}
    setting = {kind for kind, *_ in change.conditions}
    conds = [c for c in raw.get("conditions") or [] if c.get("type") != Condition.OPERATOR_ERROR
             or Condition.OPERATOR_ERROR in setting]  # a regular write clears an earlier error
    for kind, status, reason, message in change.conditions:
        conds = condition(conds, kind, status, reason, message, now)
    return updated(raw, {**fields, "conditions": conds or None, "observedGeneration": generation})


@dataclass(frozen=True)
class Closing:
    """An attempt's books closed: the attempts through `attempt` accounted, `finished` GPU-seconds of them in all."""

    attempt: int
    finished: float


def faulted(raw: dict, what: str) -> Change | None:
    """A bug met the job: condition OperatorError saying `what` (None: its status says so already)."""
    if any(c.get("type") == Condition.OPERATOR_ERROR and c.get("message") == what for c in raw.get("conditions") or []):
        return None
    return Change(conditions=((Condition.OPERATOR_ERROR, "True", Reason.INTERNAL_ERROR, what),))


def invalid(reason: str, why: str) -> Change:
    """Invalid: it cannot run as written; no placement."""
    return Change({"phase": Phase.INVALID, "reason": reason, "message": why, **UNPLACED},
                  ((Condition.INVALID, "True", reason, why),))


def holds(raw: dict, details: Mapping, nomination: dict | None = None) -> bool:
    """Whether the status as read has these details of a waiting job (None: absent) and this nomination."""
    return (all(raw.get(name) == value for name, value in details.items())
            and (nomination is None or raw.get("nomination") == nomination))


def waiting(raw: dict, cause: Cause, details: Mapping, gpus: str, replicas: int, now: float,
            nomination: dict | None = None) -> Change:
    """Queued for `cause` (its code, its sentence), with its details (`cause_details`) and, while the gangs it
    preempted stop, its nomination."""
    more = details if nomination is None else {**details, "nomination": nomination}
    return Change({"phase": Phase.QUEUED, "reason": cause.code, "message": cause.message,
                   "queuedAt": _queued_at(raw, now), "gpus": gpus, "ready": _ready(0, replicas), **more},
                  ((Condition.SCHEDULABLE, "False", cause.code, cause.message),))


def cause_details(decision: Decision) -> dict:
    """status.reservation and status.blockedBy of a waiting job (None: it has none). The expected start is said to
    the minute: a prediction that moves with the clock does not make a new status every cycle."""
    if not decision.reserved and not decision.blocked_by:  # most waiting jobs: nothing to build
        return NO_DETAILS
    reservation = None
    if decision.reserved:
        nodes = decision.reserved_nodes
        reservation = {"domain": decision.reserved, "nodes": list(nodes[:LISTED]), "nodeCount": len(nodes)}
        if decision.expected_start is not None:
            reservation["expectedStart"] = rfc3339(round(decision.expected_start / 60) * 60)
    blocked = [reference(key) for key in decision.blocked_by[:LISTED]]
    return {"reservation": reservation, "blockedBy": blocked or None}


def reference(key: GangKey) -> dict:
    """A job of status.blockedBy: a TrainingJob, or a gang of pods (by its gang's name, or its pod's)."""
    return {"kind": "PodGang" if key.of_pods else "TrainingJob", "namespace": key.namespace, "name": key.name}


def nominating(nodes: list[str], victims: list[GangKey], attempts: dict[GangKey, int],
               pods: dict[GangKey, list[str]], now: float) -> dict:
    """status.nomination of a job that preempts: the nodes held for it, its victims (a TrainingJob's attempt, a pod
    gang's pods), when."""
    return {"nodes": nodes, "victims": [victim.text for victim in victims],
            "attempts": {victim.text: attempt for victim, attempt in attempts.items()},
            "pods": {victim.text: uids for victim, uids in pods.items()}, "time": rfc3339(now)}


def nomination_dropped(why: str = "") -> Change:
    """Its nomination no longer held; with `why`, it is said to be decided again."""
    said = {"reason": Reason.NOMINATION_EXPIRED, "message": why, **NO_DETAILS} if why else {}
    return Change({"nomination": None, **said})


def placed(raw: dict, attempt: int, assignments: dict[str, list[int]], domains: dict, domain: str | None,
           message: str, gpus: str, replicas: int, admitted: dict, now: float) -> Change:
    """Starting: attempt `attempt` placed on `assignments` (node -> replica indexes), admitted under `admitted`."""
    return Change({"phase": Phase.STARTING, "attempt": attempt, "placement": assignments, "domains": domains,
                   "domain": domain, "attemptStartTime": rfc3339(now), "reason": Reason.PLACED, "message": message,
                   "gpus": gpus, "ready": _ready(0, replicas), "notBefore": None, "nomination": None,
                   "queuedAt": _queued_at(raw, now), "admitted": admitted},
                  ((Condition.SCHEDULABLE, "True", Reason.PLACED, message),))


def refused(why: str) -> Change:
    """Invalid after the API server refused the replica pod as written: the placement undone."""
    return Change({"phase": Phase.INVALID, "reason": Reason.POD_REFUSED, "message": why, **UNDONE},
                  ((Condition.SCHEDULABLE, "False", Reason.POD_REFUSED, why),
                   (Condition.INVALID, "True", Reason.POD_REFUSED, why)))


def write_failed(why: str, startup_failures: int, not_before: float) -> Change:
    """Back in the queue after its gang could not be written: the placement undone, not placed before `not_before`."""
    return Change({"phase": Phase.QUEUED, "reason": Reason.WRITE_FAILED, "message": why, **UNDONE,
                   "startupFailures": startup_failures, "notBefore": rfc3339(not_before)},
                  ((Condition.SCHEDULABLE, "False", Reason.WRITE_FAILED, why),))


def judged(status: TrainingJobStatus, raw: dict, verdict: Verdict, running: int, replicas: int, now: float,
           closing: Closing | None = None) -> Change:
    """What core.lifecycle's verdict on a placed gang says (`running` of its replicas run), with the books of the
    attempt it ends (`closing`)."""
    phase, ended = verdict.phase, verdict.phase in _ENDED
    fields: dict = {"phase": phase, "reason": verdict.reason, "message": verdict.message,
                    "restarts": verdict.restarts, "interruptions": verdict.interruptions,
                    "startupFailures": verdict.startup_failures, "containerErrors": verdict.container_errors,
                    "ready": _ready(running, replicas)}
    if verdict.interruptions_in_a_row is not None:
        fields["interruptionsInARow"] = verdict.interruptions_in_a_row
    if closing is not None:
        fields.update(_closed(closing))
    if phase == Phase.RUNNING and not status.startTime:
        fields["startTime"] = rfc3339(now)
    if ended:
        fields["completionTime"] = rfc3339(now)
    if phase == Phase.QUEUED:
        fields.update(UNDONE, notBefore=rfc3339(verdict.not_before) if verdict.not_before else None)
    if verdict.failure:
        record = {**verdict.failure, "attempt": status.attempt, "time": rfc3339(verdict.failure["time"])}
        fields["failures"] = [*(raw.get("failures") or []), record][-MAX_FAILURES:]
    running_condition = (Condition.RUNNING, "True" if phase in _RAN else "False", verdict.reason or phase,
                         verdict.message)
    if ended:
        return Change(fields, (running_condition, (Condition(phase), "True", verdict.reason, verdict.message)))
    return Change(fields, (running_condition,))


def replaced(raw: dict, replacements: int, assignments: dict[str, list[int]], domains: dict, domain: str | None,
             records: list[dict], replacing: list[int], message: str) -> Change:
    """Replicas of lost nodes made again on others (`records`: replica, lostNode, node, time): the new placement,
    the replicas being made again, one replacement more per replica."""
    return Change({"placement": assignments, "domains": domains, "domain": domain,
                   "replacements": replacements + len(records),
                   "replaced": [*(raw.get("replaced") or []), *records][-MAX_REPLACED:], "replacing": replacing,
                   "replacementDeadline": None, "nomination": None, "reason": Reason.REPLACING, "message": message})


def replacing(left: list[int]) -> Change:
    """The replicas still being made again on their new node (none: the field goes), and no replacement awaited."""
    return Change({"replacing": list(left) or None, "replacementDeadline": None})


def awaiting_replacement(why: str, deadline: float, nomination: dict | None = None) -> Change:
    """Replicas of a lost node wait for a node to take them until `deadline`, when the gang restarts; with the
    `nomination` of the nodes its preemption frees for them."""
    more = {"nomination": nomination} if nomination is not None else {}
    return Change({"reason": Reason.AWAITING_REPLACEMENT, "message": why, "replacementDeadline": rfc3339(deadline),
                   **more})


def used(gpu_seconds: float) -> Change:
    """The GPU-seconds of all its attempts, the running one up to now."""
    return Change({"gpuSeconds": gpu_seconds})


def requeued(reason: str, why: str, closing: Closing | None) -> Change:
    """A placed gang stopped and back in the queue, its attempt's books closed (`closing`)."""
    return Change({"phase": Phase.QUEUED, "reason": reason, "message": why, **UNDONE,
                   **(_closed(closing) if closing is not None else {})},
                  ((Condition.RUNNING, "False", reason, why),))


def preempted(status: TrainingJobStatus, why: str, now: float) -> Change:
    """One preemption more, now (the last KEPT_PREEMPTIONS times kept), and condition Preempted."""
    times = [rfc3339(t.timestamp()) for t in status.preemptedAt][-(KEPT_PREEMPTIONS - 1):] + [rfc3339(now)]
    return Change({"preemptions": status.preemptions + 1, "preemptedAt": times},
                  ((Condition.PREEMPTED, "True", Reason.PREEMPTED, why),))


def abandoned(attempt: int, closing: Closing | None) -> Change:
    """An attempt newer than the status knew, taken (its number never used again) and its books closed."""
    return Change({"attempt": attempt, **(_closed(closing) if closing is not None else {})})


def _closed(closing: Closing) -> dict:
    return {"finishedGpuSeconds": closing.finished, "accountedAttempts": closing.attempt,
            "gpuSeconds": closing.finished}


def _queued_at(raw: dict, now: float) -> str:
    """When it entered the queue: as its status says, else now."""
    return raw.get("queuedAt") or rfc3339(now)


def _ready(running: int, replicas: int) -> str:
    return f"{running}/{replicas}"
