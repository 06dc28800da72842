"""A stateful model of the operator's world for hypothesis: two operator replicas (each its own cache, Lease and
Controller, the real ones) over one MemoryAPI, the simulated kubelet, users, and a hostile environment — watch events
late, repeated or lost, relists, write failures and lost answers, the Lease lost mid-apply, crashes mid-apply,
NotReady flaps, node deletions, pod failures and evictions — on a virtual clock.

The invariants (checked after every step, `check`):
- no node over any resource: the requests of the pods bound there plus the replicas booked by placed gangs whose
  pods do not exist yet;
- at most one attempt's live pods per job;
- no partial gang once settled (`settle` runs cycles with no interference until nothing more is written), and no
  live pod of a finished job;
- nothing placed on a node the deciding replica knew was not ready, held for MIG, or reserved for another job;
- no write by a replica that does not hold the Lease;
- GPU-seconds: a job's accounted attempts bill exactly what its pods ran when nothing of them was lost (no crash,
  no lost event); never more than that otherwise. Not checked: an attempt closed while the closing replica's cache
  lagged behind its pods, its events late or lost (it bills a pod that had already stopped up to the decision);
- every GPU-second billed once, per queue (`_billing`): every GPUUsage record bills its namespace's queue, no bill
  group's records bill more than its pods ran, and at a quiet cycle (`quiet`) each queue's records plus the leader's
  open attempts and pods billed on their own equal what its pods ran, within BILLING_TOLERANCE;
- with GPUQueues, a queue inside its guarantee gets its next job placed or its reclaim started within
  GUARANTEE_CYCLES clear cycles (tests/unit/guarantees.py)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from superpod.api.convert import POD_USAGE, pod_usage_name, usage_name
from superpod.api.resources import quantity
from superpod.api.times import timestamp
from superpod.controller.controller import Controller
from superpod.controller.judge import Settings
from superpod.controller.state import ClusterState
from superpod.core.accounting import gpu_seconds, gpu_units
from superpod.core.gang_key import GangKey
from superpod.k8s.api import GPUUSAGES, LEASES, NODES, PODS, TRAININGJOBS, WATCHED, ApiError
from superpod.k8s.lease import LeaderLease
from tests.unit.guarantees import Guarantees, namespace_queues
from tests.unit.memory_cluster import MemoryCluster, node_ready, requests_of, unwritten

NAMESPACE = "superpod-system"
# GPU-seconds a queue's bills may differ from what its pods ran, in total: records round to 1 ms of GPU-seconds and
# GPU units to 1e-4; the machine's clock moves in whole seconds, so times add nothing (on a cluster, an end read
# from a whole-second metadata time may add up to 1 s per pod)
BILLING_TOLERANCE = 1.0


class Crash(BaseException):
    """The operator process dies here (SIGKILL): nothing after this point of its cycle happens."""


class Violation(AssertionError):
    pass


@dataclass
class Replica:
    """One operator process: its own cache, Lease and Controller."""

    identity: str
    state: ClusterState
    lease: LeaderLease
    controller: Controller
    cursor: int = 0  # watch events delivered so far
    synced_for: int = -1  # the Lease acquisition its cache was last relisted for (as Operator.synced_for)
    lost: bool = False  # events were lost since its last full list: its cache may differ from the store


@dataclass
class Truth:
    """What really ran, from every event of the store (no delay, no loss)."""

    start: dict[str, float] = field(default_factory=dict)  # pod uid -> startTime
    end: dict[str, float] = field(default_factory=dict)  # pod uid -> when its GPUs were freed: finished, or removed
    # pod uid -> its bill group (job uid and attempt of a TrainingJob's pod; the pod's own uid and 0 for any other),
    # GPU units and namespace, of every pod that requests GPUs
    pods: dict[str, dict] = field(default_factory=dict)
    closed: dict[tuple[str, int], float] = field(default_factory=dict)  # (job uid, attempt) -> when accounted
    tainted: set[tuple[str, int]] = field(default_factory=set)  # groups with a crash or lost events
    # groups a pod of which was removed unseen by some replica (its removal's event lost or superseded by a relist,
    # or the replica that saw it crashed before billing it): their bills may stop at the last time the pod names
    unseen: set[tuple[str, int]] = field(default_factory=set)
    delayed: set[tuple[str, int]] = field(default_factory=set)  # attempts closed on a cache that lagged, or whose
    # pod's end was seen late
    # groups that may be billed more than ran: an attempt closed on a cache that lagged behind its pods, or a pod
    # whose removal was seen late and names no finish of its containers (billed until seen, at most its grace's end)
    lagged: set[tuple[str, int]] = field(default_factory=set)
    cursor: int = 0


class World:
    def __init__(self, nodes: int = 6, nodes_per_unit: int = 3) -> None:
        self.c = MemoryCluster(nodes=nodes, nodes_per_unit=nodes_per_unit)
        self.store = self.c.store
        self.truth = Truth()
        self.replicas: list[Replica] = []
        self.generation = 0
        self.checks = Counter()
        self.steps = 0
        for _ in range(2):
            self.replicas.append(self._replica())
        self.store.fault = self._on_write
        self.injected: dict | None = None  # the fault of the cycle running now
        self.violations: list[str] = []  # seen while writing (checked after the step: the write goes on)
        self.writing: Replica | None = None
        self.quiet: tuple[Replica, float, int] | None = None  # a clear cycle that wrote nothing: when, events then
        self.guarantees = Guarantees(self)

    # ---- replicas -------------------------------------------------------------------------------------------------
    def _replica(self) -> Replica:
        self.generation += 1
        identity = f"replica-{self.generation}"
        state = ClusterState()
        clock = lambda: self.c.now  # noqa: E731
        lease = LeaderLease(self.store.client(identity), NAMESPACE, "superpod-scheduler", identity, 15, 10, 2,
                            clock=clock, wall=clock)
        api = self.store.client(identity, guard=lease.is_leading)
        controller = Controller(state, api, lease.is_leading, Settings(not_ready_grace=60), clock=clock)
        replica = Replica(identity, state, lease, controller)
        self._relist(replica)
        return replica

    def _relist(self, replica: Replica) -> None:
        for kind in WATCHED:
            items, version = _run(replica.controller.applier.api.list(kind))
            replica.state.resync(kind, items, version, self.c.now)
        replica.cursor = len(self.store.events)
        replica.lost = False

    def crash(self, index: int) -> None:
        self.observe()
        self._taint_open_attempts()
        if self._unrecorded_pods():
            self.checks["crash after a gang's pods, before their status"] += 1
        self.replicas[index] = self._replica()

    def _unrecorded_pods(self) -> bool:
        """Whether live pods exist of an attempt their job's status does not record yet (its write was deferred)."""
        jobs = {job["metadata"]["uid"]: int((job.get("status") or {}).get("attempt") or 0)
                for job in self.store.objects.get(TRAININGJOBS, {}).values()}
        for pod in self.store.objects.get(PODS, {}).values():
            meta = pod["metadata"]
            owner = next((o["uid"] for o in meta.get("ownerReferences") or []), None)
            if owner in jobs and not meta.get("deletionTimestamp") and int(
                    meta["labels"]["superpod.dev/attempt"]) > jobs[owner]:
                return True
        return False

    def leader(self) -> Replica | None:
        return next((r for r in self.replicas if r.lease.is_leading()), None)

    # ---- events ---------------------------------------------------------------------------------------------------
    def deliver(self, replica: Replica, count: int | None = None) -> None:
        events = self.store.events[replica.cursor:][:count]
        for ev in events:
            if ev.kind is PODS and ev.time < self.c.now and _end(ev.obj, ev.type, ev.time) is not None:
                self._delay_pod(ev.obj)  # a pod's end seen late: without its containers' times, billed from then
            replica.state.apply(ev.kind, ev.type, copy.deepcopy(ev.obj), self.c.now)
        replica.cursor += len(events)

    def drop(self, replica: Replica, count: int) -> None:
        """Lose events (a watch that broke and resumed past them)."""
        for ev in self.store.events[replica.cursor:][:count]:
            if ev.kind is PODS:
                self._taint_pod(ev.obj, ev.type)
        replica.lost = replica.lost or replica.cursor < len(self.store.events)
        replica.cursor = min(len(self.store.events), replica.cursor + count)

    def repeat(self, replica: Replica, back: int) -> None:
        """Deliver again events already delivered (a re-watch from an older resourceVersion)."""
        for ev in self.store.events[max(0, replica.cursor - back):replica.cursor]:
            replica.state.apply(ev.kind, ev.type, copy.deepcopy(ev.obj), self.c.now)

    def resync(self, replica: Replica) -> None:
        """A full relist. Events not delivered before it are superseded: what only they told (a run's end) is
        lost to this replica, as with dropped events."""
        for ev in self.store.events[replica.cursor:]:
            if ev.kind is PODS:
                self._taint_pod(ev.obj, ev.type)
        for kind in WATCHED:
            items, version = _run(replica.controller.applier.api.list(kind))
            replica.state.resync(kind, items, version, self.c.now)
        replica.lost = False

    # ---- the operators' loops -------------------------------------------------------------------------------------
    def lease_step(self, replica: Replica) -> None:
        with contextlib.suppress(ApiError):
            _run(replica.lease.step())
        leading = replica.lease.is_leading()
        if leading and replica.synced_for != replica.lease.acquisitions:  # as Operator.schedule_loop: a fresh view
            replica.state.forget_unsent()  # at the start of each term, also one it took unknowingly (k8s/lease.py)
            self.resync(replica)
            replica.synced_for = replica.lease.acquisitions
        elif not leading:
            replica.state.unfollow()  # as Operator.schedule_loop: a standby keeps none of the cache's changes

    def cycle(self, replica: Replica, fault: dict | None = None) -> None:
        if not replica.lease.is_leading():
            return
        lagging = {ev.obj["metadata"].get("labels", {}).get("superpod.dev/job-name")
                   for ev in self.store.events[replica.cursor:] if ev.kind is PODS}
        for key, pod in self.store.objects.get(PODS, {}).items():  # and events lost: the cache has another phase
            cached = replica.state.pods.get(key)
            if cached is None or cached.phase != ((pod.get("status") or {}).get("phase") or "Pending"):
                lagging.add((pod["metadata"].get("labels") or {}).get("superpod.dev/job-name"))
        for key, cached in replica.state.pods.items():  # or a pod gone whose removal it never saw
            if key not in self.store.objects.get(PODS, {}) and cached.job:
                lagging.add(cached.job.name)
        self.injected, self.writing, self.writes_this_cycle = fault, replica, 0
        self.active_before = {key: (job.get("status") or {}).get("attempt") for key, job in replica.state.jobs.items()
                              if (job.get("status") or {}).get("phase") in ("Starting", "Running")}
        before = dict(self.truth.closed)
        decided_at = self.c.now
        # A clear cycle: no fault, on a cache that has every event (the world let it see and write all)
        clear = fault is None and not replica.lost and replica.cursor == len(self.store.events)
        owed = self.guarantees.owed() if clear else {}
        writes = len(self.store.writes)
        try:
            _run(replica.controller.cycle(decided_at))
        except* Crash:  # out of the applier's task group
            self.crash(self.replicas.index(replica))
        finally:
            self.injected, self.writing = None, None
        self.observe(decided_at)
        if clear:
            self.guarantees.served(owed)
        if clear and len(self.store.writes) == writes:  # its figures of what is open hold until something changes
            self.quiet = (replica, self.c.now, len(self.store.events))
        for key in set(self.truth.closed) - set(before):  # attempts closed in this cycle on a lagging cache
            job = self._job_by_uid(key[0])
            if job is not None and job["metadata"]["name"] in lagging:
                self.truth.delayed.add(key)
                self.truth.lagged.add(key)
        for write in self.store.writes[writes:]:  # or recorded (a deleted job's last attempt: no status closes it)
            record = self.store.peek(GPUUSAGES, write.key) if (write.verb, write.kind) == ("create", "gpuusages") \
                else None
            if record is not None and not record["spec"].get("pod") and record["spec"]["job"] in lagging:
                self.truth.lagged.add((record["spec"]["jobUid"], record["spec"]["attempt"]))

    def _on_write(self, verb: str, kind, obj, writer: str) -> str | None:
        replica = self.writing
        if replica is None or writer != replica.identity:
            return None
        holder = ((self.store.peek(LEASES, f"{NAMESPACE}/superpod-scheduler") or {}).get("spec") or {}).get(
            "holderIdentity")
        if kind is not LEASES and holder != writer:
            self.violations.append(f"{writer} wrote {verb} {kind.plural} while {holder} held the Lease")
        if kind is PODS and verb == "create":
            self._check_placement(replica, obj)
        fault = self.injected or {}
        if kind is LEASES or f"{verb} {kind.plural}" != fault.get("on"):
            return None
        self.writes_this_cycle += 1
        if self.writes_this_cycle != fault["skip"] + 1:
            return None
        what = fault.get("what")
        self.checks[f"fault landed: {what} ({verb} {kind.plural})"] += 1
        if what == "fail":
            raise ApiError(500, "InternalError", "injected")
        if what == "conflict":
            raise ApiError(409, "Conflict", "injected")
        if what == "crash":
            raise Crash()
        if what == "lose-lease":  # the Lease runs out under it and another replica takes it
            self.c.now += 16
            other = next(r for r in self.replicas if r is not replica)
            lease = self.store.peek(LEASES, f"{NAMESPACE}/superpod-scheduler")
            lease["spec"].update(holderIdentity=other.identity, leaseTransitions=lease["spec"]["leaseTransitions"] + 1)
            self.store._store(LEASES, lease, "update")
            return None
        if what == "lose-answer":
            return "lose-answer"
        return None

    def _check_placement(self, replica: Replica, pod: dict) -> None:
        node = pod["spec"]["nodeName"]
        entry = replica.state.nodes.get(node)
        if entry is None or entry.node is None or not entry.node.ready or entry.node.held:
            self.violations.append(f"{pod['metadata']['name']} bound to {node}, which {replica.identity} saw not "
                                   "ready")
        job = pod["metadata"]["labels"]["superpod.dev/job-name"]
        attempt = int(pod["metadata"]["labels"]["superpod.dev/attempt"])
        if self.active_before.get(GangKey(pod['metadata']['namespace'], job)) == attempt:
            return  # a missing pod of a gang placed before: its node was booked before any reservation
        placed = next((d.job for d in replica.controller.decisions if d.job.name == job), None)
        for d in replica.controller.decisions:  # in scheduling order: reservations made before this job was placed
            if d.job.name == job:
                break
            if node in d.reserved_nodes and self.keeps_off(placed, d):
                self.violations.append(f"{pod['metadata']['name']} bound to {node}, reserved for {d.job.key}")
        self.checks["placements checked"] += 1

    def keeps_off(self, job, reserving) -> bool:
        """Whether `job` must keep off the reservation `reserving` (a Decision) took: without queues, every job
        keeps off every reservation."""
        return True

    # ---- truth ----------------------------------------------------------------------------------------------------
    def observe(self, decided_at: float | None = None) -> None:
        """Follow every store event: pod runs, and when each attempt was accounted (billing stops at the decision
        to stop a gang: `decided_at`, the time of the cycle that wrote it)."""
        for ev in self.store.events[self.truth.cursor:]:
            obj, meta = ev.obj, ev.obj["metadata"]
            if ev.kind is PODS:
                uid = meta["uid"]
                labels = meta.get("labels") or {}
                if uid not in self.truth.pods and (units := gpu_units(requests_of(obj).items())):
                    owner = (meta.get("ownerReferences") or [{}])[0].get("uid")
                    attempt = "superpod.dev/job-name" in labels and owner  # its attempt bills it first
                    self.truth.pods[uid] = {"job": owner if attempt else uid,
                                            "attempt": int(labels["superpod.dev/attempt"]) if attempt else 0,
                                            "units": units, "namespace": meta["namespace"]}
                status = obj.get("status") or {}
                if status.get("startTime") and uid not in self.truth.start:
                    self.truth.start[uid] = timestamp(status["startTime"])
                if uid in self.truth.start and uid not in self.truth.end:
                    end = _end(obj, ev.type, ev.time)
                    if end is not None:
                        self.truth.end[uid] = end
            elif ev.kind is TRAININGJOBS and ev.type != "DELETED":
                accounted = int((obj.get("status") or {}).get("accountedAttempts") or 0)
                for attempt in range(1, accounted + 1):
                    self.truth.closed.setdefault((meta["uid"], attempt), decided_at or self.c.now)
        self.truth.cursor = len(self.store.events)

    def _taint_open_attempts(self) -> None:
        """A crash: the attempts not closed, and the pods billed on their own not recorded (a pod that ended and is
        gone, its record not written, is unknown to a replica that lists afresh)."""
        records = self.store.objects.get(GPUUSAGES, {})
        live = {pod["metadata"]["uid"] for pod in self.store.objects.get(PODS, {}).values()}
        for uid, info in self.truth.pods.items():
            group = (info["job"], info["attempt"])
            unrecorded = pod_usage_name(uid) not in records
            if group not in self.truth.closed and (info["attempt"] or unrecorded):
                self.truth.tainted.add(group)
            if uid not in live and unrecorded:  # what the replica knew of its run may be gone with it
                self.truth.unseen.add(group)

    def _delay_pod(self, obj: dict) -> None:
        """A pod's end seen late: an attempt closed meanwhile billed it until the close; a removal whose object names
        no finish of its containers is billed until seen."""
        info = self.truth.pods.get(obj["metadata"].get("uid"))
        if info and info["attempt"]:
            self.truth.delayed.add((info["job"], info["attempt"]))
        if info and not _stamped(obj):
            self.truth.lagged.add((info["job"], info["attempt"]))

    def _taint_pod(self, obj: dict, event: str) -> None:
        info = self.truth.pods.get(obj["metadata"].get("uid"))
        if info:
            self.truth.tainted.add((info["job"], info["attempt"]))
            if event == "DELETED":
                self.truth.unseen.add((info["job"], info["attempt"]))

    def _job_by_uid(self, uid: str) -> dict | None:
        return next((j for j in self.store.objects.get(TRAININGJOBS, {}).values() if j["metadata"]["uid"] == uid),
                    None)

    # ---- invariants -----------------------------------------------------------------------------------------------
    def check(self, settled: bool = False) -> None:
        self.steps += 1
        if self.violations:
            raise Violation("; ".join(self.violations))
        self.observe()
        self._capacity()
        self._one_attempt()
        self._gpu_seconds()
        self._usage_records()
        self._billing()
        if settled:
            self._whole_gangs()

    def _capacity(self) -> None:
        for name, counts in self.booked().items():
            node = self.store.peek(NODES, name)
            if node is None:
                continue
            alloc = node["status"]["allocatable"]
            for resource, amount in counts.items():
                if amount > quantity(alloc.get(resource, 0), resource):
                    raise Violation(f"node {name} booked {amount} {resource} of {alloc.get(resource, 0)}")
        self.checks["capacity checks"] += 1

    def booked(self) -> dict[str, Counter]:
        """What each node holds: the requests of the pods bound there that did not finish (terminating ones
        included), and the replicas booked by placed gangs whose pods do not exist yet."""
        used: dict[str, Counter] = defaultdict(Counter)
        pods = self.store.objects.get(PODS, {})
        for pod in pods.values():
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or not pod["spec"].get("nodeName"):
                continue
            used[pod["spec"]["nodeName"]].update(requests_of(pod))
        for job in self.store.objects.get(TRAININGJOBS, {}).values():
            for node, request in unwritten(job, pods).items():
                used[node].update(request)
        return used

    def _one_attempt(self) -> None:
        attempts: dict[str, set] = defaultdict(set)
        for pod in self.store.objects.get(PODS, {}).values():
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            labels = meta.get("labels") or {}
            if "superpod.dev/job-name" in labels:  # (a pod gang's pods are not a TrainingJob's attempt)
                attempts[labels["superpod.dev/job-name"]].add(labels["superpod.dev/attempt"])
        for job, seen in attempts.items():
            if len(seen) > 1:
                raise Violation(f"job {job} has live pods of attempts {sorted(seen)}")

    def _whole_gangs(self) -> None:
        pods = self.store.objects.get(PODS, {})
        for job in self.store.objects.get(TRAININGJOBS, {}).values():
            st = job.get("status") or {}
            if st.get("phase") in ("Succeeded", "Failed"):
                running = [k for k, p in pods.items() if (p.get("status") or {}).get("phase") not in (
                    "Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp") and any(
                    o.get("uid") == job["metadata"]["uid"] for o in p["metadata"].get("ownerReferences") or [])]
                if running:
                    raise Violation(f"settled, yet finished job {job['metadata']['name']} still runs {running}")
                continue
            if st.get("phase") not in ("Starting", "Running"):
                continue
            nodes = set(st.get("placement") or {})
            if any(not node_ready(self.store.peek(NODES, n)) for n in nodes):
                continue  # the gang keeps a NotReady node through the grace period
            prefix = f"{job['metadata']['namespace']}/{job['metadata']['name']}-a{st['attempt']}-"
            have = [p for k, p in pods.items() if k.startswith(prefix) and not p["metadata"].get("deletionTimestamp")]
            if len(have) != job["spec"]["replicas"]:
                raise Violation(f"settled, yet job {job['metadata']['name']} attempt {st['attempt']} has "
                                f"{len(have)} of {job['spec']['replicas']} pods")
            self.checks["settled gangs whole"] += 1

    def _gpu_seconds(self) -> None:
        # An attempt is billed until its record's end when it has one (a close retried after the record, by another
        # replica or after a lost Lease, closes at the amount recorded; its pods bill on their own past that end),
        # else until the close was written.
        until = {(r["spec"].get("jobUid"), r["spec"].get("attempt")): timestamp(r["spec"]["end"])
                 for r in self.store.objects.get(GPUUSAGES, {}).values() if not r["spec"].get("pod")}
        by_attempt: dict[tuple[str, int], float] = defaultdict(float)
        for uid, info in self.truth.pods.items():
            key = (info["job"], info["attempt"])
            if uid not in self.truth.start or key not in self.truth.closed:
                continue
            end = min(self.truth.end.get(uid, float("inf")), until.get(key, self.truth.closed[key]))
            by_attempt[key] += info["units"] * max(0.0, end - self.truth.start[uid])
        # attempts some of whose pods are billed on their own (a pod record: its attempt closed before it started,
        # as the closing replica saw it, or the time it terminated after): the status holds only the rest
        split = {(r["spec"].get("jobUid"), r["spec"].get("attempt"))
                 for r in self.store.objects.get(GPUUSAGES, {}).values() if r["spec"].get("pod")}
        for job in self.store.objects.get(TRAININGJOBS, {}).values():
            st, uid = job.get("status") or {}, job["metadata"]["uid"]
            accounted = int(st.get("accountedAttempts") or 0)
            truth = sum(by_attempt[(uid, a)] for a in range(1, accounted + 1))
            billed = float(st.get("finishedGpuSeconds") or 0)
            keys = {(uid, a) for a in range(1, accounted + 1)}
            if keys & self.truth.delayed:
                self.checks["GPU-seconds unchecked (closed on a lagging cache)"] += 1
            elif keys & (self.truth.tainted | split):
                if billed > truth + 1e-6:
                    raise Violation(f"job {job['metadata']['name']} billed {billed} GPU-s, its pods ran {truth}")
                self.checks["GPU-seconds at most what ran (after a crash or lost events)"] += 1
            else:
                if abs(billed - truth) > 1e-3:
                    raise Violation(f"job {job['metadata']['name']} billed {billed} GPU-s, its pods ran {truth}")
                if accounted:
                    self.checks["GPU-seconds exact"] += 1

    def _usage_records(self) -> None:
        """The GPUUsage records of a job's accounted attempts never bill more than its status closed (a record is
        written before the close; a retried close may count a little longer than the record that stands). (A pod's
        own record, of the time it terminated after its attempt closed, is not the attempt's.)"""
        recorded: dict[str, float] = defaultdict(float)
        for record in self.store.objects.get(GPUUSAGES, {}).values():
            if not record["spec"].get("pod"):
                recorded[record["spec"]["jobUid"]] += record["spec"]["gpuSeconds"]
        for job in self.store.objects.get(TRAININGJOBS, {}).values():
            st = job.get("status") or {}
            uid = job["metadata"]["uid"]
            if st.get("preemptions"):
                self.checks["preempted gangs"] += 1
            if uid in recorded and recorded[uid] > float(st.get("finishedGpuSeconds") or 0) + 0.01 * (
                    int(st.get("accountedAttempts") or 0) + 1) and int(st.get("accountedAttempts") or 0) >= max(
                    (r["spec"]["attempt"] for r in self.store.objects.get(GPUUSAGES, {}).values()
                     if r["spec"]["jobUid"] == uid), default=0):
                raise Violation(f"job {job['metadata']['name']}: records bill {recorded[uid]} GPU-s, its status "
                                f"closed {st.get('finishedGpuSeconds')}")
            if uid in recorded:
                self.checks["usage records within the closed GPU-seconds"] += 1

    # ---- every GPU-second billed once, per queue -------------------------------------------------------------------
    def _billing(self) -> None:
        """Bills grouped as they split a pod's time: a TrainingJob's attempt (its record, its open attempt, and the
        pods' own bills of the tails that outlive its close) or a pod on its own. Every record bills its namespace's
        queue; no group's records bill more than its pods ran; and when a replica's figures of what is open are
        current (`quiet`), each queue's records plus its open attempts and pod bills are exactly what its pods ran."""
        ran, queues = self._ran(), namespace_queues(self.store)
        recorded: dict[tuple[str, int], float] = defaultdict(float)
        for name, record in self.store.objects.get(GPUUSAGES, {}).items():
            spec = record["spec"]
            self._bills_its_queue(f"GPUUsage {name}", spec["namespace"], spec["queue"], queues)
            info = self.truth.pods.get(name.removesuffix(POD_USAGE)) if spec.get("pod") else None
            group = (info["job"], info["attempt"]) if info else (spec["jobUid"], spec["attempt"])
            recorded[group] += spec["gpuSeconds"]
        for group, seconds in recorded.items():
            if group not in self.truth.lagged and seconds > ran.get(group, 0.0) + BILLING_TOLERANCE:
                raise Violation(f"bill group {group}: records bill {seconds:g} GPU-s, its pods ran {ran.get(group)}")
        if self.quiet is not None and self.quiet[1:] == (self.c.now, len(self.store.events)) and queues:
            self._billed_exactly(self.quiet[0], ran, recorded, queues)

    def _ran(self) -> dict[tuple[str, int], float]:
        """GPU-seconds each bill group's pods held their GPUs, from each start until its GPUs were freed, or now."""
        ran: dict[tuple[str, int], float] = defaultdict(float)
        for uid, info in self.truth.pods.items():
            if uid in self.truth.start:
                end = self.truth.end.get(uid, self.c.now)
                ran[(info["job"], info["attempt"])] += info["units"] * max(0.0, end - self.truth.start[uid])
        return ran

    def _bills_its_queue(self, what: str, namespace: str, queue: str, queues: dict[str, str]) -> None:
        if queue != queues.get(namespace, ""):
            raise Violation(f"{what} bills namespace {namespace} to queue {queue or '(none)'}, not "
                            f"{queues.get(namespace) or '(none)'}")

    def _billed_exactly(self, replica: Replica, ran: dict, recorded: dict, queues: dict[str, str]) -> None:
        """Records plus what the replica's queues count as open (its last cycle's `QueueBook.open`: open attempts,
        and pods billed on their own not recorded), per queue, against what the queue's pods ran, within
        BILLING_TOLERANCE in total. Groups a pod of which was removed unseen only never bill more than ran; attempts
        closed on a cache that lagged behind their pods are left out. (An end seen late alone does not matter here: a
        pod's run ends at its containers' finish, or its removal's time, whenever that is seen.)"""
        now, records = self.c.now, self.store.objects.get(GPUUSAGES, {})
        namespace = {(info["job"], info["attempt"]): info["namespace"] for info in self.truth.pods.values()}
        by_record = {usage_name(*group): group for group in namespace}
        opened: dict[tuple[str, int], float] = defaultdict(float)
        controller = replica.controller
        for attempt in controller.queues.open:
            group = by_record.get(attempt.record)
            if not attempt.record or group is None:  # a pod's own bill (below), or an attempt none of whose pods ran
                continue
            if attempt.record in records:
                raise Violation(f"attempt {group} billed twice: recorded, and open in {replica.identity}'s queues")
            self._bills_its_queue(f"open attempt {group}", namespace[group], attempt.queue, queues)
            opened[group] += gpu_seconds(attempt.runs, attempt.units, now)
        for bill in [*controller.bills.live.values(), *controller.bills.ended.values()]:
            info = self.truth.pods.get(bill.pod.uid)
            if pod_usage_name(bill.pod.uid) in records:
                raise Violation(f"pod {bill.pod.key} billed twice: recorded, and open in {replica.identity}'s bills")
            if info is not None:
                self._bills_its_queue(f"pod {bill.pod.key}'s own bill", info["namespace"], bill.labels[0], queues)
                opened[(info["job"], info["attempt"])] += bill.seconds(now)
        billed: dict[str, float] = defaultdict(float)
        held: dict[str, float] = defaultdict(float)
        for group, seconds in ran.items():
            total = recorded.get(group, 0.0) + opened.get(group, 0.0)
            if group in self.truth.lagged:
                self.checks["billing unchecked (an attempt closed on a lagging cache)"] += 1
            elif group in self.truth.unseen:
                if total > seconds + BILLING_TOLERANCE:
                    raise Violation(f"bill group {group} (a pod removed unseen) billed {total:g} GPU-s, its pods "
                                    f"ran {seconds:g}")
                self.checks["billing at most what ran (a pod removed unseen)"] += 1
            else:
                queue = queues.get(namespace[group], "")
                billed[queue] += total
                held[queue] += seconds
        for queue in held:
            if abs(billed[queue] - held[queue]) > BILLING_TOLERANCE:
                raise Violation(f"queue {queue or '(none)'} billed {billed[queue]:g} GPU-s (records and open), its "
                                f"pods ran {held[queue]:g} (at {replica.identity}'s quiet cycle)")
            self.checks["queues billed exactly what their pods ran"] += 1

    # ---- settling -------------------------------------------------------------------------------------------------
    def settle(self) -> None:
        """No more interference: the replicas renew, relist (as the periodic resync does, repairing any lost
        event), get every event, and cycle until nothing is written."""
        for _ in range(12):
            for replica in self.replicas:
                self.lease_step(replica)
            if self.leader() is not None:
                break
            self.c.now += 2
        leader = self.leader()
        assert leader is not None, "some replica must lead once the Lease can be renewed"
        self.deliver(leader)
        self.resync(leader)
        for _ in range(10):
            self.deliver(leader)
            writes = len(self.store.writes)
            self.cycle(leader)
            self.deliver(leader)
            if len(self.store.writes) == writes:
                break
        self.check(settled=True)


def _run(coro):
    return asyncio.run(coro)


def _end(pod: dict, event: str, when: float) -> float | None:
    """When the pod's GPUs were freed: its containers' finish once it finished, or once it is gone if the kubelet
    wrote them, else its removal (`when`, the event's time) — at the latest the end of its grace period, when a
    kubelet kills what still runs (the simulated one removes it at its next step); None while it runs or
    terminates."""
    status = pod.get("status") or {}
    ends = _finishes(pod)
    if status.get("phase") in ("Succeeded", "Failed") and ends:
        return max(ends)
    if event == "DELETED":
        if _stamped(pod):
            return max(ends)
        deadline = (pod.get("metadata") or {}).get("deletionTimestamp")
        return min(when, timestamp(deadline)) if deadline else when
    return None


def _stamped(pod: dict) -> bool:
    """Whether every container of the pod names when it finished (the kubelet's last status)."""
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(containers) and len(_finishes(pod)) == len(containers)


def _finishes(pod: dict) -> list[float]:
    """When the pod's containers that terminated finished."""
    return [timestamp(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in (pod.get("status") or {}).get("containerStatuses") or []
            if ((c.get("state") or {}).get("terminated") or {}).get("finishedAt")]
