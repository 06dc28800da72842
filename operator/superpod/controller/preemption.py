"""Preemption in the cycle (the choice itself is core/preempt.py):
- the candidates: every placed gang, with what it holds in the snapshot, the work it would lose (its GPUs times
  the time since its attempt started, status.attemptStartTime) and what protects it: minRuntimeSeconds (its
  queue's, or the job's own if less) not yet run, or preempted twice within PINGPONG_WINDOW and not yet run PINGPONG_RUN
  since;
- the nominations: a preemptor's status.nomination holds its nodes (pinned: no other job, MIG repartition or
  backfill takes them) until it starts, is deleted, or NOMINATION_TIMEOUT passes (then it is decided again);
- the writes: one plan per preemption, the preemptor's nomination first (the commit point: once it is written, a
  crash or a lost Lease never leads to a second set of victims for the same job), then each victim stopped and
  requeued (its attempt closed and recorded, condition Preempted, pods deleted with its
  preemptionGracePeriodSeconds). A victim still placed while its preemptor's nomination holds is stopped again (a
  write that failed, a leader that died between the two);
- a placed gang whose lost replicas find no node (spec.nodeFailure Replace) preempts the same way, inside the domain
  they are bound to (`replacing`): its nomination holds the freed nodes while it awaits its replacement."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from superpod.controller import job_status
from superpod.controller.actions import Plan
from superpod.controller.job_status import cause_details
from superpod.controller.jobs import JobReader, JobView
from superpod.controller.judge import requeue
from superpod.controller.metering import Labels
from superpod.controller.podgangs import GangNominee, PodGangs
from superpod.controller.snapshot import assumed_key
from superpod.controller.state import ClusterState
from superpod.core.cycle import Decision
from superpod.core.gang_key import GangKey
from superpod.core.model import Snapshot
from superpod.core.phases import ACTIVE, POD_FINISHED, Phase, Reason
from superpod.core.preempt import Nomination, Preempting, Preemption, Running
from superpod.core.request import JobRequest

PINGPONG_WINDOW = 3600.0  # seconds: a gang preempted twice within this ...
PINGPONG_RUN = 600.0  # ... is not chosen again before its attempt has run this long
NOMINATION_TIMEOUT = 600.0  # seconds a preemptor holds its nodes while its victims stop


def running(state: ClusterState, reader: JobReader, gangs: PodGangs, nominated: dict, snap: Snapshot, now: float,
            min_runtime: Callable[[JobView], int], allowed: Callable[[JobRequest], bool],
            min_runtime_of: Callable[[JobRequest], int]) -> list[Running]:
    """The placed gangs `allowed` accepts, as candidates (those a nomination already evicts left out), bound pod
    gangs included. `nominated`: job key -> the view of a job (or pod gang) holding a nomination."""
    evicting = {victim for view in nominated.values() for victim in _in_force(state, reader, gangs, view, now) or ()}
    out = []
    for key, (request, uid, attempt, nodes) in reader.gangs.items():
        view = reader.active.get(key)
        if view is None or key in evicting or not allowed(request):
            continue
        mine = [pod for pod in state.pods_of(key) if pod.owner == uid and pod.attempt == attempt]
        devices = state.dra.devices_of(pod.uid for pod in mine) if state.dra.claims else frozenset()  # (those of
        # kube-scheduler's claims for the pods' nvidia.com/gpu too)
        pods = [pod.key for pod in mine if pod.key in snap.pods]
        pods += [assumed for index in nodes if (assumed := assumed_key(key, index)) in snap.pods]
        gpus = view.units * view.replicas
        started = view.time(view.status.attemptStartTime) or now
        out.append(Running(request, gpus, gpus * max(0.0, now - started), tuple(pods),
                           _protected(view, now, min_runtime(view)), devices))
    return out + gangs.running(state, snap, now, allowed, evicting, min_runtime_of)


def _protected(view: JobView, now: float, min_runtime: int) -> str:
    """Why a placed gang may not be preempted now ("" if it may)."""
    started = view.time(view.status.attemptStartTime) or now
    ran = now - started
    if ran < min_runtime:
        return f"it has run {ran:.0f}s of its minRuntimeSeconds {min_runtime}"
    times = [t.timestamp() for t in view.status.preemptedAt]
    if len(times) >= 2 and times[-1] - times[-2] <= PINGPONG_WINDOW and ran < PINGPONG_RUN:
        return f"it was preempted twice within {PINGPONG_WINDOW:.0f}s and has run {ran:.0f}s since"
    return ""


def _unstopped(reader: JobReader, victim: GangKey, attempt: int | None) -> JobView | None:
    """The victim, if the attempt that was preempted still runs (a later attempt is a new placement)."""
    view = reader.active.get(victim)
    return view if view is not None and view.status.attempt == attempt else None


def _holding(state: ClusterState, reader: JobReader, gangs: PodGangs, victim: GangKey, nomination) -> bool:
    """Whether a victim still holds what it was preempted for: not stopped yet, or its pods still terminate."""
    stopped = not gangs.unstopped(state, victim, nomination.pods_of(victim)) if victim.of_pods else \
        _unstopped(reader, victim, nomination.attempt_of(victim)) is None
    return not stopped or any(pod.deleting and pod.phase not in POD_FINISHED for pod in state.pods_of(victim))


def _in_force(state: ClusterState, reader: JobReader, gangs: PodGangs, view: JobView,
              now: float) -> tuple[str, ...] | None:
    """The victims still holding, if the job's nomination is in force: it waits, and its victims still hold or it
    is younger than NOMINATION_TIMEOUT (a long grace period keeps it: never a second set for the same need)."""
    nomination = view.status.nomination
    if view.phase != Phase.QUEUED and not _awaiting(view):
        return None
    holding = tuple(victim for victim in nomination.gangs() if _holding(state, reader, gangs, victim, nomination))
    return holding if holding or now - nomination.time.timestamp() <= NOMINATION_TIMEOUT else None


def _awaiting(view) -> bool:
    """A placed gang awaiting the replacement of its lost replicas (its nomination holds their nodes)."""
    return view.phase in ACTIVE and getattr(view.status, "replacementDeadline", None) is not None


def nominations(state: ClusterState, reader: JobReader, gangs: PodGangs, nominated: dict,
                now: float) -> dict[str, Nomination]:
    """The waiting jobs' nominations in force, each with the victims that still hold capacity."""
    out = {}
    for key, view in nominated.items():
        holding = _in_force(state, reader, gangs, view, now)
        if holding is not None:
            holder = view.request if view.phase != Phase.QUEUED else None
            out[key] = Nomination(tuple(view.status.nomination.nodes), holding, holder)
    return out


