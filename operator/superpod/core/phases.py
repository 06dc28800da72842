"""The vocabulary of a TrainingJob's life: its phases and the reasons given for them. One source, shared by the CRD
models, the core, the controller and `superpod plan`; a value here is what users read in `status.phase`,
`status.reason` and Event reasons."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class Phase(StrEnum):
    QUEUED = "Queued"  # waiting for room (or for a requeue's backoff)
    STARTING = "Starting"  # placed: pods being created or starting
    RUNNING = "Running"  # every replica running
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"  # the spec cannot work on this cluster; fixed specs queue again


ACTIVE = frozenset({Phase.STARTING, Phase.RUNNING})  # a placed attempt holds nodes
FINISHED = frozenset({Phase.SUCCEEDED, Phase.FAILED})
PENDING = frozenset({None, "", Phase.QUEUED})  # to be placed (no phase yet: just created)


class Reason(StrEnum):
    # waiting: why a Queued job is not placed this cycle (WAITING_CAUSES below says what each means)
    NO_ROOM = "NoRoom"
    TOO_LARGE = "TooLarge"
    NO_NODE_QUALIFIES = "NoNodeQualifies"
    RESERVED_FOR_OTHERS = "ReservedForOthers"
    NO_QUEUE = "NoQueue"
    QUEUE_AT_LIMIT = "QueueAtLimit"
    GUARANTEE_USED = "GuaranteeUsed"
    BORROWING_LIMITED = "BorrowingLimited"
    MIG_RECONFIGURING = "MigReconfiguring"
    MIG_FAILED = "MigFailed"
    COMPUTE_DOMAIN_PENDING = "ComputeDomainPending"
    INVALID = "Invalid"  # the spec cannot work on this cluster (the operator's check)
    POD_REFUSED = "PodRefused"  # the API server refused the replica pod as written: fixed only by a spec change
    # placed and running
    PLACED = "Placed"
    STARTING = "Starting"
    RUNNING = "Running"
    NODE_NOT_READY = "NodeNotReady"  # a node went NotReady: the gang keeps it for a grace period
    SERVICE_RECREATED = "ServiceRecreated"
    NODE_REPLACED = "NodeReplaced"  # the replicas of a lost node are made again on another (spec.nodeFailure Replace)
    REPLACING = "Replacing"  # those replicas are being made again; the others run on
    AWAITING_REPLACEMENT = "AwaitingReplacement"  # no node may take them yet: the gang restarts at a deadline
    # an attempt ends
    COMPLETED = "Completed"
    POD_FAILED = "PodFailed"  # a replica exited non-zero: the user's failure, counted against maxRestarts
    NODE_LOST = "NodeLost"  # infrastructure: the node is gone or stayed NotReady past the grace
    POD_DELETED = "PodDeleted"  # infrastructure: a replica was deleted or evicted by someone else
    STARTUP_TIMEOUT = "StartupTimeout"
    CONTAINER_ERROR = "ContainerError"  # image or container config errors: the spec, not the cluster
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"  # its runtime limit came: stopped, Failed, not retried
    WRITE_FAILED = "WriteFailed"  # the API refused a write of the attempt; rolled back
    CLAIMS_CHANGED = "ClaimsChanged"  # a replica's DRA claims ask for more GPUs than the job was admitted with
    DEVICE_TAKEN_TWICE = "DeviceTakenTwice"  # a replica's claim was given a device an earlier claim holds
    INTERNAL_ERROR = "InternalError"  # a bug met this object; the rest of the cluster schedules on
    STATUS_REPAIRED = "StatusRepaired"  # fields of the status could not be read: dropped and written anew
    NODE_UNREADABLE = "NodeUnreadable"  # a node object the operator cannot read: left out of placement
    GPUS_PUBLISHED_TWICE = "GpusPublishedTwice"  # a node's nvidia.com/gpu and its DRA devices: one pool booked once
    # GPUQueues
    QUEUE_ACTIVE = "InForce"  # the queue takes jobs
    QUEUE_REFUSED = "Refused"  # the queue cannot be read or does not fit the tree; its jobs wait
    QUEUES_HELD = "QueuesHeld"  # the queue policy could not be computed: nothing is admitted until it can
    QUEUE_RELABELLED = "QueueRelabelled"  # a bound gang's pods came to name another queue: it counts where bound
    PREEMPTING = "Preempting"  # it evicts lower-priority (or borrowing) gangs and waits for them to stop
    PREEMPTED = "Preempted"  # its gang was stopped for a higher-priority job or a queue's guarantee; it waits
    NOMINATION_EXPIRED = "NominationExpired"  # the gangs it preempted did not free its nodes in time: decided again
    GANG_INCOMPLETE = "GangIncomplete"  # part of a pod gang stayed bound while the rest found no room: evicted
    BUDGET_EXHAUSTED = "BudgetExhausted"  # the queue's budget is spent and it drains: the gang was stopped, it waits
    MAX_RUNTIME_IGNORED = "MaxRuntimeIgnored"  # a bound pod gang's limit annotation does not read: its queue's apply


class Condition(StrEnum):
    """The condition types of status.conditions."""

    SCHEDULABLE = "Schedulable"  # False while it waits, True once placed
    RUNNING = "Running"  # True while every replica runs (and once it succeeded)
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"
    OPERATOR_ERROR = "OperatorError"  # True while a bug of the operator's keeps it from deciding for this job
    ACTIVE = "Active"  # a GPUQueue in force
    PREEMPTED = "Preempted"  # True once its gang was preempted (the message names by whom)


# The causes a Queued job's status.reason gives, and what each means (the CRD and docs/guides/waiting.md say these).
WAITING_CAUSES = {
    Reason.NO_ROOM: "the nodes it may use have too little free now",
    Reason.TOO_LARGE: "no domain it may use holds it even when idle: it waits until the cluster grows",
    Reason.NO_NODE_QUALIFIES: "every node is filtered out (nodeSelector, affinity, GPU product, taints, readiness)",
    Reason.RESERVED_FOR_OTHERS: "it fits now only inside what earlier jobs hold (status.blockedBy names them)",
    Reason.NO_QUEUE: "no GPUQueue takes it: the queue named is missing or not in force, or has no quota of its kind",
    Reason.QUEUE_AT_LIMIT: "its queue, or a parent, would pass its limit",
    Reason.GUARANTEE_USED: "a reserved-class job, and its queue's guarantee is in use",
    Reason.BORROWING_LIMITED: "beyond its queue's guarantee, and too little may be borrowed now",
    Reason.BUDGET_EXHAUSTED: "its queue's budget for the period is spent",
    Reason.QUEUES_HELD: "the queue policy could not be computed: nothing is admitted until it can",
    Reason.PREEMPTING: "it preempted lower-priority or borrowing gangs and waits for them to stop (status.nomination)",
    Reason.MIG_RECONFIGURING: "the MIG layout of its nodes is being changed for it",
    Reason.COMPUTE_DOMAIN_PENDING: "its ComputeDomain is asked for, and NVIDIA's DRA driver has not yet made the "
                                   "template of its IMEX channels",
}
WAITING = frozenset(WAITING_CAUSES)


class Cause(NamedTuple):
    """Why a job waits: a code of WAITING for programs, and a sentence for people (rendered once, where decided)."""

    code: Reason
    message: str


# A waiting pod's PodScheduled reason, whatever the cause (kube-scheduler's word, which cluster autoscalers read).
POD_UNSCHEDULABLE = "Unschedulable"
# What a pod's status.phase says once it has finished (a Kubernetes fact, not ours).
POD_FINISHED = ("Succeeded", "Failed")
# A failed pod's status.reason when the node, not the program, ended it (besides the DisruptionTarget condition,
# which evictions, preemption and node shutdowns set): the kubelet's admission (OutOf<resource>, ...) and shutdowns.
KUBELET_DISRUPTIONS = ("Preempting", "Terminated", "NodeShutdown", "NodeLost", "NodeAffinity",
                       "UnexpectedAdmissionError")

# Infrastructure interruptions restart the gang without counting against maxRestarts.
INTERRUPTIONS = frozenset({Reason.NODE_LOST, Reason.POD_DELETED})
