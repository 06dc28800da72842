"""Judge every placed gang (phase Starting or Running) from what is observed: core.lifecycle decides, this turns the
verdict into a plan. An attempt that ends is accounted (its GPU-seconds) in the same status write that ends it, before
any of its pods is deleted, so a crash can neither lose nor double-count it."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from superpod.api import manifests
from superpod.api.convert import estimate_key, pod_usage_name, usage_object
from superpod.api.times import rfc3339
from superpod.controller import held_claims, job_status
from superpod.controller.actions import CreatePods, CreateService, DeletePods, Plan, RecordUsage
from superpod.controller.job_status import Change, Closing
from superpod.controller.jobs import JobView
from superpod.controller.metering import (
    Labels,
    apart_usage,
    attempt_bill,
    attempt_pod_runs,
    attempt_usage,
    outside_queues,
)
from superpod.controller.state import ClusterState, PodInfo
from superpod.controller.state.nodes import FAILING
from superpod.core import lifecycle
from superpod.core import replace as replace_nodes
from superpod.core.cycle import RESERVE_AFTER, RESERVE_FROM_UNITS, ReservationRule
from superpod.core.estimates import LIMIT_GRACE, Ordering
from superpod.core.gang_key import GangKey
from superpod.core.model import Node, Snapshot
from superpod.core.phases import ACTIVE, INTERRUPTIONS, POD_FINISHED, Phase, Reason
from superpod.core.preempt import nodes_label
from superpod.core.request import GPU, JobRequest
from superpod.core.runtime_limit import RuntimeLimit
from superpod.core.usage import Record

STATUS_DELAY = 5.0  # seconds (Settings.status_delay)
# NoExecute taints a node's lifecycle controller sets while it is not ready: the not-ready grace covers them
GRACED_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
REPLACE_DEADLINE = 300.0  # seconds (Settings.replace_deadline)
REPLACE = "Replace"  # spec.nodeFailure: make the replicas of a lost node again elsewhere
# (gang, its lost replicas, nodes held for others) -> its nomination and the steps that stop its victims, when a
# preemption frees nodes for them
Preempt = Callable[[JobView, list[int], Collection[str]], tuple[dict, list] | None]


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = manifests.SCHEDULER_NAME
    not_ready_grace: float = lifecycle.NOT_READY_GRACE  # seconds a placed node may be NotReady before the restart
    writer: str = ""  # who writes (identity/term), stamped on the pods
    usage_half_life: float = 7 * 86400.0  # seconds: a queue's past usage halves in this (the surplus order)
    preemption: bool = True  # a blocked job may evict lower-priority or borrowing gangs (core/preempt.py)
    # Seconds a placed gang's status may wait after its pods are written: a gang whose pods all run by then is
    # written once, Running, instead of Starting then Running (a status write costs the API server 2-4 pod creates).
    status_delay: float = STATUS_DELAY
    # which blocked jobs hold reservations (core/cycle.py)
    reserving: ReservationRule = ReservationRule(after=RESERVE_AFTER, from_units=RESERVE_FROM_UNITS)
    ordering: Ordering = Ordering()  # jobs of one priority by arrival or by predicted service (core/estimates.py)
    # Seconds the replicas of a lost node wait for a node to replace it (spec.nodeFailure Replace); then the gang
    # restarts.
    replace_deadline: float = REPLACE_DEADLINE
    # Node conditions (type, status) that mean the node failed, e.g. ("GpuUnhealthy", "True"): its gangs lose it.
    failure_conditions: tuple[tuple[str, str], ...] = ()
    # (level, count): in each domain of that level, `count` wholly free nodes kept for replacements (core/spares.py)
    spares: tuple[str, int] | None = None
    # Seconds: a job whose runtime limit is at most this may run on spares (None: the replace deadline, so a spare
    # lent out is free again before a replacement waiting for it restarts its gang).
    spare_runtime: float | None = None


def replica_pod(state: ClusterState, view: JobView, attempt: int, index: int, node: str, settings: Settings) -> dict:
    """Replica `index`'s pod of the attempt, for `node` (kube-scheduler binds it where the node's DRA devices serve
    its nvidia.com/gpu: manifests.pod)."""
    entry = state.nodes.get(node)
    return manifests.pod(view.obj, attempt, index, node, settings.scheduler_name, settings.writer,
                         served=entry is not None and entry.node is not None and entry.node.served)


@dataclass(frozen=True)
class Lost:
    """A placed gang whose replicas on lost nodes (`verdict.lost`) are to be made again elsewhere: decided once the
    cycle's snapshot is known (`replacement`)."""

    view: JobView
    verdict: lifecycle.Verdict


