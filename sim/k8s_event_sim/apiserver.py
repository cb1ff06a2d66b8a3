"""A simulated kube-apiserver serving core/v1 Events, for demos, integration tests and benchmarks.

It follows the API-concepts rules the bridge relies on, as the real server applies them:

- one revision counter for the whole store (etcd's); every write takes the next revision;
- paged lists (``limit``/``continue``) served from one snapshot, 410 ``Expired`` when the
  snapshot behind a continue token has been compacted;
- watches from a resourceVersion (every later change, in order, then live ones), from
  ``""``/``"0"`` (synthetic ADDED in no order), HTTP 200 + an ERROR 410 line when compacted;
- no bookmarks on Event watches by default, as a default kube-apiserver (it serves them from
  etcd, not from the watch cache); with ``bookmark_interval`` set, bookmarks as the watch cache
  sends them: the current global revision every interval and one before the deadline;
- Event field selectors (``=``, ``==``, ``!=``), the Event TTL, bearer-token auth.

On top of that, :class:`Faults` injects the failures a client must survive. Store operations
(:meth:`SimApiServer.create_event` and friends) are synchronous: they take effect at once and
are queued to every open watch in the same step, so nothing can slip between.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import collections
import contextlib
import dataclasses
import datetime
import random
import re
import ssl
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import msgspec
from aiohttp import web

__all__ = ["Faults", "RequestRecord", "SimApiServer"]

Obj = dict[str, Any]
_T = TypeVar("_T")

DEFAULT_KUBE_SYSTEM_UID = "3c1f6a52-8d0e-4b7a-9f25-6e4d2b8c7a10"

# The field labels the real server accepts for core/v1 Events (AddFieldLabelConversionsForEvent
# plus reportingComponent, which newer servers add).
EVENT_FIELD_LABELS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
        "metadata.namespace",
        "metadata.name",
    }
)

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)
LIST_EXPIRED = "The resourceVersion for the provided list is too old."

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "AlreadyExists",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

MESSAGES = {
    401: "Unauthorized",
    403: "forbidden",
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: simulated fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted",
}

# Lines a watcher may have queued before it is closed as too slow (the real cacher terminates
# a watcher whose buffer stays full; the client then re-watches from its last resourceVersion).
WATCH_BUFFER = 10_000
# Lines written to a watch stream in one write.
WATCH_BATCH = 256

MALFORMED_LINES = (
    b'{"type":"ADDED","object":{"kind":"Event","apiVersion":"v1","metadata":{"na\n',
    b"not json\n",
    b'{"type":"WEIRD","object":{}}\n',
)

_EVENTS_PATH = re.compile(r"^/api/v1/(namespaces/[^/]+/)?events(/[^/]*)?$")
_NAMESPACE_IN_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/events")
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool


@dataclasses.dataclass
class Faults:
    """Failures injected on the events endpoints; all off by default.

    ``injected`` counts what each fault did: ``status_<code>``, ``reset``, ``drop_watch``,
    ``reset_watch``, ``malformed``, ``split_chunk``, ``stall``, ``refuse``, ``forbidden``.
    """

    # end every watch stream (clean chunked end) once it has written N lines
    drop_watches_after: int | None = None
    # the next requests each pop one (code, headers) and get it with a Status body
    status_next: list[tuple[int, dict[str, str]]] = dataclasses.field(default_factory=list)
    # the next N requests are answered by aborting the TCP connection
    reset_next: int = 0
    # abort the TCP connection of every watch once it has written N lines
    reset_watches_after: int | None = None
    # set by refuse_connections()/accept_connections(); set by hand, requests are reset
    refuse: bool = False
    # after every N real watch lines, one malformed line (truncated, not JSON, unknown type)
    malformed_every: int | None = None
    # write watch data in small random chunks (lines split, sometimes several in one chunk)
    split_lines: bool = False
    # watches send nothing at all (no bookmarks either) while set
    stall_watches: bool = False
    # namespaces whose Events this client may not list or watch (RBAC): 403, as the real one
    forbidden_namespaces: set[str] = dataclasses.field(default_factory=set)
    # reads of objects (pods, replicasets...: the enrichment's) wait while this is cleared;
    # None: they answer at once
    objects_gate: asyncio.Event | None = None
    injected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class RequestRecord:
    """One request as the server saw it; ``status`` 0 means no response (reset or in progress)."""

    method: str
    path: str
    query: dict[str, str]
    status: int = 0


_RECORD = web.RequestKey("sim_record", RequestRecord)


class ApiError(Exception):
    """An error answered as a ``Status`` object."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")

    def status(self) -> Obj:
        return status_object(self.code, self.message, self.reason)


def status_object(code: int, message: str, reason: str | None = None) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }


