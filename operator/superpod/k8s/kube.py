"""ClusterAPI over a real API server: plain JSON (no model classes), every failure as an ApiError. The calls of
the event loop (writes, gets) go out from the loop itself (transport.py), independent ones in parallel; the watches
and the pages of lists go through the kubernetes client's connection pool on threads of their own."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote

import urllib3
from kubernetes import client

from superpod.api.manifests import SCHEDULER_NAME
from superpod.k8s.api import PODS, ApiError, Kind, NotLeader
from superpod.k8s.transport import Transport, prepared
from superpod.k8s.wire import decoded

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
AGENT = f"{SCHEDULER_NAME}/"  # the user agent's prefix; the replica's identity follows
PAGE = 500
THROTTLE_RETRIES = 5  # answers of 429 (API Priority and Fairness) waited out, as client-go does, before giving up
MAX_RETRY_AFTER = 10.0  # seconds: a longer Retry-After is cut to this
WATCH_SECONDS = 300  # a watch request's length; it goes on from the last version seen
log = logging.getLogger(__name__)


class RateLimit:
    """A token bucket shared by the worker threads: `qps` calls per second on average, `burst` at once. A caller
    reserves its token and sleeps until it is due (FIFO, no busy waiting)."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps, self.burst, self.clock, self.sleep = qps, max(1, burst), clock, sleep
        self.tokens, self.when = float(self.burst), clock()
        self.lock = threading.Lock()

    def take(self) -> None:
        if wait := self.reserve():
            self.sleep(wait)

    def reserve(self) -> float:
        """Take a token: the seconds until it is due."""
        with self.lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.when) * self.qps) - 1
            self.when = now
            return -self.tokens / self.qps if self.tokens < 0 else 0.0


@dataclass
class _Position:
    """Where a watch stands: the last resourceVersion delivered, and whether the current stream delivered any."""
    version: str
    moved: bool = False


