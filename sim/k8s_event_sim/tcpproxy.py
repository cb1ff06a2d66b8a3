"""A small TCP proxy that adds latency, for a real API server that answers slowly.

It forwards bytes both ways unchanged (TLS passes through: the client still talks to the
real kube-apiserver and checks its certificate) and holds every chunk from the server for
``delay`` seconds before passing it on, in order, as a congested network or an overloaded
API server looks to the client. ``delay`` may be changed at any time; it applies to what
arrives from then on. ``cut()`` stops forwarding anything, both ways, on open connections and
new ones (a network partition: no reset, no answer); ``heal()`` lets it all through again.
``stop()`` closes every connection and the port (a link that breaks); ``start()`` again
listens on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib


class LatencyProxy:
    def __init__(
        self, upstream_host: str, upstream_port: int, delay: float = 0.0, port: int = 0
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay = delay
        self.port = port
        self.connections = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def start(self) -> LatencyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self._open.wait()  # a partition: the connection is accepted, then silence
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        up = asyncio.create_task(self._pipe(client_r, server_w, delayed=False))
        down = asyncio.create_task(self._pipe(server_r, client_w, delayed=True))
        for t in (up, down):
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        for t in (up, down):
            t.cancel()
        for w in (client_w, server_w):
            with contextlib.suppress(Exception):
                w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    writer.write_eof() if writer.can_write_eof() else writer.close()
                    return
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._open.wait()
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await reader.read(65536)
                due = loop.time() + (self.delay if delayed else 0.0)
                await queue.put((due, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
