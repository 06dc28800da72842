"""Judge every placed gang (phase Starting or Running) from what is observed: core.lifecycle decides, this turns the
verdict into a plan. An attempt that ends is accounted (its GPU-seconds) in the same status write that ends it, before
any of its pods is deleted, so a crash can neither lose nor double-count it."""

from __future__ import annotations

from dataclasses import dataclass

from superpod.api import manifests
from superpod.api.status import with_failure
from superpod.api.times import rfc3339
from superpod.controller.actions import CreatePods, CreateService, DeletePods, Plan
from superpod.controller.jobs import JobView
from superpod.controller.state import ClusterState, PodInfo
from superpod.core import lifecycle as lc
from superpod.core.accounting import Run, gpu_seconds
from superpod.core.phases import ACTIVE, INTERRUPTIONS, POD_FINISHED, Condition, Phase, Reason


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = manifests.SCHEDULER_NAME
    not_ready_grace: float = 300.0  # seconds a placed node may be NotReady before the gang restarts elsewhere
    writer: str = ""  # who writes (identity/term), stamped on the pods


def own_pods(state: ClusterState, view: JobView) -> list[PodInfo]:
    """The pods of this job object (by owner uid): pods of an earlier job of the same name are not its own."""
    return [p for p in state.pods_of(view.key) if p.owner == view.uid]


def attempt_usage(state: ClusterState, view: JobView, attempt: int, now: float) -> float:
    """GPU-seconds of one attempt's pods so far: observed pods, and pods already gone (their recorded runs)."""
    runs: dict[int, Run] = {}
    prefix = f"{view.key.split('/', 1)[0]}/"
    for i in range(view.replicas):
        key = prefix + manifests.pod_name(view.obj["metadata"]["name"], attempt, i)
        pod = state.pods.get(key)
        if pod is not None and pod.owner == view.uid:
            runs[i] = pod.run
        elif key in state.ended:
            runs[i] = state.ended[key]
    return gpu_seconds(runs.values(), view.units, now)


