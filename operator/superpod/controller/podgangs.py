"""Pod gangs: pods other controllers (a Job, a JobSet, a StatefulSet, a training operator) create with
spec.schedulerName naming this scheduler. They are grouped into gangs (api/podgang.py) and scheduled by the same
cycle as TrainingJobs — same order, queues, placement and reservations — then bound through the pods/binding
subresource, as kube-scheduler binds: the pod is never recreated and its owner stays in charge.

A gang is bound only when all its pods exist and fit, all at once; until then each pod says why in its
PodScheduled=False condition. A binding cannot be taken back, so a gang some of whose pods are bound (a binding that
failed, an operator killed mid-gang, a pod its owner made again after its node was lost) has the pods it lacks bound
as a TrainingJob's lost replicas are replaced (core/replace.choose): inside the domain of the required level its
bound pods are in, each slice whole, before any waiting job is placed, each asking what its bound part was admitted
with (any other pod, or one made again for a pod deleted from a healthy node, waits in the line for queue
admission). Until their bindings are observed, bound pods are assumed in the snapshot (`assumed`), as a
TrainingJob's placement is."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from functools import cached_property
from types import SimpleNamespace
from typing import Any

from superpod.api.convert import pod_from_k8s
from superpod.api.models import Nomination, TrainingJobSpec
from superpod.api.podgang import (
    BOUND_WITH,
    GANG_SIZE,
    MAX_NOMINATED,
    NOMINATED,
    TOPOLOGY,
    BoundWith,
    bound_with_of,
    gang_request,
    gang_size,
    grouping,
    in_slot_order,
    max_runtime_of,
    nomination_of,
    rank_of,
    requests_of,
    with_claims,
)
from superpod.api.resources import ConvertError
from superpod.api.times import rfc3339
from superpod.controller.actions import BindPods, DeletePods, Emit, Plan, SetPodCondition, pod_ref
from superpod.controller.claims import Claims
from superpod.controller.state import ClusterState
from superpod.core.dra.book import DeviceBook
from superpod.core.estimates import LIMIT_GRACE
from superpod.core.gang_key import GangKey
from superpod.core.model import Pod, Snapshot
from superpod.core.phases import POD_FINISHED, POD_UNSCHEDULABLE, Cause, Phase, Reason
from superpod.core.preempt import Running
from superpod.core.replace import by_node, choose
from superpod.core.request import JobRequest

log = logging.getLogger(__name__)
SCHEDULED = "PodScheduled"
ASSUME_TTL = 300.0  # seconds a sent binding whose pod is not seen bound stays assumed
# seconds part of a gang may stay bound while the rest waits (a TrainingJob's default startup timeout): then the
# bound part is evicted and the gang waits again whole
INCOMPLETE_TIMEOUT = float(TrainingJobSpec.model_fields["startupTimeoutSeconds"].default)


@dataclass(frozen=True)
class GangStatus:
    """What a pod gang's pods say (the fields the waiting messages compare with)."""

    message: str | None
    reason: str | None


