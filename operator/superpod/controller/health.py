"""/metrics (Prometheus), /healthz (liveness) and /readyz (readiness), served from a thread of their own so a busy
event loop never makes the kubelet kill a replica that is merely working.

- /healthz fails when the scheduling task or the Lease thread has died, or when this replica leads and no cycle has
  finished within `stall` seconds (a hung or endless cycle): the kubelet restarts the pod.
- /readyz fails until the cache is filled by the first full list, and under the same conditions as /healthz."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


class Health:
    def __init__(self, registry, stall: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry, self.stall, self.clock = registry, stall, clock
        self.synced = False
        self.leading: Callable[[], bool] = lambda: False
        self.tasks: list = []  # asyncio tasks and threads that must stay alive
        self.last_cycle = clock()  # when the last cycle finished (or leadership began)

    def cycle_done(self) -> None:
        self.last_cycle = self.clock()

    def problems(self) -> list[str]:
        out = [f"{t.get_name() if hasattr(t, 'get_name') else t.name} ended" for t in self.tasks
               if (t.done() if hasattr(t, "done") else not t.is_alive())]
        if self.leading() and self.clock() - self.last_cycle > self.stall:
            out.append(f"leading, but no cycle finished for {self.clock() - self.last_cycle:.0f}s")
        return out

    def answer(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path in ("/healthz", "/readyz"):
            problems = self.problems()
            if path == "/readyz" and not self.synced:
                problems.insert(0, "the first full list has not finished")
            return (503 if problems else 200), "text/plain", ("\n".join(problems) or "ok").encode() + b"\n"
        return 404, "text/plain", b"not found\n"

    def serve(self, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server interface
                code, kind, body = health.answer(self.path.split("?", 1)[0])
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_) -> None:  # no line per probe
                pass

        server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
        return server
