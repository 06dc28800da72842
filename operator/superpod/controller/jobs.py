"""A TrainingJob as one cycle sees it: its object, its status read tolerantly, its core request (parsed again only when
what it depends on changed), and the status writes every decision ends in."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

from superpod.api import compute_domain
from superpod.api.claims import ClaimSource, Shared
from superpod.api.convert import job_from_k8s, submitted_at
from superpod.api.crd import ADMITTED_FIELDS
from superpod.api.models import TrainingJobSpec, TrainingJobStatus
from superpod.api.resources import ConvertError
from superpod.api.status import read_status
from superpod.api.times import timestamp
from superpod.controller import job_status
from superpod.controller.actions import Emit, Plan, WriteStatus, job_ref
from superpod.controller.state import ClusterState
from superpod.core.accounting import gpu_units
from superpod.core.dra.model import ClaimSpec, pod_claims
from superpod.core.gang_key import GangKey
from superpod.core.phases import ACTIVE, Cause, Phase, Reason
from superpod.core.request import JobRequest


@dataclass(frozen=True)
class JobView:
    key: GangKey
    obj: dict
    status: TrainingJobStatus
    raw: dict  # the status fields that read well (a write keeps them)
    problems: list[str]  # the status fields that did not (a write drops them)
    request: JobRequest | ConvertError  # what the cycle reads: `parsed`, counted where it was admitted if placed
    parsed: JobRequest | ConvertError  # the request its metadata and spec make
    templates: tuple = ()  # the ResourceClaimTemplates its claims were read from, as read (or why not)

    # A view is read once per version of its object and kept (JobReader): its derived fields are computed once.
    @cached_property
    def uid(self) -> str:
        return self.obj["metadata"].get("uid") or ""

    @property
    def generation(self) -> int | None:
        return self.obj["metadata"].get("generation")

    @cached_property
    def phase(self) -> str | None:
        return self.status.phase

    @cached_property
    def replicas(self) -> int:
        return int(self.obj["spec"]["replicas"])

    @property
    def units(self) -> float:
        """GPUs per replica (MIG slices as g/7; GPUs its pods claim through DRA counted as nvidia.com/gpu)."""
        request = self.request
        return gpu_units(request.requests) + request.claimed_per_member if isinstance(request, JobRequest) else 0.0

    @property
    def gang_units(self) -> float:
        """GPU units of the whole gang, as its usage records carry them (Record.gpus)."""
        return round(self.units * self.replicas, 4)

    def spec(self, field: str):
        """A spec field as given, else the model's default (one source for the defaults: api/models.py)."""
        value = self.obj["spec"].get(field)
        return TrainingJobSpec.model_fields[field].default if value is None else value

    def placement(self) -> dict[int, str]:
        """Replica index -> node (shared: read, never change it)."""
        return self._placement

    @cached_property
    def gang(self) -> tuple[JobRequest, str, int, dict[int, str]] | None:
        """(request, uid, attempt, replica -> node) when every replica has a node in the status, else None."""
        if isinstance(self.request, JobRequest) and len(self.placement()) == self.replicas:
            return self.request, self.uid, self.status.attempt, self.placement()
        return None

    @cached_property
    def _placement(self) -> dict[int, str]:
        return {int(i): node for node, ranks in (self.status.placement or {}).items() for i in ranks}

    def time(self, value) -> float | None:
        return timestamp(value) if value else None

    def admission(self) -> dict:
        """What a gang placed now is admitted under (status.admitted): the spec's fields that decide accounting
        and protection, as they are at placement."""
        out = {field: value for field in ADMITTED_FIELDS if (value := self.spec(field)) is not None}
        if isinstance(self.request, JobRequest) and self.request.claimed_per_member:
            out["claimedGpus"] = self.request.claimed_per_member
        return out

    @property
    def min_runtime(self) -> int | None:
        """The job's own minRuntimeSeconds: as admitted while it is placed, else as its spec says."""
        admitted = self.status.admitted if self.phase in ACTIVE else None
        return admitted.minRuntimeSeconds if admitted is not None else self.obj["spec"].get("minRuntimeSeconds")

    @property
    def max_runtime_asked(self) -> int | None:
        """The job's own maxRuntimeSeconds: as admitted while it is placed, else as its spec says (the limit in
        force, with its queue's default and cap: QueueBook.max_runtime)."""
        admitted = self.status.admitted if self.phase in ACTIVE else None
        return admitted.maxRuntimeSeconds if admitted is not None else self.obj["spec"].get("maxRuntimeSeconds")

    # ---- writes ---------------------------------------------------------------------------------------------------
    def write(self, change: job_status.Change, now: float) -> WriteStatus:
        """The whole new status (job_status.applied), written if the job is still at the version read."""
        status = job_status.applied(self.raw, change, now, self.generation)
        return WriteStatus(self.key, self.obj["metadata"].get("resourceVersion", ""), status)

    def fault(self, what: str, now: float) -> Plan:
        """A bug met this job: a Warning and a condition on it (status otherwise unchanged); the rest schedules on."""
        plan = Plan(f"error:{self.key.text}", [self.emit("Warning", Reason.INTERNAL_ERROR, what)])
        if (change := job_status.faulted(self.raw, what)) is not None:
            plan.steps.insert(0, self.write(change, now))
        return plan

    def emit(self, kind: str, reason: str, message: str) -> Emit:
        return Emit(job_ref(self.obj), kind, str(reason), message)

    def holdings(self) -> str:
        res, n = self.obj["spec"].get("resources") or {}, self.replicas
        if res.get("migProfile"):
            return f"{n} x mig-{res['migProfile']}"
        return f"{round(n * self.units)} GPUs"

    def invalid(self, why: str, now: float, reason: Reason = Reason.INVALID) -> Plan | None:
        if self.phase == Phase.INVALID and self.status.message == why and not self.problems:
            return None
        write = self.write(job_status.invalid(reason, why), now)
        return Plan(self.key, [write, self.emit("Warning", reason, why)])

    def says(self, cause: Cause, details: dict, nomination: dict | None = None) -> bool:
        """Whether its status already says it waits for `cause`, with these details (job_status.cause_details) and
        nomination."""
        return (self.phase == Phase.QUEUED and self.status.reason == cause.code and self.status.message == cause.message
                and not self.problems and job_status.holds(self.raw, details, nomination))

    def wait(self, reason: str, why: str, now: float, nomination: dict | None = None, **details) -> Plan | None:
        """Queued with a reason; written only when the reason, message, details or nomination changed."""
        cause = Cause(reason, why)
        if self.says(cause, details, nomination):
            return None
        change = job_status.waiting(self.raw, cause, details, self.holdings(), self.replicas, now, nomination)
        return Plan(self.key, [self.write(change, now), self.emit("Normal", reason, why)])


