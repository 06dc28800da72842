"""The real client's handling of an API server that throttles (API Priority and Fairness answers 429 with
Retry-After), against a small HTTP server that answers as such a server does; and its client-side rate limit."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest
from kubernetes import client

from superpod.k8s.api import PODS, ApiError, NotLeader
from superpod.k8s.client import load
from superpod.k8s.kube import THROTTLE_RETRIES, KubeAPI, RateLimit
from superpod.k8s.lease import TERM
from superpod.k8s.wire import CUT, CUT_DEPTH, cut, decoded

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def sent(api: KubeAPI, call):
    """One call on a loop of its own, the loop's connections closed after it."""
    async def run():
        try:
            return await call
        finally:
            await api.close()
    return asyncio.run(run())


def api_of(server: ThreadingHTTPServer, **kwargs) -> KubeAPI:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    return KubeAPI(client.ApiClient(cfg), workers=2, **kwargs)


class Throttling:
    """Answers the first `busy` requests with 429 (Retry-After: 0), the others by echoing the object, 201."""

    def __init__(self, busy: int) -> None:
        self.busy, self.requests = busy, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
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

            do_PUT = do_DELETE = do_POST  # noqa: N815

            def log_message(self, *_) -> None:
                pass

        self.server = serve(Handler)

    def api(self, **kwargs) -> KubeAPI:
        return api_of(self.server, **kwargs)


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
    api = server.api(throttled=lambda: counted.append(1))
    created = sent(api, api.create(PODS, POD))
    assert created["metadata"]["name"] == "p"
    assert len(server.requests) == 3 and len(counted) == 2


def test_throttling_that_does_not_end_fails_the_call(throttling):
    server = throttling(100)
    with pytest.raises(ApiError) as failed:
        api = server.api()
        sent(api, api.create(PODS, POD))
    assert failed.value.status == 429 and failed.value.reason == "TooManyRequests"
    assert len(server.requests) == THROTTLE_RETRIES + 1


def test_a_write_throttled_after_the_lease_was_lost_is_not_sent_again(throttling):
    """The Lease runs out while the server throttles: the write stops at the next try, unsent."""
    server, asked = throttling(1), []

    def guard() -> bool:
        asked.append(1)
        return len(asked) == 1  # leading for the first try only
    with pytest.raises(NotLeader):
        api = server.api(guard=guard)
        sent(api, api.create(PODS, POD))
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
    ends; the second is told its version is gone (410); a list answers in two pages; the third watch blocks."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                owner.paths.append(self.path)
                watches = sum(1 for p in owner.paths if "watch=1" in p)
                if "watch=1" not in self.path:  # a list of two pages
                    more = {} if "continue=" in self.path else {"continue": "next"}
                    name = "second" if "continue=" in self.path else "listed"
                    lines = [{"kind": "PodList", "metadata": {"resourceVersion": "20", **more},
                              "items": [{"metadata": {"name": name, "resourceVersion": "19"}}]}]
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
        self.server = serve(Handler)


def test_the_lean_watch_delivers_events_goes_on_from_bookmarks_and_lists_again_after_410():
    served = Watched()
    api = api_of(served.server)
    delivered, relisted = [], []

    def relist(items: list[dict], version: str, last: bool) -> None:
        relisted.append(([item["metadata"]["name"] for item in items], version, last))
        if last:
            served.stop.set()  # and the watch after it ends the test

    watcher = threading.Thread(target=api.watch, args=(PODS, "10", lambda kind, obj: delivered.append(
        (kind, obj["metadata"]["name"], obj["kind"])), relist, served.stop))
    watcher.start()
    watcher.join(10)
    served.server.shutdown()
    assert delivered == [("ADDED", "a", "Pod"), ("MODIFIED", "a", "Pod")]
    assert relisted == [(["listed"], "20", False), (["second"], "20", True)], "a page at a time"
    watches = [p for p in served.paths if "watch=1" in p]
    assert "resourceVersion=10" in watches[0] and "resourceVersion=15" in watches[1], "on from the bookmark"


def kubeconfig_for(server: ThreadingHTTPServer, folder) -> str:
    path = folder / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "local", "user": {}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}]}))
    return str(path)


@pytest.mark.parametrize("method", ["replace", "delete"])
def test_puts_and_deletes_throttled_are_sent_again_only_by_the_guarded_loop(throttling, tmp_path, method):
    """urllib3 would send a PUT or DELETE again on a 429 by itself, past the Lease guard: the client from `load`
    leaves that to KubeAPI, which asks the guard before each send."""
    server, asked = throttling(100), []

    def guard() -> bool:
        asked.append(1)
        return len(asked) == 1
    api = KubeAPI(load(kubeconfig_for(server.server, tmp_path)), workers=2, guard=guard)
    call = api.replace(PODS, POD) if method == "replace" else api.delete(PODS, "p", "ns")
    with pytest.raises(NotLeader):
        sent(api, call)
    assert len(server.requests) == 1, "sent once: the second try found the Lease lost"


def test_the_guard_is_asked_in_the_callers_context(throttling):
    """The Lease term a cycle records (a context variable) reaches the guard."""
    server, seen = throttling(0), []

    async def write() -> None:
        TERM.set(7)
        await api.create(PODS, POD)
    api = server.api(guard=lambda: seen.append(TERM.get()) or True)
    sent(api, write())
    assert seen == [7]


class CutWatch:
    """A watch that streams an event and a bookmark, then loses its connection mid-stream; the next one blocks."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                owner.paths.append(self.path)
                if len(owner.paths) > 1:
                    owner.stop.wait(5)
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                lines = [{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "11"}}},
                         {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]
                body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                self.wfile.flush()
                self.close_connection = True  # no last chunk: the stream is cut

            def log_message(self, *_) -> None:
                pass

        self.server = serve(Handler)


def test_a_watch_cut_mid_stream_goes_on_at_once_from_the_last_version_it_delivered():
    served = CutWatch()
    delivered = []

    def deliver(kind: str, obj: dict) -> None:
        delivered.append(obj["metadata"]["name"])
    watcher = threading.Thread(target=api_of(served.server).watch,
                               args=(PODS, "10", deliver, lambda *_: None, served.stop))
    watcher.start()
    while len(served.paths) < 2 and watcher.is_alive():
        served.stop.wait(0.05)
    served.stop.set()
    watcher.join(10)
    served.server.shutdown()
    assert delivered == ["a"], "the event is not delivered twice"
    assert "resourceVersion=10" in served.paths[0] and "resourceVersion=15" in served.paths[1]


def test_a_write_that_found_no_server_was_not_sent_and_one_cut_after_sending_may_have_been():
    """The applier keeps an expectation only for a write that may have landed: a refused connection is
    "Unavailable" (nothing reached a server), an answer lost after the request went out is "Timeout"."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    refused = KubeAPI(client.ApiClient(cfg), workers=2)
    with pytest.raises(ApiError) as failed:
        sent(refused, refused.create(PODS, POD))
    assert (failed.value.status, failed.value.reason) == (0, "Unavailable")

    received = []

    class Hangs(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            received.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self.close_connection = True  # the request was read; no answer ever comes

        def log_message(self, *_) -> None:
            pass
    server = serve(Hangs)
    try:
        cut = api_of(server)
        with pytest.raises(ApiError) as failed:
            sent(cut, cut.create(PODS, POD))
    finally:
        server.shutdown()
    assert (failed.value.status, failed.value.reason) == (0, "Timeout")
    assert received and json.loads(received[0])["metadata"]["name"] == "p", "it did reach the server"


@pytest.mark.parametrize("method", ["create", "replace", "delete"])
def test_a_write_whose_connection_is_cut_is_sent_once_and_may_have_landed(method):
    """aiohttp sends a PUT or DELETE again by itself when the connection drops it, past the Lease guard: the
    transport turns that off. Each write reaches the server once, the guard is asked once, the answer is
    "Timeout"."""
    received, asked = [], []

    class Cuts(BaseHTTPRequestHandler):
        def answer(self) -> None:
            received.append((self.command, self.rfile.read(int(self.headers.get("Content-Length") or 0))))
            self.close_connection = True

        do_POST = do_PUT = do_DELETE = answer  # noqa: N815 - the http.server API

        def log_message(self, *_) -> None:
            pass
    server = serve(Cuts)
    try:
        api = api_of(server, guard=lambda: asked.append(1) or True)
        call = {"create": lambda: api.create(PODS, POD), "replace": lambda: api.replace(PODS, POD),
                "delete": lambda: api.delete(PODS, "p", "ns")}[method]
        with pytest.raises(ApiError) as failed:
            sent(api, call())
    finally:
        server.shutdown()
    assert (failed.value.status, failed.value.reason) == (0, "Timeout")
    assert len(received) == 1 and len(asked) == 1, (received, asked)


def test_writes_take_the_proxy_the_kubernetes_client_would_and_refuse_one_they_cannot_use():
    from superpod.k8s.transport import Transport

    cfg = client.Configuration()
    cfg.host, cfg.proxy = "https://10.96.0.1", "http://proxy.example:3128"
    assert Transport(client.ApiClient(cfg), 2)._proxy == "http://proxy.example:3128"
    cfg.no_proxy = "10.96.0.0/12"
    assert Transport(client.ApiClient(cfg), 2)._proxy is None, "NO_PROXY names the API server"
    api = client.ApiClient(cfg)
    cfg.no_proxy, cfg.proxy = None, "socks5://proxy.example:1080"  # (the client itself needs PySocks for one)
    with pytest.raises(ValueError, match="only HTTP"):
        Transport(api, 2)


def test_a_page_holding_one_object_nested_past_the_decoder_is_read_whole_but_that_object():
    """orjson decodes 1,024 levels; the API server keeps 10,000. The page is read, the deep object cut below
    CUT_DEPTH (so it can be written back), the object beside it and the strings that look like brackets untouched."""
    deep = '{"a":' * 1_100 + '"}]"' + "}" * 1_100
    beside = {"metadata": {"name": "whole"}, "spec": {"text": 'a "quoted" [bracket] {brace} \\', "list": [[1], {}]}}
    page = f'{{"items": [{{"metadata": {{"name": "deep"}}, "spec": {deep}}}, {json.dumps(beside)}]}}'.encode()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(page)  # the dangerous moment: orjson alone fails the whole page
    items = decoded(page)["items"]
    assert items[1] == beside
    value, levels = items[0]["spec"], 3  # the mappings and lists around it: the root, items, the item
    while isinstance(value, dict):
        value, levels = value["a"], levels + 1
    assert (value, levels) == (CUT, CUT_DEPTH)
    assert orjson.loads(orjson.dumps(items[0])) == items[0]
    three_levels = json.dumps(beside).replace("[[1], {}]", f'["{CUT}", "{CUT}"]')
    assert orjson.loads(cut(json.dumps(beside).encode(), 3)) == json.loads(three_levels)
