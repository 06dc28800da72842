"""The scheduling loop: observed state -> core decisions -> writes.

Each cycle: (1) every placed gang is judged by core.lifecycle (running, finished, restart, timeout, finish a gang
cut short by a crash); (2) pending jobs are checked (Invalid with a message when the spec cannot work here);
(3) one core.cycle.schedule over the pending jobs; placed gangs are written status first (attempt, placement), then
their pods, all or nothing. A crash at any point leaves either no placement, or a recorded placement whose missing
pods the next cycle creates under the same names."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time

from superpod.api.convert import ConvertError, job_from_k8s, timestamp
from superpod.controller.metrics import Metrics
from superpod.controller.mig import MigFlow
from superpod.controller.state import ClusterState, PodInfo
from superpod.core import lifecycle as lc
from superpod.core.cycle import schedule
from superpod.core.placement import validate
from superpod.core.request import PRODUCT_LABEL, JobRequest
from superpod.k8s import manifests
from superpod.k8s.writer import Writer

log = logging.getLogger(__name__)


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_units(spec: dict) -> float:
    """GPUs one replica holds: whole GPUs, or a MIG slice as its share of the GPU's 7 compute slices."""
    res = spec.get("resources") or {}
    if res.get("migProfile"):
        return int(str(res["migProfile"]).split("g", 1)[0]) / 7
    return float(res.get("gpus") or 0)


def holdings(spec: dict) -> str:
    res, n = spec.get("resources") or {}, int(spec.get("replicas") or 0)
    if res.get("migProfile"):
        return f"{n} x mig-{res['migProfile']}"
    return f"{n * int(res.get('gpus') or 0)} GPUs"


