"""What a job asks for, and the node filters that follow from it (pure data, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from superpod.core.dra.model import ClaimSpec
from superpod.core.gang_key import TRAINING_JOB, GangKey

GPU = "nvidia.com/gpu"
PODS = "pods"  # every pod takes one of the node's allocatable pod slots
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, t: Taint) -> bool:
        if self.effect and self.effect != t.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != t.key:
            return False
        return self.operator == "Exists" or self.value == t.value


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement (required node affinity): key, operator, values."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        v = labels.get(self.key)
        op = self.operator
        if op == "In":
            return v is not None and v in self.values
        if op == "NotIn":
            return v is None or v not in self.values
        if op == "Exists":
            return v is not None
        if op == "DoesNotExist":
            return v is None
        if op in ("Gt", "Lt") and v is not None and self.values:
            try:
                a, b = int(v), int(self.values[0])
            except ValueError:
                return False
            return a > b if op == "Gt" else a < b
        return False


Requests = tuple[tuple[str, int], ...]  # one pod's requests, sorted by resource


def gpu_units(requests: Iterable[tuple[str, int]]) -> float:
    """Whole GPUs a pod holds: nvidia.com/gpu, plus each MIG slice as its share of the GPU's 7 compute slices."""
    units = 0.0
    for resource, amount in requests:
        if resource == GPU:
            units += amount
        elif resource.startswith(MIG_PREFIX):
            units += amount * int(resource[len(MIG_PREFIX):].split("g", 1)[0]) / 7
    return units


def primary_of(requests: Requests) -> str:
    """The resource the best-fit measure counts for a pod of these requests: GPUs, else the MIG slice, else cpu."""
    req = dict(requests)
    if req.get(GPU, 0) > 0:
        return GPU
    for r, q in sorted(req.items()):
        if r.startswith(MIG_PREFIX) and q > 0:
            return r
    return "cpu"


