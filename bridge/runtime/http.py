"""``/healthz`` (alive), ``/readyz`` (every scope synced, NATS taking publishes), ``/status``
(JSON: per scope and for NATS, what a person asks first), ``/metrics`` (Prometheus)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from bridge.metrics import Metrics
from bridge.runtime.health import Health


class HttpServer:
    def __init__(self, host: str, port: int, health: Health, metrics: Metrics) -> None:
        self.host = host
        self.port = port
        self.health = health
        self.metrics = metrics
        # read when scraped: what /readyz would answer now, whether anyone asked it or not
        metrics.ready.set_function(lambda: 1.0 if health.ready else 0.0)
        # what /status shows besides readiness; set by the app once the pipeline exists
        self.status: Callable[[], dict[str, Any]] = dict
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        if self.port == 0:  # the port the system chose
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        problems = self.health.problems()
        if problems:
            return web.Response(status=503, text="not ready: " + "; ".join(problems) + "\n")
        return web.Response(text="ready\n")

    async def _status(self, request: web.Request) -> web.Response:
        problems = self.health.problems()
        doc = {"ready": not problems, "problems": problems, **self.status()}
        return web.Response(body=msgspec.json.encode(doc), content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )
