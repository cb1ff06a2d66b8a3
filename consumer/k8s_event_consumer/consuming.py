"""A durable JetStream pull consumer of the bridge's stream, with idempotent handling.

``Consumer.open`` creates (or binds to, and updates) a durable pull consumer with explicit acks,
``ack_wait``, ``max_deliver`` and back-off; ``run(handlers)`` fetches in batches, decodes each
message (``events.decode``) and calls the handler its kind names:

- returning normally: done; the CloudEvent id is remembered (``Seen``) and the message acked;
- ``raise Retry(delay)``: held; nak'd with that delay, JetStream delivers it again later (a
  remediation worker while the API server is down);
- ``raise Discard(why)``: acked (never delivered again) but its id not remembered: a message
  the handler judged untrusted (forged), whose id a genuine message may carry later;
- any other exception: nak'd with the back-off step for its delivery count, logged; after
  ``max_deliver`` deliveries JetStream stops (``max_deliver=-1``: never);
- a message that is no CloudEvent of the bridge: logged naming what is wrong and terminated
  (``term``): it will never decode, redelivering it would only stall the rest.

Idempotency: JetStream redelivers what it did not see acked (an ack lost in a reconnect, a
subscriber killed between its action and its ack), and the bridge's stream itself carries each
id once. A redelivered id already handled is acked and skipped, not handled twice; ``KVSeen``
keeps that memory in a JetStream KV bucket across restarts, ``MemorySeen`` in the process.

``run_batches(on_batch)`` is the same consumer for a handler that works on many messages at
once (the OTLP subscriber sends them as one request): the messages in hand are decoded, the
ids already handled acked and skipped, the rest handed over together, kept from redelivery
(``in_progress``) while the handler works, and settled each by the outcome it returns.

``replay`` reads a stretch of the stream (from a time or a sequence) without a durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

from k8s_event_common import streams as shapes
from k8s_event_consumer import events
from k8s_event_consumer.events import BadMessage, Decoded, KubeEvent, Status
from k8s_event_consumer.metrics import Metrics

log = logging.getLogger("k8s_event_consumer")

DEFAULT_BACKOFF = (1.0, 5.0, 30.0, 60.0)
DEFAULT_SEEN_TTL = 7 * 86400.0


async def ensure_shape(
    nc: NATS, want: StreamConfig, what: str, *, create: bool = True, unchecked: Sequence[str] = ()
) -> None:
    """The stream ``want`` names checked against it (``shapes.ShapeMismatch`` on any
    difference but in ``unchecked``, logged once per key), created with exactly it when
    missing and ``create``."""
    assert want.name is not None
    have = await shapes.read_config(nc, want.name)
    if have is None:
        if not create:
            raise nats.js.errors.NotFoundError(description=f"{what} {want.name} not found")
        try:
            await nc.jetstream().add_stream(want)
            log.info("stream_created stream=%s", want.name)
        except nats.js.errors.BadRequestError:
            pass  # made meanwhile: checked below
        except (nats.errors.TimeoutError, TimeoutError) as exc:
            # the shipped permissions refuse the request: it gets no answer
            raise nats.js.errors.NotFoundError(
                description=f"{what} {want.name} does not exist and these credentials may not "
                "create it: provision it (docs/deploy.md)"
            ) from exc
        have = await shapes.read_config(nc, want.name)
        if have is None:
            raise nats.js.errors.NotFoundError(description=f"{what} {want.name} not found")
    refuse(have, want, unchecked)


def refuse(have: dict[str, Any], want: StreamConfig, unchecked: Sequence[str] = ()) -> None:
    """Raise ``shapes.ShapeMismatch`` (and log each key) when ``have`` is not ``want``."""
    diffs = shapes.differences(have, want, unchecked=unchecked)
    for d in diffs:
        log.error(
            "stream_config_differs stream=%s key=%s existing=%s wanted=%s",
            want.name,
            d.key,
            shapes.show(d.have),
            shapes.show(d.want),
        )
    if diffs:
        raise shapes.ShapeMismatch(str(want.name), diffs)


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


class ConsumerConflict(Exception):
    """The durable exists with a start JetStream can not change (open it with ``replay``)."""


@dataclass(frozen=True)
class Start:
    """Where a new durable starts (an existing one keeps its place unless replayed)."""

    policy: DeliverPolicy = DeliverPolicy.ALL
    time: datetime | None = None
    sequence: int | None = None

    @classmethod
    def all(cls) -> Start:
        return cls(DeliverPolicy.ALL)

    @classmethod
    def new(cls) -> Start:
        return cls(DeliverPolicy.NEW)

    @classmethod
    def at_time(cls, t: datetime) -> Start:
        if t.tzinfo is None:
            raise ValueError("Start.at_time needs an aware datetime")
        return cls(DeliverPolicy.BY_START_TIME, time=t)

    @classmethod
    def at_sequence(cls, seq: int) -> Start:
        if seq < 1:
            raise ValueError("stream sequences start at 1")
        return cls(DeliverPolicy.BY_START_SEQUENCE, sequence=seq)

    def apply(self, config: ConsumerConfig) -> ConsumerConfig:
        config.deliver_policy = self.policy
        # nats-py sends opt_start_time as given: an RFC 3339 string is what JetStream reads
        config.opt_start_time = self.time.isoformat() if self.time else None  # type: ignore[assignment]
        config.opt_start_seq = self.sequence
        return config


@dataclass(frozen=True)
class ConsumerOptions:
    ack_wait: float = 30.0  # seconds JetStream waits for an ack before it delivers again
    max_deliver: int = -1  # deliveries before JetStream gives up on a message; -1: never
    # redelivery delays after a failed handler (nak) and, when set, after ack_wait ran out
    # (JetStream's consumer back-off); the last one repeats
    backoff: Sequence[float] = DEFAULT_BACKOFF
    max_ack_pending: int = 1000
    batch: int = 64
    fetch_timeout: float = 5.0

    def config(self, durable: str, subjects: Sequence[str]) -> ConsumerConfig:
        cfg = ConsumerConfig(
            durable_name=durable,
            name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
        )
        if len(subjects) == 1:
            cfg.filter_subject = subjects[0]
        else:
            cfg.filter_subjects = list(subjects)
        return cfg

    def delay(self, deliveries: int) -> float:
        steps = self.backoff or DEFAULT_BACKOFF
        return float(steps[min(max(deliveries, 1), len(steps)) - 1])


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


E = TypeVar("E", KubeEvent, Status)
Callback = Callable[[Any, Delivery], Awaitable[None]]
# a batch's outcome, one per delivery in its order: None (done: remembered and acked), a
# ``Retry`` (nak'd with its delay) or a ``Discard`` (acked, not remembered)
Outcome = Retry | Discard | None
BatchCallback = Callable[[list[Delivery]], Awaitable[Sequence[Outcome]]]
MIN_FETCH_WAIT = 0.2  # seconds: nats-py's pull request expires 0.1 s before its timeout
GATHER_STEP = 32  # messages per fetch while a batch bounded in bytes is gathered


@dataclass(frozen=True)
class Handlers:
    """What to do with each kind of message; a kind without a handler is acked and skipped.
    A status event without its own handler goes to ``on_status`` when that is set."""

    on_event: Callback | None = None
    on_gap: Callback | None = None
    on_apiserver_unreachable: Callback | None = None
    on_apiserver_reachable: Callback | None = None
    on_apiserver_degraded: Callback | None = None
    on_apiserver_recovered: Callback | None = None
    on_dropped: Callback | None = None
    on_leader_changed: Callback | None = None
    on_status: Callback | None = None

    def pick(self, d: Decoded) -> tuple[Callback | None, KubeEvent | Status]:
        if d.event is not None:
            return self.on_event, d.event
        assert d.status is not None
        own: Callback | None = getattr(self, f"on_{d.status.what}", None)
        return (own or self.on_status), d.status


class Seen(Protocol):
    """The CloudEvent ids already handled."""

    async def contains(self, id_: str) -> bool: ...

    async def add(self, id_: str) -> None: ...


class MemorySeen:
    """The last ``limit`` ids handled by this process (redeliveries come soon after)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    async def contains(self, id_: str) -> bool:
        return id_ in self._ids

    async def add(self, id_: str) -> None:
        self._ids[id_] = None
        if len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)


