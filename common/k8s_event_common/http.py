"""One HTTP/1.1 server for every program's probes and scraper, on asyncio's streams.

    server = HttpServer(host, port, {**probes(health.problems, metrics.render), "/x": x})
    await server.start()  # server.port: the bound port (0 picks one)

A program gives its routes: a path → a callable answering ``(status, content type, body)``,
called for each GET or HEAD of the path and reading the program's live state; ``probes``
builds the usual three (``/healthz``, ``/readyz``, ``/metrics``). A route that raises answers
500 and is logged (``http_handler_failed``); the server goes on.

Not aiohttp.web: a few GET paths for probes and a scraper need none of a web framework, and
aiohttp.web's modules cost a program 1.4 MB of its idle memory (docs/performance.md). What
reaches the port is not trusted: a request's head is read within ``HEAD_TIMEOUT`` and
``HEAD_LIMIT`` bytes, a body is never read, an answer is taken within ``WRITE_TIMEOUT`` (all of
it: the socket's buffer included) and closes its connection. At most ``MAX_CONNECTIONS`` are
open at once; a new one then takes the place of the oldest still waiting for its head, so peers
that open connections and send nothing can not lock the probes out nor use up the process's
file descriptors (the kubelet's connection is answered in milliseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from email.utils import formatdate
from http import HTTPStatus
from typing import NamedTuple

from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.logformat import Logger

__all__ = [
    "HEAD_LIMIT",
    "HEAD_TIMEOUT",
    "MAX_CONNECTIONS",
    "METRICS",
    "TEXT",
    "WRITE_TIMEOUT",
    "Answer",
    "HttpServer",
    "Route",
    "probes",
]

HEAD_LIMIT = 8192  # request line and headers, bytes
HEAD_TIMEOUT = 10.0  # seconds to send them
MAX_CONNECTIONS = 64  # open at once; Prometheus and the kubelet use one or two
WRITE_TIMEOUT = 10.0  # seconds for a reader to take an answer
TEXT = "text/plain; charset=utf-8"
METRICS = "text/plain; version=0.0.4; charset=utf-8"

Answer = tuple[int, str, bytes]  # status, content type, body
Route = Callable[[], Answer]


def probes(ready: Callable[[], Sequence[str]], metrics: Callable[[], bytes]) -> dict[str, Route]:
    """``/healthz`` (200 ``ok``: the process answers), ``/readyz`` (200 ``ready``, or 503
    ``not ready: `` and the problems ``ready()`` names, joined by ``; ``), ``/metrics``
    (``metrics()`` in Prometheus' text format)."""

    def healthz() -> Answer:
        return HTTPStatus.OK, TEXT, b"ok\n"

    def readyz() -> Answer:
        problems = ready()
        if problems:
            text = "not ready: " + "; ".join(problems) + "\n"
            return HTTPStatus.SERVICE_UNAVAILABLE, TEXT, text.encode()
        return HTTPStatus.OK, TEXT, b"ready\n"

    def scrape() -> Answer:
        return HTTPStatus.OK, METRICS, metrics()

    return {"/healthz": healthz, "/readyz": readyz, "/metrics": scrape}


class HttpServer:
    """The routes, taken at construction, served on ``host:port`` from ``start()`` to
    ``stop()``; ``logger`` names the program's logger (``http_handler_failed``)."""

    def __init__(
        self,
        host: str,
        port: int,
        routes: Mapping[str, Route],
        *,
        clock: Clock = SYSTEM,
        logger: str = "k8s_event_common.http",
    ) -> None:
        self.host = host
        self.port = port
        self.clock = clock
        self.log = Logger(logger)
        self._routes = dict(routes)
        self._server: asyncio.Server | None = None
        self._closing = False
        self._connections: set[asyncio.Task[None]] = set()
        # those still waiting for their request's head, oldest first: the ones to evict
        self._waiting: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

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
            self.log.error("http_handler_failed", path=path, error=repr(exc))
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


class _Reply(NamedTuple):
    status: int
    content_type: str
    body: bytes
    send_body: bool = True  # False for HEAD: the head says the length, no body follows


def _refusal(status: HTTPStatus, head_only: bool = False) -> _Reply:
    return _Reply(status, TEXT, f"{status.value} {status.phrase}\n".encode(), not head_only)