@dataclass(frozen=True)
class GangView:
    """A pod gang as one cycle sees it: the pods to place now, in the order of their request's ranks (its identical
    members, then the others: in_slot_order), and their core request. It answers the cycle as a TrainingJob's
    JobView does (wait, invalid, fault), with pod conditions instead of a status."""

    key: GangKey
    members: tuple[dict, ...]
    request: JobRequest | ConvertError | None = None  # None: it waits before anything is placed
    problems: tuple[str, ...] = ()
    # the rest of a partly bound gang, placed as lost replicas are replaced: the whole gang's request, its bound
    # pods' slots -> nodes, each member's slot, and the domain the bound pods keep it in (for the words)
    whole: JobRequest | None = None
    placement: tuple[tuple[int, str], ...] = ()
    slots: tuple[int, ...] = ()
    domain: str = ""

    @property
    def uid(self) -> GangKey:
        """A pod gang has no object of its own: its key stands for a uid."""
        return self.key

    @cached_property
    def status(self) -> GangStatus:
        said = {_condition(pod) for pod in self.members}
        if len(said) == 1 and (found := said.pop()) is not None and found[0] == "False":
            return GangStatus(found[2], found[1])
        return GangStatus(None, None)

    @property
    def phase(self) -> str | None:
        return Phase.QUEUED if self.status.reason == POD_UNSCHEDULABLE else None

    def says(self, cause: Cause, details: dict) -> bool:
        """Whether its pods already say they wait for `cause` (its sentence: a pod carries neither code nor details)."""
        return self.phase == Phase.QUEUED and self.status.message == cause.message

    def wait(self, reason: str, why: str, now: float, nomination: dict | None = None, **details) -> Plan | None:
        """PodScheduled=False with `why` on every pod that does not say it yet, and one Event. (`reason` is the
        cycle's; a pod's is always Unschedulable, as kube-scheduler's; the details of a TrainingJob's status are not
        written on pods.) A `nomination` (a preemption's) is written
        first, in the first pod's status (NOMINATED): the commit point, as in a TrainingJob's status; the plan stops
        there if that pod is gone or was replaced."""
        steps: list = [SetPodCondition(_key(pod), pod["metadata"].get("uid") or "", {
            "type": SCHEDULED, "status": "False", "reason": POD_UNSCHEDULABLE, "message": why,
            "lastTransitionTime": rfc3339(now)}) for pod in self.members
            if _condition(pod) != ("False", POD_UNSCHEDULABLE, why)]
        if nomination is not None:
            first = self.members[0]
            steps.insert(0, SetPodCondition(_key(first), first["metadata"].get("uid") or "", {
                "type": NOMINATED, "status": "True", "reason": "Preempting",
                "message": json.dumps(nomination, sort_keys=True), "lastTransitionTime": rfc3339(now)}, required=True))
        if not steps:
            return None
        return Plan(self.key, [*steps, self.emit("Warning", "FailedScheduling", why)])

    def invalid(self, why: str, now: float, reason: Reason = Reason.INVALID) -> Plan | None:
        return self.wait(reason, why, now)

    def fault(self, what: str, now: float) -> Plan:
        return Plan(f"error:{self.key.text}", [self.emit("Warning", Reason.INTERNAL_ERROR, what)])

    def bind(self, assignments: dict[str, list[int]], bound_with: BoundWith) -> Plan:
        nodes = {index: node for node, ranks in assignments.items() for index in ranks}  # member i: slot i
        bindings = tuple((_key(pod), pod["metadata"].get("uid") or "", nodes[i]) for i, pod in enumerate(self.members))
        said = (f"bound {len(bindings)} pod(s) of gang {self.key} to {len(assignments)} node(s): "
                f"{', '.join(sorted(assignments)[:8])}{' ...' if len(assignments) > 8 else ''}")
        return Plan(self.key, [BindPods(self.key, bindings, ((BOUND_WITH, bound_with.text()),)),
                               self.emit("Normal", "Scheduled", said)])

    def emit(self, kind: str, reason: str, message: str) -> Emit:
        return Emit(pod_ref(self.members[0]), kind, str(reason), message)


@dataclass(frozen=True)
class GangNominee:
    """A pod gang holding a nomination (a NOMINATED condition of its pods), as the preemption flow reads a nominated
    TrainingJob: its key, whether it still waits (phase), the nomination, and how to drop it."""

    key: GangKey
    waiting: bool
    status: Any  # .nomination: the api.models.Nomination
    holders: tuple[dict, ...]  # the pods that carry it
    request: JobRequest | None = None

    @property
    def phase(self) -> str | None:
        return Phase.QUEUED if self.waiting else None

    def emit(self, kind: str, reason: str, message: str) -> Emit:
        return Emit(pod_ref(self.holders[0]), kind, str(reason), message)

    def clear(self, now: float) -> Plan:
        """Drop the nomination of a gang that no longer waits (bound, or gone)."""
        return Plan(self.key, [SetPodCondition(_key(pod), pod["metadata"].get("uid") or "", {
            "type": NOMINATED, "status": "False", "reason": "Cleared", "message": "",
            "lastTransitionTime": rfc3339(now)}) for pod in self.holders])


