"""A durable JetStream pull consumer of the bridge's stream, with idempotent handling.

``Consumer.open`` checks the stream's shape and binds to the durable (``durables.bind``);
``run(handlers)`` fetches in batches, decodes each message (``events.decode``) and calls the
handler its kind names, one message at a time; ``run_batches(on_batch)`` hands a handler of
many messages at once (the OTLP subscriber sends them as one request) the messages in hand,
kept from redelivery (``in_progress``) while it works. A fetch brings at most
``options.batch`` messages and ``options.max_batch_bytes`` bytes (``fetching.Fetcher``): the
messages in hand are bounded in bytes whatever their sizes. Either way each message comes to
one outcome, settled in one place (``_settle``):

- done (the handler returned; a batch handler's ``None``): the CloudEvent id is remembered
  (``Seen``) and the message acked;
- ``Retry(delay)``: held; nak'd with that delay, JetStream delivers it again later (a
  remediation worker while the API server is down);
- ``Discard(why)``: acked (never delivered again) but its id not remembered: a message the
  handler judged untrusted (forged), whose id a genuine message may carry later;
- ``Failed`` (the handler raised anything else): nak'd with the back-off step for its delivery
  count, logged; after ``max_deliver`` deliveries JetStream stops (``max_deliver=-1``: never).

A message that is no CloudEvent of the bridge is logged naming what is wrong and terminated
(``term``) before any handler sees it: it will never decode, redelivering it would only stall
the rest. A redelivered id already handled is acked and skipped (JetStream redelivers what it
did not see acked: an ack lost in a reconnect, a subscriber killed between its action and its
ack).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from k8s_event_common import streams as shapes
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.digests import Digest
from k8s_event_common.logformat import Logger
from k8s_event_consumer import durables, events, fetching
from k8s_event_consumer.events import BadMessage, Decoded, KubeEvent, Status
from k8s_event_consumer.options import ConsumerOptions, Start
from k8s_event_consumer.seen import MemorySeen, Seen

if TYPE_CHECKING:  # the kit alone imports no metrics library
    from k8s_event_consumer.metrics import Metrics

__all__ = [
    "BatchCallback",
    "Callback",
    "Consumer",
    "ConsumerOptions",
    "Delivery",
    "Discard",
    "Failed",
    "Handlers",
    "Outcome",
    "Retry",
    "Start",
    "Stats",
]

log = Logger("k8s_event_consumer.consuming")

MIN_FETCH_WAIT = 0.2  # seconds: a waiting pull request expires 0.1 s before its timeout
NATS_TROUBLE = (nats.errors.Error, TimeoutError, OSError)  # NATS away while settling


class Retry(Exception):
    """Raised by a handler: not done yet, deliver this message again after ``delay`` seconds."""

    def __init__(self, delay: float, why: str = "") -> None:
        super().__init__(why or f"retry in {delay}s")
        self.delay = delay
        self.why = why


class Discard(Exception):
    """Raised by a handler: ack the message (it is never to be delivered again) without
    remembering its id as handled. For a message judged untrusted: its CloudEvent id is the
    message's own claim, and a genuine message with that id may come after it."""


@dataclass(frozen=True)
class Failed:
    """The handler raised ``error``: nak'd with the back-off step of its delivery count."""

    error: BaseException


