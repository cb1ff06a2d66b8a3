"""What a new test starts from: the small helpers every tier shares, one copy each.

- Events: ``Workload`` (k8s_event_sim.workload) is the one writer of realistic Events, seeded,
  with every version's id in ``ids``; ``Workload(sim)`` writes to the simulated API server
  (the ``sim`` fixture of tests/conftest.py), tests/e2e/writer.py draws the same Events and
  writes them to a real kube-apiserver. Do not write another Event generator. A unit test's
  hand-set Event is ``event(name, rv, ...)`` (a core/v1 dict, only the fields asked for);
  ``as_event`` its bridge view, ``watch_line`` a watch line of it, ``cloudevent`` the
  structured CloudEvent the converter writes of it. Do not write another Event builder.
- Port fakes, one per port: ``FakeSource`` (the watch port, ``bridge.runtime.ports.
  ListerWatcher``) answers lists and watches of any resource from scripts, through the real
  pager and line reader; ``RecordingSink`` (the sink port), ``MemoryPublisher`` (publish),
  ``MemoryStore`` (checkpoints), ``Reader`` (the object reader and its Namespaces).
- Waiting: ``await eventually(check, timeout, what=...)`` until ``check()`` (sync or async)
  is truthy, ``eventually_sync`` without an event loop; never a fixed sleep, never a
  hand-written ``while time.monotonic() < deadline`` loop. A timeout names what it waited for.
- Servers and processes: ``LeasingSim`` (the simulator with the Lease calls of leader
  election), ``free_port()``, ``write_kubeconfig(path, server, ...)``,
  ``rss_kib(pid)``; the ``nats_server``, ``sim``, ``kubeconfig`` and ``run_bridge`` fixtures
  (tests/conftest.py); the bridge and the subscribers as child processes, configs and reading
  the stream back: tests/integration/harness.py.

The helpers the demo, the benchmark or the soak also need live in ``k8s_event_sim`` (or
its ``programs``) and are imported here from there, so each exists once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from bridge import errors
from bridge.core import events
from bridge.core.checkpoints import Checkpoint
from bridge.core.converting import Converter
from bridge.core.enrichment import object_path
from bridge.core.messages import Outgoing
from bridge.core.queueing import BoundedQueue
from bridge.core.resources import EVENTS, NAMESPACES, Resource
from bridge.kube import lines as watch_lines
from bridge.kube import paging
from k8s_event_sim.apiserver import SimApiServer, status_response
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import free_port
from k8s_event_sim.programs import memory_kb
from k8s_event_sim.waiting import NotMet, eventually, eventually_sync
from k8s_event_sim.workload import Workload, make_event

__all__ = [
    "OPEN",
    "Ever",
    "FakeSource",
    "LeasingSim",
    "MemoryPublisher",
    "MemoryStore",
    "NotMet",
    "Reader",
    "RecordingSink",
    "Stop",
    "Workload",
    "as_event",
    "cloudevent",
    "event",
    "eventually",
    "eventually_sync",
    "free_port",
    "make_event",
    "rss_kib",
    "watch_line",
    "write_kubeconfig",
]


def rss_kib(pid: int) -> int:
    """The resident set size of process ``pid`` in KiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    return memory_kb(pid)["VmRSS"]


_LEASES = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?")


class LeasingSim(SimApiServer):
    """The simulated API server and the three Lease calls of leader election (get, create,
    replace), so that a run with ``leader_election`` publishes ``leader_changed``. The
    simulator sends every path it does not serve to ``_not_found``: Leases are answered there."""

    def __init__(self) -> None:
        super().__init__()
        self.leases: dict[str, dict[str, Any]] = {}
        self.lease_rv = 0

    async def _not_found(self, request: web.Request) -> web.Response:
        m = _LEASES.fullmatch(request.path)
        if m is None:
            return await super()._not_found(request)
        namespace, name = m.groups()
        if request.method == "GET" and name:
            lease = self.leases.get(f"{namespace}/{name}")
            if lease is None:
                return status_response(404, f'leases "{name}" not found', "NotFound")
            return web.json_response(lease)
        body = await request.json()
        key = f"{namespace}/{name or body['metadata']['name']}"
        have = self.leases.get(key)
        if request.method == "POST" and have is not None:
            return status_response(409, "already exists", "AlreadyExists")
        if request.method == "PUT" and (
            have is None
            or body["metadata"].get("resourceVersion") != have["metadata"]["resourceVersion"]
        ):
            return status_response(409, "the object has been modified", "Conflict")
        self.lease_rv += 1
        body["metadata"].update(namespace=namespace, resourceVersion=str(self.lease_rv))
        self.leases[key] = body
        return web.json_response(body, status=201 if request.method == "POST" else 200)


