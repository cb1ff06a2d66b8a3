"""A stretch of the stream read without a durable and without acks: ``replay`` (the alerting
subscriber reads the last window back into its state at start; ``tail``-like tools)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from k8s_event_common.logformat import Logger
from k8s_event_consumer import events, fetching
from k8s_event_consumer.consuming import Delivery
from k8s_event_consumer.events import BadMessage
from k8s_event_consumer.options import MAX_BATCH_BYTES, Start

log = Logger("k8s_event_consumer.replaying")


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
        deliveries = _named(nc, stream, subject or subjects[0], start, idle, name)
    async with contextlib.aclosing(deliveries) as msgs:  # its consumer gone when done
        async for msg in msgs:
            meta = msg.metadata
            try:
                decoded = events.decode(msg.subject, msg.headers, msg.data)
            except BadMessage as exc:
                log.error("bad_message", stream_sequence=meta.sequence.stream, error=str(exc))
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
        found = await sequence_at(nc, stream, start.time, subject)
        if found is None:
            return  # nothing from then on
        seq = found
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
            log.error("bad_message", stream_sequence=raw.seq, error=str(exc))
        else:
            yield Delivery(decoded, raw.seq, 1, raw.time)
        seq = raw.seq + 1


async def sequence_at(
    nc: NATS, stream: str, t: datetime, subject: str | None = None, timeout: float = 5.0
) -> int | None:
    """The first sequence stored at or after ``t`` (on ``subject`` when given); None when there
    is none yet. One message get: nats-py's ``get_msg`` takes no time."""
    req: dict[str, Any] = {"start_time": t.isoformat()}
    if subject is not None:
        req["next_by_subj"] = subject
    msg = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps(req).encode(), timeout)
    resp: dict[str, Any] = json.loads(msg.data)
    if "error" in resp:
        if resp["error"].get("code") == 404:
            return None
        nats.js.errors.APIError.from_error(resp["error"])
    return int(resp["message"]["seq"])


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
    nc: NATS, stream: str, subject: str, start: Start | None, idle: float, name: str
) -> AsyncGenerator[Msg, None]:
    js = nc.jetstream()
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
    # bounded in bytes as a durable's fetch is (fetching: small messages 256 at a time)
    fetcher = fetching.Fetcher(nc, stream, name)
    max_bytes = max(MAX_BATCH_BYTES, fetching.floor(nc.max_payload or fetching.DEFAULT_MAX_PAYLOAD))
    try:
        while True:
            try:
                msgs = await fetcher.fetch(256, max_bytes, timeout=idle)
            except (nats.errors.TimeoutError, TimeoutError):
                return  # nothing (more) from start on
            for msg in msgs:
                yield msg
    finally:
        await fetcher.unsubscribe()
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await js.delete_consumer(stream, name)
