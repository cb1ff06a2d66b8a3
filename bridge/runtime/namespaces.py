"""The Namespaces of the enrichment, on the one list/watch loop (``bridge.runtime.watching``).

``watcher`` makes a ``Watcher`` of ``bridge.core.resources.NAMESPACES``: the same 410,
back-off, breaker and health rules as the Events' watch scopes, and its own scope in the logs
and metrics (``enrich:namespaces``). ``NamespaceSink`` is what its items mean to the enricher
(``bridge.runtime.enriching``): each list replaces the enricher's ``Namespaces`` (a state, not
a history: no checkpoint, no ledger, no gap), each watch event puts or deletes one.

Whether Events wait for the Namespaces is the enricher's (``Enricher.namespaces_synced``):
while the first list has not come, an Event waits for it within its time; once an attempt
failed before it came, Events no longer wait (``namespace:unknown``) until a list succeeds.
The watch's health is kept out of ``/readyz``: the enrichment is never a reason to be unready.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bridge import logs
from bridge.core.events import Event
from bridge.core.resources import NAMESPACES
from bridge.metrics import Metrics
from bridge.runtime.enriching import Enricher
from bridge.runtime.health import ScopeHealth
from bridge.runtime.ports import Item, ListerWatcher
from bridge.runtime.watching import Watcher
from bridge.settings import KubernetesSettings
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("enriching")

SCOPE = "enrich:namespaces"  # no namespace's name: it has a colon
_decode = msgspec.json.Decoder().decode


class NamespaceSink:
    """The ``Sink`` of the namespace watch: it keeps the enricher's ``Namespaces`` current."""

    def __init__(self, enricher: Enricher) -> None:
        self.enricher = enricher
        self.lists = 0

    async def items(self, batch: list[Item]) -> None:
        e = self.enricher
        if not batch or batch[0][2] is None:  # a list, whole (a state): it replaces
            values = {}
            for _, obj, _ in batch:
                name = obj.view.metadata.name
                if isinstance(name, str) and name:
                    values[name] = e.plan.namespace_values(_object(obj))
            e.namespaces.replace(values)
            self.lists += 1
            if self.lists == 1:
                log.info("namespaces_listed", namespaces=len(values))
            e.namespaces_synced(True)
            return
        for kind, obj, _ in batch:
            name = obj.view.metadata.name
            if not isinstance(name, str) or not name:
                continue
            if kind == "DELETED":
                e.namespaces.delete(name)
            else:
                e.namespaces.put(name, e.plan.namespace_values(_object(obj)))

    def failed(self) -> None:
        """A list or watch failed: Events stop waiting for a first list that has not come."""
        self.enricher.namespaces_synced(False)

    def mark(self, rv: int) -> None:
        """No checkpoint: a restart lists the Namespaces again."""

    async def gap(self, from_rv: int, to_rv: int, *, certainty: str, why: str) -> None:
        """Never called for a state (a relist replaces it)."""

    async def reachability(self, reachable: bool, detail: str) -> None:
        """The Events' watch scopes tell subscribers; this one does not."""

    async def degradation(self, degraded: bool, data: dict[str, Any]) -> None:
        """As ``reachability``: the log line and the metrics say it (``WatchReport``)."""


class _Health(ScopeHealth):
    """The namespace watch's health, not one of ``Health.scopes`` (not in ``/readyz``); a
    failure is told to the sink."""

    def __init__(self, sink: NamespaceSink, clock: Clock) -> None:
        super().__init__(SCOPE, clock)
        self._sink = sink

    def watch_failed(self, error: str) -> None:
        super().watch_failed(error)
        self._sink.failed()


def watcher(
    source: ListerWatcher,
    enricher: Enricher,
    settings: KubernetesSettings,
    metrics: Metrics,
    clock: Clock = SYSTEM,
) -> Watcher:
    """The watch of the Namespaces for ``enricher``: run it until cancelled (the pipeline
    starts it only when ``enrich.namespace`` names something)."""
    sink = NamespaceSink(enricher)
    return Watcher(
        source,
        sink,
        settings,
        resource=NAMESPACES,
        namespace=None,
        checkpoint=None,
        field_selector="",
        metrics=metrics,
        health=_Health(sink, clock),
        clock=clock,
        scope=SCOPE,
    )


def _object(obj: Event) -> Any:
    """The Namespace as a plain object (only its metadata is read); None when its bytes hold
    what a plain decode refuses (a number no double can hold)."""
    try:
        return _decode(obj.buf[obj.start : obj.end])
    except msgspec.DecodeError:
        return None