# --- Event builders
#
# ``event(...)`` is the one hand-set core/v1 Event of the unit tests: the fields a test names,
# nothing drawn, nothing it did not ask for. The realistic ones, drawn from a seed, are
# ``make_event`` and ``Workload`` (k8s_event_sim.workload), as the integration tests write them;
# both give the same shape (a dict as the API server returns it), and the views below take
# either.

Time = str | datetime


def _time(t: Time) -> str:
    return t if isinstance(t, str) else t.strftime("%Y-%m-%dT%H:%M:%SZ")


def event(
    name: str = "web-1",
    rv: int | str = 1,
    *,
    namespace: str = "default",
    uid: str | None = None,
    reason: str = "BackOff",
    type: str = "Warning",
    kind: str = "Pod",
    involved: str | None = None,
    involved_object: dict[str, Any] | None = None,
    count: int | None = None,
    series: dict[str, Any] | None = None,
    first: Time | None = None,
    last: Time | None = None,
    event_time: Time | None = None,
    created: Time | None = None,
    message: str | None = None,
    meta: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A core/v1 Event as a watch gives it: ``name`` in ``namespace``, uid ``uid-<name>``
    unless given, resourceVersion ``rv``, of ``kind``/``involved`` (by default the name before
    its first dot, as the recorder names Events) with the ``involved_object`` keys added.

    ``count``, ``series``, the times (``first``/``last``: first/lastTimestamp, ``event_time``,
    ``created``: metadata.creationTimestamp; a datetime is written as Kubernetes writes whole
    seconds) and ``message`` are there only when given; ``meta`` adds keys to metadata;
    ``fields`` set top-level keys last, as given (a whole ``metadata``, a hostile shape, None)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}" if uid is None else uid,
        "resourceVersion": str(rv),
    }
    if created is not None:
        metadata["creationTimestamp"] = _time(created)
    metadata.update(meta or {})
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": {
            "kind": kind,
            "name": name.split(".", 1)[0] if involved is None else involved,
            **(involved_object or {}),
        },
        "reason": reason,
        "type": type,
    }
    optional = {
        "message": message,
        "count": count,
        "series": series,
        "firstTimestamp": None if first is None else _time(first),
        "lastTimestamp": None if last is None else _time(last),
        "eventTime": None if event_time is None else _time(event_time),
    }
    obj.update({k: v for k, v in optional.items() if v is not None})
    obj.update(fields)
    return obj


def as_event(obj: dict[str, Any]) -> events.Event:
    """The bridge's view of an Event dict (``bridge.core.events.Event``), as a watch reads it."""
    return events.from_obj(obj)


def watch_line(obj: dict[str, Any], type_: str = "ADDED") -> bytes:
    """One line of a watch: ``{"type": type_, "object": obj}``."""
    return msgspec.json.encode({"type": type_, "object": obj})


def cloudevent(
    obj: dict[str, Any],
    *,
    cluster: str = "prod-eu-1",
    **extensions: Any,
) -> dict[str, Any]:
    """The structured CloudEvent the bridge's converter writes for the Event ``obj`` (the
    documented form), with ``extensions`` set on it as a publisher could."""
    msg = Converter(cluster, "k8s.events", "structured").convert(obj)
    doc: dict[str, Any] = json.loads(msg.payload)
    doc.update(extensions)
    return doc


# --- fakes of the watch port


class Stop(Exception):
    """A ``FakeSource`` script is used up: ends a watcher's run in a test."""


class _Open:
    def __repr__(self) -> str:
        return "OPEN"


OPEN = _Open()  # a watch's last line: it stays open, and quiet, until cancelled


@dataclass(frozen=True)
class Ever:
    """A script entry that every call from then on gets: never used up."""

    answer: Any


def _next(script: list[Any]) -> Any:
    if not script:
        raise Stop
    if isinstance(script[0], Ever):
        return script[0].answer
    return script.pop(0)


