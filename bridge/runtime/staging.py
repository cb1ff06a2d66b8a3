"""The stage between the intake and the publisher's queue: the one place an Event is
converted and queued (``Converting``, the plain ``Stage``).

The intake hands it the accepted Events of a batch in stream order with their ledger entries
(one call per batch: the hot path is one loop here); it converts each Event (with the
enrichment, when the enricher hands one on) and puts the message on the bounded queue,
waiting while that is full (the back-pressure that reaches the watch). An Event the
converter refuses is skipped, counted and its entry settled at once. Status events
go on the same queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from bridge import logs
from bridge.core.converting import Converter
from bridge.core.enrichment import Enrichment
from bridge.core.events import Event
from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Entry
from bridge.core.queueing import BoundedQueue
from bridge.errors import ConversionError
from bridge.metrics import Metrics
from bridge.runtime.ports import Staged

log = logs.get("pipeline")


class Converting:
    """Converts and queues, in the order put. Holds nothing: ``run`` only waits."""

    def __init__(
        self, converter: Converter, queue: BoundedQueue[Outgoing], metrics: Metrics
    ) -> None:
        self.converter = converter
        self.queue = queue
        self.m = metrics
        self._convert = converter.convert  # bound once: on the hot path
        self._queue_nowait = queue.put_nowait
        # converted, and the queue was full: what ``put`` queues for the same entry
        self._full: Outgoing | None = None

    def put_nowait(self, staged: Iterator[Staged]) -> Staged | None:
        # the intake's hot path: one tight loop per batch, what it calls bound once
        convert = self._convert
        queue_nowait = self._queue_nowait
        for ev, entry, taken in staged:
            try:
                msg = convert(ev)
            except Exception as exc:
                skip_input(self.m, exc, ev)
                entry.settle()
                continue
            out = Outgoing(msg, entry)
            if not queue_nowait(out, len(msg.payload)):
                self._full = out
                return ev, entry, taken
        return None

    async def put(self, ev: Event, entry: Entry, enrichment: Enrichment | None = None) -> None:
        """One Event (the one ``put_nowait`` found no room for, or the enricher's, with what
        its lookups found); waits while the queue is full."""
        out = self._full
        self._full = None
        if out is None or out.entry is not entry:
            try:
                msg = self._convert(ev, enrichment)
            except Exception as exc:
                skip_input(self.m, exc, ev)
                entry.settle()
                return
            out = Outgoing(msg, entry)
            if self._queue_nowait(out, len(msg.payload)):
                return
        await self.queue.put(out, len(out.msg.payload))

    async def put_message(self, msg: Message) -> None:
        await self.put_status(msg)

    async def put_status(self, msg: Message, entry: Entry | None = None) -> None:
        await self.queue.put(Outgoing(msg, entry), len(msg.payload))

    async def run(self) -> None:
        await asyncio.Event().wait()  # nothing waits here: put queues at once

    def __len__(self) -> int:
        return 0

    async def close(self) -> None:
        pass


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
