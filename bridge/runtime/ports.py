"""Where the runtime meets the outside world: the Protocols the real clients satisfy
(``bridge.kube.client.KubeClient``, ``bridge.jetstream.publishing.Publisher``,
``bridge.jetstream.checkpoints.KvCheckpointStore``) and the tests' in-memory fakes too.

Failures cross a port as the bridge's own errors (``bridge.errors``), never a library's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from bridge.core.checkpoints import Checkpoint
from bridge.core.events import Event
from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Entry
from bridge.core.queueing import BoundedQueue
from bridge.core.resources import Resource

# (watch event type, the object, its resourceVersion or None for a list item)
Item = tuple[str, Event, int | None]
# What a watch hands over per read (``bridge.kube.lines``): (watch event type, the object, its
# resourceVersion; None for an ERROR).
WatchEntry = tuple[str, Event, int | None]
# One page of a list (``bridge.kube.paging``): (the list's resourceVersion, None when it has
# none; [(a listed object, its resourceVersion), ...]).
ListPage = tuple[int | None, list[tuple[Event, int]]]
# An accepted Event on its way into the stage: (the Event, its ledger entry, how many items of
# the intake's batch were taken up to and including it: what counts as received while it waits).
Staged = tuple[Event, Entry, int]
# Told of each line or list item left out: (reason, the input as it came).
Skipped = Callable[[str, Any], None]


class ListerWatcher(Protocol):
    """The API server's lists and watches of any resource (client-go's ListerWatcher): what
    to list and watch, and how its lines and items decode, is the ``Resource``
    (``bridge.core.resources``). Raises ``errors.KubeError``."""

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
        """One page as answered: ``{"metadata": {...}, "items": [raw item, ...]}``."""
        ...

    def list_pages(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        limit: int,
        field_selector: str,
        skipped: Skipped,
        only_resource_version: bool = False,
    ) -> AsyncIterator[ListPage]:
        """A list, page by page, its items decoded (the pager)."""
        ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
        skipped: Skipped,
    ) -> AbstractAsyncContextManager[AsyncIterator[list[WatchEntry]]]:
        """An open watch: yields, per read, the watch events in it (the line reader)."""
        ...

    async def reload_credentials(self) -> None: ...


class ObjectReader(Protocol):
    """What the enrichment reads (``bridge.runtime.enriching``). Raises ``errors.KubeError``."""

    async def get_object(self, path: str) -> dict[str, Any]:
        """One object by its API path (segments already checked)."""
        ...

    async def reload_credentials(self) -> None: ...


class ClusterIdentity(Protocol):
    """Where a cluster without ``cluster.name`` gets its id. Raises ``errors.KubeError``."""

    async def cluster_uid(self) -> str: ...

    async def reload_credentials(self) -> None: ...


class Sink(Protocol):
    """What a watcher hands on, in stream order: what its items mean to the caller
    (``bridge.runtime.intake.Intake`` for Events, ``bridge.runtime.namespaces`` for the
    Namespaces of the enrichment)."""

    async def items(self, batch: list[Item]) -> None:
        """Items in stream order; may wait (the queue is full). A list's items come without
        a resourceVersion of their own. Of a state (``Resource.history`` false) a list comes
        whole, as one batch, an empty list as an empty batch: the sink replaces what it held
        (client-go's ``Store.Replace``)."""
        ...

    def mark(self, rv: int) -> None:
        """The watch has synced up to ``rv`` (a bookmark, the end of a list)."""
        ...

    async def gap(self, from_rv: int, to_rv: int, *, certainty: str, why: str) -> None: ...

    async def reachability(self, reachable: bool, detail: str) -> None: ...

    async def degradation(self, degraded: bool, data: dict[str, Any]) -> None:
        """The API server's breaker opened (degraded) or closed (recovered)."""
        ...


class Stage(Protocol):
    """Where the intake hands the accepted Events of each batch, in stream order, with their
    ledger entries: it converts them and puts them on the publisher's queue, in the same order
    (``bridge.runtime.staging.Converting``; ``bridge.runtime.enriching.Enricher`` looks values
    up first). An Event it can not convert is skipped, counted and its entry settled."""

    def put_nowait(self, staged: Iterator[Staged]) -> Staged | None:
        """Take the Events of ``staged`` in order while there is room: None once all are
        taken, else the first one not taken (the stage or the queue is full), the rest left in
        ``staged``: ``put`` that one, then ``put_nowait`` the rest."""
        ...

    async def put(self, ev: Event, entry: Entry) -> None:
        """Take one Event; waits while the stage (or the queue) is full."""
        ...

    async def put_message(self, msg: Message) -> None:
        """A status event that keeps its place behind the Events put before it."""
        ...

    async def put_status(self, msg: Message, entry: Entry | None = None) -> None:
        """A status event straight to the queue, ahead of Events still in the stage; with an
        ``entry`` it holds the checkpoint until stored (the gap)."""
        ...

    async def run(self) -> None:
        """Move what was put to the queue, until cancelled."""
        ...

    def __len__(self) -> int:
        """Events taken and not yet on the queue."""
        ...

    async def close(self) -> None: ...


class Publisher(Protocol):
    """Takes messages from the queue to JetStream; settles each one's progress entry on its
    ack. Retries by itself and raises nothing for a failed publish. A message no server can
    ever take is replaced by the status event ``on_dropped`` makes of it (message, reason,
    detail), which takes over its progress entry."""

    on_dropped: Callable[[Message, str, str], Message] | None

    async def run(self, queue: BoundedQueue[Outgoing]) -> None:
        """Publish from the queue until cancelled."""
        ...

    async def reap(self) -> None:
        """Send again what waited past its deadline, until cancelled."""
        ...

    @property
    def in_flight(self) -> int: ...

    @property
    def busy(self) -> bool:
        """Anything taken from the queue and not acked yet."""
        ...

    def oldest_wait(self) -> float:
        """Seconds the oldest unacked message has waited (0 when none)."""
        ...

    def sizes(self) -> dict[str, int]:
        """How much it holds (messages, bytes, ...): what a soak run watches stay flat."""
        ...


class CheckpointStore(Protocol):
    """Raises ``errors.JetStreamUnavailable`` (or another ``BridgeError``) when it fails."""

    async def load(self, key: str) -> Checkpoint | None: ...

    async def save(self, key: str, resource_version: int) -> None: ...