@dataclass(frozen=True)
class JobRequest:
    """A gang: `replicas` identical pods, each requesting `requests` (canonical units: cpu in millicores,
    memory in bytes, GPUs and MIG slices as counts), and `others`: the requests of each member that differs (a pod
    gang's launcher or parameter server; a TrainingJob has none). Members are ranked: the identical ones
    0..replicas-1, then the others in order. Topology names are ClusterTopology level names."""

    namespace: str
    name: str
    replicas: int
    requests: tuple[tuple[str, int], ...]
    gpu_product: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # OR of terms, each an AND of requirements
    tolerations: tuple[Toleration, ...] = ()
    required: str | None = None
    preferred: str | None = None
    slice_size: int | None = None
    slice_required: str | None = None
    priority: int = 0
    submitted: float = 0.0  # seconds since any fixed epoch; only the order matters
    avoid_nodes: tuple[str, ...] = ()  # nodes where this job's earlier pods still terminate
    queue: str | None = None  # spec.queue: the GPUQueue it names (None: its namespace's)
    service_class: str = "spot"  # reserved | spot (see core/queues.py)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # seam for queues (GPUQueue)
    others: tuple[Requests, ...] = ()  # the members whose requests differ from `requests`, each its own
    estimate: float | None = None  # predicted runtime in seconds (core/estimates.py); None: unknown
    limit: float | None = None  # its runtime limit in force, seconds (enforced: it never runs longer); None: none
    turn: float | None = None  # its place in the queue among equal priorities (None: `submitted`; estimates.turn)
    kind: str = TRAINING_JOB  # what the gang is (core/gang_key.py)
    claims: tuple[ClaimSpec, ...] = ()  # each identical member's ResourceClaims (DRA), in its pod's order
    claimed_gpus: float = 0.0  # GPUs each identical member claims through DRA (counted like nvidia.com/gpu)
    gpu_classes: tuple[str, ...] = ()  # the DeviceClasses its claims may take GPUs of (core/dra/units.gpu_classes)
    shared: tuple[ClaimSpec, ...] = ()  # claims all its pods share by name, not allocated yet: allocated once, on the
    # one node the whole gang then goes to (its devices are a node's own)
    shared_on: tuple[str, ...] = ()  # the node selectors (JSON) of allocated claims its pods share: they go there
    shared_gpus: float = 0.0  # GPUs the claims its pods share take, once for the whole gang

    @cached_property
    def key(self) -> GangKey:
        return GangKey(self.namespace, self.name, self.kind)

    @property
    def claiming(self) -> bool:
        """Whether its pods claim DRA devices, their own or shared."""
        return bool(self.claims or self.shared or self.shared_on or self.shared_gpus)

    @property
    def claimed_per_member(self) -> float:
        """GPUs each member claims through DRA: its own claims' and its share of those the gang shares."""
        return self.claimed_gpus + self.shared_gpus / self.size

    @cached_property
    def binds_gpus_by_name(self) -> bool:
        """Whether a member asks nvidia.com/gpu and this scheduler binds its pods itself (a pod gang's: a
        TrainingJob's pods go to kube-scheduler on a node whose nvidia.com/gpu DRA devices serve, Node.served)."""
        return self.kind != TRAINING_JOB and self.total_requests.get(GPU, 0) > 0

    @property
    def per_replica(self) -> dict[str, int]:
        return dict(self.requests)

    @property
    def gpus(self) -> int:
        """GPUs of one identical member (see total_units for the whole gang's)."""
        return self.per_replica.get(GPU, 0)

    @property
    def size(self) -> int:
        """Members of the gang: the identical ones and the others."""
        return self.replicas + len(self.others)

    def member_requests(self, rank: int) -> Requests:
        """The requests of the member of this rank."""
        return self.requests if rank < self.replicas else self.others[rank - self.replicas]

    @cached_property
    def total_requests(self) -> dict[str, int]:
        """Every resource the whole gang asks for, summed over its members."""
        total = {resource: amount * self.replicas for resource, amount in self.requests}
        for requests in self.others:
            for resource, amount in requests:
                total[resource] = total.get(resource, 0) + amount
        return total

    @property
    def total_claimed(self) -> float:
        """GPUs the whole gang's claims take: every member's own (the others claim alike) and those its pods share."""
        return self.size * self.claimed_gpus + self.shared_gpus

    @cached_property
    def total_units(self) -> float:
        """GPU units the whole gang holds (a MIG slice g/7): what queues count and preemption frees."""
        return self.replicas * gpu_units(self.requests) + self.total_claimed + sum(
            gpu_units(requests) for requests in self.others)

    def at_largest(self) -> JobRequest:
        """The gang as `size` identical members each booked at the largest request of any member: what fits it
        fits every member in any slot."""
        if not self.others:
            return self
        largest = dict(self.requests)
        for requests in self.others:
            for resource, amount in requests:
                largest[resource] = max(largest.get(resource, 0), amount)
        return replace(self, replicas=self.size, requests=tuple(sorted(largest.items())), others=())

    @property
    def mig_profile(self) -> str | None:
        """The MIG profile of the slice each replica asks for (e.g. 3g.40gb), or None for whole GPUs."""
        return next((r[len(MIG_PREFIX):] for r, q in self.requests if r.startswith(MIG_PREFIX) and q), None)

    @property
    def primary(self) -> str:
        """The resource the best-fit measure counts for an identical member (see primary_of)."""
        return primary_of(self.requests)

    def filter_signature(self) -> tuple:
        return (self.gpu_product, self.node_selector, self.affinity, self.tolerations, self.avoid_nodes,
                self.shared_on, self.binds_gpus_by_name)

    def shape(self) -> Shape:
        """Everything placement reads, and the limit (by which a job may run inside a reservation): two jobs of one
        shape that keep off the same reservations get the same answer on the same snapshot. The estimate is not in it
        (jobs of one stem would each make a shape): a policy that backfills by estimate does not pass jobs over."""
        return self._shape

    @cached_property
    def queue_key(self) -> tuple:
        """Priority descending, then its turn (submission time unless ordered by service), then namespace, name and
        kind (computed once: the request is frozen)."""
        return (-self.priority, self.submitted if self.turn is None else self.turn, self.namespace, self.name,
                self.kind)

    @cached_property
    def _shape(self) -> Shape:  # the request is frozen: computed once
        return Shape.of((self.replicas, self.requests, self.filter_signature(), self.required, self.preferred,
                         self.slice_size, self.slice_required, self.others, self.limit, self.claims,
                         self.shared))


class Shape:
    """A job shape as a dictionary key: one object per distinct shape (interned), its hash computed once, so the
    per-cycle lookups keyed by it (what did not fit, what is invalid) cost no hashing of nested tuples."""

    __slots__ = ("fields", "_hash")
    _known: dict[tuple, Shape] = {}  # a memo of values only: the same fields always give the same object
    KNOWN_AT_MOST = 65_536  # then it starts over (equal shapes still compare equal, only more slowly)

    def __init__(self, fields: tuple) -> None:
        self.fields, self._hash = fields, hash(fields)

    @classmethod
    def of(cls, fields: tuple) -> Shape:
        known = cls._known.get(fields)
        if known is None:
            if len(cls._known) >= cls.KNOWN_AT_MOST:
                cls._known.clear()
            known = cls._known[fields] = cls(fields)
        return known

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Shape) and self.fields == other.fields)

    def __repr__(self) -> str:
        return f"Shape{self.fields!r}"


def make_request(
    namespace: str, name: str, replicas: int, requests: dict[str, int] | None = None, **kw: Any
) -> JobRequest:
    """Convenience constructor: requests as a dict (zero entries dropped)."""
    reqs = tuple(sorted((k, int(v)) for k, v in (requests or {}).items() if v))
    return JobRequest(namespace=namespace, name=name, replicas=replicas, requests=reqs, **kw)
