"""Decide for the jobs that wait: which may be placed at all (a spec the cluster cannot serve is Invalid, a job whose
earlier pods still terminate waits; the waiting room, controller/waiting.py, schedules the rest), then plans: a
placed gang is written status first (attempt, placement), then its Service and pods, all or nothing; a waiting job
says why."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from superpod.api import manifests
from superpod.api.resources import ConvertError
from superpod.api.times import rfc3339, timestamp
from superpod.controller import job_status
from superpod.controller.actions import Action, CreatePods, CreateService, DeletePods, Plan, WriteStatus
from superpod.controller.compute_domains import channel_missing, wider_than_a_clique
from superpod.controller.job_status import NO_DETAILS, cause_details
from superpod.controller.jobs import JobView
from superpod.controller.judge import Settings, abandoned, describe_domains, replica_pod
from superpod.controller.metering import Labels, outside_queues
from superpod.controller.podgangs import GangView
from superpod.controller.state import ClusterState
from superpod.core.cycle import Decision
from superpod.core.gang_key import GangKey
from superpod.core.lifecycle import backoff
from superpod.core.mig_catalog import Product, UnknownProductError
from superpod.core.mig_catalog import product as mig_product
from superpod.core.model import Snapshot
from superpod.core.phases import (
    ACTIVE,
    FINISHED,
    POD_FINISHED,
    POD_UNSCHEDULABLE,
    WAITING,
    Cause,
    Phase,
    Reason,
)
from superpod.core.placement import validate
from superpod.core.request import MIG_PREFIX, JobRequest
from superpod.k8s.api import ApiError

log = logging.getLogger(__name__)
ALWAYS_THERE = ("cpu", "memory", "pods", "ephemeral-storage")  # every node has these: never "not advertised"
# Seconds between rewrites of a waiting job's message while only its counts move: a tenth of how long it has
# waited, at least WAIT_REFRESH and at most WAIT_REFRESH_LONGEST (a change of its cause's code is written at once).
WAIT_REFRESH, WAIT_REFRESH_LONGEST, WAIT_REFRESH_SHARE = 30.0, 300.0, 0.1
REWRITES_PER_SECOND, REWRITE_BURST = 20.0, 200  # waiting-message rewrites: the API load a long queue may cause
# Both say the job waits for room; which one holds flips with every gang that ends and starts under a reservation:
# a flip between them is refreshed as counts are, not written at once as a new cause is.
FOR_ROOM = frozenset({Reason.NO_ROOM, Reason.RESERVED_FOR_OTHERS})


@dataclass
class Pending:
    """What `pending` found: the jobs to schedule, and plans for the others."""

    ready: list[JobView] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # held back this cycle, and why


def pending(state: ClusterState, views: list[JobView], now: float, labels: Callable[[JobView], Labels] = outside_queues,
            settled: Callable[[str], bool] = lambda uid: True) -> Pending:
    """Sort the jobs that are not placed: ready to schedule, held back this cycle, or Invalid; and tidy up after
    finished jobs. `labels`: a job's usage labels (the record of an attempt closed here); `settled(uid)`: False while
    pods of the job may exist unseen (applier.settled). A bug met on one job is said on it; the others go on."""
    out = Pending()
    for view in views:
        if view.phase in ACTIVE:
            continue
        try:
            _pending(state, view, now, out, labels, settled)
        except Exception as e:  # noqa: BLE001 - isolate it to this job
            log.exception("sorting %s failed", view.key)
            out.plans.append(view.fault(f"the operator failed to consider this job: {e!r}", now))
    return out


def _pending(state: ClusterState, view: JobView, now: float, out: Pending, labels: Callable[[JobView], Labels],
             settled: Callable[[str], bool]) -> None:
    pods = state.pods_of(view.key) if view.key in state.by_job else []
    earlier = [p for p in pods if p.phase not in POD_FINISHED]
    live = tuple(sorted((p.key, p.uid) for p in earlier if not p.deleting)) if earlier else ()
    if view.phase in FINISHED:  # nothing of it may run on (a teardown whose deletes were lost, say)
        _add(out.plans, _repair(view, now, live))
        return
    if not settled(view.uid):  # a pod create's answer was lost: what the gang is must be seen first
        out.reasons[view.key] = "waiting to see the pods whose create answer was lost"
        return
    domain_pending = channel_missing(view)  # (the job does not read without that template: it is not Invalid)
    if isinstance(view.request, ConvertError) and not domain_pending:
        _add(out.plans, view.invalid(str(view.request), now))
        return
    if (view.phase == Phase.INVALID and view.status.reason == Reason.POD_REFUSED
            and view.status.observedGeneration == view.generation):
        _add(out.plans, _repair(view, now))  # refused as written by the API server: only a spec change helps
        return
    if view.status.notBefore and timestamp(view.status.notBefore) > now:
        out.reasons[view.key] = f"in backoff until {rfc3339(timestamp(view.status.notBefore))}"
        _add(out.plans, _repair(view, now, live))  # (pods of its closed attempt a lost teardown left: stopped now)
        return
    # Pods of an attempt the status does not know: written by a replica that stopped before their status (being
    # deleted too: they may have run, and that attempt's number must be taken).
    newer = [p for p in pods if p.owner == view.uid and p.attempt is not None and p.attempt > view.status.attempt]
    unknown = {p.key: p for p in newer if not p.deleting}
    if unknown and (plan := recovered(state, view, [p for p in pods if not p.deleting and (
            p.phase not in POD_FINISHED or p.key in unknown)], now)):
        out.reasons[view.key] = "its pods were written before its status: writing their placement"
        out.plans.append(plan)
        return
    if live or newer:  # pods of an earlier attempt still run: stop them first, place once they are going
        out.reasons[view.key] = f"stopping {len(live)} pod(s) of an earlier attempt before a new one starts"
        plan = Plan(f"stop:{view.key.text}")
        if newer:  # that attempt is closed (billed what its pods used) and its number never used again
            plan.then(*abandoned(state, view, max(p.attempt for p in newer), now, labels))
        if live:
            plan.then(DeletePods(live))
        out.plans.append(plan)
        return
    if domain_pending:
        out.reasons[view.key] = domain_pending.message
        _add(out.plans, view.wait(domain_pending.code, domain_pending.message, now))
        return
    if earlier:  # terminating: the new attempt keeps off their nodes (views are cached: change a copy)
        avoid = tuple(sorted({p.node for p in earlier if p.node}))
        view = replace(view, request=replace(view.request, avoid_nodes=avoid))
    out.ready.append(view)


def _repair(view: JobView, now: float, live: tuple = ()) -> Plan | None:
    """For a job that gets no other write this cycle: its damaged status rewritten, pods that must not run deleted."""
    plan = Plan(view.key)
    if view.problems:
        plan.then(view.write(job_status.NO_CHANGE, now))
    if live:
        plan.then(DeletePods(live))
    return plan if plan.steps else None


@dataclass(frozen=True)
class Offered:
    """What the usable nodes offer at all: GPU products, resources (any amount) and MIG-capable catalogue
    products."""

    products: frozenset[str]
    resources: frozenset[str]
    mig_products: tuple[Product, ...]

    @classmethod
    def of(cls, offers: Iterable[tuple[str, str]]) -> Offered:
        """From the usable nodes' `state.offer_keys` (kept in `ClusterState.offers` as nodes change)."""
        products, resources, mig = set(), set(), {}
        for kind, value in sorted(offers):
            if kind == "product":
                products.add(value)
            elif kind == "resource":
                resources.add(value)
            elif kind == "mig":
                with contextlib.suppress(UnknownProductError):
                    found = mig_product(value)
                    mig[found.key] = found
        return cls(frozenset(products), frozenset(resources), tuple(mig.values()))


