"""Device allocation on one node, with the semantics of kube-scheduler's structured allocator (stable features):
the claims of the pods to put on the node get devices all together or not at all; a device goes to one claim at
most; a request takes exactly `count` devices, or all matching devices (All: none may be taken or not tolerated,
no pool may be being updated), or the first of its firstAvailable subrequests that can be had; matchAttribute
constraints hold over the devices of the requests they name; incomplete or invalid pools are passed over.

The search is kube-scheduler's (claims, then requests, then devices, in pool and slice order; backtracking), with
two cuts that keep its answers: the devices of one request are chosen in candidate order (a set, not a sequence),
and after a device failed at a position, devices indistinguishable from it (same candidacies, same constrained
attribute values) are not tried there. Pods of one claim shape are counted by groups of identical devices.

Not supported (such devices are not allocated, such claims are refused as written): admin access, partitionable
devices (shared counters), per-device node selection, distinctAttribute; list-type attributes match nothing, and a
device that allows multiple allocations still goes to one claim at a time (no consumable capacity)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from superpod.core.dra.model import (
    ALL,
    CLAIM,
    CLASS,
    MISSING,
    UNSUPPORTED,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceID,
    Pool,
    Request,
)
from superpod.core.dra.selectors import SelectorError, Selectors
from superpod.core.dra.values import Version
from superpod.core.phases import Cause, Reason


class Code(StrEnum):
    """Why claims cannot be allocated on a node."""

    TOO_FEW_DEVICES = "TooFewDevices"  # fewer free devices match a request than it needs
    CONSTRAINT_UNMET = "ConstraintUnmet"  # enough devices, but not with one value of a matchAttribute
    ALL_DEVICES_TAKEN = "AllDevicesTaken"  # an All request whose devices are (partly) taken or not tolerated, or
    # that matches none
    POOL_UPDATING = "PoolUpdating"  # an All request while a pool of the node is incomplete or invalid
    GAVE_UP = "AllocationGaveUp"  # the search tried too many device choices (kube-scheduler times out likewise)
    UNKNOWN_CLASS = "UnknownDeviceClass"  # no DeviceClass of that name: no node can take it
    CLAIM_TOO_LARGE = "ClaimTooLarge"  # a claim asks for more than 32 devices: no node can take it
    SELECTOR_ERROR = "SelectorError"  # a selector does not compile or fails on a device: no node can take it
    ALL_CONSTRAINT_UNMET = "AllDevicesConstraintUnmet"  # an All request's devices break a matchAttribute constraint:
    # kube-scheduler stops allocating the claim, as for a selector error


# kube-scheduler stops the pod's scheduling attempt on these: no node can take the claims as written
FATAL = frozenset({Code.UNKNOWN_CLASS, Code.SELECTOR_ERROR, Code.CLAIM_TOO_LARGE, Code.ALL_CONSTRAINT_UNMET})
MAX_RESULTS = 32  # devices one claim may get (resourceapi.AllocationResultsMaxSize)


@dataclass(frozen=True)
class Shortfall:
    """Why the claims do not fit on a node: a code, and a sentence for people."""

    code: Code
    message: str

    @property
    def fatal(self) -> bool:
        """True when no node can take the claims as written (the claim or its class must change)."""
        return self.code in FATAL

    def cause(self) -> Cause:
        """The job's waiting cause: no room now, or invalid as written."""
        return Cause(Reason.INVALID if self.fatal else Reason.NO_ROOM, self.message)


@dataclass(frozen=True)
class Allocation:
    """One claim's allocation: its `status.allocation` (to_dict)."""

    results: tuple[tuple[str, DeviceID], ...]  # (request name, device)
    config: tuple[dict, ...] = ()
    node_selector: dict | None = None

    @property
    def devices(self) -> tuple[DeviceID, ...]:
        return tuple(device for _, device in self.results)

    def to_dict(self) -> dict:
        devices: dict = {"results": [{"request": request, "driver": driver, "pool": pool, "device": device}
                                     for request, (driver, pool, device) in self.results]}
        if self.config:
            devices["config"] = [dict(c) for c in self.config]
        out: dict = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector
        return out