async def _reads(script: list[Any]) -> AsyncIterator[list[bytes]]:
    """A watch's lines: consecutive ones arrive together, as in one read of the socket; an
    exception is raised where it stands, ``OPEN`` keeps the watch open."""
    chunk: list[bytes] = []
    for item in script:
        if isinstance(item, bytes):
            chunk.append(item)
            continue
        if chunk:
            yield chunk
        chunk = []
        if item is OPEN:
            await asyncio.Event().wait()
        raise item
    if chunk:
        yield chunk


class FakeSource:
    """The watch port (``bridge.runtime.ports.ListerWatcher``) in memory, the one fake of it.
    Pages and lines go through the real pager and line reader, as ``KubeClient``'s do.

    It answers for ``resource`` from ``lists`` and ``watches``; for another resource from the
    fake ``serve`` gave it (else ``Stop``). Each script entry is used by one call, in order, an
    ``Ever`` entry by every call from then on; a call with none left raises ``Stop``.

    - a list entry: a page (``{"metadata": ..., "items": [...]}``), an exception to raise, or
      a callable that returns either (read at the call: live data);
    - a watch entry: an exception to raise as it opens; the watch's lines (bytes, an
      exception raised after the lines before it, ``OPEN``); an async iterator of reads (lists
      of lines); or a callable of the resourceVersion watched from that returns one of these.
    """

    def __init__(self, lists: Any = (), watches: Any = (), *, resource: Resource = EVENTS):
        self.resource = resource
        self.lists = list(lists)
        self.watches = list(watches)
        self.list_calls: list[dict[str, Any]] = []
        self.watch_calls: list[dict[str, Any]] = []
        self.probe_selectors: list[str] = []  # the field selectors of lists of one (probes)
        self.reloads = 0
        self.on_watch: Callable[[], None] = lambda: None  # e.g. move the clock: the watch lasts
        self._others: dict[str, FakeSource] = {}

    def serve(self, resource: Resource, lists: Any = (), watches: Any = ()) -> FakeSource:
        """Answer for ``resource`` too, from its own scripts: the fake that does."""
        fake = self._others[resource.name] = FakeSource(lists, watches, resource=resource)
        return fake

    def _for(self, resource: Resource) -> FakeSource:
        if resource.name == self.resource.name:
            return self
        if resource.name not in self._others:
            raise Stop
        return self._others[resource.name]

    async def list_page(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        limit: int,
        cont: str | None = None,
        resource_version: str | None = None,
        field_selector: str = "",
    ) -> dict[str, Any]:
        fake = self._for(resource)
        fake.list_calls.append({"limit": limit, "cont": cont})
        if limit == 1:
            fake.probe_selectors.append(field_selector)
        answer = _next(fake.lists)
        if callable(answer):
            answer = answer()
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    def list_pages(self, resource: Resource, namespace: str | None, **kw: Any) -> Any:
        return paging.list_pages(self.list_page, resource, namespace, **kw)

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
        skipped: Callable[[str, Any], None],
    ) -> AsyncIterator[Any]:
        fake = self._for(resource)
        fake.watch_calls.append({"rv": resource_version, "timeout": timeout_seconds})
        fake.on_watch()
        answer = _next(fake.watches)
        if callable(answer):
            answer = answer(resource_version)
        if isinstance(answer, Exception):
            raise answer
        reads = _reads(answer) if isinstance(answer, list) else answer
        yield watch_lines.read_lines(reads, resource, skipped)

    async def reload_credentials(self) -> None:
        self.reloads += 1


# --- fakes of the sink port


