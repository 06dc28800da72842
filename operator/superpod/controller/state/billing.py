"""Who bills which GPU time: the GPUUsage records, and the pods billed on their own (controller/podbills.py)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import replace

from superpod.api.convert import POD_USAGE, pod_usage_name, record_from_k8s
from superpod.api.resources import ConvertError
from superpod.controller.state.base import TOMBSTONES
from superpod.controller.state.jobs import accounted
from superpod.controller.state.pod_info import PodInfo
from superpod.core.gang_key import GangKey
from superpod.core.lifecycle import PodState
from superpod.core.usage import Ledger

log = logging.getLogger(__name__)
_ENDED = PodState("Succeeded")  # the state kept of a pod whose bill is due (billing reads its run, not its state)


class Billing:
    """The store of GPUUsage records (`ledger`, by queue), and the pods billed on their own — GPU pods no TrainingJob
    owns (pod gangs, orphans, other schedulers' pods) and a TrainingJob's pods being deleted (past their attempt's
    close): those holding GPUs (`billable`), and those that ended whose own record is not in the ledger yet
    (`unbilled`). The pod store tells it of each pod; whose pods are on their own it reads off the cached `jobs`."""

    def __init__(self, jobs: dict[GangKey, dict]) -> None:
        self.jobs = jobs
        self.ledger = Ledger()
        # pod key -> a pod holding GPUs billed on its own, and the keys changed in it since billing last took them (all
        # of them after `billable_whole`)
        self.billable: dict[str, PodInfo] = {}
        self.billable_changed: set[str] = set()
        self.billable_whole = True
        # pod uid -> such a pod that ended (finished, or gone: its run until its GPUs were freed) whose own record is
        # not in the ledger yet; a record that arrives takes its pod out (on every replica)
        self.unbilled: OrderedDict[str, PodInfo] = OrderedDict()

    # ---- the GPUUsage records -----------------------------------------------------------------------------------
    def job_of(self, key: str) -> GangKey | None:
        return None

    def store(self, name: str, obj: dict, now: float) -> None:
        self.ledger.remove(name)
        if name.endswith(POD_USAGE):
            self.unbilled.pop(name[:-len(POD_USAGE)], None)
        try:
            record = record_from_k8s(obj)
        except ConvertError as e:  # the API server checks the schema: only a hand-edited CRD gets here
            log.warning("GPUUsage %s is left out of the budgets: %s", name, e)
            return
        self.ledger.add(name, record)

    def forget(self, name: str, uid: str, obj: dict | None, now: float) -> None:
        self.ledger.remove(name)

    # ---- the pods -----------------------------------------------------------------------------------------------
    def bill(self, key: str, info: PodInfo | None) -> None:
        """Keep `billable`: a pod holding GPUs billed on its own (`on_its_own`); None: the pod is gone."""
        if info is not None and info.gpus is not None and info.holds is not None and self.on_its_own(info):
            if self.billable.get(key) is not info:
                self.billable[key] = info
                self._bill_changed(key)
        elif self.billable.pop(key, None) is not None:
            self._bill_changed(key)

    def due_if_ended(self, info: PodInfo) -> None:
        """A finished pod billed on its own has its record due (a TrainingJob's live one: its attempt bills it all)."""
        if info.gpus is not None and info.run.start is not None and info.run.end is not None and self.on_its_own(info):
            self.due(info)

    def due(self, pod: PodInfo) -> None:
        """The record of a pod that ended is due (`unbilled`), unless it is in the ledger already."""
        if pod_usage_name(pod.uid) in self.ledger.queue_of:
            return  # billed already
        self.unbilled[pod.uid] = replace(pod, holds=None, state=_ENDED)  # what billing reads of it, no more
        while len(self.unbilled) > TOMBSTONES:  # a standby whose leader bills none of them: the oldest go
            self.unbilled.popitem(last=False)

    def on_its_own(self, info: PodInfo) -> bool:
        """Billed by itself, not by an attempt: no TrainingJob owns it, it is being deleted, or its job is gone (or
        was made again: the garbage collector has yet to come to it)."""
        if info.owner is None or info.deleting:
            return True
        job = self.jobs.get(info.job) if info.job else None
        return job is None or job["metadata"].get("uid") != info.owner or info.attempt is not None and (
            info.attempt <= accounted(job))  # its attempt closed and billed: what it runs since is its own

    def _bill_changed(self, key: str) -> None:
        if len(self.billable_changed) >= TOMBSTONES:  # nobody takes them (a standby): the next taker looks at all
            self.billable_changed.clear()
            self.billable_whole = True
        self.billable_changed.add(key)

    def take_billable_changes(self) -> set[str] | None:
        """The keys of `billable` changed since the last take (None: look at all of them)."""
        changed, whole = self.billable_changed, self.billable_whole
        self.billable_changed, self.billable_whole = set(), False
        return None if whole else changed