@dataclass
class _Search:
    """One allocation's working state."""

    claims: list[ClaimSpec]
    steps: list[tuple[int, int]]  # (claim index, request index) in order
    candidates: dict[tuple[int, str], list[Device]]  # (claim index, request name) -> free matching devices
    all_devices: dict[tuple[int, str], list[Device]]  # All requests: every matching device, taken or not
    signature: dict[DeviceID, tuple]
    used: set[DeviceID] = field(default_factory=set)  # taken by other claims, or chosen here
    chosen: list[list[tuple[str, Device]]] = field(default_factory=list)  # per claim
    constraint_values: list[list[list]] = field(default_factory=list)  # per claim, per constraint: [value, count]
    picked: dict[tuple[int, int], str] = field(default_factory=dict)  # the alternative a request got
    failing: dict[tuple, Shortfall] = field(default_factory=dict)  # (candidates key, device) -> its selector error
    tries: int = 0  # devices tried so far


class Allocator:
    """Allocates claims on one node at a time, from the DeviceClasses in force."""

    def __init__(self, classes: dict[str, DeviceClass], selectors: Selectors | None = None,
                 max_tries: int = 200_000):
        self.classes = classes
        self.selectors = selectors or Selectors()
        self.max_tries = max_tries

    def allocate(self, node_name: str, pools: list[Pool], taken: set[DeviceID],
                 claims: list[ClaimSpec]) -> list[Allocation] | Shortfall:
        """An allocation per claim (in order), or why there is none; `taken`: devices other claims hold."""
        return self._allocate(node_name, pools, taken, claims, "")

    def _allocate(self, node_name, pools, taken, claims, unit: str) -> list[Allocation] | Shortfall:
        try:
            search = self._prepare(pools, taken, claims)
            if _short(search) or not self._place(search, 0):
                return self._explain(node_name, pools, search, unit)
        except _Refused as refused:
            return refused.shortfall
        return [self._allocation(search, index, node_name, pools) for index in range(len(claims))]

    def count(self, node_name: str, pools: list[Pool], taken: set[DeviceID], claims: tuple[ClaimSpec, ...],
              limit: int = 1 << 30) -> int | Shortfall:
        """How many pods whose claims are `claims` fit on the node (at most `limit`), or why not one does."""
        if limit <= 0:
            return 0
        if counts_exactly(claims) and all(_least(claim) <= MAX_RESULTS for claim in claims):
            fits = self._count_by_groups(pools, taken, claims, limit)
            if not isinstance(fits, Shortfall) or fits.code != Code.SELECTOR_ERROR:  # else as the search meets it
                return fits if isinstance(fits, Shortfall) or fits > 0 else \
                    self._why_none(node_name, pools, taken, claims)
        held, fits = set(taken), 0
        while fits < limit:
            allocations = self._allocate(node_name, pools, held, list(claims), " per pod")
            if isinstance(allocations, Shortfall):
                return allocations if fits == 0 else fits
            held.update(device for allocation in allocations for device in allocation.devices)
            fits += 1
        return fits

    def _why_none(self, node_name, pools, taken, claims) -> Shortfall:
        """Why not one pod fits, once the exact count said none: in words, without searching again."""
        try:
            return self._explain(node_name, pools, self._prepare(pools, taken, list(claims)), " per pod")
        except _Refused as refused:
            return refused.shortfall

    # --- preparing: candidates per request ---------------------------------------------------------------------

    def _prepare(self, pools: list[Pool], taken: set[DeviceID], claims: list[ClaimSpec]) -> _Search:
        candidates, all_devices, steps, failing = {}, {}, [], {}
        shared: dict[tuple, list[Device]] = {}  # requests alike share one candidate list
        for index, claim in enumerate(claims):
            for request_index, device_request in enumerate(claim.requests):
                steps.append((index, request_index))
                for request in device_request.alternatives:
                    device_class = self._class(request)
                    if request.mode == ALL:
                        all_devices[(index, request.name)] = self._all(pools, request, device_class)
                    else:
                        key = _key(request)
                        if key not in shared:
                            shared[key] = self._candidates(pools, taken, request, device_class, failing)
                        candidates[(index, request.name)] = shared[key]
        for index, claim in enumerate(claims):
            least = sum(min(len(all_devices[(index, r.name)]) if r.mode == ALL else r.count for r in d.alternatives)
                        for d in claim.requests)
            if least > MAX_RESULTS:
                raise _Refused(Shortfall(Code.CLAIM_TOO_LARGE, f"a claim asks for {least} devices; at most "
                                                               f"{MAX_RESULTS} may be allocated to one claim"))
        search = _Search(claims, steps, candidates, all_devices, {}, used=set(taken), failing=failing)
        search.signature = _signatures(claims, candidates, all_devices, failing)
        search.chosen = [[] for _ in claims]
        search.constraint_values = [[[None, 0] for _ in claim.constraints] for claim in claims]
        return search

    def _class(self, request: Request) -> DeviceClass:
        device_class = self.classes.get(request.class_name)
        if device_class is None:
            raise _Refused(Shortfall(Code.UNKNOWN_CLASS, f"request {request.name} names DeviceClass "
                                                         f"{request.class_name}, which does not exist"))
        return device_class

    def _all(self, pools: list[Pool], request: Request, device_class: DeviceClass) -> list[Device]:
        for pool in pools:
            if not pool.usable:
                why = "is being updated" if pool.incomplete else f"is invalid ({pool.invalid})"
                raise _Refused(Shortfall(Code.POOL_UPDATING, f"request {request.name} asks for all devices of class "
                                                             f"{request.class_name}, but pool {pool.driver}/"
                                                             f"{pool.name} {why}"))
        return [d for pool in pools for d in pool.devices if self._selected(d, request, device_class)]

    def _candidates(self, pools: list[Pool], taken: set[DeviceID], request: Request, device_class: DeviceClass,
                    failing: dict[tuple, Shortfall]) -> list[Device]:
        """The free devices an exact request may take, in pool and slice order. A device its selectors fail on
        keeps its place, noted in `failing`: like kube-scheduler, the search stops only if it comes to it."""
        out, key = [], (device_class.selectors, request.selectors)
        for device in _free(pools, taken):
            verdict = device.matched.get(key) if not device.consumes_counters else False
            if verdict is None:
                verdict = self._verdict(device, request, device_class)
            if verdict.__class__ is Shortfall:
                failing[(_key(request), device.id)] = verdict
                out.append(device)
            elif verdict and (not device.taints or _tolerated(device, request)):
                out.append(device)
        return out

    def _fits(self, device: Device, request: Request, device_class: DeviceClass) -> bool:
        selected = device.matched.get((device_class.selectors, request.selectors))  # memoised: the hot path
        if selected is None or device.consumes_counters:
            selected = self._selected(device, request, device_class)
        return selected and (not device.taints or _tolerated(device, request))

    def _selected(self, device: Device, request: Request, device_class: DeviceClass) -> bool:
        """Whether the selectors pick the device; an All request counts devices so picked, tolerated or not."""
        verdict = self._verdict(device, request, device_class)
        if isinstance(verdict, Shortfall):
            raise _Refused(verdict)
        return verdict

    def _verdict(self, device: Device, request: Request, device_class: DeviceClass) -> bool | Shortfall:
        if device.consumes_counters:
            return False
        key = (device_class.selectors, request.selectors)
        found = device.matched.get(key)
        if found is None:
            found = self._matches(device, request, device_class)
            if isinstance(found, bool):
                device.matched[key] = found
        return found

    def _matches(self, device: Device, request: Request, device_class: DeviceClass) -> bool | Shortfall:
        try:
            return self.selectors.all_match(device_class.selectors, device) and \
                self.selectors.all_match(request.selectors, device)
        except SelectorError as error:
            source = f"DeviceClass {device_class.name}" if _fails(self.selectors, device_class.selectors, device) \
                else f"request {request.name}"
            return Shortfall(Code.SELECTOR_ERROR, f"{source}: {error}")

    # --- the search --------------------------------------------------------------------------------------------

    def _place(self, search: _Search, step: int) -> bool:
        if step == len(search.steps):
            return True
        claim_index, request_index = search.steps[step]
        for request in search.claims[claim_index].requests[request_index].alternatives:
            search.picked[(claim_index, request_index)] = request.name
            if request.mode == ALL:
                if self._take_all(search, step, claim_index, request):
                    return True
            elif self._pick(search, step, claim_index, request, 0, request.count):
                return True
        return False

    def _take_all(self, search: _Search, step: int, claim_index: int, request: Request) -> bool:
        devices = search.all_devices[(claim_index, request.name)]
        done = 0
        for device in devices:
            if device.id in search.used or (device.taints and not _tolerated(device, request)):
                break
            if not _add(search, claim_index, request, device):
                if len(search.chosen[claim_index]) < MAX_RESULTS:  # a constraint refused it: kube-scheduler stops
                    raise _Refused(Shortfall(Code.ALL_CONSTRAINT_UNMET, f"request {request.name} asks for all "
                                                                         f"devices of {_what(request)}, but device "
                                                                         f"{'/'.join(device.id)} breaks a constraint"))
                break
            done += 1
        if devices and done == len(devices) and self._place(search, step + 1):
            return True
        for device in reversed(devices[:done]):
            _remove(search, claim_index, request, device)
        return False

    def _pick(self, search: _Search, step: int, claim_index: int, request: Request, start: int,
              remaining: int) -> bool:
        if remaining == 0:
            return self._place(search, step + 1)
        candidates = search.candidates[(claim_index, request.name)]
        tried = set()
        # with selector errors ahead, kube-scheduler's way to the end of the list, where it may meet one
        end = len(candidates) if search.failing else len(candidates) - remaining + 1
        for index in range(start, end):
            device = candidates[index]
            if device.id in search.used:
                continue
            if search.failing and (_key(request), device.id) in search.failing:
                raise _Refused(search.failing[(_key(request), device.id)])
            signature = search.signature[device.id]
            if signature in tried:
                continue
            tried.add(signature)
            search.tries += 1
            if search.tries > self.max_tries:
                raise _Refused(Shortfall(Code.GAVE_UP, f"gave up after trying {self.max_tries} device choices"))
            if not _add(search, claim_index, request, device):
                continue
            if self._pick(search, step, claim_index, request, index + 1, remaining - 1):
                return True
            _remove(search, claim_index, request, device)
        return False

    # --- results -----------------------------------------------------------------------------------------------

    def _allocation(self, search: _Search, claim_index: int, node_name: str, pools: list[Pool]) -> Allocation:
        claim = search.claims[claim_index]
        results = tuple((name, device.id) for name, device in search.chosen[claim_index])
        picked = [search.picked[(claim_index, i)] for i in range(len(claim.requests))]
        by_pool = {(pool.driver, pool.name): pool for pool in pools}
        used_pools = [by_pool[(driver, pool)] for _, (driver, pool, _) in results]
        return Allocation(results, self._config(claim, picked), _node_selector(used_pools, node_name))

    def _config(self, claim: ClaimSpec, picked: list[str]) -> tuple[dict, ...]:
        """Class configurations first (each class once), then the claim's for the requests allocated."""
        config: list[dict] = []
        by_class: dict[str, list[dict]] = {}
        requests = {r.name: r for device_request in claim.requests for r in device_request.alternatives}
        for name in picked:
            class_name = requests[name].class_name
            if class_name in by_class:
                for entry in by_class[class_name]:
                    entry["requests"].append(name)
                continue
            entries = [{"source": CLASS, "requests": [name], **json.loads(c)} for c in self.classes[class_name].config]
            by_class[class_name] = entries
            config.extend(entries)
        for names, text in claim.config:
            if not names or any(n in names or (n.partition("/")[0] in names) for n in picked):
                config.append({"source": CLAIM, "requests": list(names), **json.loads(text)})
        for entry in config:
            if len(entry["requests"]) == len(claim.requests) or not entry["requests"]:
                del entry["requests"]
        return tuple(config)

    # --- why not -----------------------------------------------------------------------------------------------

    def _explain(self, node_name: str, pools: list[Pool], search: _Search, unit: str) -> Shortfall:
        demand: dict[tuple, int] = {}
        sample: dict[tuple, tuple[Request, int, int]] = {}
        for claim_index, request_index in search.steps:
            request = search.claims[claim_index].requests[request_index].alternatives[-1]
            key = (request.class_name, request.selectors, request.mode)
            demand[key] = demand.get(key, 0) + request.count
            free = len(search.candidates.get((claim_index, request.name), ()))
            sample[key] = (request, free, claim_index)
        for key, needed in demand.items():
            request, free, claim_index = sample[key]
            if request.mode == ALL:
                every = search.all_devices[(claim_index, request.name)]
                held = sum(d.id in search.used for d in every)
                untolerated = sum(bool(d.taints) and not _tolerated(d, request) for d in every)
                if not every or held or untolerated:
                    tainted = f", {untolerated} tainted and not tolerated" if untolerated else ""
                    has = f"{len(every)}, {held} of them taken{tainted}" if every else "none"
                    return Shortfall(Code.ALL_DEVICES_TAKEN, f"needs all devices of {_what(request)}; node "
                                                             f"{node_name} has {has}")
                continue
            if free < needed:
                return Shortfall(Code.TOO_FEW_DEVICES, f"needs {needed} free devices of {_what(request)}{unit}; "
                                                       f"node {node_name} has {free}{_skipped(pools)}")
        attributes = sorted({c.attribute for claim in search.claims for c in claim.constraints})
        if attributes:
            return Shortfall(Code.CONSTRAINT_UNMET, f"node {node_name} has enough free devices, but not with one "
                                                    f"value of {', '.join(attributes)} per claim")
        return Shortfall(Code.TOO_FEW_DEVICES, f"node {node_name} has too few free devices for all requests of "
                                               f"the pod together{_skipped(pools)}")

    # --- counting pods by device groups ------------------------------------------------------------------------

    def _count_by_groups(self, pools, taken, claims, limit) -> int | Shortfall:
        """Pods counted by groups of devices with the same candidacies; a claim whose constraints bind all its
        requests gets its devices from one value of the constrained attributes, so each value is counted apart."""
        demand: dict[tuple, int] = {}
        requests: dict[tuple, Request] = {}
        for claim in claims:
            for device_request in claim.requests:
                request = device_request.alternatives[0]
                key = (request.class_name, request.selectors, request.tolerations)
                demand[key] = demand.get(key, 0) + request.count
                requests[key] = request
        keys = list(demand)
        attributes = sorted({c.attribute for claim in claims for c in claim.constraints})
        groups: dict[tuple, dict[tuple[bool, ...], int]] = {}  # constrained values -> membership -> devices
        try:
            classes = [self._class(requests[k]) for k in keys]
            for device in _free(pools, taken):
                member = tuple(self._fits(device, requests[k], c) for k, c in zip(keys, classes, strict=True))
                values = tuple(_tagged(device.qualified(a)) for a in attributes)
                if any(member) and MISSING not in values:
                    by_member = groups.setdefault(values, {})
                    by_member[member] = by_member.get(member, 0) + 1
        except _Refused as refused:
            return refused.shortfall
        fits = 0
        for by_member in groups.values():
            fits += _most_pods([demand[k] for k in keys], by_member, limit - fits)
        return fits