def expired(state: ClusterState, reader: JobReader, gangs: PodGangs, nominated: dict, now: float) -> list[Plan]:
    """Nominations no longer in force, dropped: a job placed or gone from the queue, or one whose victims have all
    stopped and that still did not start within NOMINATION_TIMEOUT (it is decided again)."""
    plans = []
    for view in nominated.values():
        if _in_force(state, reader, gangs, view, now) is not None:
            continue
        why = (f"the gangs it preempted stopped but its nodes were not free within {NOMINATION_TIMEOUT:.0f}s; "
               "decided again" if view.phase == Phase.QUEUED else "")
        if isinstance(view, GangNominee):
            if not view.waiting:  # a waiting gang's expired nomination is left for its next one to replace: two
                plans.append(view.clear(now))  # patches of one pod's annotation in a cycle would race
            continue
        plans.append(Plan(view.key, [view.write(job_status.nomination_dropped(why), now)]))
    return plans


def plans(policy: Preempting, decisions: list[Decision], reader: JobReader, gangs: PodGangs, by_key: Mapping,
          nominated: dict, state: ClusterState, now: float, labels: Callable[[JobView], Labels]) -> list[Plan]:
    """The writes of this cycle's preemptions, and of victims a nomination in force finds still running the
    attempt it preempted (its stop was not written). `by_key`: the views of the jobs and waiting pod gangs."""
    out = []
    for decision in decisions:
        found = policy.chosen.get(decision.job.key)
        view = by_key.get(decision.job.key)
        if not decision.preempts or found is None or view is None:
            continue
        nodes = sorted(found.placement.assignments)
        attempts = {victim: reader.active[victim].status.attempt for victim in decision.preempts
                    if victim in reader.active}
        pods = {victim: gangs.victim_pods(state, victim) for victim in decision.preempts if victim.of_pods}
        nomination = job_status.nominating(nodes, list(decision.preempts), attempts, pods, now)
        plan = view.wait(Reason.PREEMPTING, decision.reason, now, nomination=nomination,
                         **cause_details(decision)) or Plan(view.key)
        out.append(plan)
        for victim in decision.preempts:  # after the nomination, in the same plan: it is the commit point
            if victim.of_pods:
                plan.steps += gangs.stop(state, victim, pods[victim], view.key, decision.job.priority, now).steps
            elif (victim_view := reader.active.get(victim)) is not None:
                plan.steps += _stop(state, victim_view, view, now, labels).steps
    placed = {decision.job.key for decision in decisions if decision.placed}
    for key in policy.nominations.keys() - placed - policy.chosen.keys():
        if (preemptor := nominated.get(key)) is None:
            continue
        nomination = preemptor.status.nomination
        for victim in nomination.gangs():
            if victim.of_pods:
                if gangs.unstopped(state, victim, nomination.pods_of(victim)):
                    out.append(gangs.stop(state, victim, nomination.pods_of(victim), key, _priority(preemptor), now))
            elif (victim_view := _unstopped(reader, victim, nomination.attempt_of(victim))) is not None:
                out.append(_stop(state, victim_view, preemptor, now, labels,
                                 "replace its lost replicas" if _awaiting(preemptor) else "start"))
    return out


