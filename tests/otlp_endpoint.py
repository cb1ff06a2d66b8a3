"""An OTLP/HTTP logs endpoint in the test process, for the answers a real collector can not be
made to give on demand: a partial success naming one record, a ``Retry-After``, a 401, an
answer withheld. It decodes every request as a collector does (its Content-Encoding, protobuf)
and keeps the records it accepted; tests/standins/otelcol.py is the real collector for the rest."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from tests.support import free_port

PROTOBUF = "application/x-protobuf"


def record_id(record: Any) -> str:
    for kv in record.attributes:
        if kv.key == "cloudevents.event_id":
            return str(kv.value.string_value)
    return ""


@dataclass
class Endpoint:
    """``refuse``: ids refused for good (400 for the request, or with ``partial`` a 200 whose
    partial success counts them); ``answer``: a status to give every request instead (503,
    401 ...), with ``retry_after``; ``hold``: requests wait until it is cleared (an endpoint
    that takes a connection and does not answer)."""

    refuse: set[str] = field(default_factory=set)
    partial: bool = False
    refuse_status: int = 400  # or 500, as a collector answers a permanent pipeline error
    answer: int | None = None
    retry_after: str | None = None
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    accepted: list[str] = field(default_factory=list)
    requests: int = 0
    encodings: list[str] = field(default_factory=list)
    bodies: list[ExportLogsServiceRequest] = field(default_factory=list)
    on_request: Callable[[], None] | None = None
    port: int = 0
    _runner: web.AppRunner | None = None

    def __post_init__(self) -> None:
        self.hold.set()  # set: answering

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Endpoint:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/logs", self._logs)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self.port = self.port or free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _logs(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.on_request:
            self.on_request()
        await self.hold.wait()
        if self.answer is not None:
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.Response(status=self.answer, text="not now", headers=headers)
        self.encodings.append(request.headers.get("Content-Encoding", ""))
        body = await request.read()  # aiohttp undoes the Content-Encoding
        req = ExportLogsServiceRequest()
        req.ParseFromString(body)
        self.bodies.append(req)
        ids = [
            record_id(r) for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records
        ]
        bad = [i for i in ids if i in self.refuse]
        if bad and not self.partial:
            return web.Response(status=self.refuse_status, text=f"record {bad[0]} refused")
        self.accepted += [i for i in ids if i not in self.refuse]
        resp = ExportLogsServiceResponse()
        if bad:
            resp.partial_success.rejected_log_records = len(bad)
            resp.partial_success.error_message = f"record {bad[0]} refused"
        return web.Response(body=resp.SerializeToString(), content_type=PROTOBUF)
