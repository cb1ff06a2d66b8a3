"""Hostile HTTP clients for any program's port (the bridge's, a subscriber's): what an attacker,
or a buggy scraper, does to a probe port, and what to read of the process meanwhile.

    proc = ConsumerProcess(config, log, preexec_fn=nofile_1024).start()  # a container's limit
    async with peak_fds(pid) as peak:
        flood = await idle_flood("127.0.0.1", proc.port)  # 1,100 half heads, held
        status, body = await probe("127.0.0.1", proc.port, "/readyz")
    peak.value < NOFILE
    flood.closed() == flood.opened  # the server let go of every one
    await flood.close()

The attacks: ``idle_flood`` (connections that send half a head and wait), ``trickle`` (a head
sent a byte at a time: a slow-loris), ``exchange`` (any request as bytes: a head over the
bound, a body with a GET), ``unread`` (clients that send a request whole and never read the
answer). Program-agnostic: a host, a port, a pid. No test lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

# The soft limit on open files a container gets by default from containerd 2.x (the hard
# limit stays); the shipped manifests set none.
NOFILE = 1024
HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # a request's head without its end


def nofile_1024() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: the child's soft limit on open files at
    ``NOFILE``, its hard limit as it was."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = NOFILE if hard == resource.RLIM_INFINITY else min(NOFILE, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_fds(pid: int) -> int:
    """How many files process ``pid`` has open now (``/proc/<pid>/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_limit(pid: int) -> int:
    """Process ``pid``'s soft limit on open files (``/proc/<pid>/limits``): that
    ``nofile_1024`` took."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft = line.split()[3]
                return -1 if soft == "unlimited" else int(soft)
    raise LookupError(f"no open files limit for {pid}")


@dataclass
class Peak:
    value: int = 0


@contextlib.asynccontextmanager
async def peak_fds(pid: int, interval: float = 0.02) -> AsyncIterator[Peak]:
    """The most files process ``pid`` had open while the block ran, sampled every
    ``interval`` seconds (and at both ends)."""
    peak = Peak(open_fds(pid))

    async def sample() -> None:
        while True:
            peak.value = max(peak.value, open_fds(pid))
            await asyncio.sleep(interval)  # pacing of the samples

    task = asyncio.create_task(sample())
    try:
        yield peak
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    peak.value = max(peak.value, open_fds(pid))


@dataclass
class Flood:
    """Connections held open by a flood: ``opened`` of them, ``failed`` could not be opened
    (refused, or not accepted within the bound); each is watched for the server's end."""

    opened: int = 0
    failed: int = 0
    _closed: int = 0
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)
    _watchers: list[asyncio.Task[None]] = field(default_factory=list)

    def closed(self) -> int:
        """How many of them the server closed (a reset, or an answer and its end), so far."""
        return self._closed

    async def close(self) -> None:
        """Close every connection still open from this end."""
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        for writer in self._writers:
            writer.transport.abort()
        self._watchers.clear()
        self._writers.clear()

    async def _watch(self, reader: asyncio.StreamReader) -> None:
        """Read until the server's end: an answer (a 408, say) then EOF, or a reset."""
        with contextlib.suppress(OSError):
            while await reader.read(4096):
                pass
        self._closed += 1