def _free(pools: list[Pool], taken: set[DeviceID]) -> Iterator[Device]:
    """The devices of the usable pools not taken, in pool and slice order."""
    for pool in pools:
        if pool.usable:
            for device in pool.devices:
                if device.id not in taken:
                    yield device


def _least(claim: ClaimSpec) -> int:
    return sum(min(r.count for r in d.alternatives) for d in claim.requests)


def counts_exactly(claims: tuple[ClaimSpec, ...]) -> bool:
    """Whether pods of these claims are counted exactly by device groups: exact counts without constraints, or one
    claim whose every constraint binds all its requests. Other shapes are counted by placing pods one at a time
    (kube-scheduler's way: a lower bound of what a joint allocation could fit)."""
    if all(claim.simple for claim in claims):
        return True
    if len(claims) != 1:
        return False
    (claim,) = claims
    names = {r.name for r in claim.requests}
    return all(not r.first_available and r.alternatives[0].mode != ALL for r in claim.requests) and \
        all(not c.requests or names <= c.requests for c in claim.constraints)


def _short(search: _Search) -> bool:
    """Whether requests without alternatives that share their candidates need more devices than there are."""
    demand: dict[int, int] = {}
    for claim_index, request_index in search.steps:
        device_request = search.claims[claim_index].requests[request_index]
        request = device_request.alternatives[0]
        if not device_request.first_available and request.mode != ALL:
            listed = search.candidates[(claim_index, request.name)]
            demand[id(listed)] = demand.get(id(listed), 0) + request.count
            if demand[id(listed)] > len(listed):
                return True
    return False


