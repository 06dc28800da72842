"""The scheduling cycle: observe -> judge -> decide -> apply.

- observe: read the cache (controller/state.py) as it is at the start of the cycle: jobs, pods, nodes;
- judge: every placed gang through core.lifecycle (controller/judge.py);
- decide: the waiting jobs through core.cycle.schedule on the snapshot (controller/decide.py), then the MIG flow;
- apply: every plan through the one applier (controller/applier.py).

The first three are synchronous: no event can change the cache while a cycle decides, so every decision of a cycle
is made on one view. Errors are isolated per object: a job or node that trips a bug gets a Warning Event and the
rest of the cluster schedules on. The same object runs in the operator (`superpod run`), in `superpod plan` and in
the simulator; only the ClusterAPI behind the applier differs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from superpod.controller.actions import Emit, Plan, node_ref
from superpod.controller.applier import Applier, Outcome
from superpod.controller.decide import decide, pending, wait_plans
from superpod.controller.jobs import JobReader, JobView
from superpod.controller.judge import Settings, judge
from superpod.controller.metering import Meter
from superpod.controller.mig import MigFlow
from superpod.controller.snapshot import SnapshotCache, holdings
from superpod.controller.state import ClusterState
from superpod.core.cycle import Decision
from superpod.core.phases import ACTIVE, Reason
from superpod.core.request import JobRequest
from superpod.k8s.api import ClusterAPI

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, state: ClusterState, api: ClusterAPI, leading: Callable[[], bool],
                 settings: Settings | None = None, mig: MigFlow | None = None, metrics=None, policy=None,
                 clock: Callable[[], float] = time.time) -> None:
        self.state, self.settings, self.mig, self.metrics, self.policy = state, settings or Settings(), mig, \
            metrics, policy
        self.applier = Applier(api, state, leading, metrics, writer=self.settings.writer, clock=clock)
        self.reader = JobReader()
        self.snapshots = SnapshotCache()
        self.meter = Meter(metrics.gpu_seconds if metrics else None)
        # The last cycle's findings on the waiting jobs (for `superpod plan`, explanations and tests):
        self.decisions: list[Decision] = []  # scheduled, placed or not
        self.invalid: dict[str, str] = {}  # job key -> why no node of this cluster can serve it
        self.held_back: dict[str, str] = {}  # job key -> why it was not scheduled this cycle (backoff, terminating)

    def writer(self, fence: str) -> None:
        """Who writes from now on (Lease identity and term): stamped on created pods and Events."""
        if fence != self.settings.writer:
            self.settings = replace(self.settings, writer=fence)
            self.applier.writer = fence

    async def cycle(self, now: float, pause: float = 0) -> Outcome:
        """One cycle. `pause`: a testing knob, seconds between deciding and writing (the Lease may run out)."""
        plans = self.plan(now)
        if pause and plans:
            log.info("decided %d plan(s); writing them in %.0fs (--debug-slow-cycle)", len(plans), pause)
            await asyncio.sleep(pause)
        outcome = await self.applier.apply(plans)
        if outcome.stopped:
            log.warning("the Lease was lost while writing: %d of %d plans stopped; the next leader finishes or "
                        "rolls back from what it observes", len(plans) - len(outcome.done), len(plans))
        self.applier.forget_said({j["metadata"].get("uid") for j in self.state.jobs.values()}
                                 | {e.uid for e in self.state.nodes.values()})
        return outcome

    def plan(self, now: float) -> list[Plan]:
        """Observe, judge and decide: every write this cycle wants, as plans."""
        views = self.reader.views(self.state.jobs)
        plans = self._unreadable(views, now)
        if self.mig:
            plans += self.mig.check(now)
        placed: dict[str, tuple[JobRequest, str, int, dict[int, str]]] = {}
        for view in views:
            if view.phase not in ACTIVE:
                continue
            if isinstance(view.request, JobRequest) and len(view.placement()) == view.replicas:
                placed[view.key] = (view.request, view.uid, view.status.attempt, view.placement())
            if self.applier.settled(view.key, now):
                plans += self._isolated(view, lambda v=view: judge(self.state, v, now, self.settings, self.metrics),
                                        now)
        waiting = pending(self.state, views, now)
        plans += waiting.plans
        snap = self.snapshots.build(self.state, holdings(self.state, placed))
        started = time.perf_counter()
        self.decisions, self.invalid, start_plans = decide(self.state, snap, waiting.ready, now, self.settings,
                                                           self.policy)
        self.held_back = waiting.reasons
        if self.metrics:
            self.metrics.placement_seconds.observe(time.perf_counter() - started)
            for d in self.decisions:
                if d.placement is not None:
                    self.metrics.queue_wait_seconds.observe(max(0.0, now - d.job.submitted))
        plans += start_plans
        messages: dict[str, str] = {}
        notes: dict[str, str] = {}
        if self.mig:
            busy = {n for _, _, _, nodes in placed.values() for n in nodes.values()}
            for d in self.decisions:
                busy.update(d.placement.assignments if d.placement else d.reserved_nodes)
            mig_plans, messages, notes = self.mig.plan([d.job for d in self.decisions if d.placement is None
                                                 and not d.reserved_nodes], busy, now)
            plans += mig_plans
        by_key = {v.key: v for v in views}
        plans += wait_plans(self.decisions, by_key, messages, notes, now)
        for d in self.decisions:
            if d.error and (view := by_key.get(d.job.key)):
                log.error("placing %s failed: %s", d.job.key, d.error)
                plans.append(Plan(f"error:{view.key}", [view.emit("Warning", Reason.INTERNAL_ERROR, d.reason)]))
                self._count_error("decide")
        self.meter.observe(self.state, views, now)
        if self.metrics:
            self.metrics.observe_cluster(self.state)
        return plans

    def _isolated(self, view: JobView, decide_one: Callable[[], Plan | None], now: float) -> list[Plan]:
        try:
            plan = decide_one()
        except Exception as e:  # noqa: BLE001 - a bug met this job: say so on it, go on with the rest
            log.exception("judging %s failed", view.key)
            self._count_error("judge")
            return [Plan(f"error:{view.key}", [view.emit("Warning", Reason.INTERNAL_ERROR,
                                                         f"the operator failed to judge this job: {e!r}")])]
        return [plan] if plan else []

    def _unreadable(self, views: list[JobView], now: float) -> list[Plan]:
        """Warnings on the objects the operator cannot read in full: left out (nodes) or repaired (job status)."""
        out = []
        for name, entry in self.state.nodes.items():
            if entry.problem:
                out.append(Plan(f"node:{name}", [Emit(node_ref(entry.obj), "Warning", Reason.NODE_UNREADABLE,
                                                      f"left out of placement: {entry.problem}")]))
        for view in views:
            if view.problems:
                out.append(Plan(f"repair:{view.key}", [view.emit(
                    "Warning", Reason.STATUS_REPAIRED, f"status fields dropped and rewritten: "
                    f"{'; '.join(view.problems)}")]))
        return out

    def _count_error(self, stage: str) -> None:
        if self.metrics:
            self.metrics.object_errors.labels(stage).inc()