def status_response(code: int, message: str, reason: str | None = None) -> web.Response:
    return web.Response(
        status=code,
        body=msgspec.json.encode(status_object(code, message, reason)),
        content_type="application/json",
    )


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def clone(obj: _T) -> _T:
    """A deep copy of JSON data (several times faster than copy.deepcopy)."""
    copied: _T = msgspec.json.decode(msgspec.json.encode(obj))
    return copied


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value and leaves both arguments alone."""
    if not isinstance(patch, dict):
        return clone(patch)
    result: Obj = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result


# -- field selectors ---------------------------------------------------------------------------

Requirement = tuple[str, str, str]  # (field, operator, value), operator "=" or "!="


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            current.append(char)
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, escaped = [], False
    for char in value:
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            out.append(char)
    return "".join(out)


def parse_field_selector(selector: str) -> list[Requirement]:
    """Parse like apimachinery's ``fields.ParseSelector`` then check the Event field labels.

    Raises :class:`ApiError` 400 with the real server's messages.
    """
    requirements: list[Requirement] = []
    if not selector.strip():
        return requirements
    for part in _split_unescaped(selector, ","):
        if not part:
            continue
        term = _split_term(part)
        if term is None:
            raise ApiError(400, f"invalid selector: '{selector}'; can't understand '{part}'")
        requirements.append(term)
    for field, _, _ in requirements:
        if field not in EVENT_FIELD_LABELS:
            raise ApiError(400, f"field label not supported: {field}")
    return requirements


def _split_term(term: str) -> Requirement | None:
    index = 0
    while index < len(term):
        if term[index] == "\\":
            index += 2
            continue
        for operator in ("!=", "==", "="):
            if term.startswith(operator, index):
                field = term[:index].strip()
                value = _unescape(term[index + len(operator) :])
                return field, ("!=" if operator == "!=" else "="), value
        index += 1
    return None


def event_fields(obj: Obj) -> dict[str, str]:
    """The selectable fields of an Event (``ToSelectableFields`` in pkg/registry/core/event)."""
    meta = obj.get("metadata") or {}
    involved = obj.get("involvedObject") or {}
    source = (obj.get("source") or {}).get("component") or obj.get("reportingComponent") or ""
    return {
        "metadata.name": meta.get("name") or "",
        "metadata.namespace": meta.get("namespace") or "",
        "involvedObject.kind": involved.get("kind") or "",
        "involvedObject.namespace": involved.get("namespace") or "",
        "involvedObject.name": involved.get("name") or "",
        "involvedObject.uid": involved.get("uid") or "",
        "involvedObject.apiVersion": involved.get("apiVersion") or "",
        "involvedObject.resourceVersion": involved.get("resourceVersion") or "",
        "involvedObject.fieldPath": involved.get("fieldPath") or "",
        "reason": obj.get("reason") or "",
        "reportingComponent": obj.get("reportingComponent") or "",
        "source": source,
        "type": obj.get("type") or "",
    }


def selector_matches(requirements: list[Requirement], obj: Obj) -> bool:
    if not requirements:
        return True
    fields = event_fields(obj)
    for field, operator, value in requirements:
        if (fields[field] == value) != (operator == "="):
            return False
    return True


# -- continue tokens (apiserver/pkg/storage/continue.go) ---------------------------------------


def encode_continue(start: str, revision: int) -> str:
    raw = msgspec.json.encode({"v": "meta.k8s.io/v1", "rv": revision, "start": start})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, int]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = msgspec.json.decode(raw)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, f"invalid continue token: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        raise ApiError(400, "invalid continue token: continue key is not supported by this version")
    start, revision = data.get("start"), data.get("rv")
    if not isinstance(start, str) or not start or not isinstance(revision, int):
        raise ApiError(400, "invalid continue token: continue key is not valid")
    if revision <= 0:
        raise ApiError(400, "invalid continue token: incorrect encoded start resourceVersion")
    return start, revision


# -- the store ---------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Change:
    revision: int
    type: str  # ADDED, MODIFIED or DELETED
    key: str  # "<namespace>/<name>", like the etcd key under /registry/events/
    obj: Obj  # the new state; for DELETED the last state stamped with this revision
    prev: Obj | None
    encoded: bytes | None = None

    def line(self) -> bytes:
        if self.encoded is None:
            self.encoded = watch_line(self.type, self.obj)
        return self.encoded


@dataclasses.dataclass(slots=True)
class _Snapshot:
    revision: int
    objects: dict[str, Obj]
    keys: list[str]  # sorted


def watch_line(event_type: str, obj: Obj) -> bytes:
    return msgspec.json.encode({"type": event_type, "object": obj}) + b"\n"


def bookmark_object(revision: int) -> Obj:
    """A BOOKMARK's object: an Event with only metadata.resourceVersion set.

    Serialised as the real server does a zero-valued Go ``v1.Event`` (empty/null fields included).
    """
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(revision), "creationTimestamp": None},
        "involvedObject": {},
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": None,
        "reportingComponent": "",
        "reportingInstance": "",
    }


class _Watcher:
    __slots__ = (
        "aborted",
        "backlog",
        "live",
        "namespace",
        "overflowed",
        "requirements",
        "stopped",
        "transport",
        "wakeup",
    )

    def __init__(self, namespace: str | None, requirements: list[Requirement]) -> None:
        self.namespace = namespace
        self.requirements = requirements
        self.backlog: Iterator[bytes] = iter(())
        self.live: collections.deque[bytes] = collections.deque()
        self.wakeup = asyncio.Event()
        self.stopped = False
        self.aborted = False
        self.overflowed = False
        self.transport: asyncio.BaseTransport | None = None

    def convert(self, change: _Change) -> bytes | None:
        """The line this watcher gets for a change, as the cacher's convertToWatchEvent decides."""
        if self.namespace is not None and not change.key.startswith(self.namespace + "/"):
            return None
        if not self.requirements:
            return change.line()
        current = change.type != "DELETED" and selector_matches(self.requirements, change.obj)
        previous = change.prev is not None and selector_matches(self.requirements, change.prev)
        if current and previous:
            return change.line()
        if current:
            return watch_line("ADDED", change.obj) if change.type != "ADDED" else change.line()
        if previous:
            if change.type == "DELETED":
                return change.line()
            assert change.prev is not None
            gone = merge_patch(change.prev, {"metadata": {"resourceVersion": str(change.revision)}})
            return watch_line("DELETED", gone)
        return None

    def push(self, line: bytes) -> None:
        if self.stopped or self.overflowed:
            return
        self.live.append(line)
        if len(self.live) >= WATCH_BUFFER:
            self.overflowed = True
        self.wakeup.set()

    def stop(self, *, abort: bool = False) -> None:
        self.stopped = True
        if abort:
            self.aborted = True
            if self.transport is not None:
                self.transport.abort()  # type: ignore[attr-defined]
        self.wakeup.set()

    def next_batch(self) -> list[bytes]:
        batch: list[bytes] = []
        for line in self.backlog:
            batch.append(line)
            if len(batch) >= WATCH_BATCH:
                return batch
        while self.live and len(batch) < WATCH_BATCH:
            batch.append(self.live.popleft())
        return batch


