"""A subscriber's HTTP server: ``/healthz``, ``/readyz``, ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from nats.aio.client import Client as NATS

from k8s_event_common.connecting import refusals
from k8s_event_consumer.metrics import Metrics

# why a NATS connection was refused before CONNECT (k8s_event_common.connecting.refusals)
NATS_REFUSALS = ("tls", "redirect")


class HttpServer:
    """``/healthz`` (alive), ``/readyz`` (200 once the durable consumer is bound, while NATS
    is connected), ``/metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.ready = False
        self._connected: Callable[[], bool] = lambda: True
        self._runner: web.AppRunner | None = None
        metrics.gauge(
            "nats_refused_total",
            "NATS connections refused before CONNECT, nothing of the credentials sent: tls (TLS "
            "wanted, the socket has none), redirect (the WebSocket upgrade was redirected)",
            lambda: {(("reason", r),): float(refusals().get(r, 0)) for r in NATS_REFUSALS},
            kind="counter",
        )

    def watch(self, nc: NATS) -> None:
        """Read the connection's state when asked: ``nats_connected`` and /readyz."""
        self._connected = lambda: bool(nc.is_connected)
        self.metrics.gauge(
            "nats_connected",
            "1 while connected to NATS (read from the client when scraped)",
            lambda: {(): 1.0 if nc.is_connected else 0.0},
        )

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if not self.ready:
            return web.Response(status=503, text="not consuming yet\n")
        if not self._connected():
            return web.Response(status=503, text="not connected to NATS\n")
        return web.Response(text="ready\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain")