class JobReader:
    """Reads each job once per version of the object: its status (tolerantly) and its core request. Only the jobs
    the cache says were stored or deleted since the last read are read again."""

    def __init__(self) -> None:
        self.by_key: dict[GangKey, JobView] = {}  # every job, by key (read-only for callers)
        self.by_uid: dict[str, JobView] = {}  # the same, by uid
        self.damaged: set[str] = set()  # keys of the jobs whose status has fields that did not read
        self.active: dict[GangKey, JobView] = {}  # the jobs placed (phase in ACTIVE), by key
        self.gangs: dict[GangKey, tuple[JobRequest, str, int, dict[int, str]]] = {}  # JobView.gang of those placed
        self.priorities: Counter = Counter()  # priority -> how many gangs of it are placed
        self.gangs_changed: set[GangKey] | None = None  # whose `gangs` entry changed since taken (None: any may have)
        self.nominated: dict[GangKey, JobView] = {}  # the jobs whose status holds a nomination (core/preempt.py)
        self.deleted_placed: list[JobView] = []  # the last views of placed jobs deleted since the caller took them
        self.phases: Counter = Counter()  # phase (a job without one counts as Queued) -> how many jobs are in it
        self._whole = True  # the next read reads every job (the first: the cache may hold jobs it kept no edit of)
        self.claiming: set[GangKey] = set()  # the jobs whose pods claim DRA devices: read again when a template changes
        self._template_edits = -1

    def lowest_priority(self) -> int | None:
        """The lowest priority of a placed gang (None when none is placed)."""
        return min((p for p, count in self.priorities.items() if count > 0), default=None)

    def read(self, state: ClusterState) -> None:
        """Read the jobs stored or deleted since the last read."""
        edited, state.edited_jobs = state.edited_jobs, set()
        if self._whole:
            edited |= state.jobs.keys()
        forced = set()
        if (edits := state.dra.reading_edits()) != self._template_edits:
            self._template_edits, forced = edits, set(self.claiming)
        try:
            self._read(state, edited | forced, forced)
        except BaseException:
            state.edited_jobs |= edited  # read them again next time (a bug must not lose an edit)
            raise
        self._whole = False

    def _read(self, state: ClusterState, edited: set[str], forced: set[GangKey]) -> None:
        for key in sorted(edited):
            obj = state.jobs.get(key)
            cached = self.by_key.get(key)
            if cached is not None and cached.obj is obj and key not in forced:
                continue
            if cached is not None:
                self.by_uid.pop(cached.uid, None)
                self.phases[cached.phase or Phase.QUEUED] -= 1
            if obj is None:
                self.by_key.pop(key, None)
                self.claiming.discard(key)
                if cached is not None and key in self.active:
                    self.deleted_placed.append(cached)
            else:
                view = self.by_key[key] = _view(key, obj, cached, state.dra)  # (the order of first sight)
                if key in forced and cached is not None and view.parsed is not cached.parsed:
                    state.touch(key)  # a template it names changed what it asks for: decided again
                if claims_in(obj):
                    self.claiming.add(key)
                else:
                    self.claiming.discard(key)
                self.by_uid[view.uid] = view
                self.phases[view.phase or Phase.QUEUED] += 1
            view = self.by_key.get(key)
            if view is not None and view.problems:
                self.damaged.add(key)
            else:
                self.damaged.discard(key)
            if view is not None and view.phase in ACTIVE:
                self.active[key] = view
            else:
                self.active.pop(key, None)
            if view is not None and view.status.nomination is not None:
                self.nominated[key] = view
            else:
                self.nominated.pop(key, None)
            if key in self.active and view.gang:
                if key in self.gangs:
                    self.priorities[self.gangs[key][0].priority] -= 1
                self.gangs[key] = view.gang
                self.priorities[view.gang[0].priority] += 1
                self._gang_changed(key)
            elif key in self.gangs:
                self.priorities[self.gangs.pop(key)[0].priority] -= 1
                self._gang_changed(key)

    def _gang_changed(self, key: GangKey) -> None:
        if self.gangs_changed is not None:
            self.gangs_changed.add(key)

    def take_gang_changes(self) -> set[GangKey] | None:
        """The keys whose placed gang changed since the last call (None the first time: any may have)."""
        changed, self.gangs_changed = self.gangs_changed, set()
        return changed