class _Refused(Exception):
    def __init__(self, shortfall: Shortfall):
        self.shortfall = shortfall


def _fails(selectors: Selectors, expressions: tuple[str, ...], device: Device) -> bool:
    try:
        selectors.all_match(expressions, device)
    except SelectorError:
        return True
    return False


def _tolerated(device: Device, request: Request) -> bool:
    for key, value, effect in device.taints:
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, key, value, effect) for t in request.tolerations):
            return False
    return True


def _tolerates(toleration: tuple[str, str, str, str], key: str, value: str, effect: str) -> bool:
    t_key, operator, t_value, t_effect = toleration
    if t_effect and t_effect != effect:
        return False
    if operator == "Exists":
        return not t_key or t_key == key
    return t_key == key and t_value == value


def _tagged(value):
    """A value as a constraint compares it: True, 1 and 1.0 apart; versions by their text, build metadata included
    (kube-scheduler compares the strings); absent and unsupported values match nothing."""
    if value is MISSING or value is UNSUPPORTED:
        return MISSING
    return ("Version", value.text) if isinstance(value, Version) else (type(value).__name__, value)


def _key(request: Request) -> tuple:
    """What a request's candidates depend on: requests alike share them."""
    return request.class_name, request.selectors, request.tolerations


def _signatures(claims, candidates, all_devices, failing) -> dict[DeviceID, tuple]:
    """Per device: the candidate lists it is on (and those whose selectors fail on it) and its constrained attribute
    values; equal signatures are interchangeable in the search."""
    attributes = sorted({c.attribute for claim in claims for c in claim.constraints})
    lists = list(candidates.items()) + list(all_devices.items())
    membership: dict[DeviceID, list[int]] = {}
    devices: dict[DeviceID, Device] = {}
    for position, (_, listed) in enumerate(lists):
        for device in listed:
            membership.setdefault(device.id, []).append(position)
            devices[device.id] = device
    signatures = {device_id: (tuple(positions), tuple(_tagged(devices[device_id].qualified(a)) for a in attributes))
                  for device_id, positions in membership.items()}
    for key, device_id in failing:
        signatures[device_id] += (key,)
    return signatures