def revisit_at(state: ClusterState, view: JobView, now: float, settings: Settings,
               limit: RuntimeLimit | None = None) -> float:
    """When time alone may change what `judge` says of a placed job while nothing of it, its pods or its nodes
    changes: its startup deadline, the end of an unsent status' delay, the grace of a node of it that is not ready
    or short of GPUs, the end of its runtime `limit`. Until then an unchanged job is judged the same."""
    status, due = view.status, []
    started = view.time(status.attemptStartTime) or now
    due.append(started + float(view.spec("startupTimeoutSeconds")))
    if limit is not None:
        due.append(limit.deadline(started))
    if (unsent := state.unsent.get(view.key)) is not None:
        due.append(unsent[1] + settings.status_delay)
    gpus = view.request.gpus if isinstance(view.request, JobRequest) else 0
    for node, ranks in replace_nodes.by_node(view.placement()).items():
        entry = state.nodes.get(node)
        if entry is not None and entry.not_ready_since is not None:
            due.append(entry.not_ready_since + settings.not_ready_grace)
        elif entry is not None and entry.node is not None and entry.node.allocatable.get(GPU, 0) < gpus * len(ranks):
            due.append(entry.gpus_since + settings.not_ready_grace)  # fewer GPUs than its pods hold: the same grace
    return min(due)


def own_pods(state: ClusterState, view: JobView) -> list[PodInfo]:
    """The pods of this job object (by owner uid): pods of an earlier job of the same name are not its own."""
    return [p for p in state.pods_of(view.key) if p.owner == view.uid]


