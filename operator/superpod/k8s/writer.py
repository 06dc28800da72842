"""Every write the operator makes: job status, gang pods (all or nothing), Services, Events, node labels.

Blocking client calls run on a thread pool so a gang's pods are created in parallel."""

from __future__ import annotations

import asyncio
import datetime
import logging
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.k8s.manifests import GROUP, VERSION

log = logging.getLogger(__name__)
COMPONENT = "superpod-scheduler"


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    def __init__(self, api: client.ApiClient, workers: int = 32) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="superpod-write")

    async def _call(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    # ---- jobs -------------------------------------------------------------------------------------------------
    async def patch_status(self, namespace: str, name: str, status: dict) -> dict | None:
        """Merge-patch the job's status; returns the updated job, or None if it is gone."""
        try:
            return await self._call(self.custom.patch_namespaced_custom_object_status, GROUP, VERSION, namespace,
                                    "trainingjobs", name, {"status": status})
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def event(self, job: dict, kind: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid")},
            "type": kind, "reason": reason, "message": message[:1024],
            "firstTimestamp": now_rfc3339(), "lastTimestamp": now_rfc3339(), "count": 1,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        }
        try:
            await self._call(self.core.create_namespaced_event, meta["namespace"], body)
        except ApiException as e:  # events are best effort
            log.warning("event for %s/%s not written: %s", meta["namespace"], meta["name"], e.reason)

    # ---- pods and services ------------------------------------------------------------------------------------
    def _create_pod(self, pod: dict) -> None:
        try:
            self.core.create_namespaced_pod(pod["metadata"]["namespace"], pod, _preload_content=False)
        except ApiException as e:
            if e.status != 409:  # AlreadyExists: written before a crash, same name, same content
                raise

    def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    async def ensure_service(self, svc: dict) -> str | None:
        """Create the Service unless it exists; on failure say why (a gang write that must be rolled back)."""
        try:
            await self._call(self.core.create_namespaced_service, svc["metadata"]["namespace"], svc,
                             _preload_content=False)
        except ApiException as e:
            if e.status != 409:
                return f"Service write failed ({e.reason}: {e.status})"
        return None

    async def create_pods(self, pods: list[dict]) -> str | None:
        """Create every pod, or none: on any failure, delete the ones written and say why."""
        results = await asyncio.gather(*(self._call(self._create_pod, p) for p in pods), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if not errors:
            return None
        await self.delete_pods([(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods])
        e = errors[0]
        return f"{len(errors)} of {len(pods)} pod writes failed ({getattr(e, 'reason', None) or e}); rolled back"

    async def delete_pods(self, pods: list[tuple[str, str]]) -> None:
        results = await asyncio.gather(*(self._call(self._delete_pod, ns, n) for ns, n in pods),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                log.warning("pod delete failed: %s", r)

    # ---- nodes and config maps (MIG) --------------------------------------------------------------------------
    async def label_node(self, name: str, labels: dict[str, str | None]) -> None:
        await self._call(self.core.patch_node, name, {"metadata": {"labels": labels}}, _preload_content=False)

    async def annotate_node(self, name: str, notes: dict[str, str | None]) -> None:
        await self._call(self.core.patch_node, name, {"metadata": {"annotations": notes}}, _preload_content=False)

    async def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            cm = await self._call(self.core.read_namespaced_config_map, name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return cm.data or {}

    async def apply_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = {"metadata": {"name": name, "namespace": namespace}, "data": data}
        try:
            await self._call(self.core.replace_namespaced_config_map, name, namespace, body, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise
            await self._call(self.core.create_namespaced_config_map, namespace, body, _preload_content=False)