def _add(search: _Search, claim_index: int, request: Request, device: Device) -> bool:
    """Takes `device` for `request` when every constraint of the claim that names the request allows it."""
    if len(search.chosen[claim_index]) >= MAX_RESULTS:
        return False
    claim = search.claims[claim_index]
    states = search.constraint_values[claim_index]
    for constraint, state in zip(claim.constraints, states, strict=True):
        if not constraint.applies(request):
            continue
        value = _tagged(device.qualified(constraint.attribute))
        if value is MISSING or (state[1] and state[0] != value):
            _undo_constraints(claim, states, request, constraint)
            return False
        state[0], state[1] = value, state[1] + 1
    search.used.add(device.id)
    search.chosen[claim_index].append((request.name, device))
    return True


def _undo_constraints(claim: ClaimSpec, states: list[list], request: Request, stop) -> None:
    for constraint, state in zip(claim.constraints, states, strict=True):
        if constraint is stop:
            return
        if constraint.applies(request):
            state[1] -= 1


def _remove(search: _Search, claim_index: int, request: Request, device: Device) -> None:
    claim = search.claims[claim_index]
    for constraint, state in zip(claim.constraints, search.constraint_values[claim_index], strict=True):
        if constraint.applies(request):
            state[1] -= 1
    search.used.discard(device.id)
    search.chosen[claim_index].pop()