class PodGangs:
    def __init__(self) -> None:
        # gang key -> pod key -> (uid, when decided, sent): pods bound (or being bound) but not observed so; a binding
        # is assumed from the decision, and after the writes only if it was sent and did not fail (see settle)
        self.assumed: dict[str, dict[str, tuple[str, float, bool]]] = {}
        self._held: dict[str, Pod] = {}  # pod key -> what an assumed pod holds on its node
        self._placed: dict[str, tuple[int, JobRequest | None]] = {}  # gang key -> (its change stamp, `placed`'s answer)
        # gang key -> the queue its pods named when it was bound: a bound gang counts there, whatever its pods' labels
        # say since (a tenant may edit them); a relabelled gang is told so once (`relabelled`)
        self.admitted: dict[str, str | None] = {}
        self.relabelled: dict[str, tuple[str | None, str | None]] = {}  # gang key -> (admitted, now named), to tell
        self._told: set[str] = set()
        self.incomplete: dict[str, float] = {}  # gang key -> since when some of its pods are bound and others wait
        self.evicted: dict[str, str] = {}  # uid -> key of the pods `stop_incomplete` evicted: members no more
        # gang key -> pod key -> node: where its pods were seen bound since it was last whole (which nodes it lost)
        self.were_on: dict[str, dict[str, str]] = {}
        self.claims = Claims()  # the DRA claims of the pods it binds: allocated before they are bound
        self.claimed_gpus: dict[GangKey, float] = {}  # gang key -> GPUs each of its pods claimed when it was bound
        self.started: dict[GangKey, float] = {}  # gang key -> the earliest start seen of its pods while it is bound

    def verdict(self, state: ClusterState, key: str, now: float) -> tuple[GangView | None, Plan | None, str]:
        """A gang whose pods may have changed: ready to place (its view), or why it waits (a plan telling its pods,
        and the words), or nothing to do."""
        live, bound, waiting = self._members(state, key)
        if not (bound and waiting):
            self.incomplete.pop(key, None)
        self._track(state, key, live, bound)
        if not waiting:
            return None, None, ""
        gated = {_key(pod) for pod in waiting if pod["spec"].get("schedulingGates")}
        if gated:  # the API server says SchedulingGated on those; the others are told what the gang waits for
            why = f"waiting for {len(gated)} of the gang's pods to have their scheduling gates removed"
            return None, GangView(key, tuple(p for p in waiting if _key(p) not in gated)).wait("", why, now), why
        view = GangView(key, tuple(waiting))
        group = grouping(waiting[0])
        try:
            size = gang_size(key, live, state.pod_group(key), group.by)
            if group.by == "label" and len(live) > size:
                raise ConvertError(f"gang {key}", f"metadata.annotations[{GANG_SIZE}]",
                                   f"says {size}, but {len(live)} of its pods exist")
            if bound and len(bound) < size:  # the rest of a gang its bound part cannot run without
                self.incomplete.setdefault(key, now)
            else:  # (a PodGroup's members past its minMember are extras: the bound part is a whole gang)
                self.incomplete.pop(key, None)
            if not bound and len(waiting) < size:
                # The words do not count the pods: each pod is told once, not once per pod that appears after it.
                why = f"waiting for all {size} pods of the gang to exist"
                return None, view.wait("", why, now), f"{why} ({len(waiting)} do)"
            request = gang_request(key, waiting, extra_selector=_inside(state, list(bound.values()), waiting))
            request = with_claims(request, waiting, state.dra)
            max_runtime_of(key, waiting)  # a limit that does not read is said before the gang is bound
            if request.claiming and (said := self._claims_waiting(state, view, now)) is not None:
                return None, *said
            if bound:  # the rest of a gang: slices are the whole gang's, not this remainder's
                request = replace(request, slice_size=None, slice_required=None)
            missing = size - len(bound)  # (the pods past them wait in the line, as do those of a cut gang)
            if bound and missing > 0 and not self._cut(state, key, bound) and \
                    (rest := _rest(state, key, live, bound, missing, request)) is not None:
                return rest, None, ""
            members = in_slot_order(waiting)  # member i goes to the placement's slot i, where its request fits
        except (ConvertError, LookupError) as e:
            why = str(e).strip('"')
            return None, view.wait("", why, now), why
        return GangView(key, tuple(members), request), None, ""

    def _claims_waiting(self, state: ClusterState, view: GangView, now: float) -> tuple[Plan | None, str] | None:
        """Why the gang's claims keep it from being placed now (not made yet, or allocated for a binding that did
        not happen: released first), as a plan and the words; None when they do not."""
        why, release = self.claims.waiting(state, view.key, list(view.members), now)
        if not why:
            return None
        plan = view.wait("", why, now)
        if release is not None:
            plan = Plan(view.key, [release, *(plan.steps if plan else ())])
        return plan, why

    def replace_lost(self, state: ClusterState, snap: Snapshot, view: GangView, now: float,
                     held: Collection[str] = (), spares: Collection[str] = ()) -> Plan | None:
        """The rest of a partly bound gang (`view.slots`) bound onto nodes that keep the gang's topology, booked on
        `snap` (core/replace.choose, as a TrainingJob's lost replicas); or why it waits. `held`: nodes nominated to
        preemptors; `spares`: the spares freed for replacements."""
        chosen = choose(snap, view.whole, dict(view.placement), view.slots, held=held, spares=spares)
        if chosen is None:
            count = len(view.slots)
            why = (f"{count} pod{'s' if count > 1 else ''} of running gang {view.key}: no node {view.domain} can take "
                   f"{'them' if count > 1 else 'it'} now; {'they wait' if count > 1 else 'it waits'} for one, and "
                   f"if none frees up within {INCOMPLETE_TIMEOUT:.0f}s the gang's bound pods are evicted and it "
                   "waits again whole")
            return view.wait("", why, now)
        return self.bind(state, view, by_node({member: chosen[slot] for member, slot in enumerate(view.slots)}),
                         now, snap.devices)

    def _track(self, state: ClusterState, key: str, live: list[dict], bound: dict[str, str]) -> None:
        """Remember where the gang's pods are bound; forget the pods it no longer has once it is whole again."""
        if not live:
            self.were_on.pop(key, None)
            return
        seen = self.were_on.setdefault(key, {})
        if any(pod_key not in bound for pod_key in seen):
            try:
                if len(bound) >= gang_size(key, live, state.pod_group(key), grouping(live[0]).by):
                    seen.clear()
            except (ConvertError, LookupError):
                pass  # (said when its pods wait)
        seen.update(bound)

    def _cut(self, state: ClusterState, key: str, bound: dict[str, str]) -> bool:
        """Whether a pod the gang had bound is gone from a node that is still healthy (its owner deleted it: no node
        was lost, so its rest waits in the line, admitted as a gang of its own)."""
        return any(pod_key not in bound and _healthy(state, node) for pod_key, node in self.were_on[key].items())

    def _members(self, state: ClusterState, key: str) -> tuple[list[dict], dict[str, str], list[dict]]:
        """A gang's live pods (not finished, not being deleted); those bound or assumed bound (pod key -> node); the
        others, in rank order. Assumptions the cache has caught up with are dropped."""
        held = self.assumed.get(key, {})
        for pod_key in [k for k, (uid, _, _) in held.items() if k not in state.pods or state.pods[k].node
                        or state.pods[k].uid != uid]:
            del held[pod_key]  # observed bound, or gone (another pod of that name is not this one)
            self._held.pop(pod_key, None)
        if not held:
            self.assumed.pop(key, None)
        live = [state.gang_pods[k] for k in sorted(state.by_job.get(key, ())) if k in state.gang_pods
                and not state.pods[k].deleting and state.pods[k].phase not in POD_FINISHED
                and state.pods[k].uid not in self.evicted]
        bound = {}
        for pod in live:
            pod_key = _key(pod)
            if node := pod["spec"].get("nodeName") or (self._held[pod_key].node if pod_key in held else None):
                bound[pod_key] = node
        return live, bound, sorted((pod for pod in live if _key(pod) not in bound), key=rank_of)

    def bind(self, state: ClusterState, view: GangView, assignments: dict[str, list[int]], now: float,
             devices: DeviceBook | None = None) -> Plan:
        """The bindings of a placed gang, after its claims' allocations (booked in `devices` when it was placed);
        its pods are assumed on their nodes until they are observed bound. Each pod is bound with what the gang
        is bound with (BOUND_WITH)."""
        plan = view.bind(assignments, self._bound_with(state, view))
        if isinstance(view.request, JobRequest) and view.request.claiming:
            booked = (devices.booked.get(view.key.text) if devices else None) or {}
            allocated = {rank: pods[j] for node, ranks in assignments.items() if (pods := booked.get(node))
                         for j, rank in enumerate(ranks)} if view.request.claims else dict.fromkeys(
                range(len(view.members)), [])
            shared = devices.booked_shared.get(view.key.text) if devices else None
            if len(allocated) < len(view.members) or view.request.shared and shared is None:
                refused = devices.refused.get(view.key.text) if devices else None
                why = refused.message if refused else "its claims could not be allocated on the nodes chosen"
                return view.wait("", why, now) or Plan(view.key, [])
            plan.steps.insert(0, self.claims.allocate(state, view.key, list(view.members),
                                                      [allocated[i] for i in range(len(view.members))],
                                                      shared[1] if shared else [], now))
            plan.undo = lambda error: (view.wait("", f"allocating its pods' ResourceClaims failed: {error.message}",
                                                 now) or Plan(view.key)).steps
        if isinstance(view.request, JobRequest):
            self.admitted.setdefault(view.key, view.request.queue)  # (the rest of a gang keeps its first queue)
            if view.request.claimed_per_member:
                self.claimed_gpus.setdefault(view.key, view.request.claimed_per_member)
        held = self.assumed.setdefault(view.key, {})
        bindings = next(step for step in plan.steps if isinstance(step, BindPods)).bindings
        for member, (pod_key, uid, node) in zip(view.members, bindings, strict=True):
            pod = pod_from_k8s({**member, "spec": {**member["spec"], "nodeName": node}})
            if pod is not None:
                held[pod_key] = (uid, now, False)
                self._held[pod_key] = pod
        return plan

    # ---- preemption: bound pod gangs as victims ------------------------------------------------------------------
    def running(self, state: ClusterState, snap: Snapshot, now: float, allowed: Callable[[JobRequest], bool],
                evicting: set[str], min_runtime: Callable[[JobRequest], int]) -> list[Running]:
        """The bound pod gangs `allowed` accepts, as preemption candidates (those a nomination already evicts left
        out): their bound pods, the work lost since the first of them started, and whether their queue's
        minRuntimeSeconds still protects them."""
        out = []
        for request in self.placed(state):
            if request.key in evicting or not allowed(request) or not self._bound(state, request.key):
                continue  # (a gang whose pods all terminate already gives its nodes back)
            pods = sorted(k for k in state.by_job.get(request.key, ()) if k in snap.pods)
            started = min((state.pods[k].run.start or now for k in pods if k in state.pods), default=now)
            gpus = request.total_units
            least, ran = min_runtime(request), now - started
            protected = f"it has run {ran:.0f}s of its queue's minRuntimeSeconds {least}" if ran < least else ""
            devices = state.dra.devices_of(state.pods[k].uid for k in pods if k in state.pods) \
                if request.claiming or request.claimed_gpus else frozenset()  # (bound: read without its claims)
            out.append(Running(request, gpus, gpus * max(0.0, ran), tuple(pods), protected, devices))
        return out

    def nominated(self, state: ClusterState, ready: dict) -> dict[GangKey, GangNominee]:
        """The pod gangs holding a nomination (`ready`: the waiting room's views, for their requests)."""
        holders: dict[str, list[dict]] = {}
        for pod_key, key in state.gang_nominations.items():
            if pod_key in state.gang_pods:
                holders.setdefault(key, []).append(state.gang_pods[pod_key])
        out = {}
        for key, pods in holders.items():
            found = []
            for pod in pods:
                try:
                    nomination = Nomination.model_validate_json(nomination_of(pod) or "")
                    nomination.time.timestamp()
                    if max(len(nomination.nodes), len(nomination.victims)) > MAX_NOMINATED:
                        raise ValueError(f"names more than {MAX_NOMINATED} nodes or victims")
                except (ValueError, OverflowError) as e:  # not one the operator wrote: ignored
                    log.warning("pod %s: condition %s unreadable, ignored: %s", _key(pod), NOMINATED, e)
                    continue
                found.append(nomination)
            _, bound, waiting = self._members(state, key)
            view = ready.get(key)
            status = SimpleNamespace(nomination=max(found, key=lambda n: n.time.timestamp()) if found else None)
            nominee = GangNominee(key, bool(waiting) and status.nomination is not None, status, tuple(pods),
                                  view.request if isinstance(view, GangView) else None)
            out[key] = nominee
        return out

    def lowest_priority(self, state: ClusterState) -> int | None:
        return min((request.priority for request in self.placed(state)), default=None)

    def victim_pods(self, state: ClusterState, key: str) -> list[str]:
        """Which of a gang's pods a preemption stops, by uid: those bound now; the pods its owner makes again
        afterwards are new and never stopped by the same nomination."""
        return sorted(pod["metadata"].get("uid") or "" for pod in self._bound(state, key))

    def unstopped(self, state: ClusterState, key: str, uids: list[str]) -> list[dict]:
        """The pods of `uids` still bound and not being deleted (a preemption whose deletes did not land)."""
        wanted = set(uids)
        return [pod for pod in self._bound(state, key) if pod["metadata"].get("uid") in wanted]

    def stop(self, state: ClusterState, key: str, uids: list[str], preemptor: str, priority, now: float) -> Plan:
        """Evict a bound pod gang as kube-scheduler evicts a pod: condition DisruptionTarget (reason
        PreemptionByScheduler), then a graceful delete (each pod's own grace period); its owner makes it again."""
        return _evict(key, self.unstopped(state, key, uids), "PreemptionByScheduler", Reason.PREEMPTED,
                      f"preempted by {preemptor} (priority {priority})", now)

    def stop_incomplete(self, state: ClusterState, now: float, touched: set[str]) -> list[Plan]:
        """Gangs part of which stayed bound past INCOMPLETE_TIMEOUT while the rest could not be placed: the bound
        part is evicted (a training gang's half runs nothing but burns its GPUs), and the gang waits again whole
        (its key goes into `touched`: its remainder is no longer placed as a gang of its own)."""
        self.evicted = {uid: pod for uid, pod in self.evicted.items() if (info := state.pods.get(pod)) is not None
                        and info.uid == uid}  # (gone: forgotten)
        plans = []
        for key, since in sorted(self.incomplete.items()):
            if now - since < INCOMPLETE_TIMEOUT:
                continue
            del self.incomplete[key]
            _, bound, waiting = self._members(state, key)
            pods = [state.gang_pods[k] for k in sorted(bound) if k in state.gang_pods and k not in self.assumed.get(
                key, {})]
            if not (pods and waiting):
                continue
            why = (f"part of gang {key} was bound and the rest found no room for {now - since:.0f}s: its "
                   "bound pods were evicted, and it waits again whole")
            self.evicted.update({pod["metadata"].get("uid") or "": _key(pod) for pod in pods})
            touched.add(key)
            plans.append(_evict(key, pods, "GangIncomplete", Reason.GANG_INCOMPLETE, why, now))
        return plans

    def drain(self, state: ClusterState, key: str, why: str, now: float,
              reason: Reason = Reason.BUDGET_EXHAUSTED) -> Plan | None:
        """Evict every bound pod of a gang whose queue's budget is spent and drains (HoldAndDrain), or whose runtime
        limit came (`reason` MaxRuntimeExceeded); None when none is left to evict."""
        pods = self._bound(state, key)
        return _evict(key, pods, str(reason), reason, why, now) if pods else None

    def bound(self, state: ClusterState, key: str) -> list[dict]:
        """The gang's pods that hold their nodes (bound, not finished, not being deleted), by pod key."""
        return self._bound(state, key)

    def first_start(self, state: ClusterState, key: GangKey) -> float | None:
        """When the gang first started (its runtime limit runs from then): the first start of its bound pods, of
        those they say the gang had when they were bound (BOUND_WITH), and of those seen since it was bound (gone
        since); None: none has. Bound pods made again one by one never move it later."""
        pods = self._bound(state, key)
        said = bound_with_of(pods)
        starts = [start for pod in pods if (start := state.pods[_key(pod)].run.start) is not None]
        starts += [start for start in (said.first_start if said else None, self.started.get(key)) if start is not None]
        if not starts:
            return None
        self.started[key] = min(starts)
        return self.started[key]

    def _bound_with(self, state: ClusterState, view: GangView) -> BoundWith:
        """What the gang's pods are bound with: a gang some of whose pods are bound keeps what they were bound with
        (else what they ask: the chart's admission policy fixes it once they are bound), with its first start; the
        others, what their pods ask."""
        bound = self._bound(state, view.key)
        said = bound_with_of(bound)
        if said is not None:
            return replace(said, first_start=self.first_start(state, view.key))
        try:
            asked = max_runtime_of(view.key, bound or list(view.members))
        except ConvertError:  # (bound pods whose annotation an admin edited since)
            asked = max_runtime_of(view.key, list(view.members))
        claimed = view.request.claimed_per_member if isinstance(view.request, JobRequest) else 0.0
        return BoundWith(asked, self.first_start(state, view.key) if bound else None, claimed)

    def _bound(self, state: ClusterState, key: str) -> list[dict]:
        return [state.gang_pods[k] for k in sorted(state.by_job.get(key, ())) if k in state.gang_pods
                and state.pods[k].holds is not None and not state.pods[k].deleting]

    def settle(self, state: ClusterState, bindings: dict[str, tuple[str, str]], now: float,
               claim_writes: dict[str, str] | None = None) -> None:
        """After the last cycle's writes: an assumption stays only for a binding that was sent and did not fail (its
        answer may be lost: kept up to ASSUME_TTL, as kube-scheduler's assumed pods) and is not observed yet (a pod
        seen bound holds what its own state says: nothing once it finished); the others' gangs are looked at again."""
        for key, held in list(self.assumed.items()):
            for pod_key, (uid, since, sent) in list(held.items()):
                outcome = bindings.get(pod_key)
                if not sent:  # decided last cycle: kept only if its binding went out and did not fail
                    sent = outcome is not None and outcome[0] == uid and outcome[1] != "failed"
                    held[pod_key] = (uid, since, sent)
                info = state.pods.get(pod_key)
                if not sent or info is None or info.uid != uid or info.node or now - since > ASSUME_TTL:
                    del held[pod_key]
                    self._held.pop(pod_key, None)
                    state.touch(key)
            if not held:
                del self.assumed[key]
        bindings.clear()
        self.claims.settle(claim_writes if claim_writes is not None else {}, now, ASSUME_TTL)

    def holdings(self) -> dict[str, Pod]:
        return {pod_key: self._held[pod_key] for held in self.assumed.values() for pod_key in held
                if pod_key in self._held}

    def placed(self, state: ClusterState) -> list[JobRequest]:
        """The bound pod gangs, as requests (what the queues count as in use): one per gang, its live bound pods;
        each recomputed only when its pods changed."""
        out = []
        for key in sorted(state.gang_keys):
            pod_keys = state.by_job.get(key, ())
            stamp = state.changes.get(key, 0)
            known = self._placed.get(key)
            if known is None or known[0] != stamp:
                held = self.assumed.get(key, {})
                bound = [state.gang_pods[k] for k in sorted(pod_keys)
                         if k in state.gang_pods and (state.pods[k].holds is not None or k in held)]
                try:  # pods that came to disagree (an edited annotation) still count
                    known = self._placed[key] = (stamp, self._as_admitted(state, gang_request(key, bound, check=False),
                                                                          bound) if bound else None)
                except ConvertError:  # a malformed quantity: the API server would not have it
                    known = self._placed[key] = (stamp, None)
            if known[1] is not None:
                out.append(known[1])
            else:  # (none of its pods holds a node: a gang bound again starts anew)
                self.started.pop(key, None)
        for key in self._placed.keys() - state.gang_keys:
            del self._placed[key]
        for key in self.were_on.keys() - state.gang_keys:
            del self.were_on[key]
        for key in self.claimed_gpus.keys() - state.gang_keys:
            del self.claimed_gpus[key]
        for key in self.started.keys() - state.gang_keys:
            del self.started[key]
        for key in self.admitted.keys() - state.gang_keys:
            del self.admitted[key]
            self._told.discard(key)
        return out

    def _as_admitted(self, state: ClusterState, request: JobRequest, bound: list[dict]) -> JobRequest:
        """A bound gang's request, in the queue it was bound under (remembered from the binding, else as its pods say:
        a new leader takes what the labels say then, and counts it in its namespace's queue when they name one that
        does not take it: QueueTree.counted), with the GPUs its pods claim (remembered from the binding, else
        as their templates say now, or as their binding recorded: BOUND_WITH)."""
        if any((pod.get("spec") or {}).get("resourceClaims") for pod in bound):
            held = state.dra.gpus_of((pod["metadata"].get("uid") or "" for pod in bound), whole=True)
            said = bound_with_of(bound)
            claimed = max(held / len(bound), self.claimed_gpus.get(request.key, 0), said.claimed_gpus if said else 0)
            if claimed:
                request = replace(request, claimed_gpus=claimed)
        if request.key not in self.admitted:
            self.admitted[request.key] = request.queue
        admitted = self.admitted[request.key]
        if admitted == request.queue:
            return request
        if request.key not in self._told:
            self.relabelled[request.key] = (admitted, request.queue)
        return replace(request, queue=admitted)

    def tell_relabelled(self, state: ClusterState) -> list[Plan]:
        """A Warning, once, on each bound gang whose pods came to name another queue than the one it was bound
        under: it goes on counting there."""
        plans = []
        for key, (admitted, named) in sorted(self.relabelled.items()):
            self._told.add(key)
            pods = self._bound(state, key)
            if pods:
                said = Emit(pod_ref(pods[0]), "Warning", str(Reason.QUEUE_RELABELLED),
                            f"gang {key} was bound in queue {admitted or 'of its namespace'}; its pods now name "
                            f"{named or 'none'}: it counts in the queue it was bound in until it ends")
                plans.append(Plan(f"relabelled:{key.text}", [said]))
        self.relabelled = {}
        return plans


