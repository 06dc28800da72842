"""Pydantic models of the superpod.dev/v1alpha1 kinds: TrainingJob (namespaced), ClusterTopology, GPUQueue and
GPUUsage (cluster-scoped).

Field names are the YAML names. Every field has a description: the CRDs are generated from these models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from superpod.core.gang_key import GangKey
from superpod.core.phases import WAITING_CAUSES, Phase

GROUP = "superpod.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
REASON_DESCRIPTION = ("Short machine-readable reason for the phase. While Queued, why it waits: " + "; ".join(
    f"{code} ({meaning})" for code, meaning in WAITING_CAUSES.items()) + ".")

Quantity = int | float | str


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(description="Object name.")
    namespace: str | None = Field(None, description="Namespace (TrainingJob only).")
    uid: str | None = Field(None, description="Unique id set by the API server.")
    creationTimestamp: str | None = Field(None, description="RFC 3339 time the API server created the object.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")


class Resources(_Spec):
    gpus: int | None = Field(None, ge=1, le=64, description="Whole GPUs per replica (resource nvidia.com/gpu).")
    migProfile: str | None = Field(
        None,
        pattern=r"^[0-9]+g\.[0-9]+gb(\+me)?$",
        max_length=32,
        description="One MIG slice per replica instead of whole GPUs, e.g. 3g.40gb (resource nvidia.com/mig-3g.40gb).",
    )
    gpuProduct: str | None = Field(
        None,
        max_length=128,
        description="Only nodes whose nvidia.com/gpu.product label equals this, e.g. NVIDIA-H100-80GB-HBM3.",
    )
    cpu: Quantity | None = Field(None, description="CPU per replica, a Kubernetes quantity (e.g. 32 or 500m).")
    memory: Quantity | None = Field(None, description="Memory per replica, a Kubernetes quantity (e.g. 256Gi).")

    @model_validator(mode="after")
    def _gpus_or_mig(self) -> Resources:
        if self.gpus and self.migProfile:
            raise ValueError("set either gpus or migProfile, not both")
        return self


class TopologySpec(_Spec):
    required: str | None = Field(
        None,
        max_length=63,
        description="A ClusterTopology level name: all replicas must run inside one domain of this level.",
    )
    preferred: str | None = Field(
        None, max_length=63, description="A tighter level to aim for, best effort: never makes the job unplaceable."
    )
    sliceSize: int | None = Field(
        None, ge=1, description="Replicas per slice (e.g. a tensor-parallel group); replicas must be a multiple."
    )
    sliceRequired: str | None = Field(
        None,
        max_length=63,
        description="Level that each slice of sliceSize consecutive replicas (by rank) must fit inside.",
    )

    @model_validator(mode="after")
    def _slice_pair(self) -> TopologySpec:
        if (self.sliceSize is None) != (self.sliceRequired is None):
            raise ValueError("sliceSize and sliceRequired must be set together")
        return self


class ComputeDomainSpec(_Spec):
    allocationMode: Literal["Single", "All"] = Field(
        "Single", description="IMEX channels each pod gets: Single (one) or All (the most an IMEX domain has)."
    )


class TrainingJobSpec(_Spec):
    replicas: int = Field(ge=1, le=100_000, description="Pods in the gang; all are placed at once or none is.")
    resources: Resources = Field(description="What each replica needs.")
    topology: TopologySpec = Field(default_factory=TopologySpec, description="Placement constraints.")
    priority: int = Field(
        0, ge=-2_147_483_648, le=1_000_000_000,
        description="Higher runs first; equal priorities run in submission order. The range of a PriorityClass a "
        "user may create (pod gangs' priorities come from theirs); fixed while the job is Starting or Running.",
    )
    startupTimeoutSeconds: int = Field(
        600, ge=1, description="If not all pods are Running by then, the gang is torn down and requeued with backoff."
    )
    maxRestarts: int = Field(3, ge=0, le=1000, description="Gang restarts allowed on pod failure or node loss.")
    template: dict[str, Any] = Field(
        description="A PodTemplateSpec for every replica: image, command, env, volumes, nodeSelector, affinity, "
        "tolerations.",
    )
    queue: str | None = Field(
        None, max_length=253, description="The GPUQueue this job runs in (default: the queue that owns its namespace); "
        "fixed while the job is Starting or Running."
    )
    serviceClass: Literal["reserved", "spot"] = Field(
        "spot", description="reserved: admitted only inside its queue's guarantee, never preempted; spot: may borrow "
        "idle GPUs, may be preempted. Fixed while the job is Starting or Running."
    )
    preemptionGracePeriodSeconds: int = Field(
        30, ge=0, le=86_400, description="When the gang is preempted: seconds between SIGTERM and SIGKILL."
    )
    minRuntimeSeconds: int | None = Field(
        None, ge=0, le=30 * 86_400,
        description="Not preempted until each attempt has run this long (default and most: its GPUQueue's; 0 "
        "without one); fixed while the job is Starting or Running.",
    )
    nodeFailure: Literal["RestartGang", "Replace"] = Field(
        "RestartGang", description="When a node of the placed gang is lost (gone, or NotReady past the grace): "
        "RestartGang tears the gang down and places it again; Replace makes only the replicas of that node again on "
        "another node that keeps the gang's topology (same rank, host name and environment), the others running on, "
        "and restarts the gang if no such node is found in time. Replace suits elastic training code only.",
    )
    maxRuntimeSeconds: int | None = Field(
        None, ge=1,
        description="A limit the operator enforces: an attempt placed this long ago is stopped (graceful, each "
        "pod's own grace period) and the job ends Failed, reason MaxRuntimeExceeded, not retried. Absent: its "
        "GPUQueue's defaultMaxRuntimeSeconds; never more than the queue's maxRuntimeSeconds. Fixed while the job "
        "is Starting or Running.",
    )

    computeDomain: ComputeDomainSpec | None = Field(
        None, description="Multi-node NVLink (GB200 NVL72): the operator creates a ComputeDomain of NVIDIA's DRA "
        "driver named as the job, and each replica claims its IMEX channel (entry compute-domain-channel, on the pod "
        "and every container). Needs topology.required: the level of NVLink cliques (nvlink in the presets). Fixed "
        "while the job is Starting or Running.",
    )

    @model_validator(mode="after")
    def _domain_in_one_clique(self) -> TrainingJobSpec:
        if self.computeDomain is not None and not self.topology.required:
            raise ValueError("computeDomain needs topology.required, the level of NVLink cliques (nvlink in the "
                             "presets): an IMEX domain joins the GPUs of one clique")
        return self

    @model_validator(mode="after")
    def _slices_divide(self) -> TrainingJobSpec:
        size = self.topology.sliceSize
        if size and self.replicas % size:
            raise ValueError(f"replicas ({self.replicas}) must be a multiple of topology.sliceSize ({size})")
        return self


class Condition(BaseModel):
    type: str = Field(description="Condition type: Schedulable, Running, Succeeded, Failed, Invalid or OperatorError.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str | None = Field(None, description="CamelCase reason.")
    message: str | None = Field(None, description="Human-readable detail.")
    lastTransitionTime: datetime | None = Field(None, description="RFC 3339 time of the last status change.")


class Failure(BaseModel):
    model_config = ConfigDict(extra="allow")
    attempt: int = Field(ge=0, description="The attempt that ended.")
    reason: str = Field(description="PodFailed, NodeLost, PodDeleted, StartupTimeout, ContainerError or "
                        "MaxRuntimeExceeded.")
    replica: int | None = Field(None, description="The replica (rank) at fault, if one.")
    node: str | None = Field(None, description="Its node.")
    exitCode: int | None = Field(None, description="The exit code of the container that failed.")
    message: str | None = Field(None, description="Termination message, or the kubelet's words.")
    time: datetime = Field(description="RFC 3339 time the operator saw it.")


class Replacement(BaseModel):
    model_config = ConfigDict(extra="allow")
    attempt: int = Field(ge=0, description="The attempt whose replica was replaced.")
    replica: int = Field(ge=0, description="The replica (rank) made again.")
    lostNode: str = Field(description="The node it was lost with.")
    node: str = Field(description="The node it was made again on.")
    time: datetime = Field(description="RFC 3339 time the operator decided it.")


class Nomination(BaseModel):
    model_config = ConfigDict(extra="allow")
    nodes: list[str] = Field(default_factory=list, description="The nodes held for this job while its victims stop.")
    victims: list[str] = Field(default_factory=list, description="The gangs it preempted (namespace/name).")
    attempts: dict[str, int] = Field(default_factory=dict, description="Each TrainingJob victim's attempt that was "
                                     "preempted.")
    pods: dict[str, list[str]] = Field(default_factory=dict, description="Each pod-gang victim's pods that were "
                                       "preempted, by uid (the pods its owner makes again are new).")
    time: datetime = Field(description="RFC 3339 time it preempted them.")

    @field_validator("victims")
    @classmethod
    def _gangs(cls, victims: list[str]) -> list[str]:
        for victim in victims:
            GangKey.parse(victim)
        return victims

    def gangs(self) -> tuple[GangKey, ...]:
        """The victims."""
        return tuple(GangKey.parse(victim) for victim in self.victims)

    def attempt_of(self, victim: GangKey) -> int | None:
        return self.attempts.get(victim.text)

    def pods_of(self, victim: GangKey) -> list[str]:
        return self.pods.get(victim.text, [])


class HeldReservation(BaseModel):
    model_config = ConfigDict(extra="allow")
    domain: str = Field(description="What it holds while it waits, e.g. leaf su-2, or nodes n1, n2.")
    nodes: list[str] = Field(default_factory=list, max_length=64, description="The nodes held (the first 64).")
    nodeCount: int = Field(0, ge=0, description="How many nodes it holds.")
    expectedStart: datetime | None = Field(
        None, description="RFC 3339 time the held nodes are predicted to hold it (absent: no running gang there has "
        "a runtime limit or estimate)."
    )


class JobReference(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["TrainingJob", "PodGang"] = Field(description="A TrainingJob, or a gang of pods.")
    namespace: str = Field(description="Its namespace.")
    name: str = Field(description="Its name (a pod gang's: its gang label, or its pod's name).")


class Admission(BaseModel):
    """What a placed gang was admitted under, recorded by the operator at placement and read back while it is
    placed: the spec's fields are the tenant's to edit, these decide accounting and protection."""

    model_config = ConfigDict(extra="allow")
    queue: str | None = Field(None, description="spec.queue when placed (absent: its namespace's queue).")
    serviceClass: str = Field("spot", description="spec.serviceClass when placed.")
    priority: int = Field(0, description="spec.priority when placed.")
    minRuntimeSeconds: int | None = Field(None, description="spec.minRuntimeSeconds when placed.")
    maxRuntimeSeconds: int | None = Field(None, description="spec.maxRuntimeSeconds when placed.")
    claimedGpus: float | None = Field(
        None, ge=0, description="GPUs each replica claimed through DRA when placed: what it counts and is billed "
        "while placed, whatever its ResourceClaimTemplates become."
    )


class TrainingJobStatus(BaseModel):
    model_config = ConfigDict(extra="allow")
    phase: Phase | None = Field(None, description="Queued, Starting, Running, Succeeded, Failed or Invalid.")
    conditions: list[Condition] = Field(default_factory=list, description="Observed conditions.")
    placement: dict[str, list[int]] | None = Field(None, description="Node name to the replica indexes placed on it.")
    domains: dict[str, list[str]] | None = Field(
        None, description="Per ClusterTopology level, the domains the gang occupies, e.g. {leaf: [su-2]}."
    )
    domain: str | None = Field(None, description="The tightest single domain holding the whole gang, e.g. leaf su-2.")
    attempt: int = Field(0, ge=0, description="Gang attempt number; pods of attempt N are named <job>-aN-<index>.")
    attemptStartTime: datetime | None = Field(None, description="RFC 3339 time the current attempt was placed.")
    restarts: int = Field(0, ge=0, description="Gang restarts after a replica failed (counted against maxRestarts).")
    interruptions: int = Field(
        0, ge=0, description="Gang restarts the infrastructure caused: a node lost, a replica deleted or evicted."
    )
    interruptionsInARow: int = Field(
        0, ge=0, description="Interruptions in a row: an attempt that ran 10 minutes before its interruption starts a "
        "new row. The wait before the gang restarts doubles along a row, and the 20th in a row fails the job."
    )
    startupFailures: int = Field(
        0, ge=0, description="Attempts that could not start: not all pods ran in time, or the gang could not be "
        "written (the API refused a write)."
    )
    containerErrors: int = Field(0, ge=0, description="Attempts torn down by image or container config errors.")
    failures: list[Failure] = Field(default_factory=list, description="What ended the last attempts, newest last.")
    replacements: int = Field(
        0, ge=0, description="Replicas made again on another node after theirs was lost (spec.nodeFailure Replace), "
        "counted apart from restarts and interruptions."
    )
    replaced: list[Replacement] = Field(default_factory=list, description="The last replacements, newest last.")
    replacing: list[int] | None = Field(
        None, description="The replicas being made again on their new node, until each is seen there."
    )
    replacementDeadline: datetime | None = Field(
        None, description="While replicas of a lost node wait for a node to replace it: when the gang restarts "
        "instead."
    )
    notBefore: datetime | None = Field(None, description="RFC 3339 time before which a requeued job is not placed.")
    gpus: str | None = Field(None, description="What the whole gang holds, e.g. 128 GPUs or 8 x mig-3g.40gb.")
    ready: str | None = Field(None, description="Replicas running / replicas.")
    gpuSeconds: float = Field(
        0, ge=0, description="GPU-seconds used by all attempts, from pod start to finish (MIG slices count g/7); the "
        "running attempt up to the last status write."
    )
    nomination: Nomination | None = Field(
        None, description="Set while gangs this job preempted stop: the nodes held for it and the victims."
    )
    admitted: Admission | None = Field(
        None, description="What the running attempt was admitted under: its queue, class, priority and minimum "
        "runtime as they were when it was placed (the operator reads these, not the spec, while it is placed)."
    )
    preemptions: int = Field(0, ge=0, description="Times this job's running gang was preempted.")
    preemptedAt: list[datetime] = Field(
        default_factory=list, description="RFC 3339 times of its last preemptions (at most 4), oldest first."
    )
    finishedGpuSeconds: float = Field(0, ge=0, description="GPU-seconds of the attempts that have ended.")
    accountedAttempts: int = Field(0, ge=0, description="Attempts whose GPU-seconds are in finishedGpuSeconds.")
    observedGeneration: int | None = Field(None, description="The spec generation this status was computed from.")
    reason: str | None = Field(None, description=REASON_DESCRIPTION)
    message: str | None = Field(None, description="Why the job waits or failed, one sentence.")
    reservation: HeldReservation | None = Field(
        None, description="While it waits as the first blocked job: the nodes held for it, which later jobs use only "
        "if they end before it starts."
    )
    blockedBy: list[JobReference] | None = Field(
        None, max_length=64, description="While it waits with reason ReservedForOthers: the jobs whose reservations it "
        "fits only inside."
    )
    queuedAt: datetime | None = Field(None, description="RFC 3339 time the job entered the queue.")
    startTime: datetime | None = Field(None, description="RFC 3339 time all replicas were first running.")
    completionTime: datetime | None = Field(None, description="RFC 3339 time the job finished.")


class TrainingJob(BaseModel):
    apiVersion: Literal["superpod.dev/v1alpha1"] = Field(API_VERSION, description="superpod.dev/v1alpha1")
    kind: Literal["TrainingJob"] = Field("TrainingJob", description="TrainingJob")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: TrainingJobSpec = Field(description="The gang to run.")
    status: TrainingJobStatus | None = Field(None, description="Set by the operator.")


class TopologyLevel(_Spec):
    name: str = Field(
        min_length=1, max_length=63, description="Level name used by TrainingJob topology fields, e.g. leaf."
    )
    nodeLabel: str = Field(
        min_length=1, max_length=317, description="Node label whose value names the domain, e.g. superpod.dev/leaf."
    )


class ClusterTopologySpec(_Spec):
    levels: list[TopologyLevel] = Field(
        min_length=1,
        max_length=16,
        description="Levels coarsest first; kubernetes.io/hostname as the last level means the node.",
    )

    @model_validator(mode="after")
    def _unique(self) -> ClusterTopologySpec:
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ValueError(f"level names must be unique: {names}")
        return self


class ClusterTopology(BaseModel):
    apiVersion: Literal["superpod.dev/v1alpha1"] = Field(API_VERSION, description="superpod.dev/v1alpha1")
    kind: Literal["ClusterTopology"] = Field("ClusterTopology", description="ClusterTopology")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: ClusterTopologySpec = Field(description="The levels of the fabric.")


DURATION = r"^([0-9]+(\.[0-9]+)?(h|m|s))+$"


class QueueResource(_Spec):
    flavor: str = Field(
        min_length=1, max_length=128,
        description="What this counts: a GPU product (nvidia.com/gpu.product value), a MIG profile (e.g. 1g.10gb), "
        "a DeviceClass its jobs' DRA claims name (e.g. gpu.nvidia.com), or * for any GPU.",
    )
    guaranteed: float = Field(0, ge=0, description="GPUs this queue gets whenever it has demand.")
    limit: float | None = Field(None, ge=0, description="Hard cap including borrowed GPUs (absent: no cap).")
    lendingLimit: float | None = Field(
        None, ge=0, description="At most this much of the unused guarantee is lent to other queues (absent: all)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> QueueResource:
        if self.limit is not None and self.limit < self.guaranteed:
            raise ValueError(f"limit ({self.limit:g}) must not be below guaranteed ({self.guaranteed:g})")
        if self.lendingLimit is not None and self.lendingLimit > self.guaranteed:
            raise ValueError(f"lendingLimit ({self.lendingLimit:g}) must not exceed guaranteed ({self.guaranteed:g})")
        return self


class QueueBudget(_Spec):
    gpuHours: float = Field(gt=0, description="GPU-hours the queue may use per period (MIG slices count g/7).")
    period: str = Field(
        "720h", pattern=DURATION, max_length=32,
        description="Length of a budget period, above 0, e.g. 720h; it renews then.",
    )
    onExhausted: Literal["Hold", "HoldAndDrain"] = Field(
        "Hold", description="Hold: new jobs wait, running ones go on; HoldAndDrain: running ones are stopped too."
    )


class GPUQueueSpec(_Spec):
    parent: str | None = Field(None, max_length=253, description="The parent queue; only leaf queues take jobs.")
    namespaces: list[str] = Field(
        default_factory=list, max_length=1000,
        description="Namespaces whose jobs land here (a namespace belongs to at most one queue).",
    )
    resources: list[QueueResource] = Field(
        default_factory=list, max_length=64, description="Guarantee, limit and lending per flavor."
    )
    weight: float = Field(1, gt=0, description="Share of the surplus among queues beyond their guarantee.")
    minRuntimeSeconds: int = Field(
        0, ge=0, le=30 * 86_400, description="Its jobs' gangs are not preempted before running this long (a job's "
        "own spec.minRuntimeSeconds may ask for less, never more: the queue's owner decides protection)."
    )
    budget: QueueBudget | None = Field(None, description="GPU-hours per period; absent: no budget.")
    defaultMaxRuntimeSeconds: int | None = Field(
        None, ge=1, description="The runtime limit of its jobs that set none (a TrainingJob's spec.maxRuntimeSeconds, "
        "a pod gang's superpod.dev/max-runtime-seconds annotation): a gang placed this long ago is stopped, reason "
        "MaxRuntimeExceeded. Absent: no limit."
    )
    maxRuntimeSeconds: int | None = Field(
        None, ge=1, description="The most runtime any of its jobs gets: a job asking for more, or for nothing, is "
        "stopped after this long (reason MaxRuntimeExceeded). Absent: no cap."
    )

    @model_validator(mode="after")
    def _unique(self) -> GPUQueueSpec:
        flavors = [r.flavor for r in self.resources]
        if len(set(flavors)) != len(flavors):
            raise ValueError(f"each flavor at most once in resources: {flavors}")
        default, cap = self.defaultMaxRuntimeSeconds, self.maxRuntimeSeconds
        if default is not None and cap is not None and default > cap:
            raise ValueError(f"defaultMaxRuntimeSeconds ({default}) must not exceed maxRuntimeSeconds ({cap})")
        return self


class QueueFlavorStatus(BaseModel):
    model_config = ConfigDict(extra="allow")
    flavor: str = Field(description="The flavor.")
    guaranteed: float = Field(0, description="GPUs guaranteed.")
    allocated: float = Field(0, description="GPUs the queue's running and starting jobs hold.")
    borrowed: float = Field(0, description="Allocated beyond the guarantee.")


class QueueUsageStatus(BaseModel):
    model_config = ConfigDict(extra="allow")
    flavor: str = Field(description="The flavor.")
    serviceClass: str = Field(description="reserved or spot.")
    gpuSeconds: float = Field(0, description="GPU-seconds.")


class GPUQueueStatus(BaseModel):
    model_config = ConfigDict(extra="allow")
    guaranteed: float = Field(0, description="GPUs guaranteed, all flavors.")
    allocated: float = Field(0, description="GPUs held by the queue's jobs (its children's, for a parent).")
    borrowed: float = Field(0, description="GPUs held beyond the guarantee.")
    pending: int = Field(0, description="Jobs of the queue waiting to be placed.")
    fairShare: float = Field(0, description="Weighted dominant share of the surplus it holds (lower goes first).")
    budgetRemaining: float | None = Field(
        None, description="GPU-hours left of the budget this period (as of the last whole minute); absent: no budget."
    )
    budgetRenews: datetime | None = Field(None, description="RFC 3339 time the budget period renews.")
    gpuSeconds: list[QueueUsageStatus] = Field(
        default_factory=list, description="GPU-seconds used, all time, per flavor and service class (recorded attempts "
        "and running ones, as of the last whole minute)."
    )
    flavors: list[QueueFlavorStatus] = Field(default_factory=list, description="The same, per flavor.")
    conditions: list[Condition] = Field(default_factory=list, description="Active: whether the queue is in force.")


class GPUQueue(BaseModel):
    apiVersion: Literal["superpod.dev/v1alpha1"] = Field(API_VERSION, description="superpod.dev/v1alpha1")
    kind: Literal["GPUQueue"] = Field("GPUQueue", description="GPUQueue")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: GPUQueueSpec = Field(description="Guarantees, limits, lending, weight and budget of a tenant.")
    status: GPUQueueStatus | None = Field(None, description="Set by the operator.")


class GPUUsageSpec(_Spec):
    queue: str = Field("", max_length=253, description="The GPUQueue the attempt ran in (empty: no queue).")
    namespace: str = Field(max_length=63, description="The job's namespace.")
    job: str = Field(max_length=253, description="The TrainingJob's name.")
    jobUid: str = Field(max_length=64, description="The TrainingJob's uid (empty: a pod no known TrainingJob owns).")
    attempt: int = Field(ge=1, description="The gang attempt.")
    pod: str | None = Field(None, max_length=253, description="A pod billed on its own (a pod gang's, one orphaned by "
                            "its TrainingJob, one another scheduler placed, or a torn-down attempt's pod after the "
                            "attempt's record): its name; the record's job is its TrainingJob's or gang's name.")
    flavor: str = Field(max_length=128, description="What it counted against: a GPU product, a MIG profile, or *.")
    serviceClass: str = Field(max_length=16, description="reserved or spot.")
    gpus: float = Field(ge=0, description="GPUs the gang held (MIG slices count g/7).")
    start: datetime = Field(description="RFC 3339 time the attempt's first pod started.")
    end: datetime = Field(description="RFC 3339 time its last pod finished (or the attempt was closed).")
    gpuSeconds: float = Field(ge=0, description="GPU-seconds: each pod's GPUs times the time it ran.")
    estimateKey: str | None = Field(None, max_length=253, description="What the runtime estimator learns from this "
                                    "attempt's span: the job's superpod.dev/estimate-key label, else its name stem.")
    outcome: str | None = Field(None, max_length=32, description="The job's phase after the attempt: Succeeded, "
                                "Failed, or Queued (stopped and put back).")
    maxRuntimeSeconds: int | None = Field(None, ge=1, description="The runtime limit the attempt ran under (its "
                                          "spec.maxRuntimeSeconds or its queue's): the estimator predicts a later run "
                                          "under the same key from the share of its limit this one used.")


class GPUUsage(BaseModel):
    apiVersion: Literal["superpod.dev/v1alpha1"] = Field(API_VERSION, description="superpod.dev/v1alpha1")
    kind: Literal["GPUUsage"] = Field("GPUUsage", description="GPUUsage")
    metadata: ObjectMeta = Field(description="Standard object metadata; the name is <job uid>-a<attempt>, or <pod "
                                 "uid>-pod for a pod billed on its own.")
    spec: GPUUsageSpec = Field(description="One ended attempt's usage, or one pod's.")