def _node_selector(pools: Iterable[Pool], node_name: str) -> dict | None:
    """The allocation's node selector: this node for node-local devices, else the slices' own selectors."""
    requirements: dict[str, list] = {"matchFields": [], "matchExpressions": []}
    for pool in pools:
        if pool.node_name:
            return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                            "values": [node_name]}]}]}
        terms = (pool.node_selector or {}).get("nodeSelectorTerms") or []
        if len(terms) == 1:
            for kind, held in requirements.items():
                held.extend(r for r in terms[0].get(kind) or () if r not in held)
    term = {kind: held for kind, held in requirements.items() if held}
    return {"nodeSelectorTerms": [term]} if term else None


def describe(claims: tuple[ClaimSpec, ...]) -> str:
    """What one pod's claims ask for, in words: "8 devices of class gpu.nvidia.com matching ..."."""
    parts = []
    for claim in claims:
        for device_request in claim.requests:
            request = device_request.alternatives[0]
            many = "all devices" if request.mode == ALL else f"{request.count} device{'s' if request.count > 1 else ''}"
            more = " (or another alternative)" if device_request.first_available else ""
            parts.append(f"{many} of {_what(request)}{more}")
    return " and ".join(parts)


def _what(request: Request) -> str:
    matching = f" matching {' && '.join(request.selectors)}" if request.selectors else ""
    return f"class {request.class_name}{matching}"