def _evict(key: GangKey, pods: list[dict], reason: str, event: Reason, why: str, now: float) -> Plan:
    """The DisruptionTarget condition (`reason`), then a graceful delete of each pod, and one Event."""
    steps: list = [SetPodCondition(_key(pod), pod["metadata"].get("uid") or "", {
        "type": "DisruptionTarget", "status": "True", "reason": reason, "message": f"superpod-scheduler: {why}",
        "lastTransitionTime": rfc3339(now)}) for pod in pods]
    grace = LIMIT_GRACE if event == Reason.MAX_RUNTIME_EXCEEDED else None  # a limit is not the pods' to stretch
    steps.append(DeletePods(tuple((_key(pod), pod["metadata"].get("uid") or "") for pod in pods), grace))
    if pods:
        steps.append(Emit(pod_ref(pods[0]), "Warning", str(event), f"gang {key} {why}"))
    return Plan(key, steps)


def _rest(state: ClusterState, key: GangKey, live: list[dict], bound: dict[str, str], missing: int,
          request: JobRequest) -> GangView | None:
    """The first `missing` waiting pods of a partly bound gang that ask what its bound identical members were
    admitted with, as replicas to replace in the bound part's placement; None when none does (the others wait in the
    line: queue admission sees what they ask)."""
    placed = in_slot_order(sorted((pod for pod in live if _key(pod) in bound), key=rank_of))
    admitted = gang_request(key, placed, check=False)
    fill = [pod for pod in sorted(live, key=rank_of)
            if _key(pod) not in bound and requests_of(pod) == admitted.requests][:missing]
    if not fill:
        return None
    whole = replace(admitted, replicas=admitted.replicas + len(fill), claims=request.claims,
                    claimed_gpus=request.claimed_gpus, shared_on=request.shared_on, shared_gpus=request.shared_gpus)
    order = placed[:admitted.replicas] + fill + placed[admitted.replicas:]  # identical members first, as ranked
    placement = tuple((slot, bound[_key(pod)]) for slot, pod in enumerate(order) if _key(pod) in bound)
    slots = tuple(range(admitted.replicas, admitted.replicas + len(fill)))
    inside = _inside(state, list(bound.values()), order)
    level = ((order[0].get("metadata") or {}).get("annotations") or {}).get(TOPOLOGY["required"])
    domain = f"inside {level} {inside[0][1]}" if inside else "that keeps its topology"
    return GangView(key, tuple(order[slot] for slot in slots), request, whole=whole, placement=placement,
                    slots=slots, domain=domain)


def _inside(state: ClusterState, nodes: list[str], waiting: list[dict]) -> tuple[tuple[str, str], ...]:
    """The node selector that keeps the rest of a partly bound gang inside the domain its bound pods (on `nodes`)
    are in, at the level it requires (nothing when none is required or they span more than one such domain)."""
    if not nodes:
        return ()
    required = ((waiting[0].get("metadata") or {}).get("annotations") or {}).get(TOPOLOGY["required"])
    level = next((lv for lv in state.topology()[0].levels if lv.name == required), None)
    if level is None:
        return ()
    values = set()
    for node in nodes:
        entry = state.nodes.get(node)
        values.add(entry.node.labels.get(level.label) if entry and entry.node else None)
    return ((level.label, values.pop()),) if len(values) == 1 and None not in values else ()


def _healthy(state: ClusterState, node: str) -> bool:
    entry = state.nodes.get(node)
    return entry is not None and entry.node is not None and entry.node.ready and not entry.node.held


def _condition(pod: dict) -> tuple[str, str, str] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == SCHEDULED:
            return str(cond.get("status")), str(cond.get("reason") or ""), str(cond.get("message") or "")
    return None


def _key(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"