def unservable(snap: Snapshot, offered: Offered, job: JobRequest) -> str | None:
    """Why no node of this cluster could ever serve the job as written (Invalid until that changes), or None."""
    if why := validate(snap, job):
        return why
    if job.gpu_product and job.gpu_product not in offered.products:
        return (f"no node has GPU product {job.gpu_product!r} (nvidia.com/gpu.product here: "
                f"{', '.join(sorted(offered.products)) or 'none'})")
    for resource, amount in job.total_requests.items():  # every member's
        if resource in ALWAYS_THERE or not amount or resource in offered.resources:
            continue
        if resource.startswith(MIG_PREFIX):  # slices can be made by repartitioning, if some GPU here offers them
            profile = resource[len(MIG_PREFIX):]
            if not any(p.offers(profile) for p in offered.mig_products):
                return (f"no GPU here offers the MIG profile {profile} (MIG-capable products here: "
                        f"{', '.join(sorted(p.key for p in offered.mig_products)) or 'none'})")
            continue
        return f"requests {resource}, which no node advertises"
    return None


def servable(snap: Snapshot, offered: Offered, views: list[JobView], now: float, plans: list[Plan],
             invalid: dict[str, str]) -> list[JobView]:
    """The views some node could serve; the others are said Invalid (`invalid`: key -> why, and a plan each)."""
    valid = []
    judged: dict[tuple, str | None] = {}  # job shape -> why it is unservable: jobs of one shape get one answer
    for view in views:
        try:
            shape = view.request.shape()
            if shape not in judged:
                judged[shape] = unservable(snap, offered, view.request)
            why = judged[shape] or wider_than_a_clique(snap.topology, view)
        except Exception as e:  # noqa: BLE001 - isolate it to this job
            log.exception("checking %s failed", view.key)
            plans.append(view.fault(f"the operator failed to check this job: {e!r}", now))
            continue
        if why:
            invalid[view.key] = why
            _add(plans, view.invalid(why, now))
        else:
            valid.append(view)
    return valid