class NoSeen:
    """Remembers nothing: every delivery is handled, a redelivered one again. For a handler
    whose copies are harmless (they carry the same id) and whose ids must not be trusted to
    skip: a message forged with a genuine id seen first would hide the genuine one."""

    async def contains(self, id_: str) -> bool:
        return False

    async def add(self, id_: str) -> None:
        return None


class KVSeen:
    """Ids handled, in a JetStream KV bucket (keys: the id's SHA-256; entries expire after
    ``ttl`` seconds): survives the subscriber's restarts and is shared by its replicas."""

    def __init__(self, kv: Any) -> None:
        self._kv = kv

    @staticmethod
    def shape(bucket: str, ttl: float = DEFAULT_SEEN_TTL, replicas: int = 1) -> StreamConfig:
        """The bucket's one shape (its stream ``KV_<bucket>``): ``k8s_event_common.streams``."""
        return shapes.seen_bucket(bucket, ttl=ttl, replicas=replicas)

    @classmethod
    async def open(
        cls, nc: NATS, bucket: str, ttl: float = DEFAULT_SEEN_TTL, replicas: int | None = None
    ) -> KVSeen:
        """The bucket checked against its shape (``ShapeMismatch`` names each difference: a
        republish, a mirror, other limits ...), or created with it when missing and the
        credentials may (the shipped permissions do not: it is provisioned first). ``replicas``
        None: any number (a cluster's operator provisions it R3), one made here has 1."""
        want = cls.shape(bucket, ttl, replicas or 1)
        unchecked = ["num_replicas"] if replicas is None else []
        await ensure_shape(nc, want, "bucket", unchecked=unchecked)
        return cls(await nc.jetstream().key_value(bucket))

    @staticmethod
    def key(id_: str) -> str:
        return hashlib.sha256(id_.encode()).hexdigest()

    async def contains(self, id_: str) -> bool:
        try:
            await self._kv.get(self.key(id_))
        except nats.js.errors.KeyNotFoundError:
            return False
        return True

    async def add(self, id_: str) -> None:
        await self._kv.put(self.key(id_), b"1")


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
        metrics.gauge(
            "messages_total",
            "messages of the stream by result: handled, duplicate, retried, failed, bad "
            "(not the bridge's CloudEvent: terminated), discarded",
            lambda: {(("result", r),): float(getattr(self, a)) for r, a in self.RESULTS},
            kind="counter",
        )


