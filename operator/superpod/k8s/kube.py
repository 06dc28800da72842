"""ClusterAPI over a real API server: plain JSON over the kubernetes client's REST layer (no model classes), the
blocking calls on a thread pool so independent writes go out in parallel, every failure as an ApiError."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.api.manifests import SCHEDULER_NAME
from superpod.k8s.api import PODS, ApiError, Kind, NotLeader

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
AGENT = f"{SCHEDULER_NAME}/"  # the user agent's prefix; the replica's identity follows
PAGE = 500


class KubeAPI:
    """`guard`: asked right before each write is sent (in the worker thread, after any wait for a free worker);
    False stops the write with NotLeader. The operator guards its writes with its Lease."""

    def __init__(self, api: client.ApiClient, workers: int = 32, timeout: float = 10.0,
                 guard: Callable[[], bool] | None = None) -> None:
        self.api, self.guard = api, guard
        self.timeout = timeout  # seconds per write; a lost answer becomes ApiError(0, "Timeout", ...)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="superpod-api")

    # ---- ClusterAPI -------------------------------------------------------------------------------------------
    async def list(self, kind: Kind) -> tuple[list[dict], str]:
        return await self._run(self._list, kind)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict:
        return await self._run(self._call, "GET", _path(kind, namespace, name))

    async def create(self, kind: Kind, obj: dict) -> dict:
        return await self._run(self._call, "POST", _path(kind, obj["metadata"].get("namespace")), obj)

    async def replace(self, kind: Kind, obj: dict) -> dict:
        meta = obj["metadata"]
        return await self._run(self._call, "PUT", _path(kind, meta.get("namespace"), meta["name"]), obj)

    async def replace_status(self, kind: Kind, obj: dict) -> dict:
        meta = obj["metadata"]
        return await self._run(self._call, "PUT", _path(kind, meta.get("namespace"), meta["name"], "status"), obj)

    async def patch(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        return await self._run(self._call, "PATCH", _path(kind, namespace, name), patch, content_type=MERGE_PATCH)

    async def patch_status(self, kind: Kind, name: str, patch: dict, namespace: str | None = None) -> dict:
        return await self._run(self._call, "PATCH", _path(kind, namespace, name, "status"), patch,
                               content_type=STRATEGIC_PATCH)

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self._run(self._call, "POST", _path(PODS, namespace, name, "binding"), body)

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, uid: str | None = None,
                     grace: int | None = None) -> dict | None:
        options: dict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        try:
            out = await self._run(self._call, "DELETE", _path(kind, namespace, name), options)
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

    # ---- plumbing ---------------------------------------------------------------------------------------------
    async def _run(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    def _list(self, kind: Kind) -> tuple[list[dict], str]:
        items, token, version = [], "", ""
        while True:
            query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
            page = self._call("GET", _path(kind, None), query=query, timeout=120)
            version = version or page["metadata"].get("resourceVersion", "")
            for item in page.get("items") or []:
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
                items.append(item)
            token = page["metadata"].get("continue")
            if not token:
                return items, version

    def _call(self, method: str, path: str, body: dict | None = None, query: list | None = None,
              content_type: str | None = None, timeout: float | None = None) -> dict:
        headers = {"Accept": "application/json", "Content-Type": content_type or "application/json"}
        if method != "GET" and self.guard is not None and not self.guard():
            raise NotLeader()
        try:
            request = self.api.param_serialize(method=method, resource_path=path, query_params=query or [],
                                               header_params=headers, body=body, auth_settings=["BearerToken"])
            response = self.api.call_api(*request, _request_timeout=timeout or self.timeout)
            data = response.read()
            if not 200 <= response.status <= 299:
                raise _error(response.status, response.reason, data)
            return json.loads(data) if data else {}
        except ApiException as e:
            raise _error(e.status or 0, e.reason or "", e.body) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, "Timeout" if _maybe_sent(e) else "Unavailable", str(e)) from None


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