def starts(state: ClusterState, decisions: list[Decision], views: dict[GangKey, JobView], now: float,
           settings: Settings) -> list[Plan]:
    """The plans of the gangs placed."""
    plans = []
    for decision in decisions:
        if decision.placement is not None:
            view = views[decision.job.key]
            try:
                plans.append(start(state, view, decision.placement.assignments, now, settings))
            except Exception as e:  # noqa: BLE001 - isolate it to this job (its placement is dropped next cycle)
                log.exception("writing out %s failed", view.key)
                plans.append(view.fault(f"the operator failed to start this job: {e!r}", now))
    return plans


def wait_plans(decisions: list[Decision], views: dict[GangKey, JobView], mig: dict[GangKey, str],
               notes: dict[GangKey, str], now: float, said: dict[str | GangKey, tuple[float, str, int]],
               budget: int | None = None, passed: frozenset[GangKey] = frozenset()) -> tuple[list[Plan], int]:
    """Queued with the decision's cause: its code in status.reason, its sentence (and a note on MIG when there is
    one) in status.message, its details in status.reservation and status.blockedBy; or the MIG flow's message while
    the job's nodes are being repartitioned. Returns the plans, and how many of them were rewrites taken from
    `budget`.

    A job whose status does not say a waiting cause yet is written at once. For a job that does, the cause is
    rewritten when its code changes, and when only the sentence and details move at most every `refresh_after`
    seconds (from 30 s for a job that just started waiting to 5 minutes for one that has waited 50 minutes or more);
    so is a flip between NoRoom and ReservedForOthers (FOR_ROOM), which a long queue makes with every gang that ends
    and starts. These rewrites take from `budget` (None: no bound), the longest unwritten first. `said`: job
    uid -> when its cause was last written, its code and the hash of its sentence then. `passed`: the keys of jobs
    the cycle passed over (controller/waiting.py): only a change of code rewrites them (not a flip within FOR_ROOM),
    not counts (every gang that ends moves the counts and flips the room codes of thousands of them); what their
    status says is compared, not what was said (a write may have failed), by its code, or for a pod gang (whose pods
    say no code) by its sentence."""
    plans: list[Plan] = []
    rewrites: list[tuple[float, str, JobView, Cause, dict]] = []
    for decision in decisions:
        key = decision.job.key
        if decision.placement is None and not decision.error and (view := views.get(key)):
            if key in mig:
                cause, details = Cause(Reason.MIG_RECONFIGURING, mig[key]), NO_DETAILS
            else:
                cause = decision.cause or Cause(Reason.NO_ROOM, "waiting")
                if note := notes.get(key):
                    cause = cause._replace(message=f"{cause.message}; {note}")
                details = cause_details(decision)
            if key in passed and key not in mig and told_room(view, cause.code):
                continue
            if view.says(cause, details):
                said[view.uid] = (now, cause.code, hash(cause.message))
                continue
            if view.phase != Phase.QUEUED or view.status.reason not in SAYS_WAITING or view.problems \
                    or (view.status.reason == Reason.MIG_RECONFIGURING) != (key in mig):
                _say(plans, said, view, cause, details, now)
                continue
            when, code, sentence = said.get(view.uid, (float("-inf"), "", 0))
            if key in passed:  # what its status says, not what was last said: a write may have failed
                if view.status.reason in WAITING:
                    code = view.status.reason
                elif hash(view.status.message) != sentence:  # a pod gang's pods say no code: their sentence tells
                    code = ""
            news = code != cause.code and not {code, cause.code} <= FOR_ROOM  # else only counts moved
            if news or (now - when >= refresh_after(decision.job.submitted, now) and key not in passed):
                rewrites.append((when, key, view, cause, details))
    rewrites.sort(key=lambda item: (item[0], item[1]))
    written = 0
    for _, _, view, cause, details in rewrites:
        if budget is not None and written >= budget:
            break
        written += _say(plans, said, view, cause, details, now)
    return plans, written