class RecordingSink:
    """The sink port (``bridge.runtime.ports.Sink``: what a watcher hands on) in memory, the
    one fake of it: each kind of call in its own list, and ``told``, the status calls (gap,
    reachability, degradation) in the order they came."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, ...]] = []
        self.got: list[tuple[str, str, int]] = []  # (watch type, Event name, rv)
        self.marks: list[int] = []
        self.gaps: list[tuple[int, int]] = []
        self.certainty: list[str] = []
        self.why: list[str] = []
        self.reach: list[bool] = []
        self.degraded: list[tuple[bool, Any]] = []

    async def items(self, batch: list[tuple[str, events.Event, int]]) -> None:
        for watch_type, obj, rv in batch:
            self.got.append((watch_type, obj.view.metadata.name, rv))

    def mark(self, rv: int) -> None:
        self.marks.append(rv)

    async def gap(self, from_rv: int, to_rv: int, *, certainty: str, why: str) -> None:
        self.told.append(("gap", from_rv, to_rv, certainty))
        self.gaps.append((from_rv, to_rv))
        self.certainty.append(certainty)
        self.why.append(why)

    async def reachability(self, reachable: bool, detail: str) -> None:
        self.told.append(("reachability", reachable, detail))
        self.reach.append(reachable)

    async def degradation(self, degraded: bool, data: dict[str, Any]) -> None:
        self.told.append(("degradation", degraded, data))
        self.degraded.append((degraded, data.get("reason")))


# --- fakes of the publish, store and reader ports


class MemoryPublisher:
    """The publish port (``bridge.runtime.ports.Publisher``) in memory, the one fake of it:
    acks every message at once, except the Events whose ids are held back."""

    def __init__(self, hold: frozenset[str] = frozenset(), fail: Exception | None = None) -> None:
        self.hold = hold
        self.fail = fail
        self.sent: list[str] = []
        self.held: list[Outgoing] = []

    async def run(self, queue: BoundedQueue[Outgoing]) -> None:
        while True:
            out = await queue.get()
            if self.fail is not None:
                raise self.fail
            self.sent.append(out.msg.subject.rsplit(".", 1)[-1] + " " + out.msg.msg_id)
            if out.msg.msg_id in self.hold:
                self.held.append(out)
            elif out.entry is not None:
                out.entry.settle()

    async def reap(self) -> None:
        await asyncio.Event().wait()

    @property
    def in_flight(self) -> int:
        return len(self.held)

    @property
    def busy(self) -> bool:
        return bool(self.held)

    def oldest_wait(self) -> float:
        return 0.0

    def sizes(self) -> dict[str, int]:
        return {"held": len(self.held)}


class MemoryStore:
    """The checkpoint port (``bridge.runtime.ports.CheckpointStore``) in memory, the one fake of
    it: what is saved, and every write in order."""

    def __init__(self, saved: dict[str, int] | None = None) -> None:
        self.saved = dict(saved or {})
        self.writes: list[tuple[str, int]] = []

    async def load(self, key: str) -> Checkpoint | None:
        rv = self.saved.get(key)
        return None if rv is None else Checkpoint(rv, None)

    async def save(self, key: str, resource_version: int) -> None:
        self.writes.append((key, resource_version))
        self.saved[key] = resource_version


class Reader:
    """The reader port (``bridge.runtime.ports.ObjectReader``) in memory, the one fake of it:
    the API server's objects and Namespaces; counts reads, can hang or fail."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.namespaces: list[dict[str, Any]] = []
        self.reads: list[str] = []
        self.fail: BaseException | None = None
        self.hang = asyncio.Event()  # set: answers; clear: every read waits
        self.hang.set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.watch_lines: asyncio.Queue[list[tuple[str, dict[str, Any]]] | None] = asyncio.Queue()
        self.lists = 0
        self.reloads = 0
        self.rv = 10
        self.source = FakeSource(
            lists=[Ever(self.list_namespaces)],
            watches=[Ever(self.watch_namespaces)],
            resource=NAMESPACES,
        )

    async def reload_credentials(self) -> None:
        self.reloads += 1

    def add(self, kind: str, o: dict[str, Any]) -> None:
        m = o["metadata"]
        self.objects[object_path((kind, m.get("namespace", ""), m["name"]))] = o

    async def get_object(self, path: str) -> dict[str, Any]:
        self.reads.append(path)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.hang.wait()
            await asyncio.sleep(0)
            if self.fail is not None:
                raise self.fail
            if path not in self.objects:
                raise errors.NotFound("not found")
            return self.objects[path]
        finally:
            self.in_flight -= 1

    # -- the Namespaces, through the one fake of the watch port (tests/support.py): what each
    # list and each watch of NAMESPACES answers (a subclass changes these two)

    def list_namespaces(self) -> dict[str, Any]:
        self.lists += 1
        return {"metadata": {"resourceVersion": "10"}, "items": list(self.namespaces)}

    def watch_namespaces(self, resource_version: str) -> Any:
        """Per batch put on ``watch_lines``, one read; None ends the watch. Each change gets
        the next resourceVersion (they come in order)."""

        async def reads():
            while True:
                batch = await self.watch_lines.get()
                if batch is None:
                    return
                out = []
                for kind, o in batch:
                    if "metadata" in o:
                        self.rv += 1
                        o = {**o, "metadata": {**o["metadata"], "resourceVersion": str(self.rv)}}
                    out.append(json.dumps({"type": kind, "object": o}).encode())
                yield out

        return reads()
