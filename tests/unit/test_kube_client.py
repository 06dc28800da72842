"""The real client's handling of an API server that throttles (API Priority and Fairness answers 429 with
Retry-After), against a small HTTP server that answers as such a server does; and its client-side rate limit."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from superpod.k8s.api import PODS, ApiError, NotLeader
from superpod.k8s.kube import THROTTLE_RETRIES, KubeAPI, RateLimit

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


class Throttling:
    """Answers the first `busy` requests with 429 (Retry-After: 0), the others by echoing the object, 201."""

    def __init__(self, busy: int) -> None:
        self.busy, self.requests = busy, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests.append(self.path)
                status, headers = (429, {"Retry-After": "0"}) if len(owner.requests) <= owner.busy else (201, {})
                answer = body if status == 201 else json.dumps(
                    {"kind": "Status", "reason": "TooManyRequests", "message": "too many requests"}).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "application/json"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def api(self, **kwargs) -> KubeAPI:
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        return KubeAPI(client.ApiClient(cfg), workers=2, **kwargs)


@pytest.fixture
def throttling():
    servers = []

    def make(busy: int) -> Throttling:
        servers.append(Throttling(busy))
        return servers[-1]

    yield make
    for s in servers:
        s.server.shutdown()


def test_a_throttled_write_is_sent_again_after_retry_after(throttling):
    server, counted = throttling(2), []
    created = asyncio.run(server.api(throttled=lambda: counted.append(1)).create(PODS, POD))
    assert created["metadata"]["name"] == "p"
    assert len(server.requests) == 3 and len(counted) == 2


def test_throttling_that_does_not_end_fails_the_call(throttling):
    server = throttling(100)
    with pytest.raises(ApiError) as failed:
        asyncio.run(server.api().create(PODS, POD))
    assert failed.value.status == 429 and failed.value.reason == "TooManyRequests"
    assert len(server.requests) == THROTTLE_RETRIES + 1


def test_a_write_throttled_after_the_lease_was_lost_is_not_sent_again(throttling):
    """The Lease runs out while the server throttles: the write stops at the next try, unsent."""
    server, asked = throttling(1), []

    def guard() -> bool:
        asked.append(1)
        return len(asked) == 1  # leading for the first try only
    with pytest.raises(NotLeader):
        asyncio.run(server.api(guard=guard).create(PODS, POD))
    assert len(server.requests) == 1 and len(asked) == 2


def test_the_rate_limit_lets_a_burst_through_then_spaces_calls_by_one_over_qps():
    now, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds
    limit = RateLimit(qps=10, burst=3, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limit.take()
    assert slept == [0.1, 0.1]  # three at once, then one every 100 ms
    now[0] += 1.0  # a quiet second refills the burst (not more)
    slept.clear()
    for _ in range(4):
        limit.take()
    assert slept == [0.1]


class Watched:
    """An API server's pods endpoint as a watch sees it: the first watch streams two events and a bookmark, then
    ends; the second is told its version is gone (410); a list answers with one pod; the third watch blocks."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                owner.paths.append(self.path)
                watches = sum(1 for p in owner.paths if "watch=1" in p)
                if "watch=1" not in self.path:
                    lines = [{"kind": "PodList", "metadata": {"resourceVersion": "20"},
                              "items": [{"metadata": {"name": "listed", "resourceVersion": "19"}}]}]
                elif watches == 1:
                    lines = [{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "11"}}},
                             {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "12"}}},
                             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]
                elif watches == 2:
                    lines = [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}]
                else:
                    owner.stop.wait(5)
                    lines = []
                body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_) -> None:
                pass

        self.stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_lean_watch_delivers_events_goes_on_from_bookmarks_and_lists_again_after_410():
    served = Watched()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{served.server.server_address[1]}"
    api = KubeAPI(client.ApiClient(cfg), workers=2)
    delivered, relisted = [], []

    def relist(items: list[dict], version: str) -> None:
        relisted.append(([item["metadata"]["name"] for item in items], version))
        served.stop.set()  # and the watch after it ends the test

    watcher = threading.Thread(target=api.watch, args=(PODS, "10", lambda kind, obj: delivered.append(
        (kind, obj["metadata"]["name"], obj["kind"])), relist, served.stop))
    watcher.start()
    watcher.join(10)
    served.server.shutdown()
    assert delivered == [("ADDED", "a", "Pod"), ("MODIFIED", "a", "Pod")]
    assert relisted == [(["listed"], "20")]
    watches = [p for p in served.paths if "watch=1" in p]
    assert "resourceVersion=10" in watches[0] and "resourceVersion=15" in watches[1], "on from the bookmark"
