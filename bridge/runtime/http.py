"""``/healthz`` (alive), ``/readyz`` (every scope synced, NATS taking publishes), ``/status``
(JSON: per scope and for NATS, what a person asks first), ``/metrics`` (Prometheus).

A small HTTP/1.1 server on asyncio's streams, not aiohttp.web: four GET paths for probes and a
scraper need none of a web framework, and aiohttp.web's modules cost the bridge 1.4 MB of its
idle memory (docs/performance.md). What reaches the port is not trusted: a request's head is
read within ``HEAD_TIMEOUT`` and ``HEAD_LIMIT`` bytes, a body is never read, an answer is taken
within ``WRITE_TIMEOUT`` (all of it: the socket's buffer included) and closes its connection.
At most ``MAX_CONNECTIONS`` are open at once; a new one then takes the place of the oldest still
waiting for its head, so peers that open connections and send nothing can not lock the probes
out (the kubelet's connection is answered in milliseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, NamedTuple

import msgspec

from bridge import logs
from bridge.metrics import Metrics
from bridge.runtime.health import Health
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("http")

HEAD_LIMIT = 8192  # request line and headers, bytes
HEAD_TIMEOUT = 10.0  # seconds to send them
MAX_CONNECTIONS = 64  # open at once; Prometheus and the kubelet use one or two
WRITE_TIMEOUT = 10.0  # seconds for a reader to take an answer
TEXT = "text/plain; charset=utf-8"
METRICS = "text/plain; version=0.0.4; charset=utf-8"

_Answer = tuple[int, str, bytes]  # status, content type, body


class HttpServer:
    def __init__(
        self, host: str, port: int, health: Health, metrics: Metrics, clock: Clock = SYSTEM
    ) -> None:
        self.host = host
        self.clock = clock
        self.port = port
        self.health = health
        self.metrics = metrics
        # read when scraped: what /readyz would answer now, whether anyone asked it or not
        metrics.ready.set_function(lambda: 1.0 if health.ready else 0.0)
        # what /status shows besides readiness; set by the app once the pipeline exists
        self.status: Callable[[], dict[str, Any]] = dict
        self._server: asyncio.Server | None = None
        self._closing = False
        self._connections: set[asyncio.Task[None]] = set()
        # those still waiting for their request's head, oldest first: the ones to evict
        self._waiting: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._routes: dict[str, Callable[[], _Answer]] = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/metrics": self._metrics,
            "/status": self._status,
        }

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=HEAD_LIMIT
        )
        if self.port == 0:  # the port the system chose
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._closing = True  # connections accepted but not yet started close at once
            self._server.close()
            while self._connections:
                for task in list(self._connections):
                    task.cancel()
                await asyncio.gather(*self._connections, return_exceptions=True)
                await asyncio.sleep(0)  # let accepted connections' tasks start, and end
            await self._server.wait_closed()
            self._server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing:
            writer.transport.abort()
            return
        if len(self._connections) >= MAX_CONNECTIONS:
            if not self._waiting:  # every one is being answered, each within WRITE_TIMEOUT
                writer.transport.abort()
                return
            oldest, its_writer = next(iter(self._waiting.items()))
            del self._waiting[oldest]
            its_writer.transport.abort()
            oldest.cancel()
            self._connections.discard(oldest)
        self._connections.add(task)
        self._waiting[task] = writer
        try:
            answer = await self._answer(reader)
            self._waiting.pop(task, None)
            if answer is not None:
                await self.clock.wait_for(self._send(writer, answer), WRITE_TIMEOUT)
            writer.close()
        except (OSError, TimeoutError, asyncio.CancelledError):
            # the peer went away or would not read, or it was evicted, or the server stops
            # (the task ends here: asyncio's streams would log a cancelled one as an error)
            writer.transport.abort()
        finally:
            self._waiting.pop(task, None)
            self._connections.discard(task)

    async def _answer(self, reader: asyncio.StreamReader) -> _Reply | None:
        """What to send for the request on ``reader``; None when there is no request to answer
        (the peer closed)."""
        try:
            head = await self.clock.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            return _refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        except asyncio.IncompleteReadError as exc:
            return _refusal(HTTPStatus.BAD_REQUEST) if exc.partial else None
        except TimeoutError:
            return _refusal(HTTPStatus.REQUEST_TIMEOUT)
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return _refusal(HTTPStatus.BAD_REQUEST)
        method, target = parts[0], parts[1]
        if target.startswith((b"http://", b"https://")):  # absolute form (RFC 9112, 3.2.2)
            target = b"/" + target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b"/"
        path = target.split(b"?", 1)[0].decode("ascii", "replace")
        head_only = method == b"HEAD"
        route = self._routes.get(path)
        if route is None:
            return _refusal(HTTPStatus.NOT_FOUND, head_only)
        if method not in (b"GET", b"HEAD"):
            return _refusal(HTTPStatus.METHOD_NOT_ALLOWED)
        try:
            status, content_type, body = route()
        except Exception as exc:  # a bug behind one path must not end the server
            log.error("http_handler_failed", path=path, error=repr(exc))
            return _refusal(HTTPStatus.INTERNAL_SERVER_ERROR, head_only)
        return _Reply(status, content_type, body, send_body=not head_only)

    async def _send(self, writer: asyncio.StreamWriter, reply: _Reply) -> None:
        head = [
            f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}",
            f"Date: {formatdate(self.clock.wall(), usegmt=True)}",
            f"Content-Type: {reply.content_type}",
            f"Content-Length: {len(reply.body)}",
            "Connection: close",
        ]
        if reply.status == HTTPStatus.METHOD_NOT_ALLOWED:
            head.append("Allow: GET, HEAD")
        # drain() then waits until the socket took everything (within WRITE_TIMEOUT): nothing
        # is left buffered for a peer that does not read once the connection is let go
        writer.transport.set_write_buffer_limits(0)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("ascii"))
        if reply.send_body:
            writer.write(reply.body)
        await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    def _healthz(self) -> _Answer:
        return HTTPStatus.OK, TEXT, b"ok\n"

    def _readyz(self) -> _Answer:
        problems = self.health.problems()
        if problems:
            text = "not ready: " + "; ".join(problems) + "\n"
            return HTTPStatus.SERVICE_UNAVAILABLE, TEXT, text.encode()
        return HTTPStatus.OK, TEXT, b"ready\n"

    def _status(self) -> _Answer:
        problems = self.health.problems()
        doc = {"ready": not problems, "problems": problems, **self.status()}
        return HTTPStatus.OK, "application/json", msgspec.json.encode(doc)

    def _metrics(self) -> _Answer:
        return HTTPStatus.OK, METRICS, self.metrics.render()


class _Reply(NamedTuple):
    status: int
    content_type: str
    body: bytes
    send_body: bool = True  # False for HEAD: the head says the length, no body follows


def _refusal(status: HTTPStatus, head_only: bool = False) -> _Reply:
    return _Reply(status, TEXT, f"{status.value} {status.phrase}\n".encode(), not head_only)