def judge(state: ClusterState, view: JobView, now: float, settings: Settings, metrics=None) -> Plan | None:
    st = view.status
    attempt, placement = st.attempt, view.placement()
    if sorted(placement) != list(range(view.replicas)):
        return _damaged(view, now)
    mine = own_pods(state, view)
    current = {p.index: p for p in mine if p.attempt == attempt and not p.deleting and p.index is not None}
    lost, not_ready = set(), {}
    for node in set(placement.values()):
        entry = state.nodes.get(node)
        if entry is None or entry.node is None:
            lost.add(node)
        elif entry.not_ready_since is not None:
            if now - entry.not_ready_since >= settings.not_ready_grace:
                lost.add(node)
            else:
                not_ready[node] = now - entry.not_ready_since
    started = view.time(st.attemptStartTime) or now
    verdict = lc.decide(lc.Attempt(
        replicas=view.replicas, phase=st.phase, created_at=started,
        startup_timeout=float(view.obj["spec"].get("startupTimeoutSeconds") or 600),
        max_restarts=int(view.obj["spec"].get("maxRestarts", 3)), restarts=st.restarts,
        interruptions=st.interruptions, startup_failures=st.startupFailures, container_errors=st.containerErrors,
        placement=placement, pods={i: p.state for i, p in current.items()}, lost_nodes=frozenset(lost),
        not_ready=not_ready, not_ready_grace=settings.not_ready_grace,
        deleted=frozenset(p.index for p in mine if p.attempt == attempt and p.deleting and p.index is not None
                          and p.phase not in POD_FINISHED)), now)
    plan = Plan(f"job:{view.key}")
    running = sum(1 for p in current.values() if p.phase == "Running")
    changes: dict = {"phase": verdict.phase, "reason": verdict.reason, "message": verdict.message,
                     "restarts": verdict.restarts, "interruptions": verdict.interruptions,
                     "startupFailures": verdict.startup_failures, "containerErrors": verdict.container_errors,
                     "ready": f"{running}/{view.replicas}"}
    finished, accounted = st.finishedGpuSeconds, st.accountedAttempts
    if verdict.ends_attempt and accounted < attempt:  # close the books on this attempt, once
        finished += attempt_usage(state, view, attempt, now)
        accounted = attempt
        changes.update(finishedGpuSeconds=round(finished, 3), accountedAttempts=accounted)
    so_far = finished + (attempt_usage(state, view, attempt, now) if accounted < attempt else 0.0)
    if verdict.phase == Phase.RUNNING and not st.startTime:
        changes["startTime"] = rfc3339(now)
    if verdict.phase in (Phase.SUCCEEDED, Phase.FAILED):
        changes["completionTime"] = rfc3339(now)
    if verdict.phase == Phase.QUEUED:
        changes.update(placement=None, domain=None, domains=None,
                       notBefore=rfc3339(verdict.not_before) if verdict.not_before else None)
    if verdict.failure:
        record = {**verdict.failure, "attempt": attempt, "time": rfc3339(verdict.failure["time"])}
        changes["failures"] = with_failure(list(view.raw.get("failures") or []), record)
    if _differs(view, changes) or view.problems:
        changes["gpuSeconds"] = round(so_far, 3)
        ok = "True" if verdict.phase in (Phase.RUNNING, Phase.SUCCEEDED) else "False"
        conditions = [(Condition.RUNNING, ok, verdict.reason or verdict.phase, verdict.message)]
        if verdict.phase in (Phase.SUCCEEDED, Phase.FAILED):
            conditions.append((Condition(verdict.phase), "True", verdict.reason, verdict.message))
        plan.then(view.write(changes, now, conditions))
        if verdict.phase != st.phase or verdict.reason != st.reason:
            kind = "Warning" if verdict.action == lc.TEARDOWN else "Normal"
            plan.then(view.emit(kind, verdict.reason, verdict.message))
    if verdict.action == lc.TEARDOWN:
        if metrics and verdict.reason in (Reason.POD_FAILED, *INTERRUPTIONS):
            metrics.gang_restarts.labels("interruption" if verdict.reason in INTERRUPTIONS else "failure").inc()
        live = [(p.key, p.uid) for p in current.values() if p.phase not in POD_FINISHED]
        if live:
            plan.then(DeletePods(tuple(sorted(live))))
    elif verdict.action == lc.CREATE_MISSING:
        missing = sorted(set(placement) - set(current))
        plan.then(CreatePods(view.key, tuple(
            manifests.pod(view.obj, attempt, i, placement[i], settings.scheduler_name, settings.writer)
            for i in missing)))
    if verdict.phase in ACTIVE and verdict.action != lc.TEARDOWN and view.key not in state.services:
        plan.then(CreateService(manifests.headless_service(view.obj), recreate=True),
                  view.emit("Normal", Reason.SERVICE_RECREATED, f"created the headless Service {view.key}"))
    stale = [(p.key, p.uid) for p in mine if p.attempt != attempt and not p.deleting]
    if stale:
        plan.then(DeletePods(tuple(sorted(stale))))
    return plan if plan.steps else None


def _differs(view: JobView, changes: dict) -> bool:
    return any(view.raw.get(k) != v for k, v in changes.items())


def _damaged(view: JobView, now: float) -> Plan:
    """An active job whose placement cannot be read (a damaged status): requeue it, its pods go."""
    why = "status.placement is missing or damaged; the gang is requeued"
    write = view.write({"phase": Phase.QUEUED, "reason": Reason.INTERNAL_ERROR, "message": why, "placement": None,
                        "domain": None, "domains": None}, now,
                       [(Condition.RUNNING, "False", Reason.INTERNAL_ERROR, why)])
    return Plan(f"job:{view.key}", [write, view.emit("Warning", Reason.INTERNAL_ERROR, why)])

