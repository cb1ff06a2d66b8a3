"""The middle of the data flow: watcher → filter → converter → queue (→ publisher).

``Intake`` is the watcher's ``Sink`` for one watch scope. It records every item in that
scope's ``Progress`` in stream order: filtered and bad items are done at once, published
ones when JetStream acks them, so the checkpoint never passes an event that is not stored.
Status events (gap, apiserver reachable or not, started, stopped) are queued here too; only
the gap holds the checkpoint.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bridge import logs
from bridge.core.converting import Converter
from bridge.core.events import Event
from bridge.core.filtering import Filter
from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.errors import ConversionError
from bridge.metrics import Metrics
from bridge.runtime.ports import Item

if TYPE_CHECKING:
    from bridge.runtime.enriching import Enricher

log = logs.get("pipeline")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Intake:
    def __init__(
        self,
        scope: str,
        progress: Progress,
        event_filter: Filter,
        converter: Converter,
        queue: BoundedQueue[Outgoing],
        metrics: Metrics,
        enricher: Enricher | None = None,
    ) -> None:
        self.scope = scope
        self.enricher = enricher
        self.progress = progress
        self.filter = event_filter
        self.converter = converter
        self.queue = queue
        self.m = metrics

    async def items(self, batch: list[Item]) -> None:
        if self.enricher is not None:
            await self._to_enricher(batch, self.enricher)
            return
        m = self.m
        accepts = self.filter.accepts
        convert = self.converter.convert
        progress = self.progress
        queue = self.queue
        filtered = taken = 0
        for watch_type, ev, rv in batch:
            taken += 1
            try:
                if not accepts(watch_type, ev):
                    filtered += 1
                    progress.done(rv)
                    continue
                msg = convert(ev)
            except Exception as exc:
                self._skip(exc, ev)
                progress.done(rv)
                continue
            out = Outgoing(msg, progress.pending(rv))
            if not queue.put_nowait(out, len(msg.payload)):
                # counted as received: what is in hand, not the rest of the batch
                m.received.inc(taken)
                taken = 0
                await queue.put(out, len(msg.payload))
        m.received.inc(taken)
        if filtered:
            m.filtered.inc(filtered)

    async def _to_enricher(self, batch: list[Item], enricher: Enricher) -> None:
        """With ``enrich``: each accepted Event, in order, to the enricher (which converts it
        once its lookups are in and queues it)."""
        m = self.m
        progress = self.progress
        filtered = 0
        for watch_type, ev, rv in batch:
            m.received.inc()
            try:
                accepted = self.filter.accepts(watch_type, ev)
            except Exception as exc:
                self._skip(exc, ev)
                progress.done(rv)
                continue
            if not accepted:
                filtered += 1
                progress.done(rv)
                continue
            await enricher.put(ev, progress.pending(rv), ev.end - ev.start)
        if filtered:
            m.filtered.inc(filtered)

    def _skip(self, exc: Exception, ev: Event) -> None:
        skip_input(self.m, exc, ev)

    def mark(self, rv: int) -> None:
        self.progress.done(rv)

    async def gap(self, from_rv: int, to_rv: int, *, certainty: str, why: str) -> None:
        data = {
            "scope": self.scope,
            "fromResourceVersion": str(from_rv),
            "toResourceVersion": str(to_rv),
            "detectedAt": now_rfc3339(),
            "certainty": certainty,  # "likely" or "possible" (docs/delivery.md)
            "why": why,
            "meaning": "versions of Events written between these resourceVersions may be "
            "missing: the API server compacted them before the bridge read them; "
            "the newest version of every Event that still exists follows",
        }
        msg = self.converter.status(
            "gap", f"gap/{self.scope}/{from_rv}-{to_rv}", data, now_rfc3339()
        )
        # It reports on history, so it holds the checkpoint like an Event: the relist's end
        # (``mark``) comes after it, and until it is stored a restart resumes from before the
        # relist, meets the 410 again and finds the gap again (model/: GAPHELD).
        await self.queue.put(Outgoing(msg, self.progress.pending(None)), len(msg.payload))

    async def reachability(self, reachable: bool, detail: str) -> None:
        what = "apiserver_reachable" if reachable else "apiserver_unreachable"
        at = now_rfc3339()
        await self.status(
            what,
            f"{what}/{socket.gethostname()}/{self.scope}/{at}",
            {"scope": self.scope, "detail": detail, "at": at},
        )

    async def degradation(self, degraded: bool, data: dict[str, Any]) -> None:
        what = "apiserver_degraded" if degraded else "apiserver_recovered"
        at = now_rfc3339()
        await self.status(
            what,
            f"{what}/{socket.gethostname()}/{self.scope}/{at}",
            {"scope": self.scope, **data, "at": at},
        )

    async def status(self, what: str, msg_id: str, data: dict[str, Any]) -> None:
        msg = self.converter.status(what, msg_id, data, now_rfc3339())
        await enqueue_status(self.queue, msg)


def skip_input(m: Metrics, exc: Exception, ev: Event) -> None:
    """An Event the filter or the converter could not take: counted, logged (sampled)."""
    reason = "invalid_event" if isinstance(exc, ConversionError) else "unexpected_shape"
    m.skipped.labels(reason).inc()
    log.warn_sampled(
        reason,
        "input_skipped",
        reason=reason,
        detail=f"{type(exc).__name__}: {exc}",
        sample=ev.sample(),
    )


async def enqueue_status(queue: BoundedQueue[Outgoing], msg: Message) -> None:
    await queue.put(Outgoing(msg, None), len(msg.payload))


def process_status(converter: Converter, what: str, **data: Any) -> Message:
    """The ``started`` / ``stopped`` status event of this process."""
    at = now_rfc3339()
    host, pid = socket.gethostname(), os.getpid()
    return converter.status(
        what, f"{what}/{host}/{pid}/{at}", {"host": host, "pid": pid, "at": at, **data}, at
    )