def _view(key: GangKey, obj: dict, previous: JobView | None = None, source: ClaimSource | None = None) -> JobView:
    status, raw, problems = read_status(obj)
    if previous is not None and raw.get("phase") in ACTIVE and isinstance(previous.parsed, JobRequest) and \
            previous.parsed.claiming:  # a placed gang keeps the claims it was placed with, whatever they do since
        read, source = previous.templates, _Kept(previous, source)
    else:
        read = _templates_read(obj, source)
    parsed = _parsed(obj, raw, previous, source, read)
    if isinstance(parsed, ConvertError) and raw.get("phase") in ACTIVE and claims_in(obj):
        parsed = without_claims(obj, raw, parsed)
    same = previous is not None and parsed is previous.parsed
    admitted = _admission(raw)
    if same and admitted == _admission(previous.raw):
        request = previous.request
    elif admitted is None or not isinstance(parsed, JobRequest):
        request = parsed
    else:
        request = _admitted(parsed, status)
    return JobView(key, obj, status, raw, problems, request, parsed, read)


class _Kept:
    """The templates and claims a placed job's claims were read from when it was placed (`previous`)."""

    def __init__(self, previous: JobView, source: ClaimSource | None) -> None:
        entries = pod_claims(_pod_spec(previous.obj))
        self.read = {(entry.template, entry.claim): found for entry, found in zip(entries, previous.templates,
                                                                                  strict=False)}
        self.source = source

    def template(self, namespace: str, name: str) -> ClaimSpec:
        found = self.read.get((name, ""))
        if not isinstance(found, ClaimSpec):
            raise LookupError(f"ResourceClaimTemplate {namespace}/{name} was not read when the job was placed")
        return found

    def shared(self, namespace: str, name: str) -> Shared:
        found = self.read.get(("", name))
        if not isinstance(found, Shared):
            raise LookupError(f"ResourceClaim {namespace}/{name} was not read when the job was placed")
        return found

    def worth(self, request) -> float:  # (what it counts is status.admitted's: see _admitted)
        return self.source.worth(request) if self.source is not None else 0.0


