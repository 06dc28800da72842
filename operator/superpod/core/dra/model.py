"""DRA objects read from plain dicts (resource.k8s.io/v1): devices of ResourceSlices gathered into the pools a node
sees, DeviceClasses, and the requests and constraints of ResourceClaims and ResourceClaimTemplates.

A bad object raises DraError naming it; the `read_*` helpers read many objects and return the errors beside the
good ones, so one bad object never stops the rest."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache

from superpod.core.dra.values import Version, parse_quantity

DeviceID = tuple[str, str, str]  # (driver, pool, device): unique in the cluster
MISSING = object()  # an attribute a device does not have
UNSUPPORTED = object()  # an attribute of a kind not read here (list-type attributes): never matches
EXACT_COUNT, ALL = "ExactCount", "All"
CLASS, CLAIM = "FromClass", "FromClaim"  # where an allocation's configuration came from


class DraError(ValueError):
    """A DRA object that cannot be read or used as written; the message names it."""


@dataclass(frozen=True, eq=False)
class Device:
    """One device of a ResourceSlice: attributes keyed by qualified name ("domain/id", or "id" in the driver's
    domain), values int, bool, str or Version; capacities as exact numbers."""

    driver: str
    pool: str
    name: str
    attributes: dict[str, object] = field(default_factory=dict)
    capacity: dict[str, Fraction] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    consumes_counters: bool = False  # partitionable devices: not allocated by this allocator
    multiple_allocations: bool = False  # allowMultipleAllocations: still given to one claim at a time here
    matched: dict = field(default_factory=dict, compare=False, repr=False)  # selectors -> bool, kept by Allocator

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.name)

    def attribute(self, domain: str, name: str):
        """The value of `domain`/`name`, or MISSING (a name without domain is in the driver's domain)."""
        value = self.attributes.get(f"{domain}/{name}", MISSING)
        if value is MISSING and domain == self.driver:
            value = self.attributes.get(name, MISSING)
        return value

    def qualified(self, qualified_name: str):
        """The value of a fully qualified attribute name ("domain/id"), or MISSING: what matchAttribute compares."""
        domain, _, name = qualified_name.partition("/")
        return self.attribute(domain, name) if name else MISSING

    def capacity_of(self, domain: str, name: str):
        value = self.capacity.get(f"{domain}/{name}", MISSING)
        if value is MISSING and domain == self.driver:
            value = self.capacity.get(name, MISSING)
        return value

    @cached_property
    def by_domain(self) -> tuple[dict[str, dict[str, object]], dict[str, dict[str, Fraction]]]:
        """Attributes and capacities by domain then id, as CEL's `device.attributes` and `device.capacity` see them."""
        return _by_domain(self.attributes, self.driver), _by_domain(self.capacity, self.driver)


def _by_domain(values: dict, driver: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for qualified_name, value in values.items():
        domain, _, name = qualified_name.rpartition("/")
        out.setdefault(domain or driver, {})[name] = value
    return out


@dataclass(frozen=True)
class Pool:
    """The devices of one (driver, pool) a node sees, from the newest generation of its slices only."""

    driver: str
    name: str
    generation: int
    devices: tuple[Device, ...]
    incomplete: bool = False  # fewer slices of the newest generation than resourceSliceCount: being updated
    invalid: str = ""  # why its devices cannot be used (a device name twice)
    node_name: str = ""  # its slices are local to this node
    node_selector: dict | None = None  # its slices serve the nodes this selects (neither: all nodes)

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid


@dataclass(frozen=True)
class Slice:
    """One ResourceSlice: where its devices are (a node's name, all nodes, or a node selector) and the devices."""

    name: str
    driver: str
    pool: str
    generation: int
    count: int  # resourceSliceCount
    node_name: str = ""
    all_nodes: bool = False
    node_selector: dict | None = None
    devices: tuple[Device, ...] = ()

    def serves(self, node_name: str, labels: dict[str, str]) -> bool:
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        return self.node_selector is not None and node_selector_matches(self.node_selector, node_name, labels)


def read_slice(obj: dict) -> Slice:
    """A ResourceSlice dict. Slices with per-device node selection (partitionable devices) raise DraError."""
    name = (obj.get("metadata") or {}).get("name", "?")
    try:
        spec = obj["spec"]
        pool = spec["pool"]
        if spec.get("perDeviceNodeSelection"):
            raise DraError("perDeviceNodeSelection is not supported")
        driver = spec["driver"]
        devices = tuple(_read_device(d, driver, pool["name"]) for d in spec.get("devices") or ())
        return Slice(name, driver, pool["name"], int(pool.get("generation", 0)), int(pool.get("resourceSliceCount", 1)),
                     spec.get("nodeName") or "", bool(spec.get("allNodes")), spec.get("nodeSelector"), devices)
    except DraError as error:
        raise DraError(f"ResourceSlice {name}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise DraError(f"ResourceSlice {name}: {_why(error)}") from None


def _read_device(obj: dict, driver: str, pool: str) -> Device:
    name = obj["name"]
    attributes = {key: _attribute_value(key, value) for key, value in (obj.get("attributes") or {}).items()}
    capacity = {key: _quantity(value["value"]) for key, value in (obj.get("capacity") or {}).items()}
    taints = tuple((t.get("key", ""), t.get("value", ""), t.get("effect", "")) for t in obj.get("taints") or ())
    return Device(driver, pool, name, attributes, capacity, taints, bool(obj.get("consumesCounters")),
                  bool(obj.get("allowMultipleAllocations")))


def _attribute_value(key: str, value: dict):
    for kind in ("int", "bool", "string"):
        if kind in value:
            return value[kind]
    if "version" in value:
        return _version(value["version"])
    if value:
        return UNSUPPORTED
    raise DraError(f"attribute {key}: no value")


# A fleet's devices repeat a few values: parse each text once.
_quantity = lru_cache(maxsize=4096)(parse_quantity)
_version = lru_cache(maxsize=4096)(Version)


def _why(error: Exception) -> str:
    return f"missing field {error}" if isinstance(error, KeyError) else str(error)


def read_slices(objs: Iterable[dict]) -> tuple[list[Slice], list[str]]:
    """Every readable slice, and a sentence per unreadable one."""
    slices, errors = [], []
    for obj in objs:
        try:
            slices.append(read_slice(obj))
        except DraError as error:
            errors.append(str(error))
    return slices, errors


def node_pools(slices: Iterable[Slice], node_name: str, labels: dict[str, str] | None = None) -> list[Pool]:
    """The pools `node_name` sees, by driver then pool name, as kube-scheduler's GatherPools: of each, the newest
    generation's slices that serve the node, devices in slice-name order. When those are fewer than the pool's
    resourceSliceCount, its slices elsewhere count too (a pool may span nodes), and a newer generation elsewhere
    makes the node's slices obsolete: the pool is left out."""
    labels = labels or {}
    slices = slices if isinstance(slices, list | tuple) else list(slices)
    newest: dict[tuple[str, str], list[Slice]] = {}
    for s in slices:
        if not s.serves(node_name, labels):
            continue
        held = newest.setdefault((s.driver, s.pool), [])
        if held and s.generation < held[0].generation:
            continue
        if held and s.generation > held[0].generation:
            held.clear()
        held.append(s)
    pools = []
    for key, held in sorted(newest.items()):
        published = len(held)
        if published != held[0].count:
            generations = [s.generation for s in slices if (s.driver, s.pool) == key]
            if max(generations) > held[0].generation:
                continue
            published = generations.count(held[0].generation)
        pools.append(_pool(key, held, incomplete=published != held[0].count))
    return pools


def _pool(key: tuple[str, str], held: list[Slice], incomplete: bool) -> Pool:
    held = sorted(held, key=lambda s: s.name)
    devices = tuple(d for s in held for d in s.devices)
    names = [d.name for d in devices]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None) if len(set(names)) < len(names) else None
    return Pool(key[0], key[1], held[0].generation, devices, incomplete=incomplete,
                invalid=f"device name {twice} twice" if twice else "", node_name=held[0].node_name,
                node_selector=held[0].node_selector)


def node_selector_matches(selector: dict, node_name: str, labels: dict[str, str]) -> bool:
    """A core/v1 NodeSelector: any term matches when all its expressions and fields do."""
    return any(_term_matches(term, node_name, labels) for term in selector.get("nodeSelectorTerms") or ())


def _term_matches(term: dict, node_name: str, labels: dict[str, str]) -> bool:
    expressions, fields = term.get("matchExpressions") or (), term.get("matchFields") or ()
    if not expressions and not fields:
        return False
    return all(_requirement(r, labels.get(r["key"])) for r in expressions) and \
        all(_requirement(r, node_name if r["key"] == "metadata.name" else None) for r in fields)


def _requirement(requirement: dict, value: str | None) -> bool:
    operator, values = requirement["operator"], requirement.get("values") or ()
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and value.lstrip("-").isdigit() and values:
        return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
    return False


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[str, ...] = ()  # each DeviceClassConfiguration as JSON
    extended_resource_name: str = ""


def read_class(obj: dict) -> DeviceClass:
    name = (obj.get("metadata") or {}).get("name", "?")
    try:
        spec = obj.get("spec") or {}
        return DeviceClass(name, _selectors(spec.get("selectors")), tuple(_json(c) for c in spec.get("config") or ()),
                           spec.get("extendedResourceName") or "")
    except DraError as error:
        raise DraError(f"DeviceClass {name}: {error}") from None
    except (KeyError, TypeError, AttributeError) as error:
        raise DraError(f"DeviceClass {name}: {_why(error)}") from None


def read_classes(objs: Iterable[dict]) -> tuple[dict[str, DeviceClass], list[str]]:
    classes, errors = {}, []
    for obj in objs:
        try:
            device_class = read_class(obj)
            classes[device_class.name] = device_class
        except DraError as error:
            errors.append(str(error))
    return classes, errors


def _selectors(selectors) -> tuple[str, ...]:
    out = []
    for selector in selectors or ():
        if "cel" not in selector:
            raise DraError(f"a selector of an unknown kind: {sorted(selector)}")
        out.append(selector["cel"]["expression"])
    return tuple(out)


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Request:
    """What one request (or one subrequest of firstAvailable) asks for."""

    name: str  # as in allocation results: "request", or "request/subrequest"
    class_name: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)

    @property
    def base(self) -> str:
        return self.name.split("/", 1)[0]


@dataclass(frozen=True)
class DeviceRequest:
    """A claim's request: one Request (`exactly`), or the alternatives of firstAvailable, tried in order."""

    name: str
    alternatives: tuple[Request, ...]

    @property
    def first_available(self) -> bool:
        return self.alternatives[0].name != self.name


@dataclass(frozen=True)
class Constraint:
    """matchAttribute: every device of the named requests (all requests when empty) has one value of `attribute`."""

    attribute: str
    requests: frozenset[str] = frozenset()

    def applies(self, request: Request) -> bool:
        return not self.requests or request.base in self.requests or request.name in self.requests


@dataclass(frozen=True)
class ClaimSpec:
    """A ResourceClaim's spec.devices: hashable, so equal specs share work (a claim shape)."""

    requests: tuple[DeviceRequest, ...]
    constraints: tuple[Constraint, ...] = ()
    config: tuple[tuple[tuple[str, ...], str], ...] = ()  # (requests, DeviceConfiguration as JSON)

    @property
    def simple(self) -> bool:
        """Exact counts only, no alternatives, no constraints: pods of it can be counted by device groups."""
        return not self.constraints and all(not r.first_available and r.alternatives[0].mode == EXACT_COUNT
                                            for r in self.requests)


def read_claim_spec(spec: dict, where: str) -> ClaimSpec:
    """A ResourceClaimSpec dict; `where` names the object in errors."""
    try:
        devices = spec.get("devices") or {}
        requests = tuple(_read_request(r) for r in devices.get("requests") or ())
        if not requests:
            raise DraError("no device requests")
        constraints = tuple(_read_constraint(c) for c in devices.get("constraints") or ())
        config = tuple((tuple(c.get("requests") or ()), _json({k: v for k, v in c.items() if k != "requests"}))
                       for c in devices.get("config") or ())
        return ClaimSpec(requests, constraints, config)
    except DraError as error:
        raise DraError(f"{where}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise DraError(f"{where}: {_why(error)}") from None


def _read_request(obj: dict) -> DeviceRequest:
    name = obj["name"]
    if obj.get("exactly"):
        exactly = obj["exactly"]
        if exactly.get("adminAccess"):
            raise DraError(f"request {name}: adminAccess is not supported")
        return DeviceRequest(name, (_read_one(name, exactly),))
    if obj.get("firstAvailable"):
        return DeviceRequest(name, tuple(_read_one(f"{name}/{s['name']}", s) for s in obj["firstAvailable"]))
    raise DraError(f"request {name}: neither exactly nor firstAvailable")


def _read_one(name: str, obj: dict) -> Request:
    mode = obj.get("allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise DraError(f"request {name}: allocation mode {mode} is unknown")
    count = int(obj.get("count", 1)) if mode == EXACT_COUNT else 0
    if mode == EXACT_COUNT and count < 1:
        raise DraError(f"request {name}: count {count} is not positive")
    if not obj.get("deviceClassName"):
        raise DraError(f"request {name}: no deviceClassName")
    tolerations = tuple((t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))
                        for t in obj.get("tolerations") or ())
    return Request(name, obj["deviceClassName"], _selectors(obj.get("selectors")), mode, count, tolerations)


def _read_constraint(obj: dict) -> Constraint:
    if not obj.get("matchAttribute"):
        raise DraError(f"a constraint of an unsupported kind: {sorted(obj)}")
    return Constraint(obj["matchAttribute"], frozenset(obj.get("requests") or ()))


def read_claim(obj: dict) -> ClaimSpec:
    """A ResourceClaim's spec."""
    meta = obj.get("metadata") or {}
    return read_claim_spec(obj.get("spec") or {}, f"ResourceClaim {meta.get('namespace', '')}/{meta.get('name', '?')}")


def read_template(obj: dict) -> ClaimSpec:
    """The claim spec a ResourceClaimTemplate makes (spec.spec)."""
    meta = obj.get("metadata") or {}
    where = f"ResourceClaimTemplate {meta.get('namespace', '')}/{meta.get('name', '?')}"
    return read_claim_spec((obj.get("spec") or {}).get("spec") or {}, where)


def allocated_devices(claims: Iterable[dict]) -> set[DeviceID]:
    """The devices ResourceClaims hold (status.allocation), admin access left out: no other claim may take them."""
    taken = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if not result.get("adminAccess"):
                taken.add((result["driver"], result["pool"], result["device"]))
    return taken


def allocation_allows(claim: dict, node_name: str, labels: dict[str, str]) -> bool:
    """Whether a ResourceClaim's allocation (if any) may be used from the node: a claim already allocated (one
    shared by a gang's pods) binds its pods to the nodes its allocation selects."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation or not allocation.get("nodeSelector"):
        return True
    return node_selector_matches(allocation["nodeSelector"], node_name, labels)


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's spec.resourceClaims: a claim by name, or one made per pod from a template."""

    name: str
    claim: str = ""
    template: str = ""


def pod_claims(pod_spec: dict) -> tuple[PodClaim, ...]:
    """The entries of a pod spec's resourceClaims; raises DraError on one that does not read."""
    entries = pod_spec.get("resourceClaims") or ()
    if not isinstance(entries, list | tuple):
        raise DraError("resourceClaims: expected a list")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise DraError("resourceClaims: every entry needs a name")
        claim, template = entry.get("resourceClaimName") or "", entry.get("resourceClaimTemplateName") or ""
        if not isinstance(claim, str) or not isinstance(template, str):
            raise DraError(f"resourceClaims[{entry['name']}]: names must be strings")
        out.append(PodClaim(entry["name"], claim, template))
    return tuple(out)
