"""k8s_event_common.http: every program's server for probes and the scraper, on a real socket,
against peers that do not behave (what reaches the port is not trusted); and the bridge's four
paths on it (bridge.runtime.http)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

import pytest

from bridge.metrics import Metrics
from bridge.runtime import http as bridge_http
from bridge.runtime.health import Health
from k8s_event_common import http
from tests.support import eventually

PROBLEMS: list[str] = []  # what the fixture's /readyz names (a test sets it)


def broken() -> http.Answer:
    raise RuntimeError("bug")


ROUTES: dict[str, http.Route] = {
    **http.probes(lambda: PROBLEMS, lambda: b"up 1\n"),
    "/big": lambda: (200, http.TEXT, b"x" * (8 << 20)),
    "/broken": broken,
}


@pytest.fixture
async def server():
    PROBLEMS.clear()
    s = http.HttpServer("127.0.0.1", 0, ROUTES, logger="test.http")
    await s.start()
    yield s
    await s.stop()


async def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` and read the answer to its end (the server closes every connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def parse(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, body


async def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return parse(await exchange(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()))


async def test_the_probes(server):
    status, headers, body = await get(server.port, "/healthz")
    assert (status, body, headers["Connection"]) == (200, b"ok\n", "close")
    assert headers["Content-Type"] == http.TEXT
    assert (await get(server.port, "/readyz"))[::2] == (200, b"ready\n")
    PROBLEMS.extend(["scope * not synced", "nats not connected"])
    status, _, body = await get(server.port, "/readyz")
    assert (status, body) == (503, b"not ready: scope * not synced; nats not connected\n")
    status, headers, body = await get(server.port, "/metrics?x=1")  # a query is ignored
    assert (status, headers["Content-Type"], body) == (200, http.METRICS, b"up 1\n")
    assert int(headers["Content-Length"]) == len(body)


async def test_the_bridges_four_paths():
    s = bridge_http.HttpServer("127.0.0.1", 0, Health(30.0), Metrics("test"))
    s.status = lambda: {"scopes": {"*": "watching"}}
    await s.start()
    try:
        status, headers, body = await get(s.port, "/healthz")
        assert (status, body, headers["Connection"]) == (200, b"ok\n", "close")
        status, _, body = await get(s.port, "/readyz")
        assert status == 503 and body.startswith(b"not ready: ")  # nothing synced yet
        status, headers, body = await get(s.port, "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert b"k8s_event_bridge_ready 0.0" in body
        assert int(headers["Content-Length"]) == len(body)
        status, headers, body = await get(s.port, "/status")
        assert status == 200 and headers["Content-Type"] == "application/json"
        assert b'"scopes":{"*":"watching"}' in body and b'"ready":false' in body
    finally:
        await s.stop()


async def test_head_has_the_length_and_no_body(server):
    status, headers, body = await get(server.port, "/healthz", "HEAD")
    assert (status, headers["Content-Length"], body) == (200, "3", b"")
    status, headers, body = await get(server.port, "/nope", "HEAD")
    assert (status, body) == (404, b"") and int(headers["Content-Length"]) > 0


async def test_absolute_form_and_the_date(server):
    status, headers, body = await get(server.port, "http://bridge:8080/healthz?x")
    assert (status, body) == (200, b"ok\n")
    assert headers["Date"].endswith(" GMT")
    assert (await get(server.port, "http://bridge:8080"))[0] == 404


@pytest.mark.parametrize("turns", [0, *range(2, 8)])
async def test_stop_closes_connections_accepted_but_not_yet_started(turns):
    """Whichever step of asyncio's accepting the connections are at when the server stops
    (``turns`` of the loop after they connected), none is left waiting for its head. (After
    one turn asyncio 3.11 itself holds the accepted sockets: their transports are refused by
    the closed server and the sockets wait for the garbage collector, before any code of the
    bridge sees them.)"""
    s = http.HttpServer("127.0.0.1", 0, ROUTES)
    await s.start()
    socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(5)]
    for _ in range(turns):
        await asyncio.sleep(0)  # pacing: one turn of the loop each
    await asyncio.wait_for(s.stop(), 10)
    for sock in socks:
        sock.setblocking(False)

    def all_closed() -> bool:  # the server's end of every one, reset or closed
        for sock in socks:
            try:
                if sock.recv(1) != b"":
                    return False
            except BlockingIOError:
                return False
            except ConnectionResetError:
                pass
        return True

    await eventually(all_closed, 5, what="the server's end of every accepted connection")
    assert not s._connections
    for sock in socks:
        sock.close()


async def test_other_methods_and_paths(server):
    status, headers, _ = await get(server.port, "/healthz", "POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, _, _ = await get(server.port, "/nope")
    assert status == 404
    for bad in (
        b"GARBAGE\r\n\r\n",
        b"GET /healthz SPDY/3\r\n\r\n",
        b"GET  /healthz HTTP/1.1\r\n\r\n",
    ):
        status, _, _ = parse(await exchange(server.port, bad))
        assert status == 400, bad


async def test_a_head_over_the_limit_is_refused(server):
    big = b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (2 * http.HEAD_LIMIT) + b"\r\n\r\n"
    status, _, _ = parse(await exchange(server.port, big))
    assert status == 431


async def test_a_peer_that_closes_early_is_dropped(server):
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /heal")
    writer.close()
    await eventually(lambda: not server._connections, 10)
    assert (await get(server.port, "/healthz"))[0] == 200


async def test_a_slow_head_is_cut_off(server, monkeypatch):
    monkeypatch.setattr(http, "HEAD_TIMEOUT", 0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
    answer = await asyncio.wait_for(reader.read(), 10)
    assert parse(answer)[0] == 408
    writer.close()


async def test_a_new_connection_beyond_the_limit_evicts_the_oldest_idle_one(server, monkeypatch):
    """Peers that open connections and send nothing can not lock the probes out."""
    monkeypatch.setattr(http, "MAX_CONNECTIONS", 3)
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
    await eventually(lambda: len(server._connections) == 3, 10)
    for _ in range(5):  # each probe takes the place of the oldest idle peer, and is answered
        assert (await get(server.port, "/healthz"))[0] == 200
    oldest_reader, _ = held[0]
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(oldest_reader.read(), 10) == b""  # evicted, unanswered
    assert len(server._connections) <= 3
    for _, w in held:
        w.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_peer_that_does_not_read_is_dropped(server, monkeypatch):
    """The connection's descriptor is released within WRITE_TIMEOUT."""
    monkeypatch.setattr(http, "WRITE_TIMEOUT", 0.2)
    before = open_fds()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"GET /big HTTP/1.1\r\n\r\n")  # and never reads
    await eventually(lambda: not server._connections and open_fds() == before + 1, 10)
    sock.close()


