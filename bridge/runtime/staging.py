"""The stage between the intake and the publisher's queue: the one place an Event is
converted and queued (``Converting``, the plain ``Stage``).

The intake hands it each accepted Event in stream order with its ledger entry; it converts
the Event (with the enrichment, when the enricher hands it on) and puts the message on the
bounded queue, waiting while that is full (the back-pressure that reaches the watch). An
Event the converter refuses is skipped, counted and its entry settled at once. Status events
go on the same queue.
"""

from __future__ import annotations

import asyncio

from bridge import logs
from bridge.core.converting import Converter
from bridge.core.enrichment import Enrichment
from bridge.core.events import Event
from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Entry
from bridge.core.queueing import BoundedQueue
from bridge.errors import ConversionError
from bridge.metrics import Metrics

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

    def put_nowait(
        self, ev: Event, entry: Entry, size: int, enrichment: Enrichment | None = None
    ) -> bool:
        try:
            msg = self._convert(ev, enrichment)
        except Exception as exc:
            skip_input(self.m, exc, ev)
            entry.settle()
            return True
        out = Outgoing(msg, entry)
        if self._queue_nowait(out, len(msg.payload)):
            return True
        self._full = out
        return False

    async def put(
        self, ev: Event, entry: Entry, size: int, enrichment: Enrichment | None = None
    ) -> None:
        out = self._full
        if out is None or out.entry is not entry:
            if self.put_nowait(ev, entry, size, enrichment):
                return
            out = self._full
            assert out is not None
        self._full = None
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
