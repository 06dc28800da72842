"""The waiting room: the controller's jobs that wait, kept between cycles, so a cycle's cost follows what changed.

`pending`'s verdict on a job (ready to schedule, or nothing to do) reads only the job and its pods, so it is kept
until the cache says either changed (ClusterState.touched); verdicts that read the clock or ask for writes (backoff,
stopping pods, repairs) are taken again every cycle. The ready jobs wait in a core.waiting.WaitingLine, which
`schedule_waiting` walks without visiting the jobs behind a shape that did not fit. Those jobs are told their
cause when they start waiting or change, and then in turn, SWEEP per cycle (round robin), under the rewrite budget;
in turn, only a change of their cause's code rewrites them, not its counts nor a flip between NoRoom and
ReservedForOthers (decide.wait_plans; `decide.told_room` skips those whose status and cause both say the latter).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from itertools import islice

from superpod.controller.actions import BindPods, Plan
from superpod.controller.decide import FOR_ROOM, Offered, Pending, pending, says_room, servable, starts, told_room
from superpod.controller.jobs import JobReader, JobView
from superpod.controller.judge import Settings
from superpod.controller.metering import Labels, outside_queues
from superpod.controller.podgangs import GangView, PodGangs
from superpod.controller.state import ClusterState
from superpod.core.cycle import Decision, schedule
from superpod.core.gang_key import GangKey
from superpod.core.model import Snapshot
from superpod.core.phases import ACTIVE
from superpod.core.request import JobRequest
from superpod.core.waiting import Parked, WaitingLine, schedule_waiting

SWEEP = 64  # jobs passed over whose message is looked at again per cycle (round robin)


class Views:
    """A waiting job's view by key: the reader's, else the room's (pod gangs are only there); a ChainMap's `get`
    without its cost (a fortieth of a replay's time under a backlog)."""

    __slots__ = ("jobs", "room")

    def __init__(self, jobs: dict, room: dict) -> None:
        self.jobs, self.room = jobs, room

    def get(self, key: GangKey, default=None):
        view = self.jobs.get(key)
        return view if view is not None else self.room.get(key, default)


class WaitingRoom:
    def __init__(self) -> None:
        self.line = WaitingLine()
        self.ready: dict[str, JobView | GangView] = {}  # job key -> its view as scheduled (avoid_nodes applied)
        self.gangs = PodGangs()  # the pods other controllers ask this scheduler to bind
        self.recheck: set[str] = set()  # jobs `pending` must see every cycle: its verdict read the clock or wrote
        self.fresh: set[str] = set()  # jobs that started waiting, or changed, this cycle
        self.mig_jobs = 0  # ready jobs asking for MIG slices (the MIG flow must see every one: none is passed over)
        self.rotation: OrderedDict[str, None] = OrderedDict()  # ready jobs, in the order their turn comes
        self.unsettled: set[GangKey] = set()  # ready jobs whose status does not say they wait for room (says_room)
        self.invalid: dict[str, str] = {}  # ready jobs out of the line -> why no node can serve them ("": check failed)
        self.replacing: set[str] = set()  # ready pod gangs partly bound: their rest is placed by `replace`
        self._first = True
        self._nodes = -1  # ClusterState.version when every ready job was last checked against the nodes
        self._claims_read = 0  # DraStore.reading_edits() when the ready pod gangs' claims were last read

    def pending(self, state: ClusterState, reader: JobReader, now: float, touched: set[str],
                labels: Callable[[JobView], Labels] = outside_queues,
                settled: Callable[[str], bool] = lambda uid: True) -> Pending:
        """`decide.pending` over the jobs whose verdict may have changed (`touched`: the jobs the cache stamped or
        deleted since the last cycle; the others keep theirs): the plans and reasons of the jobs held back; the ready
        ones wait in `ready`. `labels`, `settled`: as `decide.pending` takes them."""
        if self._first:  # the cache may have been filled before this room looked (kept in `touched` on failure)
            self._first = False
            touched |= reader.by_key.keys() | {key for key in state.by_job if key.of_pods}
        if (edits := state.dra.reading_edits()) != self._claims_read:  # what their claims are read against changed
            self._claims_read = edits
            touched |= {key for key, view in self.ready.items() if key.of_pods and isinstance(
                view.request, JobRequest) and view.request.claiming}
        out = Pending()
        self.fresh = set()
        for key in sorted(touched | self.recheck):
            view = reader.by_key.get(key)
            self._leave(key)
            self.recheck.discard(key)
            if key.of_pods:  # decided on its pods alone: looked at again when they change
                gang, plan, why = self.gangs.verdict(state, key, now)
                if plan is not None:
                    out.plans.append(plan)
                if why:
                    out.reasons[key] = why
                if gang is not None:
                    self._enter(gang)
                continue
            if view is None or view.phase in ACTIVE:
                continue
            verdict = pending(state, [view], now, labels, settled)
            out.plans += verdict.plans
            out.reasons.update(verdict.reasons)
            if verdict.plans or verdict.reasons:
                self.recheck.add(key)
            for ready in verdict.ready:
                self._enter(ready)
        return out

    def _enter(self, view: JobView | GangView) -> None:
        self.ready[view.key] = view
        if isinstance(view, GangView) and view.slots:
            self.replacing.add(view.key)
        self.fresh.add(view.key)
        self.rotation[view.key] = None
        if not says_room(view):
            self.unsettled.add(view.key)
        if isinstance(view.request, JobRequest):
            self.mig_jobs += view.request.mig_profile is not None

    def _leave(self, key: GangKey) -> None:
        view = self.ready.pop(key, None)
        if view is None:
            return
        self.rotation.pop(key, None)
        self.unsettled.discard(key)
        self.replacing.discard(key)
        self.line.discard(key)
        self.invalid.pop(key, None)
        if isinstance(view.request, JobRequest):
            self.mig_jobs -= view.request.mig_profile is not None

    def decide(self, state: ClusterState, snap: Snapshot, now: float, settings: Settings, policy,
               offered: Offered, may_park: bool = True,
               estimated: Callable[[JobView | GangView], JobRequest] = lambda view: view.request) \
            -> tuple[list[Decision], list[Parked], list[Plan]]:
        """Schedule the line: the decisions of the jobs visited, the runs passed over (only for a policy that
        `parks`, with no MIG job waiting and `may_park`), and the plans of the jobs placed and found invalid. Jobs
        are checked against the nodes when they start waiting or the nodes change. `estimated(view)`: the request
        a job waits with in the line (its estimate and turn: controller/estimates.py)."""
        plans: list[Plan] = []
        if self._nodes != state.version:
            self._nodes, keys = state.version, set(self.ready)
        else:  # and those out of the line, every cycle: a write may have failed, a failed check may pass
            keys = (self.fresh | self.invalid.keys()) & self.ready.keys()
        check = [self.ready[key] for key in sorted(keys - self.replacing)]
        found: dict[str, str] = {}
        valid = servable(snap, offered, check, now, plans, found)
        for view in valid:
            if view.key not in self.line.jobs:
                self.line.add(estimated(view))
        for view in check:
            self.invalid.pop(view.key, None)
        for key in {view.key for view in check} - {view.key for view in valid}:
            self.line.discard(key)  # invalid, or its check failed (then it is checked again next cycle)
            self.invalid[key] = found.get(key, "")
        if may_park and policy.parks and not self.mig_jobs:
            visited, parked = schedule_waiting(snap, self.line, policy)
        else:
            visited, parked = schedule(snap, self.line.all(), policy), []
        jobs = [decision for decision in visited if not decision.job.key.of_pods]
        plans += starts(state, jobs, self.ready, now, settings)
        if len(jobs) < len(visited):
            plans += self._bind(state, snap, visited, now)
        return visited, parked, plans

    def replace(self, state: ClusterState, snap: Snapshot, now: float, held: Collection[str] = (),
                spares: Collection[str] = ()) -> list[Plan]:
        """The rest of each partly bound pod gang bound where its gang's topology holds (booked on `snap` before any
        waiting job is placed, the freed `spares` first), or told why it waits; a bound one is looked at again next
        cycle."""
        plans = []
        for key in sorted(self.replacing):
            view = self.ready[key]
            plan = self.gangs.replace_lost(state, snap, view, now, held, spares)
            if plan is not None:
                plans.append(plan)
                if any(isinstance(step, BindPods) for step in plan.steps):
                    state.touch(key)
        return plans

    def _bind(self, state: ClusterState, snap: Snapshot, visited: list[Decision], now: float) -> list[Plan]:
        """The bindings of the pod gangs placed; each is looked at again next cycle (it leaves the line then)."""
        plans = []
        for decision in visited:
            if decision.placement is not None and decision.job.key.of_pods:
                plans.append(self.gangs.bind(state, self.ready[decision.job.key], decision.placement.assignments, now,
                                             snap.devices))
                state.touch(decision.job.key)
        return plans

    def to_tell(self, parked: list[Parked]) -> list[Decision]:
        """The decisions of the jobs passed over that should be told now: those that started waiting or changed
        this cycle, and the next SWEEP in turn (no turn is taken while nothing in turn could be told)."""
        if not parked:
            return []
        runs: dict = {}
        for run in parked:
            runs.setdefault(run.head.shape(), []).append(run)
        turn = []  # none while every job passed over would be skipped (told_room) or is told now (fresh): all
        # say and are told "room", or do not yet and are fresh
        if not self.unsettled <= self.fresh or any(run.cause.code not in FOR_ROOM for run in parked):
            turn = list(islice(self.rotation, SWEEP))
            for key in turn:
                self.rotation.move_to_end(key)
        out = []
        for key in sorted(self.fresh.union(turn)):
            job = self.line.jobs.get(key)
            for run in runs.get(job.shape(), ()) if job is not None else ():
                if run.head.queue_key <= job.queue_key <= run.last.queue_key and not told_room(
                        self.ready.get(key), run.cause.code):
                    out.append(run.decision(job))
        return out

