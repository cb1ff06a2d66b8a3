"""The bridge's client of the API server: lists and watches of a resource, objects, Leases, the
cluster's id, credentials that rotate.

The connection is the one both programs share (``k8s_event_common.kube.connection``):
kubeconfig and in-cluster config, the token that rotates, the request (``ApiClient.call_api``
with ``_preload_content=False``), the status checked and every foreign exception mapped to
the ``errors.KubeError`` tree. What is the bridge's own is here: its connection pool sized for
one watch per scope, aiohttp's read buffer kept small, the watch's socket with TCP keepalive
and its stream read as it arrives. kubernetes_asyncio's generated API classes, ``Watch``
helper and model objects are not used: one list and one watch serve any resource (its path
and decoder are data, ``bridge.core.resources``), lists are paged by ``bridge.kube.paging``,
watch lines are split and decoded by ``bridge.kube.lines`` (with the resource's decoder,
msgspec).

Every path the bridge sends is built by ``k8s_event_common.kube.paths`` from checked, escaped
segments: a namespace or a name that is not a Kubernetes name (``..``, a ``/``, a ``%``) is
``Invalid`` and nothing is sent (the configured ones are refused at load, ``bridge.settings``).
No path is written here by hand (tests/unit/test_kube_paths_by_hand.py walks the package
for one).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec

from bridge import errors
from bridge.core.resources import Resource
from bridge.kube import paging
from bridge.kube.lines import Skipped, WatchEntry, read_lines, split_lines
from bridge.settings import KubernetesSettings
from k8s_event_common.kube import paths
from k8s_event_common.kube.connection import (
    FOREIGN,
    RELOAD_COALESCE,
    RETIRE_AFTER,
    Connection,
    in_cluster,
    pod_namespace,
)
from k8s_event_common.kube.errors import KubeConfigError, error_for_status

__all__ = [
    "READ_BUFSIZE",
    "RELOAD_COALESCE",
    "RETIRE_AFTER",
    "KubeClient",
    "decode_list_page",
    "error_for_status",
    "in_cluster",
    "keep_alive",
    "lease_namespace",
    "pod_namespace",
]

# what the bridge calls besides its resources: the Leases of leader election, and the
# kube-system Namespace (whose uid is the id of a cluster without cluster.name)
LEASE_API = "coordination.k8s.io/v1"
KUBE_SYSTEM = paths.object_path("v1", "namespaces", None, "kube-system")

READ_BUFSIZE = 2**16  # aiohttp pauses reading a response at twice this much buffered
KEEPALIVE_PROBES = 3  # unanswered keepalive probes before a connection counts as dead


class _List(msgspec.Struct):
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    items: list[msgspec.Raw] | None = None


_decode_list = msgspec.json.Decoder(_List).decode
_decode_any = msgspec.json.Decoder().decode


def decode_list_page(body: bytes) -> dict[str, Any]:
    """A list answer → ``{"metadata": {...}, "items": [raw item, ...] | None}``; the items stay
    as listed (bytes): the watcher reads them like watch objects. Raises ``KubeUnavailable``."""
    try:
        page = _decode_list(body)
    except msgspec.ValidationError as exc:
        raise errors.KubeUnavailable(f"list answer has an unexpected shape: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise errors.KubeUnavailable(f"unparsable response: {body[:100]!r}") from exc
    return {"metadata": page.metadata, "items": page.items}


def _decode_object(body: bytes) -> dict[str, Any]:
    try:
        doc = _decode_any(body)
    except msgspec.DecodeError as exc:
        raise errors.KubeUnavailable(f"unparsable response: {body[:100]!r}") from exc
    if not isinstance(doc, dict):
        raise errors.KubeUnavailable("response is not a JSON object")
    return doc


def _limit_read_buffer(api_client: Any) -> None:
    """Make aiohttp stop reading a watch at READ_BUFSIZE*2 buffered bytes, not 4 MiB.

    kubernetes_asyncio opens its session with ``read_bufsize=2**21`` so that its ``Watch``
    can read a 1.5 MiB object as one line. The bridge splits lines itself (any length), and
    with that buffer a fast watch hands over 4 MiB at a time: thousands of Events decoded,
    held and converted at once, a peak of memory for nothing (docs/performance.md). aiohttp
    has no public setter for an open session; its ``_read_bufsize`` (read per request) is set
    when present.
    """
    session = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
    if session is not None and hasattr(session, "_read_bufsize"):
        session._read_bufsize = READ_BUFSIZE


class KubeClient:
    """Lists and watches a resource (the ``ListerWatcher`` port), reads objects and Leases;
    ``reload_credentials()`` after a 401/403."""

    def __init__(self, settings: KubernetesSettings, extra_connections: int = 0) -> None:
        self.settings = settings
        # more requests at once than the watches and lists: the enrichment's reads and its
        # namespace watch
        self.extra_connections = extra_connections
        self.connection = Connection(
            kubeconfig=settings.kubeconfig,
            context=settings.context,
            timeout=aiohttp.ClientTimeout(
                connect=settings.connect_timeout,  # includes waiting for a pooled connection
                sock_connect=settings.connect_timeout,
                sock_read=settings.read_timeout,
            ),
            # One long watch per scope, plus lists: never wait for a pooled connection.
            pool_size=len(settings.namespaces) + 8 + extra_connections,
            # At most one retired client per scope (each scope's watch streams through one,
            # until its own timeout, at most watch_timeout_max < RETIRE_AFTER). A watch on a
            # client closed beyond that ends and is opened again from its resourceVersion, as
            # after any dropped connection.
            keep_retired=len(settings.scopes),
            # a 401 is the watch loop's to handle (reload, back off, count): not retried here
            reload_on_401=False,
            prepare=_limit_read_buffer,
        )

    async def connect(self) -> None:
        """Load the credentials (raises ``ConfigError``) and open a client; a client opened
        before is retired, not closed under the watches still on it."""
        try:
            await self.connection.connect()
        except KubeConfigError as exc:
            raise errors.ConfigError(str(exc)) from exc

    async def reload_credentials(self) -> None:
        """Read the kubeconfig or the service-account token again (they rotate); once for
        several scopes that ask at once."""
        try:
            await self.connection.reload_credentials()
        except KubeConfigError as exc:
            raise errors.ConfigError(str(exc)) from exc

    async def close(self) -> None:
        await self.connection.close()

    async def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
    ) -> aiohttp.ClientResponse:
        return await self.connection.call(method, path, None, query, body)

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ``coordination.k8s.io/v1`` Lease as the API server has it; None when there is
        none. The leader election's ``LeaseStore`` port (``bridge.runtime.leading``). Raises
        ``Invalid`` for a namespace or name that is not a Kubernetes name (nothing is sent)."""
        path = _lease_path(namespace, name)
        try:
            return await self._json("GET", path)
        except errors.NotFound:
            return None

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Raises ``Conflict`` when someone made it first."""
        path = paths.object_path(LEASE_API, "leases", namespace)
        return await self._json("POST", path, body=lease)

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Raises ``Conflict`` when it changed since it was read (its resourceVersion)."""
        path = _lease_path(namespace, lease["metadata"]["name"])
        return await self._json("PUT", path, body=lease)

    async def _json(
        self, method: str, path: str, query: list[tuple[str, Any]] | None = None, body: Any = None
    ) -> dict[str, Any]:
        return _decode_object(await self._body(method, path, query, body))

    async def _body(
        self, method: str, path: str, query: list[tuple[str, Any]] | None = None, body: Any = None
    ) -> bytes:
        return await self.connection.read(method, path, None, query, body)

    async def get_object(self, path: str) -> dict[str, Any]:
        """One object by its API path (from ``k8s_event_common.kube.paths``, its segments
        checked by the enrichment's ``Plan.target`` first); raises ``NotFound``,
        ``Forbidden``, ``KubeUnavailable``..."""
        return await self._json("GET", path)

    async def cluster_uid(self) -> str:
        """The kube-system namespace's uid: a stable id for a cluster without a name."""
        doc = await self._json("GET", KUBE_SYSTEM)
        uid = doc.get("metadata", {}).get("uid")
        if not uid:
            raise errors.KubeUnavailable("kube-system namespace has no uid")
        return str(uid)

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
        """One page of a list; raises ``ResourceExpired`` for a compacted continue token."""
        query: list[tuple[str, Any]] = [("limit", limit)]
        if cont:
            query.append(("continue", cont))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        body = await self._body("GET", resource.at(namespace), query)
        return decode_list_page(body)

    def list_pages(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        limit: int,
        field_selector: str,
        skipped: Skipped,
        only_resource_version: bool = False,
    ) -> AsyncIterator[paging.Page]:
        """A list, page by page (``bridge.kube.paging``)."""
        return paging.list_pages(
            self.list_page,
            resource,
            namespace,
            limit=limit,
            field_selector=field_selector,
            skipped=skipped,
            only_resource_version=only_resource_version,
        )

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
        skipped: Skipped,
    ) -> AsyncIterator[AsyncIterator[list[WatchEntry]]]:
        """An open watch: yields an iterator of the watch events of each read
        (``bridge.kube.lines``)."""
        query: list[tuple[str, Any]] = [
            ("watch", True),
            ("allowWatchBookmarks", True),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        resp = await self._call("GET", resource.at(namespace), query)
        try:
            keep_alive(resp, self.settings.read_timeout)
            yield read_lines(split_lines(_chunks(resp)), resource, skipped)
        finally:
            resp.close()


def lease_namespace(configured: str | None) -> str:
    """The Lease's namespace: ``leader_election.namespace`` (checked at load), else
    $POD_NAMESPACE, else this Pod's service account's, else "default". One found that is not a
    namespace name is a ``ConfigError`` naming where it came from: it would go in a path."""
    if configured:
        return configured
    for source, found in (
        ("$POD_NAMESPACE", os.environ.get("POD_NAMESPACE")),
        ("the service account's namespace file", pod_namespace()),
    ):
        if found:
            problem = paths.namespace_problem(found)
            if problem:
                raise errors.ConfigError(
                    f"leader_election.namespace: null, and from {source}: {problem}"
                )
            return found
    return "default"


def _lease_path(namespace: str, name: str) -> str:
    """One Lease's path; an empty name is ``Invalid`` too (``object_path`` would make it the
    collection's)."""
    problem = paths.name_problem(name)
    if problem:
        raise errors.Invalid(problem)
    return paths.object_path(LEASE_API, "leases", namespace, name)


def keep_alive(resp: aiohttp.ClientResponse, read_timeout: float) -> None:
    """TCP keepalive on a watch's socket, so that a dead peer (a half-open connection) is
    found within half the read timeout, as a failure; a read timeout then means a live but
    quiet connection (``QuietWatch``). Where an option is missing, the read timeout alone
    decides, and a dead peer shows at the next request."""
    transport = resp.connection.transport if resp.connection is not None else None
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    idle = max(1, int(read_timeout / 4))
    interval = max(1, int(read_timeout / 12))
    options = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", idle),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", interval),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", KEEPALIVE_PROBES),
        # unacknowledged data (and, on Linux, keepalive) gives up after the same time
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", 1000 * (idle + interval * KEEPALIVE_PROBES)),
    ]
    for level, name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(level, option, value)


async def _chunks(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """What arrives of a response, as it arrives; a failure while reading is mapped here."""
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except TimeoutError as exc:  # aiohttp's sock_read timeout: nothing came for read_timeout
        raise errors.QuietWatch("the watch sent nothing for kubernetes.read_timeout") from exc
    except FOREIGN as exc:
        raise errors.KubeUnavailable(f"watch stream: {type(exc).__name__}: {exc}") from exc