class KubeAPI:
    """`guard`: asked right before each write is sent (after any wait for a free connection or the rate limit);
    False stops the write with NotLeader. The operator guards its writes with its Lease. `workers`: requests in
    flight at once from the loop, and threads for the pages of lists."""

    def __init__(self, api: client.ApiClient, workers: int = 32, timeout: float = 10.0,
                 guard: Callable[[], bool] | None = None, qps: float = 0, burst: int = 0,
                 throttled: Callable[[], None] | None = None) -> None:
        self.api, self.guard = api, guard
        self.timeout = timeout  # seconds per write; a lost answer becomes ApiError(0, "Timeout", ...)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="superpod-api")
        self.transport = Transport(api, workers)
        self.limit = RateLimit(qps, burst or int(2 * qps)) if qps > 0 else None  # client side; 0: none
        self.throttled = throttled or (lambda: None)  # called on each 429 the server answers

    # ---- ClusterAPI -------------------------------------------------------------------------------------------
    async def list(self, kind: Kind) -> tuple[list[dict], str]:
        return await self._run(self._list, kind)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict:
        return await self._request("GET", _path(kind, namespace, name))

    async def create(self, kind: Kind, obj: dict) -> dict:
        return await self._request("POST", _path(kind, obj["metadata"].get("namespace")), obj)

    async def replace(self, kind: Kind, obj: dict) -> dict:
        meta = obj["metadata"]
        return await self._request("PUT", _path(kind, meta.get("namespace"), meta["name"]), obj)

    async def replace_status(self, kind: Kind, obj: dict) -> dict:
        meta = obj["metadata"]
        return await self._request("PUT", _path(kind, meta.get("namespace"), meta["name"], "status"), obj)

    async def patch(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        return await self._request("PATCH", _path(kind, namespace, name), patch, content_type=MERGE_PATCH)

    async def patch_status(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        return await self._request("PATCH", _path(kind, namespace, name, "status"), patch,
                                   content_type=STRATEGIC_PATCH)

    async def bind(self, namespace: str, name: str, uid: str, node: str,
                   annotations: dict[str, str] | None = None) -> None:
        meta = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = annotations
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self._request("POST", _path(PODS, namespace, name, "binding"), body)

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, uid: str | None = None,
                     grace: int | None = None) -> dict | None:
        options: dict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        try:
            out = await self._request("DELETE", _path(kind, namespace, name), options)
        except ApiError as e:
            if e.not_found or e.conflict:  # gone, or the name now belongs to another object: ours is gone
                return None
            raise
        return out if out.get("kind") == kind.kind else None

    def serves(self, kind: Kind) -> bool:
        """Whether the API server serves the kind (its CRD is installed). Blocking: asked once, at startup."""
        try:
            found = self._call("GET", f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}")
        except ApiError as e:
            if e.not_found:
                return False
            raise
        return any(r.get("name") == kind.plural for r in found.get("resources") or [])

    def watch(self, kind: Kind, version: str, deliver: Callable[[str, dict], None],
              relist: Callable[[list[dict], str, bool], None], stop: threading.Event) -> None:
        """List-watch `kind` from the list `version` until `stop`: each event's object, parsed once, to
        `deliver(type, object)`. When the server no longer has that version (410 Gone), list again, a page at a
        time to `relist(items, version, last)`. A cut stream goes on at once from the last version it delivered;
        a failure before anything was delivered is retried with backoff. Blocking: a thread of its own."""
        at, failures = _Position(version), 0
        while not stop.is_set():
            try:
                if not at.version:
                    items, listed, token = self._page(kind, "")
                    relist(items, listed, not token)
                    while token:
                        items, _, token = self._page(kind, token)
                        relist(items, listed, not token)
                    at.version = listed
                self._watch(kind, at, deliver, stop)
                failures = 0
            except Exception as e:  # noqa: BLE001 - the watch must outlive any error (a cut stream, a bad line)
                failures = 0 if at.moved else failures + 1
                wait = min(30, 2 ** failures) if failures else 0
                log.warning("watching %s failed (%r); again in %ds", kind.plural, e, wait)
                stop.wait(wait)
            at.moved = False

    def _watch(self, kind: Kind, at: _Position, deliver: Callable[[str, dict], None], stop: threading.Event) -> None:
        """One watch request from `at.version`, moving it on with each event and bookmark (to "" after 410 Gone:
        list again)."""
        query = [("watch", "1"), ("resourceVersion", at.version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(WATCH_SECONDS))]
        try:
            response = self._open("GET", _path(kind, None), None, query, {"Accept": "application/json"},
                                  urllib3.Timeout(connect=10, read=WATCH_SECONDS + 30))
            if response.status == 410:
                at.version = ""
                return
            if response.status != 200:
                raise _error(response.status, response.reason, response.read())
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line:
                        continue
                    event = decoded(line)
                    kind_of, obj = event.get("type"), event.get("object") or {}
                    if kind_of == "ERROR":
                        if obj.get("code") == 410:
                            at.version = ""
                            return
                        raise ApiError(obj.get("code") or 0, obj.get("reason") or "Error", obj.get("message") or "")
                    if kind_of != "BOOKMARK":
                        obj.setdefault("apiVersion", kind.api_version)
                        obj.setdefault("kind", kind.kind)
                        deliver(kind_of, obj)
                    at.version = (obj.get("metadata") or {}).get("resourceVersion") or at.version
                    at.moved = True
                if stop.is_set():
                    break
            response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, "Unavailable", str(e)) from None

    async def close(self) -> None:
        """Close the connections of the running loop (at the end of the operator, of a tool's run)."""
        await self.transport.close()

    # ---- plumbing ---------------------------------------------------------------------------------------------
    async def _request(self, method: str, path: str, body: dict | None = None,
                       content_type: str | None = None) -> dict:
        """One call from the loop, as `_call` makes it from a thread."""
        headers = {"Accept": "application/json", "Content-Type": content_type or "application/json"}
        async with self.transport.slot():
            for retry in itertools.count():
                if self.limit and (wait := self.limit.reserve()):
                    await asyncio.sleep(wait)
                if method != "GET" and self.guard is not None and not self.guard():
                    raise NotLeader()
                answer = await self.transport.send(method, path, body, None, headers, self.timeout)
                wait = self._again(method, path, retry, *answer)
                if wait is None:
                    return decoded(answer[2]) if answer[2] else {}
                await asyncio.sleep(wait)

    async def _run(self, fn, *args, **kwargs):
        """`fn` on a worker thread, in the caller's context (the guard reads the cycle's Lease term from it)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: context.run(fn, *args, **kwargs))

    def _list(self, kind: Kind) -> tuple[list[dict], str]:
        items, version, token = self._page(kind, "")
        while token:
            more, _, token = self._page(kind, token)
            items += more
        return items, version

    async def pages(self, kind: Kind) -> AsyncIterator[tuple[list[dict], str]]:
        items, version, token = await self._run(self._page, kind, "")
        yield items, version
        while token:
            items, _, token = await self._run(self._page, kind, token)
            yield items, version

    def _page(self, kind: Kind, token: str) -> tuple[list[dict], str, str]:
        """One page of a list: its items, the list's resourceVersion, and the token of the next page ("" at the
        end). Every page of a list is served at the resourceVersion of its first."""
        query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
        page = self._call("GET", _path(kind, None), query=query, timeout=120)
        items = page.get("items") or []
        for item in items:
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items, page["metadata"].get("resourceVersion", ""), page["metadata"].get("continue") or ""

    def _call(self, method: str, path: str, body: dict | None = None, query: list | None = None,
              content_type: str | None = None, timeout: float | None = None) -> dict:
        """One call; a 429 (the server's API Priority and Fairness turned it away unprocessed) is sent again after
        its Retry-After, up to THROTTLE_RETRIES times, a write only while the guard still allows it."""
        headers = {"Accept": "application/json", "Content-Type": content_type or "application/json"}
        for retry in itertools.count():
            if self.limit:
                self.limit.take()
            if method != "GET" and self.guard is not None and not self.guard():
                raise NotLeader()
            answer = self._send(method, path, body, query, headers, timeout)
            wait = self._again(method, path, retry, *answer)
            if wait is None:
                return decoded(answer[2]) if answer[2] else {}
            time.sleep(wait)

    def _again(self, method: str, path: str, retry: int, status: int, reason: str, data: bytes,
               retry_after: str | None) -> float | None:
        """After an answer: None when it succeeded, else the seconds to wait before sending it again (a 429 within
        THROTTLE_RETRIES); any other failure raised as an ApiError."""
        if 200 <= status <= 299:
            return None
        if status != 429 or retry >= THROTTLE_RETRIES:
            raise _error(status, reason, data)
        self.throttled()
        wait = _seconds(retry_after)
        log.debug("%s %s: throttled (429), sending again in %.1fs", method, path, wait)
        return wait

    def _send(self, method: str, path: str, body, query, headers: dict, timeout: float | None):
        """(status, reason, body, Retry-After) of one request; no answer at all is an ApiError."""
        try:
            response = self._open(method, path, body, query, headers, urllib3.Timeout(total=timeout or self.timeout),
                                  preload=True)
            return response.status, response.reason, response.data, response.headers.get("Retry-After")
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, "Timeout" if _maybe_sent(e) else "Unavailable", str(e)) from None

    def _open(self, method: str, path: str, body, query, headers: dict, timeout: urllib3.Timeout,
              preload: bool = False):
        """One request on the client's own connection pool (its TLS, credentials, retries of connections never
        made), the body encoded by orjson; the answer read whole (`preload`), else left to stream. The client's
        generated request path around it (a walk of every body to sanitize it, json.dumps, a parse of the whole URL,
        a response wrapper) was a fifth of the operator's CPU in a burst of writes."""
        url, headers, data = prepared(self.api, method, path, body, query, headers)
        return self.api.rest_client.pool_manager.request(method, url, body=data, headers=headers, timeout=timeout,
                                                         preload_content=preload)


def _seconds(retry_after: str | None) -> float:
    """Retry-After in seconds (the API server sends whole seconds), 1 when absent or unreadable, at most
    MAX_RETRY_AFTER."""
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(retry_after)))
    except (TypeError, ValueError):
        return 1.0


def _maybe_sent(e: Exception) -> bool:
    """Whether the request may have reached the server (a read timeout, a connection cut mid-answer), as opposed
    to a connection that was never made."""
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        e = e.reason
    return isinstance(e, urllib3.exceptions.ReadTimeoutError | urllib3.exceptions.ProtocolError)


def _path(kind: Kind, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace:
        base += f"/namespaces/{quote(namespace)}"
    base += f"/{kind.plural}"
    if name:
        base += f"/{quote(name)}"
    if sub:
        base += f"/{sub}"
    return base


def _error(status: int, reason: str, body) -> ApiError:
    """The API's Status (reason and message) when the body holds one."""
    try:
        doc = json.loads(body) if body else {}
    except (ValueError, TypeError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    return ApiError(status, doc.get("reason") or reason or "Error", doc.get("message") or text[:500] or reason)
