"""The scheduling cycle: observe -> judge -> decide -> apply.

- observe: read the cache (controller/state/) as it is at the start of the cycle: jobs, pods, nodes;
- judge: the placed gangs through core.lifecycle (controller/judge.py): those that changed, were not steady last
  cycle, on a node that changed, or whose runtime limit came (controller/deadlines.py; pod gangs' limits:
  controller/gang_limits.py);
- decide: the waiting jobs through the waiting room (controller/waiting.py: core.cycle's decisions, without
  visiting the jobs behind a shape that did not fit) on the snapshot, then the MIG flow;
- apply: every plan through the one applier (controller/applier.py).

The first three are synchronous: no event can change the cache while a cycle decides, so every decision of a cycle
is made on one view. Errors are isolated per object: a job or node that trips a bug gets a Warning Event and the
rest of the cluster schedules on. The same object runs in the operator (`superpod run`), in `superpod plan` and in
the simulator; only the ClusterAPI behind the applier differs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import ChainMap, Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

from superpod.controller import preemption
from superpod.controller.actions import Emit, Plan, node_ref
from superpod.controller.applier import Applier, Outcome
from superpod.controller.compute_domains import ComputeDomains
from superpod.controller.deadlines import Deadlines
from superpod.controller.decide import REWRITE_BURST, REWRITES_PER_SECOND, Offered, Pending, wait_plans
from superpod.controller.estimates import Estimator
from superpod.controller.gang_limits import GangLimits
from superpod.controller.held_claims import counted
from superpod.controller.jobs import JobReader, JobView
from superpod.controller.judge import Lost, Preempt, Settings, judge, record_deleted, replacement, requeue, revisit_at
from superpod.controller.metering import Meter
from superpod.controller.mig import MigFlow
from superpod.controller.podbills import PodBills, gang_labels, own_request
from superpod.controller.queues import QueueBook
from superpod.controller.snapshot import SnapshotCache
from superpod.controller.state import ClusterState
from superpod.controller.waiting import Views, WaitingRoom
from superpod.core import estimates, spares
from superpod.core import replace as replace_nodes
from superpod.core.cycle import Decision, PriorityFifo, QueuePolicy
from superpod.core.dra.book import DeviceBook
from superpod.core.gang_key import GangKey
from superpod.core.model import Snapshot
from superpod.core.phases import Phase, Reason
from superpod.core.preempt import Nomination, Preempting, Preemption, lower_priority, victims
from superpod.core.queues import Closed, FairQueues
from superpod.core.request import GPU, JobRequest
from superpod.core.runtime_limit import RuntimeLimit
from superpod.core.waiting import Parked
from superpod.k8s.api import ClusterAPI

log = logging.getLogger(__name__)
_FAILED = object()  # what a guarded step that failed answers, where None is an answer


@dataclass
class Turn:
    """What one cycle knows, step by step (Controller._plan): the plans so far and the facts the later steps read."""

    now: float
    touched: set[str]
    plans: list[Plan] = field(default_factory=list)
    placed: dict = field(default_factory=dict)  # JobReader.gangs: the placed TrainingJobs' gangs
    pending: Pending | None = None  # step 4
    snap: Snapshot | None = None  # step 5
    fair: FairQueues | None = None  # step 5: the queues' policy, when GPUQueues exist
    closed: Closed | None = None  # step 5: the policy that admits nothing, when the queues' could not be computed
    spares: list[str] = field(default_factory=list)  # step 5a: the spares freed for this cycle's replacements
    policy: QueuePolicy | None = None  # step 6
    mig: dict[str, str] = field(default_factory=dict)  # step 8: job key -> the MIG flow's message
    notes: dict[str, str] = field(default_factory=dict)  # step 8: job key -> a note on MIG for its waiting message


class Controller:
    def __init__(self, state: ClusterState, api: ClusterAPI, leading: Callable[[], bool],
                 settings: Settings | None = None, mig: MigFlow | None = None, metrics=None, policy=None,
                 clock: Callable[[], float] = time.time) -> None:
        self.state, self.settings, self.mig, self.metrics = state, settings or Settings(), mig, metrics
        state.fail_on(frozenset(self.settings.failure_conditions))
        self.policy = policy or PriorityFifo(self.settings.reserving, self.settings.ordering)
        self.applier = Applier(api, state, leading, metrics, writer=self.settings.writer, clock=clock)
        self.queues = QueueBook(state, self.settings.usage_half_life, metrics)
        self.estimator = Estimator(state, self.policy.ordering, self.queues.max_runtime)
        self.meter = Meter(metrics.gpu_seconds if metrics else None, self.queues.labels)
        self.domains = ComputeDomains()  # the ComputeDomains asked for (TrainingJobs with spec.computeDomain)
        self.bills = PodBills(self.queues)  # pods billed on their own (pod gangs, orphans, others' GPU pods, tails)
        # The last cycle's findings on the waiting jobs (for `superpod plan`, explanations and tests):
        self.visited: list[Decision] = []  # the jobs the cycle decided one by one, in queue order
        self.parked: list[Parked] = []  # the jobs it passed over (core/waiting.py)
        self.invalid: dict[str, str] = {}  # job key -> why no node of this cluster can serve it
        self.held_back: dict[str, str] = {}  # job key -> why it was not scheduled this cycle (backoff, terminating)
        self._follow_anew()
        self._offered: tuple[int, Offered] | None = None  # (nodes version, what the usable nodes offer)
        self._rewrites: tuple[float, float] = (REWRITE_BURST, 0.0)  # (tokens, when) of the rewrite budget
        self.unrecorded: dict[GangKey | str, Plan] = {}  # plan key -> a deleted placed job's record, until written
        self.preempting: dict[GangKey, dict[str, int]] = {}  # preemptor -> victims by kind, of this cycle's preemptions
        self.nominated: dict = {}  # job key -> view, of the jobs and pod gangs holding a nomination (this cycle)
        self.lost: list[Lost] = []  # this cycle's placed gangs with replicas to make again elsewhere (step 3 to 5)
        self.holds: dict[GangKey, tuple[JobRequest, Preemption]] = {}  # gang -> its preemption for its lost replicas

    def _follow_anew(self) -> None:
        """What follows the cache's changes, from scratch: at the start, and at the first cycle after the cache kept
        none (a standby's, `ClusterState.unfollow`), as in a replica just started: every job read, every placed gang
        judged, the snapshot built, the waiting room filled, counting resumed from now."""
        self.reader = JobReader()
        self.snapshots = SnapshotCache()
        self._devices_key: tuple = ()  # what the DRA book in use was built from
        self._built: dict = {}  # what that book held booked when built (more booked since: a cycle placed on it)
        self._spared: tuple = ()  # (the snapshot's rebuilds, its generation, the waiting needs) of the last booking
        self._told_pooled: set[str] = set()  # nodes warned that their GPUs are reached two ways (_tell_pooled)
        self._told_of: DeviceBook | None = None  # the device book they were last looked for in
        self.room = WaitingRoom()
        # job uid (a pod gang: its key) -> when its cause was written, its code, the hash of its sentence
        self.said: dict[str | GangKey, tuple[float, str, int]] = {}
        # Running gangs judged steady (all replicas running, nothing to write), with what they were judged on:
        # judging again gives the same verdict until the job, its pods, its Service or the nodes change.
        self.steady: dict[str, tuple[int, int]] = {}  # job uid -> (its changes, the last change of its nodes)
        self.judge_next: set[str] = set()  # keys of the placed jobs to judge next cycle though nothing changed
        # job uid -> (what `steady` compares, judge.revisit_at) of a placed job judged with nothing to write that is
        # not steady (a gang starting): not judged again before that moment unless it changes
        self.quiet: dict[str, tuple[tuple[int, int, int], float]] = {}
        self._judged = -1  # the nodes version the placed jobs were last all judged on
        self.deadlines = Deadlines()  # when each placed gang's runtime limit ends
        self.gang_limits = GangLimits()
        self._limits_of = -1  # the GPUQueue edits the placed jobs' deadlines were last all computed on
        self.meter.reset()
        self.applier.forget_all()

    def writer(self, fence: str) -> None:
        """Who writes from now on (Lease identity and term): stamped on created pods and Events."""
        if fence != self.settings.writer:
            self.settings = replace(self.settings, writer=fence)
            self.applier.writer = fence
            self.meter.reset()  # another replica counted while this one did not lead

    async def cycle(self, now: float, pause: float = 0) -> Outcome:
        """One cycle. `pause`: a testing knob, seconds between deciding and writing (the Lease may run out)."""
        started = time.perf_counter()
        plans = self.plan(now)
        planned = time.perf_counter()
        if self.metrics:
            self.metrics.plan_seconds.observe(planned - started)
        if pause and plans:
            log.info("decided %d plan(s); writing them in %.0fs (--debug-slow-cycle)", len(plans), pause)
            await asyncio.sleep(pause)
        outcome = await self.applier.apply(plans)
        if plans:
            log.debug("cycle: %d plans decided in %.3fs, written in %.3fs", len(plans), planned - started,
                      time.perf_counter() - planned)
        self.bills.written(self.state, outcome.done)
        for key in outcome.done:
            self.unrecorded.pop(key, None)
            if self.metrics and key in self.preempting:  # a preemption whose writes all landed
                for kind, count in self.preempting[key].items():
                    self.metrics.preemptions.labels(kind).inc(count)
        self.preempting = {}
        if outcome.stopped:
            log.warning("the Lease was lost while writing: %d of %d plans stopped; the next leader finishes or "
                        "rolls back from what it observes", len(plans) - len(outcome.done), len(plans))
        if self.state.gone:  # jobs, nodes or queues are gone: drop what is remembered of them
            gone = list(self.state.gone)
            self.state.gone.clear()
            self.applier.forget(gone)
            for uid in gone:
                self.said.pop(uid, None)
                self.steady.pop(uid, None)
                self.quiet.pop(uid, None)
        return outcome

    def plan(self, now: float) -> list[Plan]:
        """Observe, judge and decide: every write this cycle wants, as plans."""
        if not self.state.follow():  # a standby until now: the cache kept no changes to follow
            self._follow_anew()
        touched, self.state.touched = self.state.touched, set()
        try:
            return self._plan(now, touched)
        except BaseException:
            self.state.touched |= touched  # look at them again next cycle (a bug must not lose a change)
            raise

    def _plan(self, now: float, touched: set[str]) -> list[Plan]:
        """The cycle's steps, in order, each adding its plans to one `Turn`: what the cycle knows so far."""
        turn = Turn(now, touched)
        for step in (self._observe, self._account, self._judge_gangs, self._sort_waiting, self._snapshot,
                     self._release_spares, self._replace, self._replace_pods, self._keep_spares, self._choose_policy,
                     self._decide, self._repartition, self._preempt, self._queue_statuses, self._tell_waiting,
                     self._report_faults, self._meter):
            step(turn)
        return turn.plans

    def _observe(self, turn: Turn) -> None:
        """1. Read what changed: the GPUs DRA devices serve, jobs, pod gangs' bindings, objects that cannot be read,
        MIG layouts."""
        self.state.serve_gpus(turn.now)
        self.reader.read(self.state)
        self.room.gangs.settle(self.state, self.applier.bindings, turn.now, self.applier.claim_writes)
        turn.placed = self.reader.gangs
        turn.plans += self._unreadable()
        claiming = [self.reader.by_key[key] for key in sorted(self.reader.claiming) if key in self.reader.by_key]
        turn.plans += self._guarded("compute-domains", lambda: self.domains.plans(claiming, turn.now), [])
        if self.mig:
            turn.plans += self._guarded("mig", lambda: self.mig.check(turn.now), [])

    def _account(self, turn: Turn) -> None:
        """2. Bill what ended: deleted jobs' open attempts, pods billed on their own."""
        turn.plans += self._record_deleted(turn.now)
        turn.plans += self._guarded("metering", lambda: self._bill_pods(), [])

    def _judge_gangs(self, turn: Turn) -> None:
        """3. Judge the placed gangs (keep, finish, restart), their runtime limits, incomplete pod gangs."""
        due = self.deadlines.due(turn.now)
        self.lost = []
        turn.plans += self._judge_placed(turn.touched, turn.now, [key for key in due if not key.of_pods])
        turn.plans += self._guarded("limits", lambda: self._gang_limits(
            [key for key in due if key.of_pods], turn.now), [])
        turn.plans += self.room.gangs.stop_incomplete(self.state, turn.now, turn.touched)
        turn.plans += self._guarded("claims", lambda: self._devices_taken_twice(turn.now), [])

    def _devices_taken_twice(self, now: float) -> list[Plan]:
        """A bound pod gang whose claim holds a device an earlier claim holds (DraStore.taken_before: kube-scheduler
        gave the earlier one to a TrainingJob's replica while this operator's view had it free) is evicted, as a
        TrainingJob's replica in its place is stopped (judge): its owner makes it again, placed anew."""
        plans, gangs = [], self.room.gangs
        for claim_key, (device, earlier) in sorted(self.state.dra.taken_twice.items()):
            claim = self.state.dra.claims.get(claim_key)
            namespace = claim_key.split("/", 1)[0]
            for consumer in ((claim or {}).get("status") or {}).get("reservedFor") or ():
                key = self.state.dra.gang_of_pod(f"{namespace}/{consumer.get('name')}") if isinstance(
                    consumer, dict) else None
                if key is None or not key.of_pods:
                    continue
                why = (f"claim {claim_key} was given device {device[2]} of pool {device[1]}, which the earlier claim "
                       f"{earlier} holds: evicted, to be placed again")
                if plan := gangs.drain(self.state, key, why, now, Reason.DEVICE_TAKEN_TWICE):
                    plans.append(plan)
                break
        return plans

    def _sort_waiting(self, turn: Turn) -> None:
        """4. Sort the jobs that are not placed: ready to schedule, held back, Invalid."""
        turn.pending = self.room.pending(self.state, self.reader, turn.now, turn.touched, self.queues.labels,
                                         lambda uid: self.applier.settled(uid, turn.now))
        turn.plans += turn.pending.plans

    def _snapshot(self, turn: Turn) -> None:
        """5. The snapshot of capacity, the queues' policy over it, the predicted ends of what runs."""
        placed, gangs = turn.placed, self.room.gangs
        turn.snap = self.snapshots.build(self.state, placed, gangs.holdings(), turn.touched)
        turn.snap.set_devices(self._devices(turn.snap, placed))
        turn.plans += self._tell_pooled(turn.snap)
        holding = lambda: [counted(self.state, gang) for gang in placed.values()] + gangs.placed(self.state) + \
            self.bills.foreign() + self._unrecorded_holdings(placed)  # noqa: E731 - asked only when GPUQueues exist
        turn.fair, turn.closed = self._queue_policy(turn.snap, holding, turn.now)
        turn.plans += gangs.tell_relabelled(self.state)
        turn.snap.horizon = self.estimator.horizon_at(self.reader, turn.now)

    def _devices(self, snap: Snapshot, placed: dict) -> DeviceBook | None:
        """The DRA devices to place on: the snapshot's book while nothing changed (no claim, slice or class, no
        allocation in flight, no replica allocated, nothing booked on it since it was built), else one built anew,
        with the claims of the placed TrainingJobs' replicas that kube-scheduler has not allocated yet booked on
        their nodes."""
        if not self.state.dra.slices:
            return None
        in_flight = self.room.gangs.claims.observe(self.state)
        waiting = self._unallocated_replicas(placed)
        key = (self.state.dra.generation, frozenset(in_flight), waiting)
        if snap.devices is not None and key == self._devices_key and _bookings(snap.devices) == self._built:
            return snap.devices
        book = self.state.dra.book({name: entry.node.labels for name, entry in self.state.nodes.items()
                                    if entry.node}, in_flight)
        for job_key, node, count, sharing in waiting if book is not None else ():
            request = placed[job_key][0]
            book.book(job_key.text, node, request.claims, count, request.shared if sharing else ())
        self._devices_key, self._built = key, _bookings(book) if book is not None else {}
        return book

    def _tell_pooled(self, snap: Snapshot) -> list[Plan]:
        """A Warning, once a term, on each node that advertises nvidia.com/gpu and publishes its GPUs as DRA devices
        too: booked here as one pool (Snapshot._pool), but kube-scheduler and its kubelet hand each out apart. (A
        node whose nvidia.com/gpu a DeviceClass serves from its devices is one pool to kube-scheduler too.)"""
        if snap.devices is self._told_of:  # (looked for once per book: a book is built anew when devices change)
            return []
        self._told_of, plans = snap.devices, []
        for name in snap.devices.gpu_nodes() if snap.devices is not None else ():
            i = snap.index.get(name)
            if i is None or i not in snap.pooled or snap.nodes[i].served or name in self._told_pooled or (
                    entry := self.state.nodes.get(name)) is None:
                continue
            said = (f"node {name} advertises {snap.nodes[i].allocatable.get(GPU, 0)} nvidia.com/gpu and publishes its "
                    "GPUs as DRA devices too: this scheduler books them as one pool, but kube-scheduler and the "
                    "kubelet hand them out apart (a pod asking nvidia.com/gpu and a claim may get the same GPU); run "
                    "either the device plugin or the DRA driver's GPUs on a node")
            self._told_pooled.add(name)
            plans.append(Plan(f"node:{name}:gpus", [Emit(node_ref(entry.obj), "Warning",
                                                         str(Reason.GPUS_PUBLISHED_TWICE), said)]))
        return plans

    def _unallocated_replicas(self, placed: dict) -> tuple:
        """(job, node, replicas, whether the claims they share are to book too) of the placed TrainingJobs' replicas
        whose claims kube-scheduler has not allocated (the claims a job's pods share are allocated with its first)."""
        out = []
        for job_key, (request, uid, attempt, nodes) in placed.items():
            if request.claiming:
                done = {p.index for p in self.state.pods_of(job_key) if p.owner == uid and p.attempt == attempt
                        and p.node == nodes.get(p.index) and self.state.dra.allocated_for(p.uid, len(request.claims))}
                waiting = Counter(node for index, node in nodes.items() if index not in done)
                out.extend((job_key, node, count, bool(request.shared) and not done and i == 0)
                           for i, (node, count) in enumerate(sorted(waiting.items())))
        return tuple(out)

    def _release_spares(self, turn: Turn) -> None:
        """5a. The spares freed for this cycle's replacements (steps 5b and 5c; 5d books those left again)."""
        if self.lost or self.room.replacing:
            self._keep_spares(turn)  # a snapshot built anew has none booked yet
            turn.spares = spares.release(turn.snap)

    def _replace(self, turn: Turn) -> None:
        """5b. The replicas of lost nodes made again on nodes that keep their gangs' topology, booked before any
        waiting job is placed; or, with none free, the deadline after which their gangs restart, and the gangs they
        preempt for them."""
        self.holds = {}
        if not self.lost:
            return
        nominees = self._nominees()
        preempt = self._replacement_preemption(turn, nominees)
        for lost in self.lost:
            try:  # not onto nodes held for a preemptor: its victims were stopped for them
                held = self._held(nominees, but=lost.view.key)
                plan = replacement(self.state, lost, turn.snap, turn.now, self.settings, self.queues.labels, held,
                                   turn.spares, preempt)
            except Exception as e:  # noqa: BLE001 - a bug met this job: say so on it, go on with the rest
                log.exception("replacing replicas of %s failed", lost.view.key)
                self._count_error("judge")
                plan = lost.view.fault(f"the operator failed to replace its lost replicas: {e!r}", turn.now)
            if plan is not None:
                turn.plans.append(plan)
        self.lost = []

    def _replacement_preemption(self, turn: Turn, nominees: dict) -> Preempt | None:
        """How a gang whose lost replicas find no node preempts for them (core/replace.preempting): gangs of strictly
        lower priority the queues' rules let it evict (never a reserved one, nor one protected or already evicted),
        searched as a blocked head's victims are."""
        if not (self.settings.preemption and self.policy.preempts) or turn.closed:
            return None
        gangs, fair, snap, now = self.room.gangs, turn.fair, turn.snap, turn.now
        bound = fair.reclaim_bound if fair is not None else lambda job, victim: None
        taken: set[GangKey] = set()  # the victims this cycle's replacements chose

        def may_evict(job: JobRequest, victim: JobRequest) -> bool:
            return victim.key not in taken and lower_priority(job, victim) and (
                fair is None or fair.may_evict(job, victim))

        def preempt(view: JobView, lost: list[int], held: Collection[str]) -> tuple[dict, list] | None:
            job = view.request
            lowest = min((p for p in (self.reader.lowest_priority(), gangs.lowest_priority(self.state))
                          if p is not None), default=None)
            if lowest is None or lowest >= job.priority:
                return None
            running = preemption.running(self.state, self.reader, gangs, nominees, snap, now, self.queues.min_runtime,
                                         lambda victim: may_evict(job, victim), self.queues.queue_min_runtime)
            candidates, limits, _ = victims(job, running, bound, {})
            found = replace_nodes.preempting(snap, job, view.placement(), lost, candidates, held, limits)
            if found is None:
                return None
            writes = preemption.replacing(self.state, self.reader, gangs, view, found, now, self.queues.labels)
            self.holds[view.key] = (job, found)
            taken.update(victim.key for victim in found.victims)
            return writes
        return preempt

    def _replace_pods(self, turn: Turn) -> None:
        """5c. The pods owners made again for partly bound pod gangs (a lost node's), bound as lost replicas are
        replaced, before any waiting job is placed; not onto nodes held for a preemptor (this cycle's too)."""
        if not self.room.replacing:
            return
        held = self._held(self._nominees())
        turn.plans += self._guarded("judge", lambda: self.room.replace(self.state, turn.snap, turn.now, held,
                                                                       turn.spares), [])

    def _nominees(self) -> dict:
        """Job or pod gang key -> view, of those holding a nomination."""
        return {**self.reader.nominated, **self.room.gangs.nominated(self.state, self.room.ready)}

    def _held(self, nominees: dict, but: GangKey | None = None) -> set[str]:
        """The nodes no replacement may take: those nominated to preemptors (but `but`), and those this cycle's
        replacements preempt for."""
        held = {node for key, view in nominees.items() if key != but and view.status.nomination
                for node in view.status.nomination.nodes}
        held.update(node for _, found in self.holds.values() for node in found.placement.assignments)
        return held

    def _keep_spares(self, turn: Turn) -> None:
        """5d. The spare nodes (--spares) booked on the snapshot, so that no waiting job but a short one is placed
        there; none where only they keep a waiting job from the capacity it needs."""
        if self.settings.spares is None:
            return
        snap = turn.snap
        runtime = self.settings.spare_runtime
        # the waiting line's limits are rounded up to the estimate grid: the bound is rounded down to it
        snap.spare_runtime = estimates.rounded_down(self.settings.replace_deadline if runtime is None else runtime)
        level, count = self.settings.spares
        depth = snap.topology.index(level) or 0
        waiting = spares.needs(snap, depth, (view.request for view in self.room.ready.values()
                                             if isinstance(view.request, JobRequest)))
        spared = (self.snapshots.rebuilds, snap.generation, waiting)
        if self._spared == spared:  # nothing changed since they were booked
            return
        spares.keep(snap, depth, count, waiting)
        self._spared = (self.snapshots.rebuilds, snap.generation, waiting)

    def _choose_policy(self, turn: Turn) -> None:
        """6. The policy in force: held when the queues' policy failed, else under preemption when it may."""
        turn.policy = turn.closed or turn.fair or self.policy
        if turn.closed:
            turn.plans += self.queues.held_plans(turn.closed.why.message, turn.now)
        elif self.settings.preemption and self.policy.preempts:
            turn.policy = self._guarded("preemption", lambda: self._preempting(
                turn.policy, turn.fair, turn.snap, turn.now), turn.policy)
            turn.plans += self._guarded("preemption", lambda: preemption.expired(
                self.state, self.reader, self.room.gangs, self.nominated, turn.now), [])

    def _decide(self, turn: Turn) -> None:
        """7. Decide the waiting jobs in the waiting room; the placed ones' writes."""
        started = time.perf_counter()
        self.visited, self.parked, start_plans = self.room.decide(
            self.state, turn.snap, turn.now, self.settings, turn.policy, self.offered(), self._may_park(),
            self.estimator.request)
        self.invalid = {key: why for key, why in self.room.invalid.items() if why}
        self.held_back = turn.pending.reasons
        self._observe_decisions(turn.now, time.perf_counter() - started)
        turn.plans += start_plans

    def _repartition(self, turn: Turn) -> None:
        """8. The MIG flow: nodes repartitioned for the jobs that need slices (their notes for step 11)."""
        if self.mig:
            mig_plans, turn.mig, turn.notes = self._guarded("mig", lambda: self._mig(turn.placed, turn.now),
                                                            ([], {}, {}))
            turn.plans += mig_plans

    def _preempt(self, turn: Turn) -> None:
        """9. The writes of this cycle's preemptions (those of replacements were written in step 5b)."""
        policy = turn.policy
        self.preempting = {key: _kinds(found) for key, (_, found) in self.holds.items()}
        if not isinstance(policy, Preempting):
            return
        turn.plans += self._guarded("preemption", lambda: preemption.plans(
            policy, self.visited, self.reader, self.room.gangs, ChainMap(self.reader.by_key, self.room.ready),
            self.nominated, self.state, turn.now, self.queues.labels), [])
        self.preempting.update((key, _kinds(found)) for key, found in policy.chosen.items())

    def _queue_statuses(self, turn: Turn) -> None:
        """10. Each GPUQueue's status."""
        if not turn.closed:
            turn.plans += self._guarded("queues", lambda: self.queues.status_plans(turn.fair, self.visited, turn.now),
                                        [])

    def _tell_waiting(self, turn: Turn) -> None:
        """11. Why each waiting job waits, within the rewrite budget (preemptors were told in step 9)."""
        by_key = Views(self.reader.by_key, self.room.ready)
        budget = self._rewrite_budget(turn.now)
        passed = self.room.to_tell(self.parked)
        waiting = [decision for decision in self.visited if not decision.preempts] + passed
        waits, rewrites = wait_plans(waiting, by_key, turn.mig, turn.notes, turn.now, self.said, int(budget),
                                     frozenset(decision.job.key for decision in passed))
        turn.plans += waits
        self._rewrites = (budget - rewrites, turn.now)

    def _report_faults(self, turn: Turn) -> None:
        """12. A bug met while deciding a job, said on that job."""
        by_key = Views(self.reader.by_key, self.room.ready)
        for decision in self.visited:
            if decision.error and (view := by_key.get(decision.job.key)):
                log.error("placing %s failed: %s", decision.job.key, decision.error)
                turn.plans.append(view.fault(decision.reason, turn.now))
                self._count_error("decide")

    def _meter(self, turn: Turn) -> None:
        """13. The metrics of what runs and what pods used; the ended attempts the cache may forget."""
        now, touched = turn.now, turn.touched
        self._guarded("metering", lambda: self.meter.observe(self.state, self.reader.by_key, now, touched), None)
        self._guarded("metering", lambda: self.meter.observe_pods(self.bills.take_changes(now),
                                                                  lambda: self.bills.every(now), now), None)
        if self.state.ended:
            by_uid = self.reader.by_uid
            self.state.forget_ended({uid: by_uid[uid].status.accountedAttempts
                                     for uid, *_ in self.state.ended.values() if uid in by_uid})

    @property
    def decisions(self) -> list[Decision]:
        """Every waiting job's decision in the last cycle, in queue order (the jobs passed over included)."""
        if not self.parked:
            return self.visited
        passed = [decision for run in self.parked for decision in run.decisions()]
        return sorted(self.visited + passed, key=lambda decision: decision.job.queue_key)

    def _preempting(self, policy, fair, snap, now: float) -> Preempting:
        """The policy in force with preemption: the placed gangs as candidates, the nominations in force."""
        gangs = self.room.gangs
        # Nominations are the operator's own: a TrainingJob's status, a pod gang's pod status (NOMINATED); neither
        # is a tenant's to write, so they are read as written.
        self.nominated = {**self.reader.nominated, **gangs.nominated(self.state, self.room.ready)}

        def running(may):
            return preemption.running(self.state, self.reader, gangs, self.nominated, snap, now,
                                      self.queues.min_runtime, may, self.queues.queue_min_runtime)

        def hopeless(job) -> bool:  # no lower priority placed, and no guarantee to take back
            lowest = min((p for p in (self.reader.lowest_priority(), gangs.lowest_priority(self.state))
                          if p is not None), default=None)
            return (lowest is None or lowest >= job.priority) and not (fair is not None and fair.inside.get(job.key))

        nominated = preemption.nominations(self.state, self.reader, gangs, self.nominated, now)
        for key, (job, found) in self.holds.items():  # this cycle's replacements' preemptions: their nodes held
            nominated[key] = Nomination(tuple(sorted(found.placement.assignments)),
                                        tuple(victim.key for victim in found.victims), job)
        if fair is None:
            return Preempting(policy, running, nominated, lower_priority, hopeless)
        return Preempting(policy, running, nominated, fair.may_evict,
                          hopeless, fair.reclaim_bound)

    def _queue_policy(self, snap, placed: Callable, now: float) -> tuple[FairQueues | None, Closed | None]:
        """The GPUQueues' policy for this cycle. Unlike the other stages it fails closed: admitting without it could
        overspend a limit, a guarantee or a budget, so a failure holds admission (Closed) and says why."""
        try:
            return self.queues.policy(snap, placed, self.reader.active.values(), now, self.policy,
                                      self.bills.opens), None
        except Exception as e:  # noqa: BLE001 - logged, counted, and said on every GPUQueue
            log.exception("the queues step failed; nothing is admitted this cycle")
            self._count_error("queues")
            return None, Closed(f"admission is held: the GPUQueue policy could not be computed ({e!r:.160}); the "
                                "operator's log says more")

    def _unrecorded_holdings(self, placed: dict) -> list[JobRequest]:
        """TrainingJob pods that hold GPUs though no placement in force records them, so the queues count them too
        (else the cycle that finds them over-admits): those of a job whose status does not record them yet (a
        replica stopped between a gang's pods and its deferred status write: the next leader writes it a cycle
        later), as that many replicas of the job; those whose job is gone or was made again (pods a stale view
        placed, or the garbage collector has yet to delete), each by its own request."""
        out = []
        for key in self.state.by_job.keys() - placed.keys():
            if key.of_pods:
                continue
            view, mine = self.reader.by_key.get(key), 0
            for pod in self.state.pods_of(key):
                if pod.holds is None or pod.deleting:
                    continue
                if view is not None and pod.owner == view.uid:
                    mine += 1
                elif pod.gpus is not None:
                    out.append(own_request(pod))
            if mine and isinstance(view.request, JobRequest):
                out.append(replace(view.request, replicas=mine))
        return out

    def _may_park(self) -> bool:
        """Jobs may be passed over unless the MIG flow must see every waiting job (slices to give back)."""
        return self.mig is None or not self.mig.reclaims()

    def _rewrite_budget(self, now: float) -> float:
        """Waiting-message rewrites allowed now: a token bucket of REWRITES_PER_SECOND, at most REWRITE_BURST."""
        tokens, since = self._rewrites
        return min(REWRITE_BURST, tokens + max(0.0, now - since) * REWRITES_PER_SECOND)

    def _mig(self, placed: dict, now: float) -> tuple[list[Plan], dict[str, str], dict[str, str]]:
        """The MIG flow, for jobs that wait without a reservation, never on nodes that are placed or reserved."""
        def busy() -> set[str]:
            nodes = {node for _, _, _, gang in placed.values() for node in gang.values()}
            for decision in self.visited:  # the jobs passed over neither place nor reserve
                nodes.update(decision.placement.assignments if decision.placement else decision.reserved_nodes)
            return nodes

        # Jobs are passed over only when the flow needs none of them (_may_park): the visited are all it reads.
        waiting = [d.job for d in self.visited if d.placement is None and not d.reserved_nodes]
        return self.mig.plan(waiting, busy, now)

    def _observe_decisions(self, now: float, seconds: float) -> None:
        if self.metrics:
            self.metrics.placement_seconds.observe(seconds)
            for decision in self.visited:
                if decision.placement is not None:
                    self.metrics.queue_wait_seconds.observe(max(0.0, now - decision.job.submitted))
            self.metrics.observe_cluster(self.state, self.reader.phases)

    def offered(self) -> Offered:
        """What the usable nodes offer at all, recomputed when nodes change (from counts kept as they change)."""
        seen = (self.state.version, self.state.dra.device_edits)
        if self._offered is None or self._offered[0] != seen:
            self._offered = (seen, Offered.of(self.state.offers))
        return self._offered[1]

    def next_deadline(self) -> float | None:
        """The soonest runtime limit of a placed gang still to come: a cycle then stops it (the simulator's
        instant; the operator cycles every second)."""
        return self.deadlines.next()

    def _judge_placed(self, touched: set[str], now: float, due: list[str]) -> list[Plan]:
        """Judge the placed gangs that are not steady: those that changed (`touched`), those not steady last cycle,
        those whose runtime limit came (`due`), and when nodes changed, those on a node that changed or is gone."""
        active, changes, version, steady = self.reader.active, self.state.changes, self.state.version, self.steady
        stamps, nodes = self.state.node_stamps, self.state.nodes
        if self._judged != version:
            self._judged, candidates = version, set(active)
        else:
            candidates = (touched & active.keys()) | self.judge_next
        self.judge_next = set()
        for key in due:  # judged again though nothing of it changed: time did
            if (view := active.get(key)) is not None:
                steady.pop(view.uid, None)
                self.quiet.pop(view.uid, None)
                candidates.add(key)
        limits = self._job_limits(candidates, touched, now)
        plans: list[Plan] = []
        draining = self._draining(now)
        plans += draining.values()
        for key in sorted(candidates - draining.keys()):
            view = active.get(key)
            if view is None:
                continue
            on = view.placement().values()
            seen = (changes.get(key, 0), max((stamps.get(node, 0) for node in on), default=0),
                    sum(node not in nodes for node in on))  # a node deleted has no stamp
            quiet = self.quiet.get(view.uid)
            if quiet is not None and quiet[0] == seen and now < quiet[1]:
                self.judge_next.add(key)  # judged on this same state, and no deadline has come
                continue
            if steady.get(view.uid) != seen and self.applier.settled(view.uid, now):
                plans += self._judge_unless_steady(view, seen, now, limits.get(key))
            if steady.get(view.uid) != seen:
                self.judge_next.add(key)
        return plans

    def _job_limits(self, candidates: set[str], touched: set[str], now: float) -> dict[str, RuntimeLimit]:
        """The runtime limits of the placed jobs about to be judged, and the deadlines of those (every placed job's
        when a GPUQueue changed: its default or cap may have). A job no longer placed has none."""
        active = self.reader.active
        every = self._limits_of != self.state.queue_edits
        self._limits_of = self.state.queue_edits
        limits = {}
        gone = {key for key in touched - active.keys() if not key.of_pods}  # (a pod gang's are its own)
        for key in set(active) if every else candidates | gone:
            view = active.get(key)
            limit = self._guarded("limits", lambda v=view: self.queues.job_limit(v), _FAILED) if view else None
            if limit is _FAILED:  # its deadline stays as it was; tried again next cycle
                self.judge_next.add(key)
                continue
            started = view.time(view.status.attemptStartTime) if view is not None else None
            self.deadlines.set(key, limit.deadline(started) if limit is not None and started is not None else None)
            if limit is not None:
                limits[key] = limit
        return limits

    def _gang_limits(self, due: list[str], now: float) -> list[Plan]:
        """Pod gangs' deadlines followed, and those whose limit came evicted (unless draining does)."""
        gangs = self.room.gangs
        plans = self.gang_limits.follow(self.state, gangs, self.queues, self.deadlines)
        for key in due:
            if plan := self.gang_limits.stop(self.state, gangs, self.queues, self.deadlines, key, now):
                plans.append(plan)
        return plans

    def _record_deleted(self, now: float) -> list[Plan]:
        """Records of the attempts of placed jobs deleted since the last cycle (retried until written)."""
        deleted, self.reader.deleted_placed = self.reader.deleted_placed, []
        for view in deleted:
            plan = self._guarded("metering", lambda v=view: record_deleted(self.state, v, now, self.queues.labels),
                                 None)
            if plan is not None:
                self.unrecorded[plan.key] = plan
        return list(self.unrecorded.values())

    def _bill_pods(self) -> list[Plan]:
        """The pods billed on their own brought up to date (before the queues read them); the records due."""
        self.bills.update(self.state, self.reader, self.room.gangs, bool(self.unrecorded))
        return self.bills.plans()

    def _draining(self, now: float) -> dict[str, Plan]:
        """The placed jobs and bound pod gangs of queues whose HoldAndDrain budget was spent (as of the last cycle):
        each job stopped and requeued, each gang evicted (its owner makes it again; it then waits on the budget)."""
        if not self.queues.draining:
            return {}
        plans = {}
        for key, view in self.reader.active.items():
            queue = self.queues.labels(view)[0]
            if queue in self.queues.draining and self.applier.settled(view.uid, now):
                plans[key] = requeue(self.state, view, now, Reason.BUDGET_EXHAUSTED,
                                     f"stopped: queue {queue}'s budget is spent and it drains (HoldAndDrain); the "
                                     "job waits for the budget to renew", self.queues.labels)
        gangs = self.room.gangs
        for request in gangs.placed(self.state):
            queue = gang_labels(self.queues, request.key, request)[0]
            if queue in self.queues.draining and (plan := gangs.drain(
                    self.state, request.key, f"stopped: queue {queue}'s budget is spent and it drains (HoldAndDrain); "
                    "made again, it waits for the budget to renew", now)):
                plans[request.key] = plan
        return plans

    def _judge_unless_steady(self, view: JobView, seen: tuple[int, int], now: float,
                             limit: RuntimeLimit | None) -> list[Plan]:
        """Judge a placed job, and remember it as steady when there is nothing to write (`seen`: its change stamp
        and the last change of its nodes); a steady job's runtime `limit` wakes it (`deadlines`)."""
        plans = self._judge(view, now, limit)
        self.quiet.pop(view.uid, None)
        if self.lost and self.lost[-1].view is view:  # judged again each cycle until its replicas are made again
            return plans
        if not plans and view.phase == Phase.RUNNING and view.status.reason == Reason.RUNNING:
            self.steady[view.uid] = seen
        elif not plans:
            self.quiet[view.uid] = (seen, revisit_at(self.state, view, now, self.settings, limit))
        return plans

    def _judge(self, view: JobView, now: float, limit: RuntimeLimit | None) -> list[Plan]:
        try:
            plan = judge(self.state, view, now, self.settings, self.metrics, self.queues.labels, limit)
        except Exception as e:  # noqa: BLE001 - a bug met this job: say so on it, go on with the rest
            log.exception("judging %s failed", view.key)
            self._count_error("judge")
            return [view.fault(f"the operator failed to judge this job: {e!r}", now)]
        if isinstance(plan, Lost):
            self.lost.append(plan)
            return []
        return [plan] if plan else []

    def _guarded(self, stage: str, step: Callable, fallback):
        """A step over the whole cluster (MIG, metering): a bug there must not stop placement."""
        try:
            return step()
        except Exception:  # noqa: BLE001 - logged and counted; the cycle goes on without it
            log.exception("the %s step failed; this cycle goes on without it", stage)
            self._count_error(stage)
            return fallback

    def _unreadable(self) -> list[Plan]:
        """Warnings on the objects the operator cannot read in full: left out (nodes) or repaired (job status)."""
        out = []
        for name in sorted(self.state.unreadable):
            entry = self.state.nodes[name]
            out.append(Plan(f"node:{name}", [Emit(node_ref(entry.obj), "Warning", Reason.NODE_UNREADABLE,
                                                  f"left out of placement: {entry.problem}")]))
        for view in map(self.reader.by_key.get, sorted(self.reader.damaged)):
            if view.problems:
                out.append(Plan(f"repair:{view.key.text}", [view.emit(
                    "Warning", Reason.STATUS_REPAIRED, f"status fields dropped and rewritten: "
                    f"{'; '.join(view.problems)}")]))
        return out

    def _count_error(self, stage: str) -> None:
        if self.metrics:
            self.metrics.object_errors.labels(stage).inc()


def _kinds(found: Preemption) -> dict[str, int]:
    """A preemption's victims by kind, for the metrics: taken back by a queue (reclaim), or by priority."""
    return {"reclaim": sum(1 for v in found.victims if v.group),
            "priority": sum(1 for v in found.victims if not v.group)}


def _bookings(book: DeviceBook) -> dict[str, tuple]:
    """What a book holds booked: gang -> (node, pods) pairs."""
    return {gang: tuple(sorted((node, len(pods)) for node, pods in nodes.items()))
            for gang, nodes in book.booked.items()}
