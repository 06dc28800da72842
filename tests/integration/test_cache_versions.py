"""The cache against the real API server's versions: what a write answers and what the watch then says of it."""

from __future__ import annotations

import asyncio

from kubernetes import client, watch

from superpod.controller.state import ClusterState
from superpod.k8s.api import PODS
from superpod.k8s.kube import KubeAPI


def test_a_pod_deleted_at_once_leaves_the_cache_though_the_answer_came_first(cluster, namespace):
    """An unbound pod is deleted at once: the DELETE answers with the version its DELETED event carries. (So, seen
    by hand, did 11 of 60 graceful DELETEs that raced a grace-0 one, as the operator's teardown of a gang races
    KWOK's or the kubelet's final delete; this test takes the unbound pod, which does it every time.) The operator
    writes the answer through to its cache before the watch delivers the event; the event must still remove the pod
    (it was dropped as the same version again, and the pod held its node until the next relist: 24-29 such pods
    stalled a 16-pod gang for minutes in bench_operator)."""
    state = ClusterState()
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gone-at-once", "namespace": namespace},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "trainer"}]}}

    async def write() -> tuple[dict, dict]:
        api = KubeAPI(cluster.api)
        try:
            created = await api.create(PODS, body)
            return created, await api.delete(PODS, "gone-at-once", namespace)
        finally:
            await api.close()

    created, answer = asyncio.run(write())
    state.apply(PODS, "ADDED", created, 0)
    state.apply(PODS, "MODIFIED", answer, 0)  # as the applier writes a DELETE's answer through
    assert f"{namespace}/gone-at-once" in state.pods, "the answer came first"
    stream = watch.Watch().stream(client.CoreV1Api(cluster.api).list_namespaced_pod, namespace,
                                  resource_version=created["metadata"]["resourceVersion"], timeout_seconds=20,
                                  deserialize=False)
    deleted = next((e["object"] for e in stream if e["type"] == "DELETED"), None)
    assert deleted is not None, "the watch delivered no DELETED event within 20 s"
    assert deleted["metadata"]["resourceVersion"] == answer["metadata"]["resourceVersion"], (
        "the dangerous moment: the answer carries the deletion's own version")
    state.apply(PODS, "DELETED", deleted, 1)
    assert f"{namespace}/gone-at-once" not in state.pods