def told_room(view: JobView | GangView | None, code: str) -> bool:
    """Whether a TrainingJob passed over, whose cause now has `code`, is not rewritten: its status says it waits
    for room (says_room) and so does `code` (the waiting room skips such jobs in turn)."""
    return code in FOR_ROOM and says_room(view)


def says_room(view: JobView | GangView | None) -> bool:
    """Whether a TrainingJob's status says, as written, that it is Queued for room (a code of FOR_ROOM)."""
    return isinstance(view, JobView) and view.status.reason in FOR_ROOM and view.status.phase == Phase.QUEUED and \
        not view.problems


def refresh_after(submitted: float, now: float) -> float:
    """Seconds between rewrites of the moving counts of a job waiting since `submitted` (0: unknown, the shortest):
    the longer it has waited, the less a minute's news of its counts is worth."""
    waited = now - submitted if submitted > 0 else 0.0
    return min(WAIT_REFRESH_LONGEST, max(WAIT_REFRESH, waited * WAIT_REFRESH_SHARE))


def _say(plans: list[Plan], said: dict[str, tuple[float, str, int]], view: JobView, cause: Cause, details: dict,
         now: float) -> int:
    said[view.uid] = (now, cause.code, hash(cause.message))  # written now, or its status already says it
    if plan := view.wait(cause.code, cause.message, now, **details):
        plans.append(plan)
        return 1
    return 0


SAYS_WAITING = WAITING | {POD_UNSCHEDULABLE}  # a status that says a cause (a job's written before codes: rewritten)