def without_claims(obj: dict, raw: dict, error: ConvertError) -> JobRequest | ConvertError:
    """The request of a job whose claims do not read, without them (`error` when it does not read even so): a placed
    job whose template was deleted since, counted at the GPUs it claimed when admitted (status.admitted)."""
    spec = {k: v for k, v in obj["spec"].items() if k != "computeDomain"}
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        spec["template"] = {**template, "spec": {k: v for k, v in template["spec"].items() if k != "resourceClaims"}}
    try:
        return job_from_k8s({**obj, "spec": spec, "status": raw})
    except ConvertError:
        return error


def _pod_spec(obj: dict) -> dict:
    """The pod spec a job's replicas are made from, with its ComputeDomain's channel claim (api/compute_domain.py)."""
    template = obj["spec"].get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    return compute_domain.with_channel(obj, pod_spec if isinstance(pod_spec, dict) else {}, "")


def _admission(raw: dict) -> dict | None:
    """status.admitted while the job is placed (it counts only then)."""
    return raw.get("admitted") if raw.get("phase") in ACTIVE else None


def _admitted(request: JobRequest, status: TrainingJobStatus) -> JobRequest:
    """A placed job counts where it was admitted (status.admitted), whatever its spec says since: a tenant's edit
    of its queue, class or priority never moves a running gang out of its queue's limit or under protection."""
    admitted = status.admitted
    if status.phase not in ACTIVE or admitted is None:
        return request
    claimed = {} if admitted.claimedGpus is None else {"claimed_gpus": admitted.claimedGpus, "shared_gpus": 0.0}
    return replace(request, queue=admitted.queue, service_class=admitted.serviceClass, priority=admitted.priority,
                   **claimed)  # (claimedGpus: each replica's, its share of the claims they share included)


def claims_in(obj: dict) -> bool:
    """Whether the job's pods claim DRA devices (spec.template.spec.resourceClaims, or a ComputeDomain's channel)."""
    template = (obj.get("spec") or {}).get("template")
    spec = template.get("spec") if isinstance(template, dict) else None
    return compute_domain.wanted(obj) or isinstance(spec, dict) and bool(spec.get("resourceClaims"))


def _parsed(obj: dict, raw: dict, previous: JobView | None, source: ClaimSource | None,
            read: tuple) -> JobRequest | ConvertError:
    """The request `obj` makes: the previous one while what job_from_k8s reads did not change (most versions are the
    operator's own status writes; `read`: the templates as read now), or it with its new submit time when only
    status.queuedAt moved."""
    if previous is not None:
        try:
            before = (*_request_inputs(previous.obj, previous.raw), previous.templates)
            after = (*_request_inputs(obj, raw), read)
            if before == after:
                return previous.parsed
            if before[:2] == after[:2] and before[3] == after[3] and isinstance(previous.parsed, JobRequest):
                return replace(previous.parsed, submitted=submitted_at({**obj, "status": raw}))
        except RecursionError:  # a spec nested a thousand levels: job_from_k8s says why it is Invalid
            pass
    try:
        return job_from_k8s({**obj, "status": raw}, source)
    except ConvertError as e:
        return e


def _request_inputs(obj: dict, raw: dict) -> tuple:
    """What job_from_k8s reads of the job: the metadata (but its version and field ownership), the spec, and of the
    status only status.queuedAt (through submitted_at)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields", "generation")}
    return meta, obj.get("spec"), raw.get("queuedAt")


def _templates_read(obj: dict, source: ClaimSource | None) -> tuple:
    """What the job's claims are read from: each template (or why not), and what the classes' devices are worth."""
    if source is None or not claims_in(obj):
        return ()
    namespace = obj["metadata"].get("namespace") or "default"
    out: list = []
    try:
        for claim in pod_claims(_pod_spec(obj)):
            try:
                out.append(source.template(namespace, claim.template) if claim.template else
                           source.shared(namespace, claim.claim))
            except (LookupError, ValueError) as error:
                out.append(str(error))
    except ValueError as error:  # an entry that does not read: job_from_k8s says so
        out.append(str(error))
    specs = [found.spec if isinstance(found, Shared) else found for found in out]
    worth = tuple(source.worth(alternative) for spec in specs if isinstance(spec, ClaimSpec)
                  for request in spec.requests for alternative in request.alternatives)
    return (*out, worth)  # (what the claims are worth in GPUs: a change of it is a change of the request)
