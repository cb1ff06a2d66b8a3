"""The load: Events written into a real kube-apiserver the way kubelets write them, and the truth
(every version the API server accepted).

A tick every ``1 / rate`` seconds draws one operation (``k8s_event_sim.workload``: the kubelet's
Pod Events, core/v1 style): a new Event, or with ``bump_ratio`` a repeat of a recent one (``count``
+ 1, ``lastTimestamp`` the time of the repeat). The time an Event carries is when it happened,
the tick, not when it reached the API server: an operation drawn while the API server is away
waits in the queue and is written right after it is back, in order, as client-go's recorder
retries what it could not send. Nothing is dropped, whatever the outage's length.

One writer sends the queue in order and sends an operation again until the API server answers
it: a connection refused or reset, a timeout, a 429 or 5xx is tried again after ``RETRY``
seconds with the same body, so an answer lost after the server wrote it costs nothing (a merge
patch of the same count and time changes nothing and answers the version written; a create
answered 409 is read back). Each accepted write is a :class:`Version` of the truth, tagged with
the phase the run was in when the API server accepted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from k8s_event_sim.workload import Workload

RETRY = 0.2  # seconds between two tries of one write while the API server does not answer
TIMEOUT = 10.0  # seconds one request may take


class LoadError(RuntimeError):
    """The API server refused a write for good (not an outage): the benchmark is broken."""


@dataclass(frozen=True)
class Version:
    """One version of an Event the API server accepted (from its answer)."""

    uid: str
    resource_version: str
    namespace: str
    name: str
    count: int
    last_timestamp: str  # RFC 3339, whole seconds: when it happened
    sent_at: float  # epoch seconds: when the try the API server answered was sent
    accepted_at: float  # epoch seconds: when its answer arrived
    phase: str
    created: bool

    @property
    def id(self) -> str:
        """``<uid>/<resourceVersion>``: the CloudEvent id of this version (docs/design.md)."""
        return f"{self.uid}/{self.resource_version}"

    @property
    def occurred(self) -> float:
        """``last_timestamp`` in epoch seconds."""
        return (
            datetime.strptime(self.last_timestamp, "%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=UTC)
            .timestamp()
        )


@dataclass
class _Op:
    namespace: str
    name: str | None  # None: a new Event (``body``)
    at: str  # when it happened (RFC 3339, seconds)
    body: dict[str, Any] | None = None
    patch: dict[str, Any] | None = None  # fixed at the first try, the same on every retry


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Recorders:
    """Writes Events into ``namespaces`` of the API server at ``url`` (admin ``ssl_context``)
    at ``rate`` operations a second while running; ``truth`` every version accepted."""

    url: str
    ssl_context: ssl.SSLContext
    namespaces: tuple[str, ...]
    rate: float
    bump_ratio: float = 0.3
    seed: int = 33
    phase: str = ""  # set by the run: the phase each accepted version is tagged with
    truth: list[Version] = field(default_factory=list)
    retries: int = 0  # writes sent again (the API server did not answer)
    max_queued: int = 0
    _queue: asyncio.Queue[_Op | None] = field(default_factory=asyncio.Queue)
    _current: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _ticking: asyncio.Event = field(default_factory=asyncio.Event)
    _session: aiohttp.ClientSession | None = None
    _inflight: _Op | None = None  # the operation being written

    def __post_init__(self) -> None:
        self.workload = Workload(
            seed=self.seed,
            kinds=("Pod",),
            style="core",
            namespaces=list(self.namespaces),
            now=lambda: datetime.now(UTC),
            recent=30,
        )

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def __aenter__(self) -> Recorders:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl_context),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT),
        )
        for ns in self.namespaces:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            status, text = await self._send("POST", "/api/v1/namespaces", body)
            if status not in (201, 409):
                raise LoadError(f"namespace {ns}: {status} {text[:300]}")
        self._tasks = [
            asyncio.create_task(self._tick(), name="load-tick"),
            asyncio.create_task(self._write(), name="load-write"),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            await asyncio.sleep(0.25)  # let aiohttp close its TLS transports

    def start(self) -> None:
        """Operations are drawn from now on."""
        self._ticking.set()

    def stop(self) -> None:
        """No more operations are drawn; what is queued is still written (:meth:`drained`)."""
        self._ticking.clear()

    def drained(self) -> bool:
        """Nothing drawn is left to write."""
        return self._queue.empty() and self._inflight is None

    # -- the draw

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        step = 1.0 / self.rate
        due = loop.time()
        while True:
            await self._ticking.wait()
            now = loop.time()
            if due < now - 1.0:  # paused, or the loop was busy: no catching up in a burst
                due = now
            self._queue.put_nowait(self._draw())
            self.max_queued = max(self.max_queued, self._queue.qsize())
            due += step
            await asyncio.sleep(max(0.0, due - loop.time()))

    def _draw(self) -> _Op:
        w = self.workload
        at = _rfc3339(time.time())
        repeat = w.draw_repeat(self.bump_ratio)
        if repeat is not None:
            return _Op(repeat[0], repeat[1], at)
        body = w.draw_event()
        body["metadata"].pop("managedFields", None)  # the server keeps its own
        body["firstTimestamp"] = body["lastTimestamp"] = at
        body["count"] = 1
        return _Op(body["metadata"]["namespace"], None, at, body=body)

    # -- the write

    async def _write(self) -> None:
        while True:
            op = await self._queue.get()
            if op is None:
                return
            self._inflight = op
            try:
                sent, obj = await self._until_accepted(op)
            finally:
                self._inflight = None
            self._record(op, obj, sent)

    async def _until_accepted(self, op: _Op) -> tuple[float, dict[str, Any]]:
        """(when the try that was answered was sent, the object answered)."""
        while True:
            sent = time.time()
            try:
                got = await self._once(op)
            except (aiohttp.ClientError, TimeoutError, OSError):
                got = None
            if got is not None:
                return sent, got
            self.retries += 1
            await asyncio.sleep(RETRY)

    async def _once(self, op: _Op) -> dict[str, Any] | None:
        """One try: the object the API server answered, or None (try again)."""
        base = f"/api/v1/namespaces/{op.namespace}/events"
        if op.name is None:
            assert op.body is not None
            status, text = await self._send("POST", base, op.body)
            if status == 409:  # written by a try whose answer was lost: read it back
                name = op.body["metadata"]["name"]
                status, text = await self._send("GET", f"{base}/{name}", None)
                if status == 200:
                    return self._same(json.loads(text), op)
            elif status == 201:
                return json.loads(text)  # type: ignore[no-any-return]
        else:
            current = self._current[(op.namespace, op.name)]
            if op.patch is None:
                op.patch = {"count": int(current.get("count") or 1) + 1, "lastTimestamp": op.at}
            status, text = await self._send(
                "PATCH", f"{base}/{op.name}", op.patch, "application/merge-patch+json"
            )
            if status == 200:
                return json.loads(text)  # type: ignore[no-any-return]
        if status == 429 or status >= 500 or status == 0:
            return None
        raise LoadError(f"{op.namespace}/{op.name or '(new)'}: {status} {text[:300]}")

    def _same(self, obj: dict[str, Any], op: _Op) -> dict[str, Any]:
        assert op.body is not None
        if obj.get("count") != op.body["count"]:
            raise LoadError(f"{op.namespace}: the Event read back is not the one created: {obj}")
        return obj

    async def _send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        content_type: str = "application/json",
    ) -> tuple[int, str]:
        assert self._session is not None
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._session.request(
            method, f"{self.url}{path}", data=data, headers=headers
        ) as r:
            return r.status, await r.text()

    def _record(self, op: _Op, obj: dict[str, Any], sent: float) -> None:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        self._current[key] = obj
        created = op.name is None
        if created:
            self.workload.record(obj, created=True)  # now a candidate for repeats
        version = Version(
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
            namespace=meta["namespace"],
            name=meta["name"],
            count=int(obj.get("count") or 0),
            last_timestamp=obj.get("lastTimestamp") or "",
            sent_at=sent,
            accepted_at=time.time(),
            phase=self.phase,
            created=created,
        )
        if version.id not in self._seen:  # an answer read twice (a lost one, tried again)
            self._seen.add(version.id)
            self.truth.append(version)