def start(state: ClusterState, view: JobView, assignments: dict[str, list[int]], now: float,
          settings: Settings) -> Plan:
    """The writes of a new gang attempt: status (the commit point, in force in the cache at once and sent with the
    job's next status write: decide.recovered finds the gang if this replica stops first), Service, pods; undone
    on failure."""
    attempt = next_attempt(state, view)
    write, message = placed(state, view, attempt, assignments, now, "placed", deferred=True)
    nodes = {int(i): node for node, ranks in assignments.items() for i in ranks}
    pods = tuple(replica_pod(state, view, attempt, i, nodes[i], settings) for i in sorted(nodes))
    service = [CreateService(manifests.headless_service(view.obj))] if manifests.has_service(view.obj) else []
    plan = Plan(view.key, [write, *service, CreatePods(view.key, pods),
                                    view.emit("Normal", Reason.PLACED, message)])
    plan.undo = lambda error: rollback(view, write, error, now)
    return plan


def placed(state: ClusterState, view: JobView, attempt: int, assignments: dict[str, list[int]], now: float,
           verb: str, deferred: bool = False) -> tuple[WriteStatus, str]:
    """The status write of a gang attempt placed on `assignments` (node -> replica indexes), and what it says."""
    domains, domain = describe_domains(state, assignments)
    message = f"{verb} {view.replicas} replicas on {len(assignments)} nodes{f' in {domain}' if domain else ''}"
    change = job_status.placed(view.raw, attempt, assignments, domains, domain, message, view.holdings(),
                               view.replicas, view.admission(), now)
    return replace(view.write(change, now), deferred=deferred), message


def recovered(state: ClusterState, view: JobView, pods: list, now: float) -> Plan | None:
    """A waiting job whose pods (live, or finished since) are one whole attempt newer than its status, made from
    its spec as it is: a replica placed them and stopped (or lost its Lease) before their status was written. Their
    placement is written now (the judge then sees them run or end); anything else of them is not a gang (None)."""
    attempts = {p.attempt for p in pods}
    indexes = sorted(p.index for p in pods if p.index is not None)
    attempt = next(iter(attempts)) if len(attempts) == 1 else None
    if attempt is None or attempt <= view.status.attempt or indexes != list(range(view.replicas)) or any(
            p.owner != view.uid or p.gang_spec != manifests.gang_digest(view.obj["spec"]) or not p.node
            for p in pods):
        return None
    assignments: dict[str, list[int]] = {}
    for pod in sorted(pods, key=lambda p: p.index):
        assignments.setdefault(pod.node, []).append(pod.index)
    write, message = placed(state, view, attempt, assignments, now, "found the pods of attempt "
                            f"{attempt} written before their status:")
    return Plan(view.key, [write, view.emit("Normal", Reason.PLACED, message)])


def next_attempt(state: ClusterState, view: JobView) -> int:
    """One past the job's last attempt and past any pod named for this job (an earlier job of the same name may
    still have pods): pod names never collide."""
    seen = [p.attempt for p in state.pods_of(view.key) if p.attempt is not None]
    return max([view.status.attempt, *seen]) + 1


def rollback(view: JobView, placed: WriteStatus, error: ApiError, now: float) -> list[Action]:
    """After a failed gang write (its pods already deleted): Invalid in the API server's words when it refused the
    pod itself, else back to the queue with backoff. Written over the placed status, whether or not it landed."""
    if error.invalid:
        why = f"the API server refused the replica pod: {error.message}"
        change, event = job_status.refused(why), Reason.POD_REFUSED
    else:
        failures = view.status.startupFailures + 1
        why = f"writing the gang failed: {error.message}; retry in {backoff(failures):.0f}s"
        change, event = job_status.write_failed(why, failures, now + backoff(failures)), Reason.WRITE_FAILED
    status = job_status.applied(placed.status, change, now, view.generation)
    return [WriteStatus(view.key, "", status), view.emit("Warning", event, why)]


def _add(plans: list[Plan], plan: Plan | None) -> None:
    if plan is not None:
        plans.append(plan)