def judge(state: ClusterState, view: JobView, now: float, settings: Settings, metrics=None,
          labels: Callable[[JobView], Labels] = outside_queues,
          limit: RuntimeLimit | None = None) -> Plan | Lost | None:
    """The plan for a placed job (None: nothing to do; Lost: replicas to make again elsewhere). `limit`: its runtime
    limit in force (QueueBook.job_limit), counted from its placement (status.attemptStartTime)."""
    status = view.status
    attempt, placement = status.attempt, view.placement()
    if sorted(placement) != list(range(view.replicas)):
        return _damaged(state, view, now, labels)
    pods = state.pods_of(view.key)
    mine = [p for p in pods if p.owner == view.uid]  # own_pods, from the one list
    if taken := sorted(p.key for p in pods if p.attempt == attempt and p.owner != view.uid):
        return requeue(state, view, now, Reason.WRITE_FAILED, f"pod {taken[0]} of an earlier job of the same name "
                       "holds a name of this attempt (placed while it was unseen): placed again as a new attempt",
                       labels)
    replacing = frozenset(status.replacing or ())
    # a replaced replica's pod left on its lost node: it goes at once (its kubelet is not there to stop it)
    # (a replica made again for kube-scheduler is pinned to its new node until bound there: not displaced)
    displaced = [p for p in mine if p.attempt == attempt and p.index in replacing and p.where != placement[p.index]]
    ours = [p for p in mine if p.attempt == attempt and p.index is not None and p not in displaced]
    current = {p.index: p for p in ours if not p.deleting}
    if found := held_claims.fault(state, view, current.values()):
        return requeue(state, view, now, *found, labels, event="Warning")
    lost, not_ready = _node_trouble(state, set(placement.values()), now, settings.not_ready_grace)
    replace_lost = view.spec("nodeFailure") == REPLACE and isinstance(view.request, JobRequest)
    failed, short = _node_failures(state, view, placement, ours, replace_lost, now, settings.not_ready_grace)
    verdict = lifecycle.decide(lifecycle.Attempt(
        replicas=view.replicas, phase=status.phase, created_at=view.time(status.attemptStartTime) or now,
        startup_timeout=float(view.spec("startupTimeoutSeconds")), max_restarts=int(view.spec("maxRestarts")),
        restarts=status.restarts, interruptions=status.interruptions, startup_failures=status.startupFailures,
        interruptions_in_a_row=status.interruptionsInARow,
        container_errors=status.containerErrors, placement=placement, pods={i: p.state for i, p in current.items()},
        lost_nodes=lost | frozenset(failed), not_ready={**not_ready, **{node: t for node, (t, _) in short.items()}},
        not_ready_grace=settings.not_ready_grace,
        deleted=frozenset(p.index for p in ours if p.deleting and p.phase not in POD_FINISHED), limit=limit,
        replace=replace_lost, replacing=replacing, replaced_at=_last_replaced(view),
        replace_by=view.time(status.replacementDeadline),
        lost_why={**failed, **{node: why for node, (_, why) in short.items()}}), now)
    if verdict.action == lifecycle.REPLACE:
        return Lost(view, verdict)
    plan = Plan(view.key)
    closing = _closing(state, view, now) if verdict.ends_attempt else None
    change = _change(state, view, verdict, current, closing, now)
    if not verdict.ends_attempt:
        change |= _replaced_seen(view, current)
    unsent = state.unsent.get(view.key)
    if unsent is not None:  # its placement is not written yet: only once it runs, ends, or has waited long enough
        write = verdict.phase != Phase.STARTING or now - unsent[1] >= settings.status_delay or bool(view.problems)
    else:
        write = change.differs(view.raw) or bool(view.problems)
    if write:
        plan.then(*_usage_record(state, view, closing, verdict.phase, now, labels, limit))
        plan.then(view.write(change, now))
        if (verdict.phase != status.phase or verdict.reason != status.reason) and not _progress(status, verdict):
            plan.then(view.emit("Warning" if verdict.action == lifecycle.TEARDOWN else "Normal", verdict.reason,
                                verdict.message))
    if verdict.action == lifecycle.TEARDOWN:
        if metrics and verdict.reason in (Reason.POD_FAILED, *INTERRUPTIONS):
            metrics.gang_restarts.labels("interruption" if verdict.reason in INTERRUPTIONS else "failure").inc()
        live = [(p.key, p.uid) for p in current.values() if p.phase not in POD_FINISHED]
        if live:  # a gang stopped at its limit gets LIMIT_GRACE, not its pods' own grace (reservations count on it)
            plan.then(DeletePods(tuple(sorted(live)),
                                 LIMIT_GRACE if verdict.reason == Reason.MAX_RUNTIME_EXCEEDED else None))
    elif displaced:  # before any create: a replica's name is free only once its displaced pod is gone
        plan.then(DeletePods(tuple(sorted((p.key, p.uid) for p in displaced)), 0))
    if verdict.action == lifecycle.CREATE_MISSING:
        held = {p.index for p in displaced}  # made again once its displaced pod is seen gone
        if missing := sorted(set(placement) - set(current) - held):
            plan.then(CreatePods(view.key, tuple(
                replica_pod(state, view, attempt, i, placement[i], settings) for i in missing)))
    if verdict.phase in ACTIVE and verdict.action != lifecycle.TEARDOWN and view.key not in state.services \
            and manifests.has_service(view.obj):
        plan.then(CreateService(manifests.headless_service(view.obj)),
                  view.emit("Normal", Reason.SERVICE_RECREATED, f"created the headless Service {view.key}"))
    stale = [(p.key, p.uid) for p in mine if p.attempt != attempt and not p.deleting]
    if stale:
        plan.then(DeletePods(tuple(sorted(stale))))
    return plan if plan.steps else None


def _last_replaced(view: JobView) -> float | None:
    """When the current attempt's last replacement was decided (None: it had none)."""
    times = [r.time.timestamp() for r in view.status.replaced if r.attempt == view.status.attempt]
    return max(times, default=None)


def _replaced_seen(view: JobView, current: dict[int, PodInfo]) -> Change:
    """The replicas still being made again (those whose pod does not run on its new node yet), and no deadline for
    a replacement unless one is awaited."""
    replacing, placement = view.status.replacing or [], view.placement()
    left = [i for i in replacing if not (i in current and current[i].node == placement[i]
                                         and current[i].phase in ("Running", "Succeeded"))]
    return job_status.replacing(left)


def replacement(state: ClusterState, lost: Lost, snap: Snapshot, now: float, settings: Settings,
                labels: Callable[[JobView], Labels] = outside_queues, held: Collection[str] = (),
                spares: Collection[str] = (), preempt: Preempt | None = None) -> Plan | None:
    """The writes that make the lost replicas again on nodes that keep the gang's topology (booked on `snap`): the
    lost pods' own GPUUsage records, the status (the new placement, the replicas being made again: the commit point a
    next leader goes on from), the lost pods deleted at once, then the new ones created under the same names. Without
    such nodes, the deadline after which the gang restarts, written once, and (`preempt`, unless its nomination
    already holds nodes) the gangs it preempts for them. `held`: nodes nominated to preemptors; `spares`: nodes kept
    free for replacements, taken first."""
    view, verdict = lost.view, lost.verdict
    status, placement = view.status, view.placement()
    chosen = replace_nodes.choose(snap, view.request, placement, verdict.lost, held=held, spares=spares)
    used = job_status.used(round(status.finishedGpuSeconds + attempt_usage(state, view, status.attempt, now), 3))
    if chosen is None:
        deadline = view.time(status.replacementDeadline) or now + settings.replace_deadline
        why = (f"{verdict.message}; no node that keeps the gang's topology can take replica"
               f"{'s' if len(verdict.lost) > 1 else ''} {', '.join(map(str, verdict.lost))} now: the gang restarts "
               f"at {rfc3339(deadline)} unless one frees up")
        nomination, stops = None, []
        if status.nomination is not None:
            why += _holding(status.nomination.nodes, status.nomination.gangs())
        elif preempt is not None and (found := preempt(view, verdict.lost, held)) is not None:
            nomination, stops = found
            why += _holding(nomination["nodes"], [GangKey.parse(victim) for victim in nomination["victims"]])
        change = job_status.awaiting_replacement(why, deadline, nomination)
        if not change.differs(view.raw) and not view.problems:
            return None
        change |= used  # the nomination with the status first: the commit point, then the victims stopped
        return Plan(view.key, [view.write(change, now), view.emit("Warning", Reason.AWAITING_REPLACEMENT, why),
                               *stops])
    assignments = replace_nodes.by_node({**placement, **chosen})
    domains, domain = describe_domains(state, assignments)
    moved = ", ".join(f"replica {i} from {placement[i]} to {node}" for i, node in sorted(chosen.items()))
    message = f"{verdict.message}: made again on another node, {moved}; the others run on"
    records = [{"attempt": status.attempt, "replica": i, "lostNode": placement[i], "node": node, "time": rfc3339(now)}
               for i, node in sorted(chosen.items())]
    change = job_status.replaced(view.raw, status.replacements, assignments, domains, domain, records,
                                 sorted(set(status.replacing or ()) | set(chosen)), message) | used
    displaced = sorted((p for p in own_pods(state, view) if p.attempt == status.attempt and p.index in chosen),
                       key=lambda p: p.key)
    bills = [RecordUsage(usage_object(_displaced_record(view, p, labels(view), now), view.uid, p.uid))
             for p in displaced if p.run.start is not None and pod_usage_name(p.uid) not in state.ledger.queue_of]
    gone = tuple((p.key, p.uid) for p in displaced)
    pods = tuple(replica_pod(state, view, status.attempt, i, node, settings) for i, node in sorted(chosen.items()))
    # the lost pods' records before the status (a next leader may never see those pods); their names freed before
    # the creates (a failed delete leaves them to the next cycles' judge)
    return Plan(view.key, [*bills, view.write(change, now), view.emit("Normal", Reason.NODE_REPLACED, message),
                           *([DeletePods(gone, 0, required=True)] if gone else []), CreatePods(view.key, pods)])


def _holding(nodes, victims) -> str:
    """What a replacement's nomination holds, said the same from the cycle it preempts on."""
    return f"; {nodes_label(nodes)} held for it while the gangs it preempted stop ({', '.join(map(str, victims))})"


def _displaced_record(view: JobView, pod: PodInfo, labels: Labels, now: float) -> Record:
    """A replaced replica's pod billed on its own, from its start until its replacement is decided (`now`: it is
    deleted at once), so that its run survives the attempt's close and a next leader that never saw it."""
    queue, namespace, flavor, service_class = labels
    start = pod.run.start or now
    end = max(start, now if pod.run.end is None else min(pod.run.end, now))
    return Record(queue, namespace, view.obj["metadata"]["name"], flavor, service_class, view.status.attempt,
                  round(view.units, 4), start, end, round(view.units * (end - start), 3), pod.key.split("/", 1)[1])


def _progress(status, verdict) -> bool:
    """A placed gang's pods starting and running, as planned: its status and conditions say so (with the times), an
    Event each would be two more writes per job for nothing new (the Placed Event said where it went)."""
    return status.reason in (Reason.PLACED, Reason.STARTING) and verdict.reason in (Reason.STARTING, Reason.RUNNING)


def _node_trouble(state: ClusterState, nodes: set[str], now: float,
                  grace: float) -> tuple[frozenset[str], dict[str, float]]:
    """(nodes lost: gone, or not ready past the grace; nodes not ready within it -> seconds since). A node object
    the operator cannot read counts as not ready."""
    lost, not_ready = set(), {}
    for node in nodes:
        entry = state.nodes.get(node)
        if entry is None:
            lost.add(node)
        elif entry.not_ready_since is not None:
            if now - entry.not_ready_since >= grace:
                lost.add(node)
            else:
                not_ready[node] = now - entry.not_ready_since
    return frozenset(lost), not_ready


def _node_failures(state: ClusterState, view: JobView, placement: dict[int, str], ours: list[PodInfo],
                   drains: bool, now: float, grace: float) -> tuple[dict[str, str], dict[str, tuple[float, str]]]:
    """The gang's nodes that failed though ready -> why: tainted NoExecute (not tolerated; not-ready and unreachable
    have the grace), a failure condition (`Settings.failure_conditions`), fewer GPUs allocatable than the gang's pods
    hold there for `grace` (a kubelet restart zeroes them for seconds); with `drains`, cordoned or not ready with a
    replica's pod deleted or evicted there (the taint manager's eviction of a not-ready node's pods loses the node; a
    cordon alone does not). Also the nodes short of GPUs within the grace -> (seconds since, why)."""
    request = view.request
    if not isinstance(request, JobRequest):
        return {}, {}
    short: dict[str, tuple[float, str]] = {}
    pods: dict[int, PodInfo] = {}
    for p in ours:
        pods.setdefault(p.index, p)
    out: dict[str, str] = {}
    for node, ranks in replace_nodes.by_node(placement).items():
        entry = state.nodes.get(node)
        model = entry.node if entry is not None else None
        if model is None:
            continue  # gone or unreadable: `_node_trouble`
        holding = [i for i in ranks if i not in pods or pods[i].phase not in POD_FINISHED]
        if not model.ready:  # within the grace (`_node_trouble`) unless its replicas' pods are taken from it
            if drains and (evicted := _evicted(view, holding, pods)):
                out[node] = f"is not ready and replica {evicted[0]}'s pod was evicted or deleted"
            continue
        why = _failure_of(model, request)
        gpus, offered = len(holding) * request.gpus, model.allocatable.get(GPU, 0)
        if why is None and gpus and offered < gpus:
            why = f"offers {offered} GPUs, fewer than the {gpus} the gang's pods hold there"
            if now - entry.gpus_since < grace:
                short[node], why = (now - entry.gpus_since, why), None
        if why is None and drains and model.unschedulable and (evicted := _evicted(view, holding, pods)):
            why = f"is drained (cordoned, replica {evicted[0]}'s pod evicted or deleted)"
        if why is not None:
            out[node] = why
            short.pop(node, None)
    return out, short


def _evicted(view: JobView, holding: list[int], pods: dict[int, PodInfo]) -> list[int]:
    """The replicas of `holding` whose pod is being deleted, was evicted, or (a running gang's) is gone."""
    return [i for i in holding if (pods[i].deleting or pods[i].state.disrupted if i in pods else
                                   view.phase == Phase.RUNNING and i not in (view.status.replacing or ()))]


def _failure_of(node: Node, request: JobRequest) -> str | None:
    """Why a ready node failed for a gang, by its condition or taints (None: it did not)."""
    if node.held.startswith(FAILING):
        return f"has the failure condition {node.held[len(FAILING):]}"
    for taint in node.taints:
        if taint.effect == "NoExecute" and taint.key not in GRACED_TAINTS \
                and not any(toleration.tolerates(taint) for toleration in request.tolerations):
            return f"is tainted {taint.key}:NoExecute"
    return None


def _change(state: ClusterState, view: JobView, verdict: lifecycle.Verdict, current: dict[int, PodInfo],
            closing: Closing | None, now: float) -> Change:
    """The status change the verdict makes, GPU-seconds included (an ending attempt is accounted in `closing`, once)."""
    status = view.status
    running = sum(1 for p in current.values() if p.phase == "Running")
    change = job_status.judged(status, view.raw, verdict, running, view.replicas, now, closing)
    if change.differs(view.raw):  # a write is due: bring the usage up to date
        accounted = closing.finished if closing is not None else status.finishedGpuSeconds
        open_attempt = status.accountedAttempts < status.attempt and not verdict.ends_attempt
        change |= job_status.used(round(accounted + (attempt_usage(state, view, status.attempt, now)
                                                     if open_attempt else 0.0), 3))
    return change


def _closing(state: ClusterState, view: JobView, now: float) -> Closing | None:
    """Close the books on the current attempt, unless an earlier write already did (None)."""
    status = view.status
    if status.accountedAttempts >= status.attempt:
        return None
    return Closing(status.attempt, round(status.finishedGpuSeconds + attempt_bill(state, view, status.attempt, now), 3))


def _usage_record(state: ClusterState, view: JobView, closing: Closing | None, outcome: str | None, now: float,
                  labels: Callable[[JobView], Labels], limit: RuntimeLimit | None = None) -> list[RecordUsage]:
    """The GPUUsage record of the attempt `closing` closes (none if its pods never ran), ending as `outcome` (a
    phase), run under `limit`: written before the status write that closes it, so a close that landed always has its
    record."""
    attempt = view.status.attempt
    if closing is None:
        return []
    pod_runs = [(uid, run) for uid, run in attempt_pod_runs(state, view, attempt) if run.start is not None]
    runs = [run for _, run in pod_runs]
    if not runs:
        return []
    units = max(view.units, *(held_claims.replica_units(state, view, uid) for uid, _ in pod_runs))
    used = closing.finished - view.status.finishedGpuSeconds - apart_usage(state, view, attempt)
    queue, namespace, flavor, service_class = labels(view)
    record = Record(queue, namespace, view.obj["metadata"]["name"], flavor, service_class, attempt,
                    round(units * view.replicas, 4), min(run.start for run in runs),
                    max(now if run.end is None else run.end for run in runs), round(max(0.0, used), 3),
                    estimate_key=estimate_key(view.obj), outcome=str(outcome or ""),
                    limit=limit.seconds if limit is not None else None)
    return [RecordUsage(usage_object(record, view.uid))]


