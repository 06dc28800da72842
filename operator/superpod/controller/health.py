"""One small HTTP server on the event loop: /metrics (Prometheus), /healthz (liveness) and /readyz (readiness).

- /healthz fails when the scheduling or Lease task has died, or when this replica leads and no cycle has finished
  within `stall` seconds (a hung cycle): the kubelet restarts the pod.
- /readyz fails until the cache is filled by the first full list, and under the same conditions as /healthz.
Served from the event loop itself, so a blocked loop fails both (no answer)."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


class Health:
    def __init__(self, registry, stall: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry, self.stall, self.clock = registry, stall, clock
        self.synced = False
        self.leading: Callable[[], bool] = lambda: False
        self.tasks: list = []  # asyncio tasks that must stay alive
        self.last_cycle = clock()  # when the last cycle finished (or leadership began)

    def cycle_done(self) -> None:
        self.last_cycle = self.clock()

    def problems(self) -> list[str]:
        out = [f"task {t.get_name()} ended" for t in self.tasks if t.done()]
        if self.leading() and self.clock() - self.last_cycle > self.stall:
            out.append(f"leading, but no cycle finished for {self.clock() - self.last_cycle:.0f}s")
        return out

    async def serve(self, port: int, host: str = "0.0.0.0") -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        return runner

    async def _metrics(self, _request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request) -> web.Response:
        return _answer(self.problems())

    async def _readyz(self, _request) -> web.Response:
        return _answer(([] if self.synced else ["the first full list has not finished"]) + self.problems())


def _answer(problems: list[str]) -> web.Response:
    if problems:
        return web.Response(status=503, text="\n".join(problems) + "\n")
    return web.Response(text="ok\n")
