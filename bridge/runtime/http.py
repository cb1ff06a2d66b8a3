"""``/healthz`` (alive), ``/readyz`` (every scope synced, NATS taking publishes), ``/status``
(JSON: per scope and for NATS, what a person asks first), ``/metrics`` (Prometheus).

The server is every program's (``k8s_event_common.http``: head timeout, bounded head, write
timeout, a connection cap that evicts idle peers); the probes' answers are its ``probes``; what
is the bridge's here is ``/status`` and the ``ready`` gauge.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import msgspec

from bridge.metrics import Metrics
from bridge.runtime.health import Health
from k8s_event_common import http
from k8s_event_common.clock import SYSTEM, Clock


class HttpServer(http.HttpServer):
    """The shared server with the bridge's four paths; ``status`` (set by the app once the
    pipeline, or the standby, exists) gives what ``/status`` shows besides readiness."""

    def __init__(
        self, host: str, port: int, health: Health, metrics: Metrics, clock: Clock = SYSTEM
    ) -> None:
        self.health = health
        self.metrics = metrics
        # read when scraped: what /readyz would answer now, whether anyone asked it or not
        metrics.ready.set_function(lambda: 1.0 if health.ready else 0.0)
        self.status: Callable[[], dict[str, Any]] = dict
        routes = {**http.probes(health.problems, metrics.render), "/status": self._status}
        super().__init__(host, port, routes, clock=clock, logger="bridge.http")

    def _status(self) -> http.Answer:
        problems = self.health.problems()
        doc = {"ready": not problems, "problems": problems, **self.status()}
        return HTTPStatus.OK, "application/json", msgspec.json.encode(doc)
