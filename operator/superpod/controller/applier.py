"""The one applier: every write the operator makes goes through here.

- Leadership is checked before every write (each pod of a gang included): a replica that lost its Lease stops at
  once; the next leader finishes or rolls back from what it observes.
- Plans run concurrently (independent objects), each plan's steps in order; a failed step stops its plan and runs its
  undo (a gang whose status was written but whose pods could not all be written is rolled back: nothing of it stays
  placed). Structured concurrency: apply() returns only when every write it started has finished.
- Answers are written through to the cache (the cache never lags behind our own writes); a stale resourceVersion
  refreshes the object from the API.
- Expectations: pods whose create answer was lost may exist; their job is not judged until they are observed or the
  expectation expires (EXPECTATION_TTL), so a lost answer never makes a gang look partial."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from superpod.api.convert import pod_resources
from superpod.api.manifests import ATTEMPT_LABEL, SCHEDULER_NAME
from superpod.api.resources import ConvertError
from superpod.api.times import rfc3339
from superpod.controller.actions import (
    BindPods,
    CreateComputeDomain,
    CreatePods,
    CreateService,
    DeletePods,
    Emit,
    MergeMigConfigs,
    PatchNode,
    Plan,
    RecordUsage,
    SetPodCondition,
    WriteClaims,
    WriteQueueStatus,
    WriteStatus,
)
from superpod.controller.state import ClusterState
from superpod.core.gang_key import GangKey
from superpod.core.mig_render import CONFIG_PREFIX as MIG_CONFIG_PREFIX
from superpod.k8s.api import (
    COMPUTEDOMAINS,
    CONFIGMAPS,
    EVENTS,
    GPUQUEUES,
    GPUUSAGES,
    NODES,
    PODS,
    RESOURCECLAIMS,
    SERVICES,
    TRAININGJOBS,
    ApiError,
    ClusterAPI,
    Kind,
    NotLeader,
)

log = logging.getLogger(__name__)
EXPECTATION_TTL = 300.0
COMPONENT = SCHEDULER_NAME  # the Events' reporting component
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"  # kube-scheduler's finalizer on the claims it allocates


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)  # plan keys that ran to the end
    failed: dict[str, str] = field(default_factory=dict)  # plan key -> why
    stopped: bool = False  # leadership was lost: writes stopped


WRITES = {Emit: "_emit", WriteStatus: "_write_status", WriteQueueStatus: "_write_queue_status",
          CreatePods: "_create_pods", RecordUsage: "_record_usage", DeletePods: "_delete_pods",
          BindPods: "_bind_pods", WriteClaims: "_write_claims", SetPodCondition: "_set_pod_condition",
          CreateService: "_create_service", CreateComputeDomain: "_create_compute_domain",
          PatchNode: "_patch_node", MergeMigConfigs: "_merge_configs"}  # each step's write, by the step's type


class Applier:
    def __init__(self, api: ClusterAPI, state: ClusterState, leading: Callable[[], bool], metrics=None,
                 concurrency: int = 64, writer: str = "", clock: Callable[[], float] = time.time) -> None:
        self.api, self.state, self.leading, self.metrics = api, state, leading, metrics
        self.concurrency, self.writer, self.clock = concurrency, writer, clock
        self.expected: dict[str, tuple[set[str], float]] = {}  # job uid -> (pod keys of unknown outcome, since)
        self._said: dict[str, dict[str, str]] = {}  # object uid -> reason -> last message: Events on change only
        # Bindings sent since the pod gangs last took them: pod key -> (uid, "ok" | "unknown" (sent, no answer) |
        # "failed"). A binding decided but never sent (the Lease lost first) is not here.
        self.bindings: dict[str, tuple[str, str]] = {}
        self.claim_writes: dict[str, str] = {}  # claim key -> ok, unknown or "failed: <why>": the last cycle's

    # ---- expectations ---------------------------------------------------------------------------------------------
    def settled(self, job_uid: str, now: float) -> bool:
        """False while pods of this job may exist that the cache has not seen (a create whose answer was lost): seen
        in the cache, or seen deleted since (its run kept for billing)."""
        entry = self.expected.get(job_uid)
        if entry is None:
            return True
        keys, since = entry
        keys -= {k for k in keys if k in self.state.pods or (self.state.ended.get(k) or (None,))[0] == job_uid}
        if not keys or now - since > EXPECTATION_TTL:
            self.expected.pop(job_uid, None)
            return True
        return False

    def forget(self, gone: list[str]) -> None:
        """Drop what is remembered of objects that are gone (their uids): Events said, pods expected."""
        for uid in gone:
            self._said.pop(uid, None)
            self.expected.pop(uid, None)

    def forget_all(self) -> None:
        """Drop what is remembered of every object (a standby kept no deletions: `ClusterState.unfollow`)."""
        self._said.clear()
        self.expected.clear()
        self.bindings.clear()
        self.claim_writes.clear()

    # ---- apply ----------------------------------------------------------------------------------------------------
    async def apply(self, plans: list[Plan]) -> Outcome:
        outcome = Outcome()
        if not plans:
            return outcome
        gate = asyncio.Semaphore(self.concurrency)

        async def one(plan: Plan) -> None:
            async with gate:
                await self._run(plan, outcome)

        async with asyncio.TaskGroup() as group:
            for plan in plans:
                group.create_task(one(plan))
        return outcome

    async def _run(self, plan: Plan, outcome: Outcome) -> None:
        wrote_status = False
        try:
            for step in plan.steps:
                try:
                    await self._do(step)
                except NotLeader:
                    raise
                except ApiError as e:
                    if isinstance(step, Emit):
                        continue
                    outcome.failed[plan.key] = str(e)
                    self._count("failed", step)
                    if (wrote_status or isinstance(step, WriteClaims)) and plan.undo is not None:
                        for undo in plan.undo(e):
                            await self._best_effort(undo)
                    return
                wrote_status |= isinstance(step, WriteStatus)
            outcome.done.append(plan.key)
        except NotLeader:
            outcome.stopped = True
            outcome.failed[plan.key] = "lost the Lease"
        except Exception as e:  # a bug: isolate it to this plan, say so, go on with the others
            log.exception("applying %s failed", plan.key)
            outcome.failed[plan.key] = f"internal error: {e}"
            if self.metrics:
                self.metrics.object_errors.labels("apply").inc()

    async def _best_effort(self, step) -> None:
        try:
            await self._do(step)
        except NotLeader:
            raise
        except ApiError as e:
            log.warning("rollback step %s failed: %s (the next cycle converges)", type(step).__name__, e)

    def _check(self) -> None:
        if not self.leading():
            raise NotLeader()

    def _count(self, outcome: str, step) -> None:
        if self.metrics:
            self.metrics.writes.labels(type(step).__name__, outcome).inc()

    async def _do(self, step) -> None:
        self._check()
        await getattr(self, WRITES[type(step)])(step)
        if not isinstance(step, Emit):
            self._count("deferred" if isinstance(step, WriteStatus) and step.deferred else "ok", step)

    def _see(self, kind, obj: dict | None, event: str = "MODIFIED") -> None:
        if obj:
            self.state.apply(kind, event, obj, self.clock())

    # ---- the writes -----------------------------------------------------------------------------------------------
    async def _write_status(self, step: WriteStatus) -> None:
        job = self.state.jobs.get(step.job)
        if job is None:
            raise ApiError(404, "NotFound", f"TrainingJob {step.job} is gone")
        if step.deferred:  # in force now, sent with the job's next status write (the precondition checked here)
            if not self.state.defer(step.job, step.resource_version, step.status, self.clock()):
                raise ApiError(409, "Conflict", f"TrainingJob {step.job} changed since the decision")
            return
        body = _status_body(job, step.resource_version or job["metadata"]["resourceVersion"], step.status)
        try:
            self._see(TRAININGJOBS, await self.api.replace_status(TRAININGJOBS, body))
        except ApiError as e:
            if e.conflict:  # someone else wrote first (the user's spec edit, another writer): read it again
                await self._refresh(step.job)
            raise

    async def _write_queue_status(self, step: WriteQueueStatus) -> None:
        queue = self.state.queues.get(step.queue)
        if queue is None:
            raise ApiError(404, "NotFound", f"GPUQueue {step.queue} is gone")
        body = _status_body(queue, queue["metadata"]["resourceVersion"], step.status)  # a conflict: next cycle
        self._see(GPUQUEUES, await self.api.replace_status(GPUQUEUES, body))

    async def _refresh(self, job: GangKey) -> None:
        try:
            self._see(TRAININGJOBS, await self.api.get(TRAININGJOBS, job.name, job.namespace))
        except ApiError as e:
            log.info("refreshing %s: %s", job, e)

    async def _create_pods(self, step: CreatePods) -> None:
        """Every pod of the gang, in parallel. A pod whose answer was lost is expected (it may exist); any other
        failure deletes the pods this step made (by uid) and raises."""
        unknown: set[str] = set()
        uids: dict[str, str] = {}  # pod key -> uid of the pods this step created (rolled back by uid)

        async def create(pod: dict) -> None:
            self._check()
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            try:
                created = await self.api.create(PODS, pod)
                uids[key] = created["metadata"].get("uid") or ""
                self._see(PODS, created, "ADDED")
            except NotLeader:
                raise
            except ApiError as e:
                if e.conflict:
                    await self._adopt(pod)
                elif e.unknown_outcome:
                    unknown.add(key)
                else:
                    raise

        results = await asyncio.gather(*(create(p) for p in step.pods), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if any(isinstance(e, NotLeader) for e in errors):
            raise NotLeader()
        if unknown:
            self.expected[step.pods[0]["metadata"]["ownerReferences"][0]["uid"]] = (unknown, self.clock())
        if not errors:
            return
        # only the pods this step made, by uid: a name another pod holds (a conflict) is not ours to delete, and
        # one whose answer was lost is judged once seen (expected)
        await self._delete_pods(DeletePods(tuple(sorted(uids.items()))))
        first = next((e for e in errors if isinstance(e, ApiError)), errors[0])
        if not isinstance(first, ApiError):
            raise first
        raise ApiError(first.status, first.reason, f"{len(errors)} of {len(step.pods)} pod writes failed: "
                       f"{first.message}; rolled back")

    async def _adopt(self, pod: dict) -> None:
        """A pod of this name exists: ours (written before a crash) if its owner, attempt, node and requests match
        (a pod made ahead by someone else under the replica's name is then the replica it poses as, GPU for GPU),
        else an error."""
        meta = pod["metadata"]
        found = await self.api.get(PODS, meta["name"], meta["namespace"])
        owner = meta["ownerReferences"][0]["uid"]
        theirs = found["metadata"]
        if not theirs.get("deletionTimestamp") and any(o.get("uid") == owner for o in theirs.get("ownerReferences")
                                                       or []) and (
                (theirs.get("labels") or {}).get(ATTEMPT_LABEL) == meta["labels"][ATTEMPT_LABEL]) and (
                found["spec"].get("nodeName") == pod["spec"].get("nodeName")) and _requests(found) == _requests(pod):
            self._see(PODS, found)
            return
        raise ApiError(409, "AlreadyExists", f"pod {meta['namespace']}/{meta['name']} exists and is not this "
                       "attempt's live pod on its node (being deleted, of an earlier job of the same name, "
                       "placed elsewhere, or asking for other resources)")

    async def _delete_pods(self, step: DeletePods) -> None:
        async def delete(key: str, uid: str) -> None:
            self._check()
            namespace, name = key.split("/", 1)
            self._see(PODS, await self.api.delete(PODS, name, namespace, uid or None, step.grace))

        results = await asyncio.gather(*(delete(k, u) for k, u in step.pods), return_exceptions=True)
        failed = None
        for r in results:
            if isinstance(r, NotLeader):
                raise r
            if isinstance(r, BaseException):
                log.warning("pod delete failed: %s (retried next cycle)", r)
                if not (isinstance(r, ApiError) and (r.not_found or r.conflict)):  # (not gone already, nor replaced)
                    failed = failed or r
        if failed is not None and step.required:
            raise failed if isinstance(failed, ApiError) else ApiError(500, "InternalError", str(failed))

    async def _bind_pods(self, step: BindPods) -> None:
        """Every binding in parallel; those that failed are remembered (`unbound`), and the step fails after."""
        async def bind(key: str, uid: str, node: str) -> None:
            self._check()
            namespace, name = key.split("/", 1)
            try:
                await self.api.bind(namespace, name, uid, node, dict(step.annotations))
                self.bindings[key] = (uid, "ok")
            except NotLeader:
                raise
            except ApiError as e:
                if e.conflict and (pod := self.state.pods.get(key)) and pod.uid == uid and pod.node == node:
                    self.bindings[key] = (uid, "ok")  # an earlier try landed
                    return
                self.bindings[key] = (uid, "unknown" if e.unknown_outcome else "failed")
                raise

        results = await asyncio.gather(*(bind(*binding) for binding in step.bindings), return_exceptions=True)
        _fail_on_any(results, f"bindings of gang {step.gang}")

    async def _write_claims(self, step: WriteClaims) -> None:
        """Every claim's status in parallel, each with its uid and version as preconditions; the step fails after
        them if any did."""
        async def write(key: str, uid: str, version: str, status: dict, finalizers: tuple[str, ...]) -> None:
            self._check()
            namespace, name = key.split("/", 1)
            try:
                if status.get("allocation") and DELETE_PROTECTION not in finalizers:
                    version = await self._claim_finalizers(name, namespace, uid, version,
                                                           [*finalizers, DELETE_PROTECTION])
                patch = {"metadata": {"uid": uid, "resourceVersion": version}, "status": status}
                answer = await self.api.patch_status(RESOURCECLAIMS, name, patch, namespace)
                self._see(RESOURCECLAIMS, answer)
                if "allocation" in status and not status["allocation"] and DELETE_PROTECTION in finalizers:
                    await self._claim_finalizers(name, namespace, uid, answer["metadata"]["resourceVersion"],
                                                 [f for f in finalizers if f != DELETE_PROTECTION])
                self.claim_writes[key] = "ok"
            except ApiError as e:
                self.claim_writes[key] = "unknown" if e.unknown_outcome else f"failed: {e.message}"
                raise

        results = await asyncio.gather(*(write(*claim) for claim in step.claims), return_exceptions=True)
        _fail_on_any(results, f"ResourceClaim writes of gang {step.gang}")

    async def _claim_finalizers(self, name: str, namespace: str, uid: str, version: str, finalizers: list[str]) -> str:
        """Set a claim's finalizers if it is still at `version`; its new version."""
        patch = {"metadata": {"uid": uid, "resourceVersion": version, "finalizers": finalizers}}
        answer = await self.api.patch(RESOURCECLAIMS, name, patch, namespace)
        self._see(RESOURCECLAIMS, answer)
        return answer["metadata"]["resourceVersion"]

    async def _set_pod_condition(self, step: SetPodCondition) -> None:
        await self._patch_pod(step.pod, step.uid, {"status": {"conditions": [step.condition]}}, status=True,
                              required=step.required)

    async def _patch_pod(self, key: str, uid: str, patch: dict, status: bool = False, required: bool = False) -> None:
        """A patch of another controller's pod, only while it is the pod with `uid`: a pod gone or replaced is no
        failure, unless the patch is `required` (the rest of its plan must not run without it)."""
        pod = self.state.pods.get(key)
        if pod is None or pod.uid != uid:
            if required:
                raise ApiError(404, "NotFound", f"pod {key} is gone or was replaced")
            return
        namespace, name = key.split("/", 1)
        patch = {**patch, "metadata": {**patch.get("metadata", {}), "uid": uid}}
        try:
            self._see(PODS, await (self.api.patch_status if status else self.api.patch)(PODS, name, patch, namespace))
        except ApiError as e:
            if required or not (e.not_found or e.conflict):
                raise

    async def _record_usage(self, step: RecordUsage) -> None:
        """A refused record (invalid) is logged and counted, and the close goes on: a job must not stay open
        because its bill cannot be written; any other failure stops the close, which is retried."""
        try:
            self._see(GPUUSAGES, await self.api.create(GPUUSAGES, step.usage), "ADDED")
        except ApiError as e:
            if e.invalid:
                log.error("usage record %s refused, the attempt is closed without it: %s",
                          step.usage["metadata"]["name"], e)
                self._count("refused", step)
            elif not e.conflict:  # AlreadyExists: an earlier try of the same close wrote it
                raise

    async def _create_service(self, step: CreateService) -> None:
        await self._create_once(SERVICES, step.service, cached=True)

    async def _create_compute_domain(self, step: CreateComputeDomain) -> None:
        await self._create_once(COMPUTEDOMAINS, step.domain)

    async def _create_once(self, kind: Kind, obj: dict, cached: bool = False) -> None:
        """Create `obj` (seen at once if the cache keeps its kind); one of its name that exists stands."""
        try:
            made = await self.api.create(kind, obj)
        except ApiError as e:
            if not e.conflict:
                raise
            return
        if cached:
            self._see(kind, made, "ADDED")

    async def _patch_node(self, step: PatchNode) -> None:
        patch: dict = {"metadata": {}}
        if step.labels:
            patch["metadata"]["labels"] = step.labels
        if step.annotations:
            patch["metadata"]["annotations"] = step.annotations
        self._see(NODES, await self.api.patch(NODES, step.node, patch))

    async def _merge_configs(self, step: MergeMigConfigs) -> None:
        """Add our mig-parted configs to the ConfigMap (read, merge, replace with its resourceVersion)."""
        try:
            current = await self.api.get(CONFIGMAPS, step.name, step.namespace)
        except ApiError as e:
            if not e.not_found:
                raise
            current = None
        existing = {name: entries for name, entries in _configs(current, step).items()
                    if not name.startswith(MIG_CONFIG_PREFIX) or name in step.in_use}
        doc = {"version": "v1", "mig-configs": {**existing, **step.configs}}
        data = {"config.yaml": yaml.safe_dump(doc, sort_keys=False)}
        if current is None:
            await self.api.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                                               "metadata": {"name": step.name, "namespace": step.namespace}})
        else:
            await self.api.replace(CONFIGMAPS, {**current, "data": {**(current.get("data") or {}), **data}})

    async def _emit(self, step: Emit) -> None:
        said = self._said.setdefault(step.ref.get("uid") or step.ref["name"], {})
        if said.get(step.reason) == step.message:
            return
        said[step.reason] = step.message
        now = rfc3339(self.clock())
        body = {"metadata": {"generateName": f"{step.ref['name']}.", "namespace": step.ref.get("namespace")
                             or "default"},
                "involvedObject": step.ref, "type": step.type, "reason": step.reason, "message": step.message[:1024],
                "firstTimestamp": now, "lastTimestamp": now, "count": 1, "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT, "reportingInstance": self.writer}
        try:
            await self.api.create(EVENTS, body)
        except NotLeader:
            raise
        except ApiError as e:
            log.warning("event %s on %s not written: %s", step.reason, step.ref["name"], e)


def _configs(current: dict | None, step: MergeMigConfigs) -> dict:
    """The mig-configs already in the ConfigMap; a document that is not a mig-parted mapping is replaced."""
    if current is None:
        return {}
    raw = (current.get("data") or {}).get("config.yaml") or "{}"
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        log.warning("ConfigMap %s/%s: config.yaml is not YAML (%s); rewriting it", step.namespace, step.name, e)
        return {}
    configs = doc.get("mig-configs") if isinstance(doc, dict) else None
    if not isinstance(configs, dict):
        log.warning("ConfigMap %s/%s: config.yaml has no mig-configs mapping; rewriting it", step.namespace,
                    step.name)
        return {}
    return configs


def _requests(pod: dict) -> tuple | None:
    try:
        return pod_resources(pod)
    except ConvertError:
        return None


def _status_body(obj: dict, resource_version: str, status: dict) -> dict:
    """An update of the status subresource: the API server keeps everything but the status from what it stores, so
    the spec is not sent (nor encoded: a tenant's spec may nest deeper than the encoder goes)."""
    meta = {key: value for key, value in obj["metadata"].items() if key in ("name", "namespace")}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "status": status,
            "metadata": {**meta, "resourceVersion": resource_version}}


def _fail_on_any(results: list, what: str) -> None:
    """Raise for the first failure of writes made in parallel (NotLeader first: writing stops)."""
    errors = [r for r in results if isinstance(r, BaseException)]
    if any(isinstance(e, NotLeader) for e in errors):
        raise NotLeader()
    if errors:
        first = errors[0]
        if not isinstance(first, ApiError):
            raise first
        raise ApiError(first.status, first.reason, f"{len(errors)} of {len(results)} {what} failed: {first.message}")