async def idle_flood(
    host: str,
    port: int,
    connections: int = 1100,
    partial: bytes = HALF_HEAD,
    *,
    open_timeout: float = 30.0,
    at_once: int = 100,
) -> Flood:
    """Open ``connections`` TCP connections to ``host:port`` (``at_once`` being opened at a
    time, each within ``open_timeout``), send ``partial`` on each and then nothing, and keep
    them open; returns once every one is open (or failed). This process's own soft limit on
    open files is raised for them when it is lower (up to its hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 256  # and what the test itself has open
    if soft != resource.RLIM_INFINITY and soft < want:
        raise_to = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raise_to, hard))
    flood = Flood()
    gate = asyncio.Semaphore(at_once)

    async def one() -> None:
        async with gate:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), open_timeout
                )
            except (OSError, TimeoutError):
                flood.failed += 1
                return
        flood.opened += 1
        flood._writers.append(writer)
        flood._watchers.append(asyncio.create_task(flood._watch(reader)))
        with contextlib.suppress(OSError):  # an evicted one may be reset already
            writer.write(partial)
            await writer.drain()

    await asyncio.gather(*(one() for _ in range(connections)))
    return flood


def status_of(answer: bytes) -> int:
    """The status code of an HTTP answer's first line (``ConnectionError`` when there is
    none)."""
    status_line = answer.split(b"\r\n", 1)[0].split(b" ")
    if (
        len(status_line) < 2
        or not status_line[0].startswith(b"HTTP/")
        or not status_line[1].isdigit()
    ):
        raise ConnectionError(f"no HTTP answer: {answer[:80]!r}")
    return int(status_line[1])


async def exchange(host: str, port: int, request: bytes, timeout: float = 30.0) -> bytes:
    """Send ``request`` as given (a head, a body or part of one, anything) and read what comes
    back until the server ends the connection, within ``timeout`` seconds (else
    ``TimeoutError``): the server's whole answer. A reset after some of an answer keeps what
    came; a reset before any raises ``ConnectionResetError``."""

    async def talk() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        got = bytearray()
        try:
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                writer.write(request)
                await writer.drain()
            try:
                while chunk := await reader.read(65536):
                    got += chunk
            except ConnectionResetError:
                if not got:
                    raise
        finally:
            writer.transport.abort()
        return bytes(got)

    return await asyncio.wait_for(talk(), timeout)


async def probe(
    host: str, port: int, path: str = "/healthz", timeout: float = 3.0
) -> tuple[int, bytes]:
    """A fresh client's ``GET path``: the status and the body, read to the server's end within
    ``timeout`` seconds (else ``TimeoutError``; a refused or reset connection raises
    ``OSError``). 3 s: what the flooded subscribers' probes timed out at (issue 39)."""
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    answer = await exchange(host, port, request, timeout)
    return status_of(answer), answer.partition(b"\r\n\r\n")[2]


@dataclass
class Trickled:
    """What came of a head sent a byte at a time: ``sent`` of its ``length`` bytes went out;
    ``answer`` is what the server sent back (``b""``: not a word); ``ended``: it ended the
    connection (else the trickle gave up, the head sent whole and answered, or at its
    deadline)."""

    sent: int
    length: int
    answer: bytes
    ended: bool

    @property
    def whole(self) -> bool:
        """The server waited for the whole head."""
        return self.sent == self.length


async def trickle(
    host: str, port: int, head: bytes, interval: float = 1.0, timeout: float = 120.0
) -> Trickled:
    """A slow-loris: send ``head`` one byte every ``interval`` seconds (each byte resets a
    timeout that counts from the last byte read), while reading; until the server ends the
    connection, or the head went whole and was answered (a server that keeps connections
    alive), or ``timeout`` seconds."""
    reader, writer = await asyncio.open_connection(host, port)
    sent = 0
    got = bytearray()

    async def send() -> None:
        nonlocal sent
        with contextlib.suppress(OSError):
            for i in range(len(head)):
                writer.write(head[i : i + 1])
                await writer.drain()
                sent += 1
                await asyncio.sleep(interval)  # the attack's pace

    async def receive() -> bool:
        with contextlib.suppress(OSError):
            while chunk := await reader.read(65536):
                got.extend(chunk)
                if sent == len(head) and b"\r\n\r\n" in got:
                    return False  # answered once whole, the connection kept
        return True

    sending = asyncio.create_task(send())
    try:
        ended = await asyncio.wait_for(receive(), timeout)
    except TimeoutError:
        ended = False
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        writer.transport.abort()
    return Trickled(sent, len(head), bytes(got), ended)


async def unread(host: str, port: int, request: bytes, connections: int) -> list[socket.socket]:
    """``connections`` clients that each send ``request`` whole and then never read: their
    sockets, open, each with the smallest receive buffer the kernel allows (an answer of more
    than a few KiB is left for the server to hold). The caller closes them."""
    loop = asyncio.get_running_loop()
    socks: list[socket.socket] = []
    try:
        for _ in range(connections):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
            sock.setblocking(False)
            await loop.sock_connect(sock, (host, port))
            await loop.sock_sendall(sock, request)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks
