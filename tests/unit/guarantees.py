"""A queue inside its guarantee gets it (issue 35): for the state machine (tests/unit/machine.py), a model of what a
GPUQueue is owed, from the store alone, independent of the operator's queue policy.

A queue is owed its next job when, in the store:
- the queue holds less than its guarantee: the GPUs of its placed gangs (a placed TrainingJob's whole gang, a pod
  gang's bound pods, any other live bound pod of its namespaces) as the queues count them, and also the GPUs its
  pods still hold on the nodes (terminating ones included);
- its first waiting job in queue order (priority, then submission, then name) that fits inside the guarantee — the
  job the policy calls "inside" (`FairQueues.order`; jobs in backoff, `notBefore`, are not in that order) — has no
  nomination yet and no pod of an earlier attempt still there (it waits for them: one attempt's pods at a time), a
  plain spec (no node filters, GPU product or MIG profile; no required topology but a level's label; it could run
  on this cluster idle), and its namespace's queue;
- it fits on the nodes that take pods (ready, schedulable, named by no nomination) once some of what other queues
  borrow is given back: gangs of queues above their guarantee, each no larger than what its queue borrows, together
  no more than that, not reserved, not protected against ping-pong (preempted twice within PINGPONG_WINDOW, run
  less than PINGPONG_RUN), not named by a nomination already. Its replicas fit node by node on the free requests
  (within one domain of its required level, if any).

The operator must place that job, or start the preemption that makes its room (its nomination written), within
GUARANTEE_CYCLES clear cycles: cycles of the leader with no fault injected, on a cache that has every event (none
lost since its last full list). The other moments are the world's: a cycle on a stale cache may not know the job or
the room; a fault may stop the very write; a crash or a lost Lease ends the cycle; no leader, no cycle. Nodes that
are down or cordoned are not counted as room, so those moments are excluded by the model itself.

Why two cycles: a clear cycle decides every waiting job on a view equal to the store and writes what it decides
(placement: the pods; reclaim: the preemptor's nomination, then the victims' stop) in that same cycle. The victims'
grace period (preemptionGracePeriodSeconds) delays only the placement that follows the nomination, never the
nomination itself: "its reclaim started" is the nomination, so grace adds no cycle. But admission counts what the
placed gangs hold as the cycle starts: a gang the same cycle's judge stops (a node lost, a pod failed) frees its
queue's share for the next cycle only, and a placement decided but whose status write is deferred
(Settings.status_delay) books the whole gang while the store shows only its pods — one more cycle either way (the
machine found both with one). A job another queue's job inside its own guarantee outran in the cycle is not owed
after it, so it is not counted."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from superpod.api.convert import job_from_k8s
from superpod.api.podgang import GANG_SIZE, grouping, nomination_of, rank_of
from superpod.api.podgang import gang_request as gang_request_of
from superpod.api.resources import ConvertError, quantity
from superpod.api.times import timestamp
from superpod.controller.preemption import PINGPONG_RUN, PINGPONG_WINDOW
from superpod.core.accounting import gpu_units
from superpod.core.phases import ACTIVE, FINISHED
from superpod.core.queues import ANY, RESERVED
from superpod.core.request import JobRequest
from superpod.k8s.api import CLUSTERTOPOLOGIES, GPUQUEUES, NODES, PODS, TRAININGJOBS
from tests.unit.memory_cluster import node_ready, requests_of, unwritten

if TYPE_CHECKING:
    from tests.unit.machine import World

GUARANTEE_CYCLES = 2  # clear cycles a queue may wait for the job it is owed (see the module's docstring)
MAX_VICTIMS = 3  # gangs given back together, at most, in the model (the cluster holds few that borrow)


def namespace_queues(store) -> dict[str, str]:
    """Namespace -> the GPUQueue that takes it."""
    return {namespace: queue["metadata"]["name"] for queue in store.objects.get(GPUQUEUES, {}).values()
            for namespace in (queue.get("spec") or {}).get("namespaces") or []}


@dataclass(frozen=True)
class Gang:
    """A placed gang of some queue, as a victim would give it back."""

    key: str
    queue: str
    units: float
    frees: dict[str, Counter]  # node -> the requests it holds there
    protected: bool  # reserved, or shielded against ping-pong


@dataclass(frozen=True)
class Waiting:
    key: str
    request: JobRequest
    nominated: bool  # its preemption started
    leftover: bool  # pods of an earlier attempt are still there: it waits for them (one attempt's pods at a time)
    possible: bool = True  # some node could hold each of its replicas (else it could never run here)


class Guarantees:
    def __init__(self, world: World) -> None:
        self.world = world
        self.unserved: dict[tuple[str, str], int] = {}  # (queue, job key) -> clear cycles it stayed owed after

    # ---- the check ------------------------------------------------------------------------------------------------
    def served(self, owed: dict[str, Waiting]) -> None:
        """After a clear cycle: each job owed before it and still owed after it has waited one more cycle."""
        after = self.owed() if owed else {}
        waited = {}
        for queue, job in owed.items():
            if queue in after and after[queue].key == job.key:
                waited[(queue, job.key)] = self.unserved.get((queue, job.key), 0) + 1
                if waited[(queue, job.key)] >= GUARANTEE_CYCLES:
                    self.world.violations.append(
                        f"queue {queue} is inside its guarantee and {job.key} ({job.request.total_units:g} GPUs) fits, "
                        f"yet after {waited[(queue, job.key)]} clear cycle(s) it is neither placed nor preempting")
            elif self._preempting(job):
                self.world.checks["owed jobs served: their reclaim started"] += 1
            else:
                self.world.checks["owed jobs served (placed, or no longer owed)"] += 1
        self.unserved = waited

    def _preempting(self, job: Waiting) -> bool:
        store = self.world.store
        if obj := store.peek(TRAININGJOBS, job.key):
            return bool((obj.get("status") or {}).get("nomination"))
        return any(nomination_of(pod) is not None for pod in store.objects.get(PODS, {}).values()
                   if grouping(pod).key(pod["metadata"]["namespace"]).text == job.key)

    # ---- the model ------------------------------------------------------------------------------------------------
    def owed(self) -> dict[str, Waiting]:
        """Queue -> the job it is owed now (see the module's docstring)."""
        store = self.world.store
        guaranteed = {name: sum(float(r.get("guaranteed") or 0) for r in (q.get("spec") or {}).get("resources") or []
                                if r.get("flavor") == ANY)
                      for name, q in store.objects.get(GPUQUEUES, {}).items()}
        if not guaranteed:
            return {}
        queues = namespace_queues(store)
        gangs, loose = self._placed(queues)
        placed = Counter(loose)
        for gang in gangs:
            placed[gang.queue] += gang.units
        held = Counter()  # what the queues' pods hold on the nodes, terminating ones included
        for pod in store.objects.get(PODS, {}).values():
            if pod["spec"].get("nodeName") and _live(pod):
                held[queues.get(pod["metadata"]["namespace"], "")] += _gpus(pod)
        pinned, named = self._nominations()
        waiting = self._waiting(queues)
        out = {}
        for queue, guarantee in guaranteed.items():
            job = next((j for j in sorted(waiting[queue], key=lambda j: j.request.queue_key)  # (one no node could
                        if j.possible and placed[queue] + j.request.total_units <= guarantee), None)  # hold: skipped)
            if job is None or job.nominated or job.leftover or held[queue] + job.request.total_units > guarantee:
                continue
            borrowed = {q: placed[q] - guaranteed[q] for q in guaranteed if q != queue}
            victims = [g for g in gangs if g.queue != queue and not g.protected and g.key not in named
                       and 0 < g.units <= borrowed[g.queue]]
            usable = {name: node for name, node in store.objects.get(NODES, {}).items()
                      if node_ready(node) and not node["spec"].get("unschedulable") and name not in pinned}
            if self._fits(job.request, usable, self.world.booked(), victims, borrowed):
                out[queue] = job
                self.world.checks["queues owed a job (inside the guarantee, room)"] += 1
        return out

    def _placed(self, queues: dict[str, str]) -> tuple[list[Gang], Counter]:
        """The placed gangs (TrainingJobs with a placement, pod gangs' bound pods) and, per queue, the GPUs of the
        other live bound pods not being deleted (a TrainingJob's whose placement is not recorded)."""
        store, now = self.world.store, self.world.c.now
        pods = store.objects.get(PODS, {})
        gangs, loose = [], Counter()
        placed_jobs = {}
        for job in store.objects.get(TRAININGJOBS, {}).values():
            status = job.get("status") or {}
            if status.get("phase") in ACTIVE and status.get("placement"):
                placed_jobs[job["metadata"]["uid"]] = job
        frees: dict[str, dict[str, Counter]] = {uid: defaultdict(Counter) for uid in placed_jobs}
        bound: dict[str, list[dict]] = defaultdict(list)
        for pod in pods.values():
            meta = pod["metadata"]
            if not pod["spec"].get("nodeName") or not _live(pod) or meta.get("deletionTimestamp"):
                continue
            owner = next((o.get("uid") for o in meta.get("ownerReferences") or []), None)
            if owner in placed_jobs:  # its placed job counts it (and gives it back)
                frees[owner][pod["spec"]["nodeName"]].update(requests_of(pod))
            elif owner is None:
                bound[grouping(pod).key(meta["namespace"])].append(pod)
            else:
                loose[queues.get(meta["namespace"], "")] += _gpus(pod)
        for uid, job in placed_jobs.items():
            status = job["status"]
            for node, counts in unwritten(job, pods).items():
                frees[uid][node].update(counts)
            started = timestamp(status.get("attemptStartTime")) if status.get("attemptStartTime") else now
            times = [timestamp(t) for t in status.get("preemptedAt") or []]
            shielded = len(times) >= 2 and times[-1] - times[-2] <= PINGPONG_WINDOW and now - started < PINGPONG_RUN
            service_class = (status.get("admitted") or {}).get("serviceClass") or job["spec"].get("serviceClass")
            key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
            gangs.append(Gang(key, queues.get(job["metadata"]["namespace"], ""), _units(job), dict(frees[uid]),
                              shielded or service_class == RESERVED))
        for key, members in bound.items():
            given: dict[str, Counter] = defaultdict(Counter)
            for pod in members:
                given[pod["spec"]["nodeName"]].update(requests_of(pod))
            gangs.append(Gang(key.text, queues.get(key.namespace, ""), sum(map(_gpus, members)), dict(given),
                              False))
        return gangs, loose

    def _nominations(self) -> tuple[set[str], set[str]]:
        """The nodes and the victims any nomination names (in force or not: the model keeps off them all)."""
        nodes, victims = set(), set()
        found = [(job.get("status") or {}).get("nomination") for job in
                 self.world.store.objects.get(TRAININGJOBS, {}).values()]
        for pod in self.world.store.objects.get(PODS, {}).values():
            if (text := nomination_of(pod)) is not None:
                try:
                    found.append(json.loads(text))
                except ValueError:
                    continue
        for nomination in filter(None, found):
            nodes.update(nomination.get("nodes") or [])
            victims.update(nomination.get("victims") or [])
        return nodes, victims

    def _waiting(self, queues: dict[str, str]) -> dict[str, list[Waiting]]:
        """Per queue: its waiting TrainingJobs and pod gangs that are not held back and that the model can place."""
        store, now = self.world.store, self.world.c.now
        out: dict[str, list[Waiting]] = defaultdict(list)
        pods = store.objects.get(PODS, {}).values()
        # jobs with pods still there: their own earlier attempts', or an earlier job's of the same name (the names)
        leftovers = {(pod["metadata"]["namespace"], (pod["metadata"].get("labels") or {}).get("superpod.dev/job-name"))
                     for pod in pods if _live(pod)}
        for job in store.objects.get(TRAININGJOBS, {}).values():
            meta, status = job["metadata"], job.get("status") or {}
            queue = queues.get(meta["namespace"])
            if queue is None or meta.get("deletionTimestamp") or status.get("phase") not in (None, "", "Queued") \
                    or timestamp(status.get("notBefore")) > now:
                continue
            try:
                request = job_from_k8s(job)
            except (ConvertError, ValueError):
                continue
            if request.queue in (None, queue) and self._plain(request):
                out[queue].append(Waiting(meta["namespace"] + "/" + meta["name"], request,
                                          bool(status.get("nomination")),
                                          (meta["namespace"], meta["name"]) in leftovers,
                                          self._possible(request)))
        members: dict[str, list[dict]] = defaultdict(list)
        for pod in pods:
            meta = pod["metadata"]
            if not meta.get("ownerReferences") and pod["spec"].get("schedulerName") == "superpod-scheduler":
                members[grouping(pod).key(meta["namespace"])].append(pod)
        for key, gang in members.items():
            namespace = key.namespace
            queue = queues.get(namespace)
            size = int((gang[0]["metadata"].get("annotations") or {}).get(GANG_SIZE) or 1)
            if queue is None or len(gang) != size or any(
                    not _live(pod) or pod["metadata"].get("deletionTimestamp") or pod["spec"].get("nodeName")
                    for pod in gang):
                continue
            try:
                request = gang_request_of(key, sorted(gang, key=rank_of))
            except (ConvertError, ValueError):
                continue
            if request.queue in (None, queue) and self._plain(request):  # (its first pod's label names its queue)
                out[queue].append(Waiting(key.text, request, any(nomination_of(pod) is not None for pod in gang), False,
                                          self._possible(request)))
        return out

    def _plain(self, request: JobRequest) -> bool:
        """A request the model places exactly."""
        return not (request.node_selector or request.affinity or request.tolerations or request.gpu_product
                    or request.mig_profile or request.slice_size or request.required not in (None, *self._levels()))

    def _possible(self, request: JobRequest) -> bool:
        """Whether it claims a place in its queue's order: each of its members fits on some node, up or not, as far
        as its whole GPUs and other resources go (MIG slices are made where needed). A gang whose members each fit
        but whose topology no domain could hold still claims its place (the policy's own rule)."""
        largest: Counter = Counter()
        for node in self.world.store.objects.get(NODES, {}).values():
            for resource, amount in node["status"]["allocatable"].items():
                largest[resource] = max(largest[resource], quantity(amount, resource))
        return all(amount <= largest[resource] for requests in (request.requests, *request.others)
                   for resource, amount in requests if not resource.startswith("nvidia.com/mig-"))

    def _levels(self) -> dict[str, str]:
        """Topology level -> its node label."""
        topology = next(iter(self.world.store.objects.get(CLUSTERTOPOLOGIES, {}).values()), None) or {}
        return {level["name"]: level["nodeLabel"] for level in (topology.get("spec") or {}).get("levels") or []}

    def _fits(self, request: JobRequest, nodes: dict[str, dict], booked: dict[str, Counter], victims: list[Gang],
              borrowed: dict[str, float]) -> bool:
        """Whether the gang's replicas fit on `nodes` (what `booked` holds taken) once some set of victims, each
        queue's together no more than it borrows, is given back."""
        label = self._levels().get(request.required) if request.required else None
        need = dict(request.requests)
        for count in range(min(MAX_VICTIMS, len(victims)) + 1):
            for chosen in combinations(victims, count):
                given = Counter()
                for gang in chosen:
                    given[gang.queue] += gang.units
                if any(amount > borrowed[queue] for queue, amount in given.items()):
                    continue
                slots: Counter = Counter()  # domain -> replicas it takes
                for name, node in nodes.items():
                    free = Counter({r: quantity(v, r) for r, v in node["status"]["allocatable"].items()})
                    free.subtract(booked.get(name, Counter()))
                    for gang in chosen:
                        free.update(gang.frees.get(name, Counter()))
                    slots[node["metadata"]["labels"].get(label) if label else ""] += min(
                        int(free[r] // amount) for r, amount in need.items() if amount)
                if max(slots.values(), default=0) >= request.replicas:
                    return True
        return False


def _live(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in FINISHED


def _gpus(pod: dict) -> float:
    return gpu_units(requests_of(pod).items())


def _units(job: dict) -> float:
    try:
        return job_from_k8s(job).total_units
    except (ConvertError, ValueError):
        return 0.0