# what a durable of ours sets, and what it must not have: a push consumer's delivery (into
# anyone's inbox), or only the headers (every message would come without its body: counted bad,
# terminated, lost to this subscriber)
DURABLE_KEYS = ("ack_policy", "ack_wait", "max_deliver", "max_ack_pending", "filter_subject")
PUSH_KEYS = ("deliver_subject", "deliver_group")
FORBIDDEN_KEYS = (*PUSH_KEYS, "headers_only")


def durable_differences(have: ConsumerConfig, want: ConsumerConfig) -> dict[str, tuple[Any, Any]]:
    """{key: (existing, wanted)} for each key the durable's config differs in."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in DURABLE_KEYS:
        a, b = getattr(have, key), getattr(want, key)
        if isinstance(a, float) or isinstance(b, float):
            same = a is not None and b is not None and abs(float(a) - float(b)) < 1e-3
        else:
            same = a == b
        if not same:
            out[key] = (a, b)
    if sorted(have.filter_subjects or []) != sorted(want.filter_subjects or []):
        out["filter_subjects"] = (have.filter_subjects, want.filter_subjects)
    for key in FORBIDDEN_KEYS:
        if getattr(have, key):
            out[key] = (getattr(have, key), None)
    return out


async def check_stream(nc: NATS, stream: str, subject_prefix: str | None = None) -> None:
    """The bridge's stream checked for what a subscriber relies on: every key of its shape
    (``k8s_event_common.streams.event_stream``) but the sizes the bridge's settings give, and
    its subjects when ``subject_prefix`` is given. ``shapes.ShapeMismatch`` names each
    difference (a stream with rollups, sources, a mirror, purges allowed ...)."""
    have = await shapes.read_config(nc, stream)
    if have is None:
        raise nats.js.errors.NotFoundError(description=f"stream {stream} not found")
    want = shapes.event_stream(stream, subject_prefix or "", max_age=0, duplicate_window=0)
    unchecked = [*shapes.SIZING, *([] if subject_prefix else ["subjects"])]
    refuse(have, want, unchecked)


class Consumer:
    """One durable pull consumer of the stream; ``run`` until ``stop``."""

    def __init__(
        self,
        nc: NATS,
        sub: Any,
        stream: str,
        durable: str,
        options: ConsumerOptions,
        seen: Seen,
    ) -> None:
        self._nc = nc
        self._sub = sub
        self.stream = stream
        self.durable = durable
        self.options = options
        self.seen = seen
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
        options: ConsumerOptions = ConsumerOptions(),
        start: Start | None = None,
        replay: bool = False,
        seen: Seen | None = None,
        subject_prefix: str | None = None,
    ) -> Consumer:
        """Check the stream's shape (``check_stream``), then bind to the durable: it must be a
        pull consumer with this config (``ConsumerConflict`` names each difference; where the
        credentials may update it, what JetStream lets change is updated: ack_wait,
        max_deliver, max_ack_pending, subjects). A missing durable is created from ``start``
        where the credentials may (the shipped permissions do not: it is provisioned first).
        ``replay``: drop an existing durable and start again from ``start``."""
        js = nc.jetstream()
        await check_stream(nc, stream, subject_prefix)
        config = options.config(durable, subjects)
        existing = None
        try:
            existing = await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            pass
        if existing is not None and replay:
            await js.delete_consumer(stream, durable)
            existing = None
        if existing is None:
            start = start or Start.all()
            try:
                await js.add_consumer(stream, config=start.apply(config))
            except (nats.errors.TimeoutError, TimeoutError) as exc:
                raise ConsumerConflict(
                    f"durable {durable} on {stream} does not exist and these credentials may "
                    "not create it: provision it (docs/deploy.md)"
                ) from exc
            log.info("consumer_created durable=%s start=%s", durable, start.policy.value)
        else:
            old = existing.config
            diffs = durable_differences(old, config)
            if diffs:
                config.deliver_policy = old.deliver_policy
                config.opt_start_time = old.opt_start_time
                config.opt_start_seq = old.opt_start_seq
                try:
                    forbidden = [k for k in FORBIDDEN_KEYS if k in diffs]
                    if forbidden:
                        raise nats.js.errors.BadRequestError(
                            description=f"{', '.join(forbidden)} set: not changed here"
                        )
                    await js.add_consumer(stream, config=config)
                except (nats.js.errors.BadRequestError, nats.errors.TimeoutError) as exc:
                    raise ConsumerConflict(
                        f"durable {durable} on {stream} exists with another config ("
                        + ", ".join(f"{k}={h!r} (wanted {w!r})" for k, (h, w) in diffs.items())
                        + f") that these credentials may not or JetStream will not change: {exc}"
                    ) from exc
                log.info("consumer_updated durable=%s keys=%s", durable, ",".join(diffs))
            log.info("consumer_bound durable=%s", durable)
        sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
        return cls(nc, sub, stream, durable, options, seen or MemorySeen())

    async def stop(self) -> None:
        """Let the batch in hand finish, then return from ``run``."""
        self._stopping.set()

    async def run(self, handlers: Handlers) -> None:
        while not self._stopping.is_set():
            try:
                msgs = await self._sub.fetch(self.options.batch, timeout=self.options.fetch_timeout)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except nats.errors.Error as exc:  # reconnecting: nats-py reconnects by itself
                log.warning("fetch_failed %s: %s", type(exc).__name__, exc)
                await self._pause(1.0)
                continue
            for msg in msgs:
                try:
                    await self.handle(msg, handlers)
                except (nats.errors.Error, TimeoutError, OSError) as exc:
                    # NATS away while settling it (the ack, the Seen bucket): not acked, so
                    # JetStream delivers it again after ack_wait; the rest of the batch too
                    self.stats.failed += 1
                    log.warning("settle_failed %s: %s", type(exc).__name__, exc)

    async def run_batches(
        self, on_batch: BatchCallback, *, linger: float = 1.0, max_bytes: int | None = None
    ) -> None:
        """Until ``stop``: gather up to ``options.batch`` messages (after the first one, for at
        most ``linger`` seconds more), decode them (one that is no CloudEvent of the bridge is
        terminated, an id already handled acked and skipped), hand the rest to ``on_batch`` in
        the stream's order and settle each by its outcome. While ``on_batch`` works, the
        messages are marked in progress at once and every third of ``ack_wait``, so JetStream
        delivers none of them again however long the handler waits (on a slow or absent
        endpoint); one batch is in hand at a time, and with ``max_bytes`` it stops growing once
        its messages hold that many bytes, so memory is bounded by the batch. ``on_batch``
        raising: every message nak'd with the back-off step of its delivery count."""
        while not self._stopping.is_set():
            msgs = await self._gather(linger, max_bytes)
            if not msgs:
                continue
            try:
                await self.handle_batch(msgs, on_batch)
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                # NATS away while settling: what is not acked JetStream delivers again
                self.stats.failed += 1
                log.warning("settle_failed %s: %s", type(exc).__name__, exc)

    async def _gather(self, linger: float, max_bytes: int | None = None) -> list[Msg]:
        """Up to ``options.batch`` messages: what the first fetch brings, then more for at most
        ``linger`` seconds while the batch is not full; with ``max_bytes``, fetched
        ``GATHER_STEP`` at a time and no more once they hold that many bytes."""
        msgs: list[Msg] = []
        size = 0
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        while (
            len(msgs) < self.options.batch
            and (max_bytes is None or size < max_bytes)
            and not self._stopping.is_set()
        ):
            if deadline is None:
                wait = self.options.fetch_timeout
            else:
                wait = deadline - loop.time()
                if wait <= 0:
                    break
            try:
                want = self.options.batch - len(msgs)
                if max_bytes is not None:
                    want = min(want, GATHER_STEP)
                got = await self._sub.fetch(want, timeout=max(wait, MIN_FETCH_WAIT))
            except (nats.errors.TimeoutError, TimeoutError):
                if msgs or deadline is None:
                    break
                continue
            except nats.errors.Error as exc:  # reconnecting: nats-py reconnects by itself
                log.warning("fetch_failed %s: %s", type(exc).__name__, exc)
                if not msgs:
                    await self._pause(1.0)
                break
            msgs.extend(got)
            size += sum(len(m.data or b"") for m in got)
            if deadline is None:
                deadline = loop.time() + linger
        return msgs

    async def handle_batch(self, msgs: Sequence[Msg], on_batch: BatchCallback) -> None:
        """Messages in hand: decode, skip what was handled, ``on_batch`` the rest, settle."""
        todo: list[tuple[Msg, Delivery]] = []
        for msg in msgs:
            d = await self._take(msg)
            if d is not None:
                todo.append((msg, d))
        if not todo:
            return
        try:
            async with self._kept([m for m, _ in todo]):
                outcomes = list(await on_batch([d for _, d in todo]))
        except Exception as exc:
            self.stats.failed += len(todo)
            log.error("batch_failed messages=%s %s: %s", len(todo), type(exc).__name__, exc)
            for msg, d in todo:
                await msg.nak(delay=self.options.delay(d.num_delivered))
            return
        if len(outcomes) != len(todo):
            raise ValueError(f"on_batch gave {len(outcomes)} outcomes for {len(todo)} messages")
        for (msg, d), outcome in zip(todo, outcomes, strict=True):
            if isinstance(outcome, Retry):
                self.stats.retried += 1
                await msg.nak(delay=outcome.delay)
            elif isinstance(outcome, Discard):
                self.stats.discarded += 1
                await msg.ack()
            else:
                await self.seen.add(d.id)
                await msg.ack()
                self.stats.handled += 1
                kind = "event" if d.decoded.event is not None else d.decoded.status.what  # type: ignore[union-attr]
                self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1

    @contextlib.asynccontextmanager
    async def _kept(self, msgs: Sequence[Msg]) -> AsyncIterator[None]:
        """``msgs`` kept from redelivery (``_keep``) while the block runs."""
        tasks = [asyncio.create_task(self._keep(msgs), name="in-progress")]
        try:
            yield
        finally:
            for task in tasks:
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
                except (nats.errors.Error, TimeoutError, OSError) as exc:
                    log.warning("in_progress_failed %s: %s", type(exc).__name__, exc)
                    break
            await asyncio.sleep(every)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _take(self, msg: Msg) -> Delivery | None:
        """The message decoded, or None when it is settled already: one that is no CloudEvent
        of the bridge terminated (logged), an id already handled acked."""
        meta = msg.metadata
        try:
            decoded = events.decode(msg.subject, msg.headers, msg.data)
        except BadMessage as exc:
            self.stats.bad += 1
            log.error(
                "bad_message stream_sequence=%s subject=%s: %s",
                meta.sequence.stream,
                msg.subject,
                exc,
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

    async def handle(self, msg: Msg, handlers: Handlers) -> None:
        """One message: decode, skip if already handled, call its handler, settle it."""
        d = await self._take(msg)
        if d is None:
            return
        decoded = d.decoded
        meta = msg.metadata
        handler, payload = handlers.pick(decoded)
        kind = "event" if decoded.event is not None else decoded.status.what  # type: ignore[union-attr]
        try:
            if handler is not None:
                await handler(payload, d)
        except Discard:
            self.stats.discarded += 1
            await msg.ack()
            return
        except Retry as r:
            self.stats.retried += 1
            log.info("held id=%s delay=%s why=%s", d.id, r.delay, r.why)
            await msg.nak(delay=r.delay)
            return
        except Exception as exc:
            self.stats.failed += 1
            delay = self.options.delay(meta.num_delivered)
            last = 0 < self.options.max_deliver <= meta.num_delivered
            log.error(
                "handler_failed id=%s delivery=%s %s: %s%s",
                d.id,
                meta.num_delivered,
                type(exc).__name__,
                exc,
                " (last delivery: JetStream gives up)" if last else "",
            )
            await msg.nak(delay=delay)
            return
        await self.seen.add(d.id)
        await msg.ack()
        self.stats.handled += 1
        self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1


async def replay(
    nc: NATS,
    *,
    stream: str,
    subject: str | None = None,
    start: Start | None = None,
    idle: float = 2.0,
    name: str | None = None,
    gets: bool = False,
) -> AsyncIterator[Delivery]:
    """The stream from ``start`` up to its end when called, in order, with no durable and no
    acks; ``subject`` narrows it (default: the stream's first subject). A message that does
    not decode is logged and passed over.

    ``name``: read through an ephemeral pull consumer of that name (created, read, deleted;
    one left by a crash is replaced), so that the credentials need only that consumer's API
    subjects (``$JS.API.CONSUMER.{CREATE,MSG.NEXT,DELETE}.<stream>.<name>``): the unnamed
    create subject an ordered consumer uses lets its holder rewrite any consumer of the
    stream. None: an ordered consumer."""
    js = nc.jetstream()
    info = await js.stream_info(stream)
    last = int(info.state.last_seq)
    if last == 0:
        return
    subjects = info.config.subjects or [">"]
    if gets:
        async for d in _gets(nc, js, stream, subject or subjects[0], start or Start.all(), last):
            yield d
        return
    if name is None:
        deliveries = _ordered(js, stream, subject or subjects[0], start, idle)
    else:
        deliveries = _named(js, stream, subject or subjects[0], start, idle, name)
    async with contextlib.aclosing(deliveries) as msgs:  # its consumer gone when done
        async for msg in msgs:
            meta = msg.metadata
            try:
                decoded = events.decode(msg.subject, msg.headers, msg.data)
            except BadMessage as exc:
                log.error("bad_message stream_sequence=%s: %s", meta.sequence.stream, exc)
            else:
                yield Delivery(decoded, meta.sequence.stream, meta.num_delivered, meta.timestamp)
            if meta.sequence.stream >= last or meta.num_pending == 0:
                return


async def _gets(
    nc: NATS, js: Any, stream: str, subject: str, start: Start, last: int
) -> AsyncGenerator[Delivery, None]:
    if start.policy == DeliverPolicy.NEW:
        return
    if start.policy == DeliverPolicy.BY_START_TIME and start.time is not None:
        # the first sequence at or after the time (nats-py's get_msg takes no time)
        req = {"start_time": start.time.isoformat(), "next_by_subj": subject}
        msg = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps(req).encode())
        resp = json.loads(msg.data)
        if "error" in resp:
            if resp["error"].get("code") == 404:
                return  # nothing from then on
            nats.js.errors.APIError.from_error(resp["error"])
        seq = int(resp["message"]["seq"])
    else:
        seq = start.sequence or 1
    while seq <= last:
        try:
            raw = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return  # nothing more on the subject
        if raw.seq is None or raw.seq > last:
            return
        try:
            decoded = events.decode(raw.subject or "", raw.headers, raw.data or b"")
        except BadMessage as exc:
            log.error("bad_message stream_sequence=%s: %s", raw.seq, exc)
        else:
            yield Delivery(decoded, raw.seq, 1, raw.time)
        seq = raw.seq + 1


