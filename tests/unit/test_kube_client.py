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
