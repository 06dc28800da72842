"""The vocabulary of a TrainingJob's life: its phases and the reasons given for them. One source, shared by the CRD
models, the core, the controller and `superpod plan`; a value here is what users read in `status.phase`,
`status.reason` and Event reasons."""

from __future__ import annotations

from enum import StrEnum


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
    # waiting
    UNSCHEDULABLE = "Unschedulable"  # no room now; the message says why
    MIG_RECONFIGURING = "MigReconfiguring"
    MIG_FAILED = "MigFailed"
    INVALID = "Invalid"  # the spec cannot work on this cluster (the operator's check)
    POD_REFUSED = "PodRefused"  # the API server refused the replica pod as written: fixed only by a spec change
    # placed and running
    PLACED = "Placed"
    STARTING = "Starting"
    RUNNING = "Running"
    NODE_NOT_READY = "NodeNotReady"  # a node went NotReady: the gang keeps it for a grace period
    SERVICE_RECREATED = "ServiceRecreated"
    # an attempt ends
    COMPLETED = "Completed"
    POD_FAILED = "PodFailed"  # a replica exited non-zero: the user's failure, counted against maxRestarts
    NODE_LOST = "NodeLost"  # infrastructure: the node is gone or stayed NotReady past the grace
    POD_DELETED = "PodDeleted"  # infrastructure: a replica was deleted or evicted by someone else
    STARTUP_TIMEOUT = "StartupTimeout"
    CONTAINER_ERROR = "ContainerError"  # image or container config errors: the spec, not the cluster
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"  # its runtime limit came: stopped, Failed, not retried
    WRITE_FAILED = "WriteFailed"  # the API refused a write of the attempt; rolled back
    INTERNAL_ERROR = "InternalError"  # a bug met this object; the rest of the cluster schedules on
    STATUS_REPAIRED = "StatusRepaired"  # fields of the status could not be read: dropped and written anew
    NODE_UNREADABLE = "NodeUnreadable"  # a node object the operator cannot read: left out of placement
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


# What a pod's status.phase says once it has finished (a Kubernetes fact, not ours).
POD_FINISHED = ("Succeeded", "Failed")
# A failed pod's status.reason when the node, not the program, ended it (besides the DisruptionTarget condition,
# which evictions, preemption and node shutdowns set): the kubelet's admission (OutOf<resource>, ...) and shutdowns.
KUBELET_DISRUPTIONS = ("Preempting", "Terminated", "NodeShutdown", "NodeLost", "NodeAffinity",
                       "UnexpectedAdmissionError")

# Infrastructure interruptions restart the gang without counting against maxRestarts.
INTERRUPTIONS = frozenset({Reason.NODE_LOST, Reason.POD_DELETED})