def abandoned(state: ClusterState, view: JobView, attempt: int, now: float,
              labels: Callable[[JobView], Labels]) -> list:
    """The steps that close an attempt newer than the status knows (its pods were written before their status, by a
    replica that stopped, and are not a whole gang of the spec as it is): its record, then the status that takes its
    number and the GPU-seconds its pods used."""
    newer = replace(view, status=view.status.model_copy(update={"attempt": attempt}))
    closing = _closing(state, newer, now)
    return [*_usage_record(state, newer, closing, None, now, labels),
            view.write(job_status.abandoned(attempt, closing), now)]


def record_deleted(state: ClusterState, view: JobView, now: float, labels: Callable[[JobView], Labels]) -> Plan | None:
    """The record of the open attempt of a placed job that was deleted (its pods go with it): usage up to now."""
    status = view.status
    if status.accountedAttempts >= status.attempt:
        return None
    closing = Closing(status.attempt, status.finishedGpuSeconds + attempt_usage(state, view, status.attempt, now))
    steps = _usage_record(state, view, closing, None, now, labels)
    return Plan(f"usage:{view.uid}", list(steps)) if steps else None


def _damaged(state: ClusterState, view: JobView, now: float, labels: Callable[[JobView], Labels]) -> Plan:
    """An active job whose placement cannot be read (a damaged status): accounted and requeued; its pods go."""
    return requeue(state, view, now, Reason.INTERNAL_ERROR, "status.placement is missing or damaged; the gang is "
                   "requeued", labels, "Warning")


def requeue(state: ClusterState, view: JobView, now: float, reason: str, why: str,
            labels: Callable[[JobView], Labels] = outside_queues, event: str = "Normal", grace: int | None = None,
            more: Change = job_status.NO_CHANGE) -> Plan:
    """Stop a placed gang and put it back in the queue: the attempt is closed (accounted and recorded) in the status
    write, then its pods are deleted gracefully (`grace` seconds, else each pod's own; pods left over are deleted
    while it waits). `more`: what else the write changes."""
    closing = _closing(state, view, now)
    plan = Plan(view.key, [*_usage_record(state, view, closing, Phase.QUEUED, now, labels),
                                    view.write(job_status.requeued(reason, why, closing) | more, now),
                                    view.emit(event, reason, why)])
    live = tuple(sorted((p.key, p.uid) for p in own_pods(state, view) if not p.deleting
                        and p.phase not in POD_FINISHED))
    return plan.then(DeletePods(live, grace)) if live else plan


def describe_domains(state: ClusterState, assignments: dict[str, list[int]]) -> tuple[dict, str | None]:
    """Per topology level, the domains the gang occupies; and the tightest single domain holding it."""
    topology = state.topology()[0]
    out: dict[str, list[str]] = {}
    tightest = None
    for level in topology.levels:
        values = sorted({(state.nodes[n].node.labels.get(level.label) if state.nodes[n].node else None)
                         or f"({n})" for n in assignments if n in state.nodes})
        out[level.name] = values
        if len(values) == 1:
            tightest = f"{level.name} {values[0]}"
    if tightest is None and len(assignments) == 1:
        tightest = f"node {next(iter(assignments))}"
    return out, tightest