def repeat_patch(current: dict[str, Any]) -> dict[str, Any]:
    """The merge patch a client-go recorder sends on a repeat of Event ``current``: a series
    bumped (events.k8s.io style), or ``count`` + 1 and ``lastTimestamp`` now (core/v1)."""
    series = current.get("series")
    if series:
        return {
            "series": {
                "count": int(series.get("count") or 1) + 1,
                "lastObservedTime": now_rfc3339_micro(),
            }
        }
    if current.get("count") is None and current.get("eventTime"):
        # events.k8s.io recorder: the first repeat starts a series at 2
        return {"series": {"count": 2, "lastObservedTime": now_rfc3339_micro()}}
    return {"count": int(current.get("count") or 1) + 1, "lastTimestamp": now_rfc3339()}


class SimApiServer:
    """A kube-apiserver stand-in serving ``/api/v1/events`` over real HTTP."""

    def __init__(
        self,
        *,
        bookmark_interval: float | None = None,
        event_ttl: float | None = None,
        tokens: set[str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        kube_system_uid: str = DEFAULT_KUBE_SYSTEM_UID,
        compaction_interval: float | None = None,
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.event_ttl = event_ttl
        self.tokens = tokens
        self.ssl_context = ssl_context
        self.kube_system_uid = kube_system_uid
        # like kube-apiserver's --etcd-compaction-interval: each tick compacts to the revision
        # seen at the previous tick, so at least one interval of history stays watchable
        self.compaction_interval = compaction_interval
        self.url = ""
        self.host = "127.0.0.1"
        self.port = 0
        self.resource_version = 1  # etcd starts at 1 on an empty cluster
        self.compacted = 0
        self.faults = Faults()
        self.requests: list[RequestRecord] = []
        self.watch_count = 0
        self.watch_overflows = 0
        self._objects: dict[str, Obj] = {}
        self._sorted_keys: list[str] | None = []
        self._log: list[_Change] = []
        self._snapshots: collections.OrderedDict[int, _Snapshot] = collections.OrderedDict()
        self._touched: dict[str, float] = {}  # key -> monotonic time of the last write
        self._watchers: set[_Watcher] = set()
        self._transports: set[asyncio.BaseTransport] = set()
        self._rng = random.Random()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        # the objects an Event may be about, by API path (put_object), and the namespaces' labels
        # (set_namespace): what the enrichment reads; namespace watches get every change
        self.cluster_objects: dict[str, Obj] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self._namespace_watches: set[asyncio.Queue[bytes | None]] = set()
        self.object_reads: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/api/v1/events", self._events)
        app.router.add_get("/api/v1/namespaces/{namespace}/events", self._events)
        app.router.add_get("/api/v1/namespaces/{namespace}/events/{name}", self._get_event)
        app.router.add_get("/api/v1/namespaces", self._namespaces)
        app.router.add_get("/api/v1/namespaces/{name}", self._namespace)
        app.router.add_get("/api/v1/namespaces/{namespace}/{resource}/{name}", self._object)
        app.router.add_get("/api/v1/{resource}/{name}", self._object)
        app.router.add_get(
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}", self._object
        )
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_get("/livez", self._ok)
        app.router.add_get("/version", self._version)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        self.host = host
        self._site = web.TCPSite(self._runner, host, port, ssl_context=self.ssl_context)
        await self._site.start()
        self.port = int(self._runner.addresses[0][1])
        scheme = "https" if self.ssl_context is not None else "http"
        self.url = f"{scheme}://{host}:{self.port}"
        if self.event_ttl is not None:
            self._tasks.append(asyncio.create_task(self._expiring(), name="sim-event-ttl"))
        if self.compaction_interval is not None:
            self._tasks.append(
                asyncio.create_task(self._compacting(self.resource_version), name="sim-compaction")
            )

    async def stop(self) -> None:
        self.close_watches()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def refuse_connections(self) -> None:
        """Stop listening (connection refused) and cut every open connection."""
        self.faults.refuse = True
        if self._site is not None:
            await self._site.stop()
            self._site = None
        for watcher in list(self._watchers):
            watcher.stop(abort=True)
        for transport in list(self._transports):
            transport.abort()  # type: ignore[attr-defined]
        self._transports.clear()
        self.faults.injected["refuse"] += 1

    async def accept_connections(self) -> None:
        """Listen again on the same port."""
        if self._site is None and self._runner is not None:
            self._site = web.TCPSite(
                self._runner, self.host, self.port, ssl_context=self.ssl_context
            )
            await self._site.start()
        self.faults.refuse = False

    def close_watches(self) -> None:
        """End every open watch stream now, with a clean end of the chunked body."""
        for watcher in list(self._watchers):
            watcher.stop()
        for q in list(self._namespace_watches):
            q.put_nowait(None)

    # -- the objects Events are about (for the enrichment) -----------------------------------

    def put_object(self, path: str, obj: dict[str, Any]) -> None:
        """An object the API server serves at ``path`` (``/api/v1/namespaces/ns/pods/p``)."""
        self.cluster_objects[path] = clone(obj)

    def put_deployment(
        self, namespace: str, name: str, pods: int, labels: dict[str, str] | None = None
    ) -> list[tuple[str, str]]:
        """A Deployment ``name`` → its ReplicaSet ``<name>-1`` → ``pods`` Pods ``<name>-1-<i>``
        (with ``labels``), each owned by a controller reference, with the labels and selectors
        the controllers write (the owners claim their children: a ReplicaSet's
        ``pod-template-hash``); the (name, uid) of each Pod."""
        deployment, replicaset = f"{namespace}-{name}", f"{namespace}-{name}-1"  # their uids
        selected = dict(labels or {"app": name})
        hashed = {**selected, "pod-template-hash": "1"}

        def owner(kind: str, owner_name: str, uid: str) -> list[dict[str, Any]]:
            return [
                {
                    "apiVersion": "apps/v1",
                    "kind": kind,
                    "name": owner_name,
                    "uid": uid,
                    "controller": True,
                }
            ]

        apps = f"/apis/apps/v1/namespaces/{namespace}"
        self.put_object(
            f"{apps}/deployments/{name}",
            {
                "metadata": {"name": name, "namespace": namespace, "uid": deployment},
                "spec": {"selector": {"matchLabels": selected}},
            },
        )
        self.put_object(
            f"{apps}/replicasets/{name}-1",
            {
                "metadata": {
                    "name": f"{name}-1",
                    "namespace": namespace,
                    "uid": replicaset,
                    "labels": hashed,
                    "ownerReferences": owner("Deployment", name, deployment),
                },
                "spec": {"selector": {"matchLabels": hashed}},
            },
        )
        out = []
        for i in range(pods):
            pod, uid = f"{name}-1-{i}", f"{replicaset}-{i}"
            self.put_object(
                f"/api/v1/namespaces/{namespace}/pods/{pod}",
                {
                    "metadata": {
                        "name": pod,
                        "namespace": namespace,
                        "uid": uid,
                        "labels": dict(hashed),
                        "ownerReferences": owner("ReplicaSet", f"{name}-1", replicaset),
                    }
                },
            )
            out.append((pod, uid))
        return out

    def set_namespace(self, name: str, labels: dict[str, str]) -> None:
        """A namespace with these labels; open namespace watches get the change."""
        event_type = "MODIFIED" if name in self.namespace_labels else "ADDED"
        self.namespace_labels[name] = dict(labels)
        self.resource_version += 1
        line = watch_line(event_type, self._namespace_object(name))
        for q in self._namespace_watches:
            q.put_nowait(line)

    def _namespace_object(self, name: str) -> Obj:
        uid = (
            self.kube_system_uid
            if name == "kube-system"
            else str(uuid.uuid5(uuid.UUID(self.kube_system_uid), name))
        )
        return {
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": uid,
                "resourceVersion": str(self.resource_version),
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {
                    "kubernetes.io/metadata.name": name,
                    **self.namespace_labels.get(name, {}),
                },
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    async def _namespaces(self, request: web.Request) -> web.StreamResponse:
        if self.faults.refuse:
            raise ApiError(503, "refused")
        if request.query.get("watch") not in ("true", "1", "True"):
            body = {
                "kind": "NamespaceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.resource_version)},
                "items": [self._namespace_object(n) for n in sorted(self.namespace_labels)],
            }
            return web.Response(body=msgspec.json.encode(body), content_type="application/json")
        lifetime = float(_int_param(request.query, "timeoutSeconds", 300))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        q: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._namespace_watches.add(q)
        try:
            deadline = asyncio.get_running_loop().time() + lifetime
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    line = await asyncio.wait_for(q.get(), remaining)
                except TimeoutError:
                    break
                if line is None:
                    break
                await response.write(line)
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        finally:
            self._namespace_watches.discard(q)
        return response

    async def _object(self, request: web.Request) -> web.Response:
        self.object_reads.append(request.path)
        gate = self.faults.objects_gate
        if gate is not None:
            await gate.wait()
        obj = self.cluster_objects.get(request.path)
        if obj is None:
            # not one of the objects Events are about: what the server does with any other
            # path (a subclass answers more there, e.g. Leases: tests/support.py)
            return await self._not_found(request)
        return web.Response(body=msgspec.json.encode(obj), content_type="application/json")

    # -- store operations --------------------------------------------------------------------

    def create_event(self, obj: dict[str, Any]) -> dict[str, Any]:
        event = clone(obj)
        meta = event.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ValueError("metadata.name or metadata.generateName is required")
            meta["name"] = meta["generateName"] + "".join(
                self._rng.choices("bcdfghjklmnpqrstvwxz2456789", k=5)
            )
        meta.setdefault("namespace", "default")
        key = f"{meta['namespace']}/{meta['name']}"
        if key in self._objects:
            raise ValueError(f'events "{meta["name"]}" already exists')
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["creationTimestamp"] = now_rfc3339()
        event["apiVersion"] = "v1"
        event["kind"] = "Event"
        return clone(self._commit("ADDED", key, event, None))

    def update_event(self, namespace: str, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        current = self._require(key)
        updated = merge_patch(current, changes)
        meta = updated.setdefault("metadata", {})
        for immutable in ("name", "namespace", "uid", "creationTimestamp"):
            meta[immutable] = current["metadata"][immutable]
        updated["apiVersion"] = "v1"
        updated["kind"] = "Event"
        return clone(self._commit("MODIFIED", key, updated, current))

    def bump_count(self, namespace: str, name: str) -> dict[str, Any]:
        """Record a repeat of an Event as the client-go recorders do."""
        current = self._require(f"{namespace}/{name}")
        return self.update_event(namespace, name, repeat_patch(current))

    def delete_event(self, namespace: str, name: str) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        current = self._require(key)
        return clone(self._commit("DELETED", key, current, current))

    def get_event(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._objects.get(f"{namespace}/{name}")
        return clone(obj) if obj is not None else None

    def list_events(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Deep copies of the current Events, sorted by key (namespace/name)."""
        prefix = f"{namespace}/" if namespace is not None else ""
        return [
            clone(self._objects[key]) for key in sorted(self._objects) if key.startswith(prefix)
        ]

    def compact(self, revision: int | None = None) -> None:
        """Forget the history at or below ``revision`` (default: the current revision)."""
        target = self.resource_version if revision is None else revision
        if target > self.resource_version:
            raise ValueError(f"revision {target} is in the future ({self.resource_version})")
        if target <= self.compacted:
            return
        self.compacted = target
        cut = bisect.bisect_right(self._log, target, key=lambda change: change.revision)
        del self._log[:cut]
        for old in [rev for rev in self._snapshots if rev < target]:
            del self._snapshots[old]

    @property
    def event_count(self) -> int:
        return len(self._objects)

    def _require(self, key: str) -> Obj:
        try:
            return self._objects[key]
        except KeyError:
            raise KeyError(f'events "{key.split("/", 1)[1]}" not found') from None

    def _commit(self, event_type: str, key: str, obj: Obj, prev: Obj | None) -> Obj:
        self.resource_version += 1
        revision = self.resource_version
        stamped = dict(obj)
        stamped["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(revision)}
        if event_type == "DELETED":
            del self._objects[key]
            self._touched.pop(key, None)
            self._sorted_keys = None
        else:
            if key not in self._objects:
                self._sorted_keys = None
            self._objects[key] = stamped
            self._touched.pop(key, None)
            self._touched[key] = time.monotonic()
        change = _Change(revision, event_type, key, stamped, prev)
        self._log.append(change)
        for watcher in list(self._watchers):
            line = watcher.convert(change)
            if line is not None:
                watcher.push(line)
        self._changed.set()  # wakes the current waiters; later ones wait for the next write
        self._changed.clear()
        return stamped

    def _snapshot(self, revision: int) -> _Snapshot:
        """The store as it was at ``revision`` (compacted <= revision <= current)."""
        cached = self._snapshots.get(revision)
        if cached is not None:
            self._snapshots.move_to_end(revision)
            return cached
        if revision == self.resource_version:
            objects = dict(self._objects)
            if self._sorted_keys is None:
                self._sorted_keys = sorted(self._objects)
            keys = self._sorted_keys
        else:
            objects = dict(self._objects)
            for change in reversed(self._log):
                if change.revision <= revision:
                    break
                if change.prev is None:
                    objects.pop(change.key, None)
                else:
                    objects[change.key] = change.prev
            keys = sorted(objects)
        snapshot = _Snapshot(revision, objects, keys)
        self._snapshots[revision] = snapshot
        while len(self._snapshots) > 8:
            self._snapshots.popitem(last=False)
        return snapshot

    async def _compacting(self, previous: int) -> None:
        assert self.compaction_interval is not None
        while True:
            await asyncio.sleep(self.compaction_interval)
            self.compact(previous)
            previous = self.resource_version

    async def _expiring(self) -> None:
        assert self.event_ttl is not None
        period = min(0.25, max(0.02, self.event_ttl / 4))
        while True:
            await asyncio.sleep(period)
            deadline = time.monotonic() - self.event_ttl
            expired = []
            for key, touched in self._touched.items():  # oldest write first
                if touched > deadline:
                    break
                expired.append(key)
            for key in expired:
                namespace, name = key.split("/", 1)
                self.delete_event(namespace, name)

    # -- HTTP --------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        record = RequestRecord(request.method, request.path, dict(request.query))
        self.requests.append(record)
        request[_RECORD] = record
        transport = request.transport
        if transport is not None:
            self._transports.add(transport)
        if _EVENTS_PATH.match(request.path):
            faults = self.faults
            if faults.refuse or faults.reset_next > 0:
                if not faults.refuse:
                    faults.reset_next -= 1
                faults.injected["reset"] += 1
                if transport is not None:
                    transport.abort()
                return web.Response(status=500)  # never sent: the connection is gone
            in_ns = _NAMESPACE_IN_PATH.match(request.path)
            if in_ns is not None and in_ns.group(1) in faults.forbidden_namespaces:
                faults.injected["forbidden"] += 1
                record.status = 403
                return status_response(
                    403,
                    'events is forbidden: User "system:serviceaccount:bridge:bridge" cannot '
                    f'list resource "events" in API group "" in the namespace "{in_ns.group(1)}"',
                )
            if faults.status_next:
                code, headers = faults.status_next.pop(0)
                faults.injected[f"status_{code}"] += 1
                faulty = status_response(code, MESSAGES.get(code, "simulated fault"))
                faulty.headers.update(headers)
                record.status = code
                return faulty
        if self.tokens is not None:
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or token.strip() not in self.tokens:
                record.status = 401
                return status_response(401, "Unauthorized")
        response: web.StreamResponse
        try:
            response = await handler(request)
        except ApiError as exc:
            response = web.Response(
                status=exc.code,
                body=msgspec.json.encode(exc.status()),
                content_type="application/json",
            )
        record.status = response.status
        return response

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "major": "1",
                "minor": "36",
                "gitVersion": "v1.36.0-sim",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.25.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            },
            dumps=lambda obj: msgspec.json.encode(obj).decode(),
        )

    async def _not_found(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            return status_response(
                405, "the server does not allow this method on the requested resource"
            )
        return status_response(404, "the server could not find the requested resource")

    async def _namespace(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        uid = (
            self.kube_system_uid
            if name == "kube-system"
            else str(uuid.uuid5(uuid.UUID(self.kube_system_uid), name))
        )
        body = {
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": uid,
                "resourceVersion": "1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"kubernetes.io/metadata.name": name},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        return web.Response(body=msgspec.json.encode(body), content_type="application/json")

    async def _get_event(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        obj = self._objects.get(f"{namespace}/{name}")
        if obj is None:
            raise ApiError(404, f'events "{name}" not found')
        return web.Response(body=msgspec.json.encode(obj), content_type="application/json")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        namespace = request.match_info.get("namespace")
        requirements = parse_field_selector(query.get("fieldSelector", ""))
        if query.get("labelSelector", "").strip():
            raise ApiError(400, "labelSelector is not supported by the simulated API server")
        watch = query.get("watch", "")
        if watch and watch not in _TRUE and watch not in {"0", "f", "F", "FALSE", "false", "False"}:
            raise ApiError(400, f'invalid value for watch: "{watch}"')
        if watch in _TRUE:
            return await self._watch(request, namespace, requirements)
        return await self._list(query, namespace, requirements)

    async def _list(
        self, query: Any, namespace: str | None, requirements: list[Requirement]
    ) -> web.Response:
        rv_param = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        token = query.get("continue", "")
        limit = _int_param(query, "limit", 0)
        if limit < 0:
            limit = 0
        if match:
            if match not in ("Exact", "NotOlderThan"):
                raise ApiError(
                    422,
                    f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported '
                    f'value: "{match}": supported values: "Exact", "NotOlderThan"',
                )
            if not rv_param:
                raise ApiError(
                    422,
                    'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            if token:
                raise ApiError(
                    422,
                    'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                    "resourceVersionMatch is forbidden when continue is provided",
                )
            if match == "Exact" and rv_param == "0":
                raise ApiError(
                    422,
                    'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                    'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
        prefix = f"{namespace}/" if namespace is not None else ""
        start = ""
        if token:
            if rv_param not in ("", "0"):
                raise ApiError(
                    400, "specifying resource version is not allowed when using continue"
                )
            start, revision = decode_continue(token)
            if ("/" in start and namespace is not None) or start.startswith("/"):
                raise ApiError(400, "invalid continue token: continue key is not valid")
            if revision < self.compacted:
                raise ApiError(410, CONTINUE_EXPIRED, "Expired")
        elif rv_param in ("", "0"):
            revision = self.resource_version
        else:
            wanted = _parse_rv(rv_param)
            if match == "Exact":
                if wanted < self.compacted:
                    raise ApiError(410, LIST_EXPIRED, "Expired")
                await self._wait_for_revision(wanted)
                revision = wanted
            else:
                await self._wait_for_revision(wanted)
                revision = self.resource_version
        snapshot = self._snapshot(revision)
        keys = snapshot.keys
        lo = bisect.bisect_left(keys, prefix + start)
        hi = bisect.bisect_left(keys, prefix[:-1] + "0") if prefix else len(keys)  # '0' = '/'+1
        items: list[Obj] = []
        index = lo
        while index < hi:
            obj = snapshot.objects[keys[index]]
            index += 1
            if selector_matches(requirements, obj):
                items.append({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
                if limit and len(items) >= limit:
                    break
        metadata: Obj = {"resourceVersion": str(revision)}
        if limit and index < hi:
            metadata["continue"] = encode_continue(
                keys[index - 1][len(prefix) :] + "\x00", revision
            )
            if not requirements:
                metadata["remainingItemCount"] = hi - index
        body = {"kind": "EventList", "apiVersion": "v1", "metadata": metadata, "items": items}
        return web.Response(body=msgspec.json.encode(body), content_type="application/json")

    async def _wait_for_revision(self, revision: int) -> None:
        """Like the watch cache: wait up to 3 s for a future revision, then 504."""
        deadline = time.monotonic() + 3.0
        while self.resource_version < revision:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ApiError(
                    504,
                    f"Too large resource version: {revision}, current: {self.resource_version}",
                    "Timeout",
                )
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def _watch(
        self, request: web.Request, namespace: str | None, requirements: list[Requirement]
    ) -> web.StreamResponse:
        query = request.query
        rv_param = query.get("resourceVersion", "")
        bookmarks = (
            self.bookmark_interval is not None and query.get("allowWatchBookmarks", "") in _TRUE
        )
        if query.get("sendInitialEvents", ""):
            raise ApiError(
                422,
                'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is "
                "enabled",
            )
        timeout_s = query.get("timeoutSeconds", "")
        timeout = float(_int_param(query, "timeoutSeconds", 0)) if timeout_s else 0.0
        if timeout <= 0:
            timeout = 1800.0 * (1 + self._rng.random())  # the server's 30-60 min
        record = request[_RECORD]
        self.watch_count += 1

        # Register and take the history in one synchronous step: no gap, no duplicate.
        watcher = _Watcher(namespace, requirements)
        expired: bytes | None = None
        if rv_param in ("", "0"):
            prefix = f"{namespace}/" if namespace is not None else ""
            current = [
                obj
                for key, obj in self._objects.items()
                if key.startswith(prefix) and selector_matches(requirements, obj)
            ]
            self._rng.shuffle(current)
            watcher.backlog = (watch_line("ADDED", obj) for obj in current)
        else:
            since = _parse_rv(rv_param)
            if since < self.compacted:
                message = f"too old resource version: {since} ({self.compacted})"
                expired = watch_line("ERROR", status_object(410, message, "Expired"))
            else:
                first = bisect.bisect_right(self._log, since, key=lambda change: change.revision)
                history = self._log[first:]
                watcher.backlog = (
                    line for line in map(watcher.convert, history) if line is not None
                )
        if expired is None:
            self._watchers.add(watcher)

        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.headers["Cache-Control"] = "no-cache, private"
        response.enable_chunked_encoding()
        watcher.transport = request.transport
        record.status = 200
        try:
            await response.prepare(request)
            if expired is not None:
                await response.write(expired)
            else:
                await self._stream(response, watcher, bookmarks, timeout)
            if not watcher.aborted:
                await response.write_eof()
        except ConnectionError:
            watcher.aborted = True
        finally:
            self._watchers.discard(watcher)
        return response

    async def _stream(
        self, response: web.StreamResponse, watcher: _Watcher, bookmarks: bool, lifetime: float
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lifetime
        pre_deadline = deadline - min(2.0, lifetime / 4)  # the cacher's "deadline - 2s" bookmark
        pre_deadline_sent = False
        interval = self.bookmark_interval or 0.0
        next_bookmark = loop.time() + interval
        counts = {"lines": 0, "real": 0}
        while not watcher.stopped:
            if self.faults.stall_watches:
                self.faults.injected["stall"] += 1
                while self.faults.stall_watches and not watcher.stopped:
                    if loop.time() >= deadline:
                        return
                    await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
                continue
            batch = watcher.next_batch()
            if batch:
                if not await self._emit(response, watcher, batch, counts):
                    return
                continue
            if watcher.overflowed or watcher.stopped:
                if watcher.overflowed:
                    self.watch_overflows += 1
                return
            now = loop.time()
            if now >= deadline:
                return
            wake_at = deadline
            if bookmarks:
                if not pre_deadline_sent and now >= pre_deadline:
                    pre_deadline_sent = True
                    line = watch_line("BOOKMARK", bookmark_object(self.resource_version))
                    if not await self._emit(response, watcher, [line], counts):
                        return
                    continue
                if now >= next_bookmark:
                    next_bookmark = now + interval
                    line = watch_line("BOOKMARK", bookmark_object(self.resource_version))
                    if not await self._emit(response, watcher, [line], counts):
                        return
                    continue
                wake_at = min(wake_at, next_bookmark)
                if not pre_deadline_sent:
                    wake_at = min(wake_at, pre_deadline)
            if self.faults.stall_watches:
                continue
            watcher.wakeup.clear()
            try:
                await asyncio.wait_for(watcher.wakeup.wait(), max(0.0, wake_at - now))
            except TimeoutError:
                pass

    async def _emit(
        self,
        response: web.StreamResponse,
        watcher: _Watcher,
        batch: list[bytes],
        counts: dict[str, int],
    ) -> bool:
        """Write lines with the faults applied; False when the stream must end."""
        faults = self.faults
        limit: int | None = None
        action = ""
        for after, kind in (
            (faults.drop_watches_after, "drop"),
            (faults.reset_watches_after, "reset"),
        ):
            if after is not None and (limit is None or after < limit):
                limit, action = after, kind
        if limit is not None:
            batch = batch[: max(0, limit - counts["real"])]
        out: list[bytes] = []
        for line in batch:
            out.append(line)
            counts["real"] += 1
            if faults.malformed_every and counts["real"] % faults.malformed_every == 0:
                out.append(MALFORMED_LINES[faults.injected["malformed"] % len(MALFORMED_LINES)])
                faults.injected["malformed"] += 1
        data = b"".join(out)
        if data:
            if faults.split_lines:
                for chunk in self._chunks(data):
                    await response.write(chunk)
                    await asyncio.sleep(0)
                    faults.injected["split_chunk"] += 1
            else:
                await response.write(data)
        counts["lines"] += len(out)
        if limit is not None and counts["real"] >= limit:
            if action == "drop":
                faults.injected["drop_watch"] += 1
                watcher.stop()
                watcher.live.clear()
            else:
                faults.injected["reset_watch"] += 1
                watcher.stop(abort=True)
            return False
        return True

    def _chunks(self, data: bytes) -> Iterable[bytes]:
        index = 0
        while index < len(data):
            roll = self._rng.random()
            if roll < 0.5:
                size = self._rng.randint(1, 8)
            elif roll < 0.85:
                size = self._rng.randint(9, 200)
            else:
                size = self._rng.randint(200, 4096)  # often several lines at once
            yield data[index : index + size]
            index += size


def _int_param(query: Any, name: str, default: int) -> int:
    value = query.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f'invalid value for {name}: "{value}"') from None


def _parse_rv(value: str) -> int:
    try:
        revision = int(value)
    except ValueError:
        raise ApiError(400, f'invalid resource version "{value}"') from None
    if revision < 0:
        raise ApiError(400, f'invalid resource version "{value}"')
    return revision