def replacing(state: ClusterState, reader: JobReader, gangs: PodGangs, view: JobView, found: Preemption, now: float,
              labels: Callable[[JobView], Labels]) -> tuple[dict, list]:
    """A placed gang's preemption for its lost replicas: its nomination (written first, with its status: the commit
    point) and the steps that stop and requeue its victims."""
    victims = [victim.key for victim in found.victims]
    attempts = {victim: reader.active[victim].status.attempt for victim in victims if victim in reader.active}
    pods = {victim: gangs.victim_pods(state, victim) for victim in victims if victim.of_pods}
    nomination = job_status.nominating(sorted(found.placement.assignments), victims, attempts, pods, now)
    steps = []
    for victim in victims:
        if victim.of_pods:
            steps += gangs.stop(state, victim, pods[victim], view.key, view.request.priority, now).steps
        elif (victim_view := reader.active.get(victim)) is not None:
            steps += _stop(state, victim_view, view, now, labels, "replace its lost replicas").steps
    return nomination, steps


def _priority(view) -> int | str:
    return view.request.priority if isinstance(view.request, JobRequest) else "?"


def _stop(state: ClusterState, victim: JobView, preemptor, now: float, labels: Callable[[JobView], Labels],
          to: str = "start") -> Plan:
    """Stop and requeue a TrainingJob victim (`preemptor`: the view of the job or pod gang that evicts it, `to`: what
    for)."""
    why = f"preempted by {preemptor.key} (priority {_priority(preemptor)}); it waits to run again"
    plan = requeue(state, victim, now, Reason.PREEMPTED, why, labels, "Warning",
                   int(victim.spec("preemptionGracePeriodSeconds")), job_status.preempted(victim.status, why, now))
    return plan.then(preemptor.emit("Normal", Reason.PREEMPTING, f"preempted {victim.key} to {to}"))