def _skipped(pools: list[Pool]) -> str:
    unusable = [f"{p.driver}/{p.name}" for p in pools if not p.usable]
    return f" (pools being updated or invalid: {', '.join(unusable)})" if unusable else ""


def _most_pods(per_pod: list[int], groups: dict[tuple[bool, ...], int], limit: int) -> int:
    """The most pods k (at most `limit`) such that request r gets k * per_pod[r] devices, each device from a group
    whose membership includes r: a bipartite flow, searched by bisection."""
    if len(per_pod) == 1:
        return min(limit, sum(groups.values()) // per_pod[0])
    low, high = 0, min(limit, sum(groups.values()) // sum(per_pod))
    while low < high:
        middle = (low + high + 1) // 2
        if _flow_fits([middle * n for n in per_pod], groups):
            low = middle
        else:
            high = middle - 1
    return low


def _flow_fits(demands: list[int], groups: dict[tuple[bool, ...], int]) -> bool:
    """Whether the devices in `groups` can serve every demand: a max flow from requests to groups, by shortest
    augmenting paths (the graph is a few requests and a few groups)."""
    members = list(groups)
    capacity = [groups[member] for member in members]
    left = list(demands)
    flow = [[0] * len(members) for _ in demands]  # request -> group
    while any(left):
        path = _augmenting_path(left, capacity, flow, members)  # r0, g0, r1, g1, ..., gk
        if path is None:
            return False
        back = [(path[i + 1], path[i]) for i in range(1, len(path) - 1, 2)]  # g_i -> r_i+1 undoes flow[r_i+1][g_i]
        amount = min(left[path[0]], capacity[path[-1]], *(flow[r][g] for r, g in back))
        left[path[0]] -= amount
        capacity[path[-1]] -= amount
        for i in range(0, len(path) - 1, 2):
            flow[path[i]][path[i + 1]] += amount
        for r, g in back:
            flow[r][g] -= amount
    return True


def _augmenting_path(left, capacity, flow, members) -> list[int] | None:
    parents: dict[tuple[str, int], tuple[str, int] | None] = {}
    queue: deque[tuple[str, int]] = deque()
    for r, need in enumerate(left):
        if need:
            parents[("r", r)] = None
            queue.append(("r", r))
    while queue:
        kind, index = queue.popleft()
        if kind == "r":
            for g, member in enumerate(members):
                if member[index] and ("g", g) not in parents:
                    parents[("g", g)] = (kind, index)
                    if capacity[g]:
                        return _trace(parents, ("g", g))
                    queue.append(("g", g))
        else:
            for r in range(len(left)):
                if flow[r][index] and ("r", r) not in parents:
                    parents[("r", r)] = (kind, index)
                    queue.append(("r", r))
    return None


def _trace(parents, node) -> list[int]:
    path = []
    while node is not None:
        path.append(node[1])
        node = parents[node]
    return path[::-1]