class Scheduler:
    def __init__(self, state: ClusterState, writer: Writer, metrics: Metrics | None = None,
                 mig: MigFlow | None = None, scheduler_name: str = manifests.SCHEDULER_NAME) -> None:
        self.state, self.writer, self.metrics, self.mig = state, writer, metrics, mig
        self.scheduler_name = scheduler_name
        self._said: dict[tuple[str, str], str] = {}  # (job, reason) -> last event message, to post changes only
        self._parsed: dict[str, tuple[str, JobRequest | ConvertError]] = {}  # job -> (resourceVersion, request)

    async def cycle(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if self.mig:
            await self.mig.check(now)
        await _together(self._judge(job, now) for job in list(self.state.jobs.values())
                        if (job.get("status") or {}).get("phase") in lc.ACTIVE)
        pending = await self._pending(now)
        assumed = {}
        for key, job in self.state.jobs.items():
            st = job.get("status") or {}
            if st.get("phase") in lc.ACTIVE and st.get("placement"):
                req = self._request(key, job)
                if isinstance(req, JobRequest):
                    assumed[key] = (req, st["placement"])
        snap = self.state.snapshot(assumed)
        invalid = {}
        for req in pending:
            if why := validate(snap, req) or self._unsatisfiable(req):
                invalid[req.key] = why
        await _together(self._set_invalid(self.state.jobs[key], why) for key, why in invalid.items())
        started = time.perf_counter()
        decisions = schedule(snap, [r for r in pending if r.key not in invalid])
        if self.metrics:
            self.metrics.placement_seconds.observe(time.perf_counter() - started)
        reasons = {d.job.key: d.reason for d in decisions if d.placement is None}
        if self.mig:
            waiting = [d.job for d in decisions if d.placement is None and not d.reserved_nodes]
            reasons.update(await self.mig.plan(waiting, now))
        writes = []
        for d in decisions:
            job = self.state.jobs.get(d.job.key)
            if job is None:
                continue
            if d.placement is not None:
                self.state.adopt(d.job, d.placement.assignments)
                writes.append(self._start(job, d.job, d.placement.assignments, now))
            else:
                writes.append(self._wait(job, reasons.get(d.job.key) or "waiting", now))
        await _together(writes)  # jobs are independent: their writes go out in parallel
        self._said = {k: v for k, v in self._said.items() if k[0] in self.state.jobs}  # forget deleted jobs
        self._parsed = {k: v for k, v in self._parsed.items() if k in self.state.jobs}
        if self.metrics:
            self.metrics.observe_cluster(self.state)

    # ---- pending jobs -----------------------------------------------------------------------------------------
    async def _pending(self, now: float) -> list[JobRequest]:
        out = []
        for key, job in list(self.state.jobs.items()):
            st = job.get("status") or {}
            if st.get("phase") in (*lc.ACTIVE, lc.SUCCEEDED, lc.FAILED):
                continue
            await self._remove_stale(key, keep_attempt=None)
            req = self._request(key, job)
            if isinstance(req, ConvertError):
                await self._set_invalid(job, str(req))
                continue
            if st.get("notBefore") and timestamp(st["notBefore"]) > now:
                continue
            out.append(req)
        return out

    def _request(self, key: str, job: dict) -> JobRequest | ConvertError:
        """The core request of a job, parsed once per version of the object."""
        rv = job["metadata"].get("resourceVersion", "")
        cached = self._parsed.get(key)
        if cached is None or cached[0] != rv:
            try:
                cached = (rv, job_from_k8s(job))
            except ConvertError as e:
                cached = (rv, e)
            self._parsed[key] = cached
        return cached[1]

    def _unsatisfiable(self, req: JobRequest) -> str | None:
        if req.gpu_product:
            products = {n.labels.get(PRODUCT_LABEL) for n in self.state.nodes.values()} - {None}
            if req.gpu_product not in products:
                return (f"no node has GPU product {req.gpu_product!r} (nvidia.com/gpu.product here: "
                        f"{', '.join(sorted(products)) or 'none'})")
        return None

    async def _set_invalid(self, job: dict, why: str) -> None:
        st = job.get("status") or {}
        if st.get("phase") == "Invalid" and st.get("message") == why:
            return
        await self._patch(job, {"phase": "Invalid", "reason": "Invalid", "message": why,
                                "conditions": [_cond("Invalid", "True", "InvalidSpec", why)]})
        await self._say(job, "Warning", "Invalid", why)

    async def _wait(self, job: dict, reason: str, now: float) -> None:
        st = job.get("status") or {}
        if st.get("phase") == lc.QUEUED and st.get("message") == reason:
            return
        await self._patch(job, {"phase": lc.QUEUED, "reason": "Unschedulable", "message": reason,
                                "queuedAt": st.get("queuedAt") or rfc3339(now), "notBefore": None,
                                "gpus": holdings(job["spec"]), "ready": f"0/{job['spec']['replicas']}",
                                "conditions": [_cond("Schedulable", "False", "Unschedulable", reason)]})
        await self._say(job, "Normal", "Waiting", reason)

    # ---- placing ----------------------------------------------------------------------------------------------
    async def _start(self, job: dict, req: JobRequest, assignments: dict[str, list[int]], now: float) -> None:
        st, spec = job.get("status") or {}, job["spec"]
        attempt = int(st.get("attempt") or 0) + 1
        domains, domain = self._domains(assignments)
        where = f" in {domain}" if domain else ""
        message = f"placed {req.replicas} replicas on {len(assignments)} nodes{where}"
        updated = await self._patch(job, {
            "phase": lc.STARTING, "attempt": attempt, "placement": assignments, "domains": domains,
            "domain": domain, "attemptStartTime": rfc3339(now), "reason": "Placed", "message": message,
            "gpus": holdings(spec), "ready": f"0/{req.replicas}", "notBefore": None,
            "queuedAt": st.get("queuedAt") or rfc3339(now),
            "conditions": [_cond("Schedulable", "True", "Placed", message)]})
        if updated is None:  # the job is gone
            self.state.drop(req)
            return
        if self.metrics:
            queued = timestamp(st.get("queuedAt") or job["metadata"].get("creationTimestamp"))
            self.metrics.queue_wait_seconds.observe(max(0.0, now - queued))
        await self._say(updated, "Normal", "Placed", message)
        error = await self.writer.ensure_service(manifests.headless_service(updated))
        if error:
            await self._write_failed(updated, error, now)
            return
        await self._create(updated, attempt, _by_index(assignments), now)

    async def _create(self, job: dict, attempt: int, nodes: dict[int, str], now: float,
                      only: set[int] | None = None) -> None:
        pods = [manifests.pod(job, attempt, i, n, self.scheduler_name) for i, n in sorted(nodes.items())
                if only is None or i in only]
        error = await self.writer.create_pods(pods)
        if error:
            await self._write_failed(job, error, now)

    async def _write_failed(self, job: dict, error: str, now: float) -> None:
        """Nothing of the attempt stays placed: requeue with backoff and say why."""
        failures = int((job.get("status") or {}).get("startupFailures") or 0) + 1
        retry = now + lc.backoff(failures)
        await self._patch(job, {"phase": lc.QUEUED, "reason": "WriteFailed", "message": error, "placement": None,
                                "startupFailures": failures, "notBefore": rfc3339(retry)})
        await self._say(job, "Warning", "WriteFailed", error)

    def _domains(self, assignments: dict[str, list[int]]) -> tuple[dict[str, list[str]], str | None]:
        topo = self.state.topology()[0]
        out: dict[str, list[str]] = {}
        tightest = None
        for level in topo.levels:
            # a node without the level's label is a domain of its own, as in the core
            values = sorted({self.state.nodes[n].labels.get(level.label) or f"({n})" for n in assignments
                             if n in self.state.nodes})
            out[level.name] = values
            if len(values) == 1:
                tightest = f"{level.name} {values[0]}"
        if tightest is None and len(assignments) == 1:
            tightest = f"node {next(iter(assignments))}"
        return out, tightest

    # ---- placed gangs -----------------------------------------------------------------------------------------
    async def _judge(self, job: dict, now: float) -> None:
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        st, spec = job.get("status") or {}, job["spec"]
        attempt = int(st.get("attempt") or 0)
        placement = _by_index(st.get("placement") or {})
        await self._remove_stale(key, keep_attempt=attempt)
        pods = {p.index: p.phase for p in self.state.pods_of(key)
                if p.attempt == attempt and not p.deleting and p.index is not None}
        lost = frozenset(n for n in placement.values()
                         if n not in self.state.nodes or not self.state.nodes[n].ready)
        started = timestamp(st.get("attemptStartTime")) if st.get("attemptStartTime") else now
        v = lc.decide(lc.Attempt(
            replicas=int(spec["replicas"]), phase=st["phase"], created_at=started,
            startup_timeout=float(spec.get("startupTimeoutSeconds") or 600), restarts=int(st.get("restarts") or 0),
            max_restarts=int(spec.get("maxRestarts", 3)), startup_failures=int(st.get("startupFailures") or 0),
            placement=placement, pods=pods, lost_nodes=lost), now)
        running = sum(1 for ph in pods.values() if ph == "Running")
        patch: dict = {"phase": v.phase, "reason": v.reason, "message": v.message, "restarts": v.restarts,
                       "startupFailures": v.startup_failures, "ready": f"{running}/{spec['replicas']}"}
        if v.phase == lc.RUNNING and not st.get("startTime"):
            patch["startTime"] = rfc3339(now)
        if v.phase in (lc.SUCCEEDED, lc.FAILED, lc.QUEUED):
            used = gpu_units(spec) * int(spec["replicas"]) * max(0.0, now - started)
            patch["gpuSeconds"] = float(st.get("gpuSeconds") or 0) + used
            if self.metrics:
                self.metrics.gpu_seconds.labels(job["metadata"]["namespace"]).inc(used)
        if v.phase in (lc.SUCCEEDED, lc.FAILED):
            patch["completionTime"] = rfc3339(now)
        if v.phase == lc.QUEUED:
            patch.update(placement=None, domain=None)
            patch["notBefore"] = rfc3339(v.not_before) if v.not_before else None
            if self.metrics and v.reason != "StartupTimeout":
                self.metrics.gang_restarts.inc()
        if v.action == lc.TEARDOWN:
            await self.writer.delete_pods([_name(p) for p in self.state.pods_of(key)
                                           if p.attempt == attempt and not p.deleting])
        elif v.action == lc.CREATE_MISSING:
            await self._create(job, attempt, placement, now, only=set(placement) - set(pods))
        if any(st.get(k) != patch[k] for k in patch):
            await self._patch(job, {**patch, "conditions": _conditions(v)})
        if v.phase != st["phase"]:
            kind = "Warning" if v.action == lc.TEARDOWN else "Normal"
            await self._say(job, kind, v.reason, v.message)

    async def _remove_stale(self, key: str, keep_attempt: int | None) -> None:
        """Delete the job's pods from other attempts (or all of them when it has no placed attempt)."""
        stale = [_name(p) for p in self.state.pods_of(key)
                 if not p.deleting and p.attempt != keep_attempt and p.phase not in ("Succeeded",)]
        if stale:
            await self.writer.delete_pods(stale)

    # ---- writes -----------------------------------------------------------------------------------------------
    async def _patch(self, job: dict, status: dict) -> dict | None:
        meta = job["metadata"]
        status = {**status, "observedGeneration": meta.get("generation")}
        updated = await self.writer.patch_status(meta["namespace"], meta["name"], status)
        if updated is not None:
            self.state.on_job("MODIFIED", updated)
        return updated

    async def _say(self, job: dict, kind: str, reason: str, message: str) -> None:
        key = (f"{job['metadata']['namespace']}/{job['metadata']['name']}", reason)
        if self._said.get(key) == message:
            return
        self._said[key] = message
        await self.writer.event(job, kind, reason, message)


async def _together(coros, limit: int = 64) -> None:
    """Run independent per-job write sequences concurrently, at most `limit` at a time."""
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            await c
    await asyncio.gather(*(one(c) for c in coros))


def _by_index(assignments: dict[str, list[int]]) -> dict[int, str]:
    return {int(i): node for node, idx in assignments.items() for i in idx}


def _name(p: PodInfo) -> tuple[str, str]:
    ns, name = p.key.split("/", 1)
    return ns, name


def _cond(kind: str, status: str, reason: str, message: str) -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(time.time())}


def _conditions(v: lc.Verdict) -> list[dict]:
    ready = "True" if v.phase in (lc.RUNNING, lc.SUCCEEDED) else "False"
    out = [_cond("Running", ready, v.reason or v.phase, v.message)]
    if v.phase in (lc.SUCCEEDED, lc.FAILED):
        out.append(_cond(v.phase, "True", v.reason, v.message))
    return out
