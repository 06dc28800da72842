"""ClusterAPI kept in memory, for unit tests and the simulator: the API server's semantics the operator relies on —
resourceVersions and optimistic concurrency, uids and delete preconditions, the status subresource and generation,
merge patch, graceful pod deletion, owner garbage collection, AlreadyExists — and a log of watch events the caller
delivers when it likes (late, twice, or never). Not an API server: admission, defaulting and validation are limited
to the few checks named in `_validate_pod`. Faults can be injected around any write (see `fault`).

A write's answer is the very object its watch event carries: whoever reads one reads both, so neither is changed
in place (the operator's cache never changes what it is given). What the store holds and what a read returns are
copies of their own."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import orjson

from superpod.api.resources import STANDARD, quantity
from superpod.api.times import rfc3339
from superpod.k8s.api import NODES, PODS, TRAININGJOBS, ApiError, Kind, NotLeader

WITH_STATUS = (NODES, PODS, TRAININGJOBS)  # kinds whose status only the status subresource changes

DEFAULT_GRACE = 30


@dataclass
class WatchEvent:
    kind: Kind
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict
    time: float = 0.0  # when the change happened (a watch delivers it then, or later)


@dataclass
class Write:
    """One write that reached the store: who made it, when, what."""

    time: float
    writer: str
    verb: str
    kind: str
    key: str


@dataclass
class MemoryAPI:
    clock: Callable[[], float]
    objects: dict[Kind, dict[str, dict]] = field(default_factory=dict)
    events: list[WatchEvent] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    # fault(verb, kind, obj_or_key, writer) may raise an ApiError before the write, or return "lose-answer": the
    # write is applied but the caller gets a timeout (the worst case: it cannot know the write landed).
    fault: Callable[[str, Kind, object, str], str | None] | None = None
    _owned: dict[str, set[tuple[Kind, str]]] = field(default_factory=dict)  # owner uid -> (kind, key) it owns
    _version: itertools.count = field(default_factory=lambda: itertools.count(1))
    _uid: itertools.count = field(default_factory=lambda: itertools.count(1))

    def client(self, writer: str = "", guard: Callable[[], bool] | None = None) -> MemoryClient:
        """The ClusterAPI one operator replica uses; its writes are logged under `writer` and, like KubeAPI's, stop
        with NotLeader when `guard` says no."""
        return MemoryClient(self, writer, guard)

    async def close(self) -> None:
        """No connections to let go of."""

    # ---- store --------------------------------------------------------------------------------------------------
    def items(self, kind: Kind) -> list[dict]:
        return [_clone(o) for o in self.objects.get(kind, {}).values()]

    def peek(self, kind: Kind, key: str) -> dict | None:
        """The stored object itself (read-only by convention), for test assertions."""
        return self.objects.get(kind, {}).get(key)

    def version(self) -> str:
        return str(next(self._version))

    def _store(self, kind: Kind, obj: dict, verb: str) -> dict:
        obj["metadata"]["resourceVersion"] = self.version()
        self.objects.setdefault(kind, {})[_key(obj)] = obj
        for owner in obj["metadata"].get("ownerReferences") or []:
            self._owned.setdefault(owner.get("uid"), set()).add((kind, _key(obj)))
        seen = _clone(obj)
        self.events.append(WatchEvent(kind, "ADDED" if verb == "create" else "MODIFIED", seen, self.clock()))
        return seen

    def _remove(self, kind: Kind, key: str) -> dict | None:
        """The object removed, at the version of its removal (its DELETED event's), as a DELETE answers it."""
        obj = self.objects.get(kind, {}).pop(key, None)
        if obj is None:
            return None
        obj["metadata"]["resourceVersion"] = self.version()
        if not obj["metadata"].get("deletionTimestamp"):  # a deletion without grace: its time is on the object
            obj["metadata"]["deletionTimestamp"] = rfc3339(self.clock(), micro=True)
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
        gone = _clone(obj)
        self.events.append(WatchEvent(kind, "DELETED", gone, self.clock()))
        for other_kind, other_key in sorted(self._owned.pop(obj["metadata"].get("uid"), ()),
                                            key=lambda owned: (owned[0].plural, owned[1])):  # the garbage collector
            other = self.objects.get(other_kind, {}).get(other_key)
            owners = other["metadata"].get("ownerReferences") or [] if other is not None else []
            if any(o.get("uid") == obj["metadata"].get("uid") for o in owners):
                self._collect(other_kind, other_key, other)
        return gone

    def delete_now(self, kind: Kind, key: str) -> None:
        """Removal without grace: the kubelet finishing a pod's termination, the garbage collector, a node gone."""
        self._remove(kind, key)

    def _collect(self, kind: Kind, key: str, obj: dict) -> None:
        if _graceful(kind, obj):
            if not obj["metadata"].get("deletionTimestamp"):
                self._mark_deleting(kind, obj, int(obj["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE)))
        else:
            self._remove(kind, key)

    def _mark_deleting(self, kind: Kind, obj: dict, grace: int) -> dict:
        obj["metadata"]["deletionTimestamp"] = rfc3339(self.clock() + grace)
        obj["metadata"]["deletionGracePeriodSeconds"] = grace
        return self._store(kind, obj, "update")

    def _check_fault(self, verb: str, kind: Kind, what: object, writer: str) -> str | None:
        return self.fault(verb, kind, what, writer) if self.fault else None

    def _log(self, writer: str, verb: str, kind: Kind, key: str) -> None:
        self.writes.append(Write(self.clock(), writer, verb, kind.plural, key))


@dataclass
class MemoryClient:
    store: MemoryAPI
    writer: str = ""
    guard: Callable[[], bool] | None = None

    async def _send(self) -> None:
        """Where a real client waits for the network: other coroutines run; then the guard, as KubeAPI asks it."""
        await asyncio.sleep(0)
        if self.guard is not None and not self.guard():
            raise NotLeader()

    async def list(self, kind: Kind) -> tuple[list[dict], str]:
        return self.store.items(kind), str(int(self.store.version()) - 1)

    async def pages(self, kind: Kind) -> AsyncIterator[tuple[list[dict], str]]:
        yield await self.list(kind)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict:
        obj = self.store.peek(kind, f"{namespace}/{name}" if kind.namespaced else name)
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
        return _clone(obj)

    async def create(self, kind: Kind, obj: dict) -> dict:
        await self._send()
        obj = _json(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self.store._uid):05x}"
        if kind.namespaced:
            meta.setdefault("namespace", "default")
        key = _key(obj)
        lose = self.store._check_fault("create", kind, obj, self.writer)
        if key in self.store.objects.get(kind, {}):
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{meta["name"]}" already exists')
        if kind is PODS:
            _validate_pod(obj)
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        meta["uid"] = f"uid-{next(self.store._uid)}"
        meta["creationTimestamp"] = rfc3339(self.store.clock())
        meta["generation"] = 1
        if kind is PODS:  # as the API server: a pod's status starts Pending whatever the creator wrote
            obj["status"] = {"phase": "Pending"}
        elif kind is TRAININGJOBS:  # a custom resource's status subresource: dropped on create
            obj.pop("status", None)
        out = self.store._store(kind, obj, "create")
        self.store._log(self.writer, "create", kind, key)
        return _answer(out, lose)

    async def replace(self, kind: Kind, obj: dict) -> dict:
        return await self._replace(kind, obj, status=False)

    async def replace_status(self, kind: Kind, obj: dict) -> dict:
        return await self._replace(kind, obj, status=True)

    async def _replace(self, kind: Kind, obj: dict, status: bool) -> dict:
        await self._send()
        obj = _json(obj)
        key = _key(obj)
        lose = self.store._check_fault("update", kind, obj, self.writer)
        cur = self._current(kind, key)
        given = obj["metadata"].get("resourceVersion")
        if not given:  # as the API server answers an update (PUT) of a custom resource without one
            raise ApiError(422, "Invalid", f'{kind.plural} "{key}" is invalid: metadata.resourceVersion: Invalid '
                           "value: 0: must be specified for an update")
        if given != cur["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{key}": the object has '
                           "been modified; please apply your changes to the latest version and try again")
        new = {**cur, "metadata": dict(cur["metadata"])}  # cur leaves the store: its parts are not copied again
        if status:
            new["status"] = obj.get("status")  # obj is this call's own copy
        else:
            for part, value in obj.items():
                if part != "metadata" and not (part == "status" and kind in WITH_STATUS):
                    new[part] = value
            for k in ("labels", "annotations"):
                if k in obj["metadata"]:
                    new["metadata"][k] = obj["metadata"][k]
            if new.get("spec") != cur.get("spec"):
                new["metadata"]["generation"] = cur["metadata"].get("generation", 1) + 1
        out = self.store._store(kind, new, "update")
        self.store._log(self.writer, "update-status" if status else "update", kind, key)
        return _answer(out, lose)

    async def patch(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        await self._send()
        key = f"{namespace}/{name}" if kind.namespaced else name
        lose = self.store._check_fault("patch", kind, key, self.writer)
        new = _clone(self._current(kind, key))
        patch = _json(patch)
        if kind in WITH_STATUS:  # only the status subresource changes the status
            patch.pop("status", None)
        _merge(new, patch)
        out = self.store._store(kind, new, "update")
        self.store._log(self.writer, "patch", kind, key)
        return _answer(out, lose)

    async def patch_status(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        """Merge patch, except that status.conditions merge by type (as a strategic merge patch of a pod)."""
        await self._send()
        key = f"{namespace}/{name}" if kind.namespaced else name
        lose = self.store._check_fault("patch", kind, key, self.writer)
        new = _clone(self._current(kind, key))
        patch = _json(patch)
        conditions = (patch.get("status") or {}).pop("conditions", None)
        _merge(new, patch)
        if conditions is not None:
            status = new.setdefault("status", {})
            kept = {c.get("type"): c for c in status.get("conditions") or []}
            kept.update({c.get("type"): c for c in conditions})
            status["conditions"] = list(kept.values())
        if kind.plural == "resourceclaims":
            _allocation_unchanged(self._current(kind, key), new, key)
        out = self.store._store(kind, new, "update")
        self.store._log(self.writer, "patch-status", kind, key)
        return _answer(out, lose)

    async def bind(self, namespace: str, name: str, uid: str, node: str,
                   annotations: dict[str, str] | None = None) -> None:
        await self._send()
        key = f"{namespace}/{name}"
        lose = self.store._check_fault("bind", PODS, key, self.writer)
        cur = self._current(PODS, key)
        if uid and cur["metadata"].get("uid") != uid:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": Precondition '
                           "failed: UID in precondition does not match the UID in object")
        if cur["spec"].get("nodeName"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                           f"already assigned to node \"{cur['spec']['nodeName']}\"")
        new = _clone(cur)
        new["spec"]["nodeName"] = node
        if annotations:  # merged in, as the API server merges a binding's
            new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}), **annotations}
        conditions = [c for c in (new.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        new.setdefault("status", {})["conditions"] = [*conditions, {"type": "PodScheduled", "status": "True"}]
        self.store._store(PODS, new, "update")
        self.store._log(self.writer, "bind", PODS, key)
        _answer(None, lose)

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, uid: str | None = None,
                     grace: int | None = None) -> dict | None:
        await self._send()
        key = f"{namespace}/{name}" if kind.namespaced else name
        lose = self.store._check_fault("delete", kind, key, self.writer)
        cur = self.store.peek(kind, key)
        if cur is None or (uid and cur["metadata"].get("uid") != uid):
            return None
        self.store._log(self.writer, "delete", kind, key)
        if _graceful(kind, cur) and grace != 0:  # grace 0 removes at once, as the API server does (a force delete)
            if cur["metadata"].get("deletionTimestamp"):
                return _answer(_clone(cur), lose)
            if grace is None:
                grace = cur["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE)
            return _answer(self.store._mark_deleting(kind, cur, int(grace)), lose)
        return _answer(self.store._remove(kind, key), lose)

    async def close(self) -> None:
        """No connections to let go of."""

    def _current(self, kind: Kind, key: str) -> dict:
        cur = self.store.peek(kind, key)
        if cur is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{key}" not found')
        return cur


def _json(obj):
    """A deep copy through JSON, encoded as the real client's transport encodes a body: what it cannot carry fails
    here as it would there."""
    return orjson.loads(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


_clone = _json  # stored objects passed the JSON check on the way in: a copy through JSON is their deep copy


def _answer(out, lose: str | None):
    if lose == "lose-answer":
        raise ApiError(0, "Timeout", "the write was sent but no answer came back")
    return out


def _graceful(kind: Kind, obj: dict) -> bool:
    """A bound pod that has not finished terminates gracefully; everything else goes at once."""
    return kind is PODS and bool(obj["spec"].get("nodeName")) and (obj.get("status") or {}).get("phase") not in (
        "Succeeded", "Failed")


def _key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _merge(target: dict, patch: dict) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = v


def _validate_pod(pod: dict) -> None:
    """The API server's rule the operator has met: an extended resource needs a limit equal to its request."""
    name = pod["metadata"]["name"]
    for i, c in enumerate(pod["spec"].get("containers") or []):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for r, q in requests.items():
            if r in STANDARD or r.startswith("hugepages-"):
                continue
            path = f"spec.containers[{i}].resources"
            if r not in limits:
                raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {path}.limits: Required value: Limit must '
                               "be set for non overcommitable resources")
            if quantity(q, r) != quantity(limits[r], r):
                raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {path}.requests: Invalid value: "{q}": '
                               f"must be equal to {r} limit of {limits[r]}")


def _allocation_unchanged(old: dict, new: dict, key: str) -> None:
    """A ResourceClaim's allocation may be set or cleared, never changed (as the API server validates it)."""
    before, after = (old.get("status") or {}).get("allocation"), (new.get("status") or {}).get("allocation")
    if before and after and before != after:
        raise ApiError(422, "Invalid", f'ResourceClaim "{key}" is invalid: status.allocation: Invalid value: field is '
                       "immutable")