@dataclass(frozen=True)
class Delivery:
    """A message as the consumer got it: decoded, with JetStream's bookkeeping."""

    decoded: Decoded
    stream_sequence: int
    num_delivered: int
    timestamp: datetime | None
    # the message as stored (a dead letter carries it on unchanged); empty where not kept
    headers: dict[str, str] | None = field(default=None, repr=False, compare=False)
    body: bytes = field(default=b"", repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.decoded.id

    @property
    def kind(self) -> str:
        """``event``, a status event's name of ``events.STATUS_KINDS``, or ``other``."""
        return self.decoded.kind


E = TypeVar("E", KubeEvent, Status)
Callback = Callable[[Any, Delivery], Awaitable[None]]
# a message's outcome: None (done: remembered and acked), a ``Retry`` (nak'd with its delay), a
# ``Discard`` (acked, not remembered) or a ``Failed`` (nak'd with the back-off)
Outcome = Retry | Discard | Failed | None
BatchCallback = Callable[[list[Delivery]], Awaitable[Sequence[Outcome]]]


@dataclass(frozen=True)
class Handlers:
    """What to do with each kind of message; a kind without a handler is acked and skipped.
    A status event without its own handler goes to ``on_status`` when that is set, and so does
    one of a kind this version does not know: the handler is chosen from the fixed table of
    kinds (``events.STATUS_KINDS``), never by the name a message gives itself (a status event
    naming itself ``event`` is no Kubernetes Event)."""

    on_event: Callback | None = None
    on_gap: Callback | None = None
    on_apiserver_unreachable: Callback | None = None
    on_apiserver_reachable: Callback | None = None
    on_apiserver_degraded: Callback | None = None
    on_apiserver_recovered: Callback | None = None
    on_dropped: Callback | None = None
    on_leader_changed: Callback | None = None
    on_status: Callback | None = None
    on_digest: Callback | None = None  # a digest (the digests stream's: io.k8s.digest)

    def pick(self, d: Decoded) -> tuple[Callback | None, KubeEvent | Status | Digest]:
        if d.event is not None:
            return self.on_event, d.event
        if d.digest is not None:
            return self.on_digest, d.digest
        assert d.status is not None
        # d.kind is from the fixed table (or "other", which has no handler of its own)
        own: Callback | None = getattr(self, f"on_{d.kind}", None)
        return (own or self.on_status), d.status

    async def outcome(self, d: Delivery) -> Outcome:
        """Call the handler ``d``'s kind names; what came of it."""
        handler, payload = self.pick(d.decoded)
        if handler is None:
            return None
        try:
            await handler(payload, d)
        except (Retry, Discard) as exc:
            return exc
        except Exception as exc:
            return Failed(exc)
        return None


@dataclass
class Stats:
    handled: int = 0
    skipped_duplicates: int = 0
    retried: int = 0
    failed: int = 0
    bad: int = 0
    discarded: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    # what each count is, as ``messages_total{result}`` says it
    RESULTS = (
        ("handled", "handled"),
        ("duplicate", "skipped_duplicates"),
        ("retried", "retried"),
        ("failed", "failed"),
        ("bad", "bad"),
        ("discarded", "discarded"),
    )

    def export(self, metrics: Metrics) -> None:
        """Exported as ``<prefix>messages_total{result}``: handled, duplicate (already handled),
        retried, failed (not settled), bad (not a CloudEvent of the bridge: a forged message,
        or a JetStream answer someone sent into an Event subject; terminated, logged
        ``bad_message``), discarded."""
        metrics.read(
            "messages_total",
            "messages of the stream by result: handled, duplicate, retried, failed, bad "
            "(not the bridge's CloudEvent: terminated), discarded",
            lambda: {(r,): float(getattr(self, a)) for r, a in self.RESULTS},
            labels=("result",),
            kind="counter",
        )


class Consumer:
    """One durable pull consumer of the stream; ``run`` or ``run_batches`` until ``stop``."""

    def __init__(
        self,
        nc: NATS,
        sub: Any,
        stream: str,
        durable: str,
        options: ConsumerOptions,
        seen: Seen,
        clock: Clock = SYSTEM,
    ) -> None:
        self._nc = nc
        self._sub = sub  # a ``fetching.Fetcher`` of the durable
        self.stream = stream
        self.durable = durable
        self.options = options
        self.seen = seen
        self.clock = clock
        self.stats = Stats()
        self._stopping = asyncio.Event()

    @classmethod
    async def open(
        cls,
        nc: NATS,
        *,
        stream: str,
        durable: str,
        subjects: Sequence[str],
        options: ConsumerOptions | None = None,
        start: Start | None = None,
        replay: bool = False,
        seen: Seen | None = None,
        subject_prefix: str | None = None,
        clock: Clock = SYSTEM,
        digests: bool = False,
    ) -> Consumer:
        """Check the stream's shape (``k8s_event_common.streams.check_event_stream``, or with
        ``digests`` ``check_digest_stream``: ``ShapeMismatch`` names each difference), then bind
        to the durable (``durables.bind``: ``ConsumerConflict``). ``replay``: drop an existing
        durable and start again from ``start``."""
        if digests:
            await shapes.check_digest_stream(nc, stream, subject_prefix)
        else:
            await shapes.check_event_stream(nc, stream, subject_prefix)
        bound = await durables.bind(
            nc,
            stream=stream,
            durable=durable,
            config=(options := options or ConsumerOptions()).config(durable, subjects),
            start=start,
            replay=replay,
        )
        await bound.unsubscribe()  # nats-py's fetch asks for no byte bound: Fetcher does
        fetcher = fetching.Fetcher(nc, stream, durable, clock)
        return cls(nc, fetcher, stream, durable, options, seen or MemorySeen(), clock)

    async def stop(self) -> None:
        """Let the message or batch in hand finish, then return from ``run``."""
        self._stopping.set()

    @property
    def largest(self) -> int:
        """The largest message the server takes, as a fetch counts it (``fetching.floor``)."""
        max_payload = self._nc.max_payload if self._nc is not None else 0
        return fetching.floor(max_payload or fetching.DEFAULT_MAX_PAYLOAD)

    @property
    def max_batch_bytes(self) -> int:
        """The bytes a fetch may bring: ``options.max_batch_bytes``, at least the largest
        message (a smaller budget would never fetch it)."""
        return max(self.options.max_batch_bytes, self.largest)

    async def run(self, handlers: Handlers) -> None:
        """Until ``stop``: each message fetched handled and settled, in the stream's order."""
        while not self._stopping.is_set():
            try:
                msgs = await self._sub.fetch(
                    self.options.batch, self.max_batch_bytes, timeout=self.options.fetch_timeout
                )
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except nats.errors.Error as exc:  # reconnecting: nats-py reconnects by itself
                log.warning("fetch_failed", error=f"{type(exc).__name__}: {exc}")
                await self._pause(1.0)
                continue
            msgs.reverse()  # each message let go once settled, none kept into the next fetch
            while msgs:
                await self._settling(self.handle(msgs.pop(), handlers))

    async def run_batches(
        self, on_batch: BatchCallback, *, linger: float = 1.0, max_bytes: int | None = None
    ) -> None:
        """Until ``stop``: gather up to ``options.batch`` messages (after the first one, for at
        most ``linger`` seconds more), decode them (one that is no CloudEvent of the bridge is
        terminated, an id already handled acked and skipped), hand the rest to ``on_batch`` in
        the stream's order and settle each by its outcome. While ``on_batch`` works, the
        messages are marked in progress at once and every third of ``ack_wait``, so JetStream
        delivers none of them again however long the handler waits (on a slow or absent
        endpoint); one batch is in hand at a time, holding at most ``max_bytes`` (and
        ``max_batch_bytes``) bytes of messages, or one message when it alone is larger: memory
        is bounded by the batch. ``on_batch`` raising: every message ``Failed``."""
        while not self._stopping.is_set():
            msgs = await self._gather(linger, max_bytes)
            if msgs:
                await self._settling(self.handle_batch(msgs, on_batch))
            del msgs  # settled: let go before the next batch is gathered

    async def handle(self, msg: Msg, handlers: Handlers) -> None:
        """One message: decode, skip if already handled, call its handler, settle it."""
        d = await self._take(msg)
        if d is not None:
            await self._settle(msg, d, await handlers.outcome(d))

    async def handle_batch(self, msgs: Sequence[Msg], on_batch: BatchCallback) -> None:
        """Messages in hand: decode, skip what was handled, ``on_batch`` the rest, settle."""
        todo: list[tuple[Msg, Delivery]] = []
        for msg in msgs:
            d = await self._take(msg)
            if d is not None:
                todo.append((msg, d))
        if not todo:
            return
        outcomes: Sequence[Outcome]
        try:
            async with self._kept([m for m, _ in todo]):
                outcomes = list(await on_batch([d for _, d in todo]))
        except Exception as exc:
            outcomes = [Failed(exc)] * len(todo)
        if len(outcomes) != len(todo):
            raise ValueError(f"on_batch gave {len(outcomes)} outcomes for {len(todo)} messages")
        for (msg, d), outcome in zip(todo, outcomes, strict=True):
            await self._settle(msg, d, outcome)

    async def _settle(self, msg: Msg, d: Delivery, outcome: Outcome) -> None:
        """The one place a delivered message is settled by its outcome."""
        if outcome is None:
            await self.seen.add(d.id)
            await msg.ack()
            self.stats.handled += 1
            self.stats.by_kind[d.kind] = self.stats.by_kind.get(d.kind, 0) + 1
        elif isinstance(outcome, Discard):
            self.stats.discarded += 1
            await msg.ack()
        elif isinstance(outcome, Retry):
            self.stats.retried += 1
            log.debug("held", id=d.id, delay=outcome.delay, why=outcome.why)
            await msg.nak(delay=outcome.delay)
        else:
            self.stats.failed += 1
            last = 0 < self.options.max_deliver <= d.num_delivered
            log.error(
                "handler_failed",
                id=d.id,
                delivery=d.num_delivered,
                error=f"{type(outcome.error).__name__}: {outcome.error}",
                last_delivery=last,  # JetStream gives up after it
            )
            await msg.nak(delay=self.options.delay(d.num_delivered))

    async def _settling(self, work: Awaitable[None]) -> None:
        """``work`` (handling and settling); NATS away meanwhile leaves what was not acked to
        JetStream, which delivers it again after ack_wait."""
        try:
            await work
        except NATS_TROUBLE as exc:
            self.stats.failed += 1
            log.warning("settle_failed", error=f"{type(exc).__name__}: {exc}")

    async def _gather(self, linger: float, max_bytes: int | None = None) -> list[Msg]:
        """Up to ``options.batch`` messages: what the first fetch brings, then more for at most
        ``linger`` seconds while the batch is not full; each fetch asks for no more bytes than
        the batch has room for (``max_bytes``, at most ``max_batch_bytes``), the first for at
        least the largest message."""
        limit = min(max_bytes or self.max_batch_bytes, self.max_batch_bytes)
        msgs: list[Msg] = []
        size = 0
        deadline: float | None = None
        while len(msgs) < self.options.batch and size < limit and not self._stopping.is_set():
            if deadline is None:
                wait = self.options.fetch_timeout
            else:
                wait = deadline - self.clock.monotonic()
                if wait <= 0:
                    break
            room = limit - size if msgs else max(limit, self.largest)
            try:
                want = self.options.batch - len(msgs)
                got = await self._sub.fetch(want, room, timeout=max(wait, MIN_FETCH_WAIT))
            except (nats.errors.TimeoutError, TimeoutError):
                if msgs or deadline is None:
                    break
                continue
            except nats.errors.Error as exc:  # reconnecting: nats-py reconnects by itself
                log.warning("fetch_failed", error=f"{type(exc).__name__}: {exc}")
                if not msgs:
                    await self._pause(1.0)
                break
            if not got:
                break  # the next message does not fit in what is left
            msgs.extend(got)
            size += sum(fetching.size(m) for m in got)
            if deadline is None:
                deadline = self.clock.monotonic() + linger
        return msgs

    @contextlib.asynccontextmanager
    async def _kept(self, msgs: Sequence[Msg]) -> AsyncIterator[None]:
        """``msgs`` kept from redelivery (``_keep``) while the block runs."""
        task = asyncio.create_task(self._keep(msgs), name="in-progress")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep(self, msgs: Sequence[Msg]) -> None:
        """Mark ``msgs`` in progress at once (the gathering took some of their ack_wait) and
        every third of ``ack_wait`` until cancelled."""
        every = max(self.options.ack_wait / 3, 0.1)
        while True:
            for msg in msgs:
                try:
                    await msg.in_progress()
                except NATS_TROUBLE as exc:
                    log.warning("in_progress_failed", error=f"{type(exc).__name__}: {exc}")
                    break
            await self.clock.sleep(every)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await self.clock.wait_for(self._stopping.wait(), seconds)

    async def _take(self, msg: Msg) -> Delivery | None:
        """The message decoded, or None when it is settled already: one that is no CloudEvent
        of the bridge terminated (logged), an id already handled acked."""
        meta = msg.metadata
        try:
            decoded = events.decode(msg.subject, msg.headers, msg.data)
        except BadMessage as exc:
            self.stats.bad += 1
            log.error(
                "bad_message",
                stream_sequence=meta.sequence.stream,
                subject=msg.subject,
                error=str(exc),
            )
            await msg.term()
            return None
        d = Delivery(
            decoded, meta.sequence.stream, meta.num_delivered, meta.timestamp, msg.headers, msg.data
        )
        if await self.seen.contains(d.id):
            self.stats.skipped_duplicates += 1
            await msg.ack()
            return None
        return d