async def _ordered(
    js: Any, stream: str, subject: str, start: Start | None, idle: float
) -> AsyncGenerator[Msg, None]:
    cfg = (start or Start.all()).apply(ConsumerConfig())
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True, config=cfg)
    try:
        while True:
            try:
                yield await sub.next_msg(timeout=idle)
            except (nats.errors.TimeoutError, TimeoutError):
                return  # nothing (more) from start on
    finally:
        await sub.unsubscribe()


async def _named(
    js: Any, stream: str, subject: str, start: Start | None, idle: float, name: str
) -> AsyncGenerator[Msg, None]:
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_consumer(stream, name)  # a crash's leftover, with another start
    cfg = (start or Start.all()).apply(
        ConsumerConfig(
            name=name,
            ack_policy=AckPolicy.NONE,
            filter_subject=subject,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=max(60.0, 10 * idle),
        )
    )
    await js.add_consumer(stream, cfg)
    sub = await js.pull_subscribe_bind(name, stream=stream)
    try:
        while True:
            try:
                msgs = await sub.fetch(256, timeout=idle)
            except (nats.errors.TimeoutError, TimeoutError):
                return  # nothing (more) from start on
            for msg in msgs:
                yield msg
    finally:
        await sub.unsubscribe()
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await js.delete_consumer(stream, name)