async def test_an_answer_is_sent_whole_before_the_connection_is_let_go(server):
    """drain() waits for an empty buffer, not for one under asyncio's 64 KiB high-water
    mark: what a peer that does not read leaves in the transport would otherwise keep the
    descriptor after close() (how much that is depends on the kernel's buffers, so the
    setting itself is checked here, the behaviour by the test above)."""
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    await server._send(writer, http._Reply(200, http.TEXT, b"ok\n"))
    assert writer.transport.get_write_buffer_limits() == (0, 0)
    writer.close()


async def test_a_failing_handler_answers_500_is_logged_and_the_server_goes_on(server, caplog):
    caplog.set_level(logging.ERROR, "test.http")
    assert (await get(server.port, "/broken"))[0] == 500
    failed = [r for r in caplog.records if r.getMessage() == "http_handler_failed"]
    assert [(r.name, r.fields["path"]) for r in failed] == [("test.http", "/broken")]  # type: ignore[attr-defined]
    assert "RuntimeError('bug')" in failed[0].fields["error"]  # type: ignore[attr-defined]
    assert (await get(server.port, "/healthz"))[0] == 200


async def test_stop_does_not_wait_for_idle_peers(server):
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
    await eventually(lambda: len(server._connections) == 3, 10)
    await asyncio.wait_for(server.stop(), 10)
    for reader, writer in held:
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
