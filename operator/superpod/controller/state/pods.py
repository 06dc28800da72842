"""The Pods: by job and pod gang, the capacity each holds, and the runs of deleted pods not yet accounted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from superpod.api.podgang import nomination_of
from superpod.api.status import read_status
from superpod.controller.gpu_tally import GpuTally
from superpod.controller.state.base import Notes, slim
from superpod.controller.state.billing import Billing
from superpod.controller.state.pod_info import PodInfo, pod_info, removed_run
from superpod.core.accounting import Run
from superpod.core.gang_key import GangKey
from superpod.core.model import Pod
from superpod.core.phases import POD_FINISHED

# Runs of deleted pods a standby keeps before it drops those no leader would bill (then: twice those it kept)
ENDED_KEPT = 1_000


class PodStore:
    """The Pods. What a pod holds moves the GPU tally (`gpus`, shared with the nodes, which offer them); each pod
    stored or gone is told to `billing`; a pod that leaves a job for another has the job it left stamped (`stamp`);
    the cached `jobs` are read to drop the runs of accounted attempts on a standby."""

    def __init__(self, notes: Notes, scheduler_name: str, gpus: GpuTally, billing: Billing, jobs: dict[GangKey, dict],
                 stamp: Callable[[GangKey], None]) -> None:
        self.notes, self.scheduler_name = notes, scheduler_name
        self.gpus, self.billing, self.jobs, self.stamp = gpus, billing, jobs, stamp
        self.pods: dict[str, PodInfo] = {}
        self.by_job: dict[GangKey, set[str]] = {}  # gang -> keys of its pods
        self.gang_keys: set[GangKey] = set()  # the pod gangs of by_job
        self.gang_pods: dict[str, dict] = {}  # pod key -> object, of the pods other controllers ask it to bind
        self.gang_nominations: dict[str, GangKey] = {}  # pod key -> gang, of those pods holding a nomination
        self.holding: dict[str, Pod] = {}  # pod key -> the capacity it holds (bound, not finished)
        self.holding_changed: set[str] = set()  # keys changed in `holding` since the snapshot last took them
        # pod key -> (job uid, attempt, run, pod uid) of deleted pods
        self.ended: dict[str, tuple[str, int, Run, str]] = {}
        self._ended_bound = ENDED_KEPT  # a standby looks which runs of deleted pods still matter past this many

    def job_of(self, key: str) -> GangKey | None:
        return self.pods[key].job if key in self.pods else None

    def store(self, key: str, obj: dict, now: float) -> None:
        obj = slim(obj)
        held = self.holding.get(key)
        info = pod_info(obj, self.scheduler_name, held)
        old = self.pods.get(key)
        if old is not None and old.job and old.job != info.job:
            self._leave_job(key, old)
            self.stamp(old.job)  # the job it left has one pod fewer
        self.pods[key] = info
        if info.holds is not held:
            if self.notes.followed:
                self.holding_changed.add(key)
            self.gpus.pod(held, info.holds)
        if info.holds is not None:
            self.holding[key] = info.holds
        else:
            self.holding.pop(key, None)
        if info.job:
            self.by_job.setdefault(info.job, set()).add(key)
            if info.job.of_pods:
                self.gang_keys.add(info.job)
        if info.job and not info.owner:
            self.gang_pods[key] = obj
        else:
            self.gang_pods.pop(key, None)
        if info.job and not info.owner and nomination_of(obj) is not None:
            self.gang_nominations[key] = info.job
        else:
            self.gang_nominations.pop(key, None)
        self.billing.bill(key, info)
        self.billing.due_if_ended(info)

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        pod = self.pods.pop(key, None)
        if (held := self.holding.pop(key, None)) is not None:
            if self.notes.followed:
                self.holding_changed.add(key)
            self.gpus.pod(held, None)
        self.gang_pods.pop(key, None)
        self.gang_nominations.pop(key, None)
        if pod is None:
            return
        if pod.job:
            self._leave_job(key, pod)
            if pod.owner is None:
                self.notes.went(pod.uid)  # the Events said on it
        run = removed_run(pod, obj, now)
        if pod.job:
            self._keep_run(key, pod, run)
        self.billing.bill(key, None)
        if pod.gpus is not None and run.start is not None and pod.phase not in POD_FINISHED:
            self.billing.due(replace(pod, run=run))  # (a finished pod was taken when it finished)

    def _leave_job(self, key: str, pod: PodInfo) -> None:
        """Pod `key` no longer counts for `pod.job` (deleted, or relabelled into another gang); a pod gang left with
        no pods is gone, with what is remembered of it."""
        self.by_job.get(pod.job, set()).discard(key)
        if not self.by_job.get(pod.job):
            self.by_job.pop(pod.job, None)
            self.gang_keys.discard(pod.job)
            if pod.owner is None:
                self.notes.went(pod.job)

    def _keep_run(self, key: str, pod: PodInfo, run: Run) -> None:
        """Keep a deleted pod's run until its attempt is accounted (`forget_ended`): the leader's cycle drops the
        others every cycle, a standby each time they have doubled."""
        self.ended[key] = (pod.owner, pod.attempt, run, pod.uid)
        if not self.notes.followed and len(self.ended) > self._ended_bound:
            self.forget_accounted()

    def forget_ended(self, accounted: dict[str, int]) -> None:
        """Drop the runs of deleted pods once their attempt is accounted or their job is gone (job uid ->
        accountedAttempts)."""
        self.ended = {k: v for k, v in self.ended.items() if v[0] in accounted and v[1] > accounted[v[0]]}

    def forget_accounted(self) -> None:
        """`forget_ended` without a cycle (a standby): the attempts accounted as the cached jobs' statuses say. Looks
        again only when as many more runs are kept (and not before the jobs are as many)."""
        owners = {uid for uid, *_ in self.ended.values()}
        self.forget_ended({uid: read_status(obj)[0].accountedAttempts for obj in self.jobs.values()
                           if (uid := obj["metadata"].get("uid")) in owners})
        self._ended_bound = max(ENDED_KEPT, len(self.jobs), 2 * len(self.ended))

    def pods_of(self, job: GangKey) -> list[PodInfo]:
        return [self.pods[k] for k in self.by_job.get(job, ()) if k in self.pods]
