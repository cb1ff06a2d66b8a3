"""The Events' stream read whole and in sequence order, from a place, for as long as it runs:
through the consumer ``nats.durable`` names (``k8s-event-digests``, ``-0``, ``-1``: one per
replica), which ``k8s-event-digests provision`` makes (pull, no acks, every subject). The
program never creates a consumer (a consumer's delivery subject would let its maker copy the
Events into any stream of the account: docs/deploy.md); it moves its own to the sequence it
wants (``$JS.API.CONSUMER.RESET``, tested on nats-server 2.15.1) and finds the sequence of a
time with one message get. A sequence that does not follow the last one read (a pull answer lost
with the connection) moves the consumer back to the one after the last read; messages
JetStream no longer has (its limits dropped them) are passed over, counted."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy

from k8s_event_common.cloudevents import parse_time
from k8s_event_common.logformat import Logger
from k8s_event_common.streams import Difference, ShapeMismatch
from k8s_event_consumer import fetching, replaying
from k8s_event_consumer.options import MAX_BATCH_BYTES

BATCH = 256
log = Logger("k8s_event_consumer.digests")


def consumer_config(name: str) -> ConsumerConfig:
    """The shape of the program's consumer: pull, no acks, every subject, from the start."""
    return ConsumerConfig(
        durable_name=name,
        name=name,
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.ALL,
        description="k8s-event-digests: the Events read in order (moved by CONSUMER.RESET)",
    )


async def provision(nc: NATS, stream: str, name: str) -> str:
    """Make the consumer ``name`` (an operator's credentials): "created" or "unchanged"."""
    try:
        await check(nc, stream, name)
        return "unchanged"
    except nats.js.errors.NotFoundError:
        await nc.jetstream(timeout=5.0).add_consumer(stream, consumer_config(name))
        return "created"


async def check(nc: NATS, stream: str, name: str) -> None:
    """The consumer is there (``NotFoundError`` when not: provision it) in the shape the
    program reads with (``ShapeMismatch`` naming each difference)."""
    info = await nc.jetstream().consumer_info(stream, name)
    c = info.config
    diffs = []
    if c.ack_policy != AckPolicy.NONE:
        diffs.append(Difference("ack_policy", str(c.ack_policy), "none"))
    if c.deliver_subject:
        diffs.append(Difference("deliver_subject", c.deliver_subject, None))
    if c.filter_subject or c.filter_subjects:
        diffs.append(Difference("filter_subject", c.filter_subject or c.filter_subjects, None))
    if c.headers_only:
        diffs.append(Difference("headers_only", True, False))
    if c.replay_policy not in (None, ReplayPolicy.INSTANT):
        diffs.append(Difference("replay_policy", str(c.replay_policy), "instant"))
    if diffs:
        raise ShapeMismatch(f"{stream} consumer {name}", diffs)


@dataclass(frozen=True)
class StreamState:
    """The stream as the server answered at ``ts`` (its own clock)."""

    first_seq: int
    last_seq: int
    ts: datetime | None
    messages: int = 0


async def state(nc: NATS, stream: str, timeout: float = 5.0) -> StreamState:
    """``$JS.API.STREAM.INFO``: the first and last sequence, and the server's time of the
    answer (``ts``, nats-server 2.10 and later)."""
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=timeout)
    resp: dict[str, Any] = json.loads(msg.data)
    if "error" in resp:
        nats.js.errors.APIError.from_error(resp["error"])
    st = resp.get("state", {})
    return StreamState(
        int(st.get("first_seq", 0)),
        int(st.get("last_seq", 0)),
        parse_time(resp.get("ts")),
        int(st.get("messages", 0)),
    )


class Reader:
    """``batches(after)``: lists of messages in sequence order, each the next one; an empty
    list when ``idle`` passed with nothing new (the caller may close a window then)."""

    def __init__(self, nc: NATS, stream: str, name: str, *, idle: float = 1.0) -> None:
        self.nc = nc
        self.stream = stream
        self.name = name
        self.idle = idle
        self.fetcher: fetching.Fetcher | None = None
        self.restarts = 0  # consumers made again after a gap
        self.missing = 0  # sequences JetStream no longer had when read
        self.failures = 0  # moves of the consumer the server did not answer
        self.last_error = ""

    async def _open(self, start: int | datetime) -> None:
        """Move the consumer to ``start`` (a sequence, or the first stored at a time)."""
        await self._drop()
        if isinstance(start, datetime):
            seq = await replaying.sequence_at(self.nc, self.stream, start)
            if seq is None:  # nothing stored since: from the end on
                seq = (await state(self.nc, self.stream)).last_seq + 1
            start = seq
        req = json.dumps({"seq": max(1, start)}).encode()
        msg = await self.nc.request(
            f"$JS.API.CONSUMER.RESET.{self.stream}.{self.name}", req, timeout=5.0
        )
        resp: dict[str, Any] = json.loads(msg.data)
        if "error" in resp:
            nats.js.errors.APIError.from_error(resp["error"])
        self.fetcher = fetching.Fetcher(self.nc, self.stream, self.name)

    async def _drop(self) -> None:
        if self.fetcher is not None:
            with contextlib.suppress(Exception):
                await self.fetcher.unsubscribe()
            self.fetcher = None

    async def batches(
        self, after: int, since: datetime | None = None
    ) -> AsyncGenerator[list[Msg], None]:
        """From the sequence after ``after`` (or, when ``after`` is 0 and ``since`` given, the
        first stored at or after ``since``), on and on."""
        last = after
        await self._reopen(since if after == 0 and since is not None else after + 1)
        max_bytes = max(MAX_BATCH_BYTES, fetching.floor(self.nc.max_payload or (1 << 20)))
        try:
            while True:
                assert self.fetcher is not None
                try:
                    msgs = await self.fetcher.fetch(BATCH, max_bytes, timeout=self.idle)
                except (nats.errors.TimeoutError, TimeoutError):
                    yield []
                    continue
                except (nats.errors.Error, nats.js.errors.APIError):  # a server restart...
                    await asyncio.sleep(self.idle)  # never a tight loop
                    await self._reopen(last + 1)
                    self.restarts += 1
                    continue
                if not msgs:  # the next message is over max_bytes: never a tight loop
                    yield []
                    await asyncio.sleep(self.idle)
                    continue
                good: list[Msg] = []
                for msg in msgs:
                    seq = msg.metadata.sequence.stream
                    if seq <= last:
                        continue  # read already
                    if last and seq != last + 1 and not await self._gone(last + 1, seq):
                        break  # a gap: read again from last + 1
                    good.append(msg)
                    last = seq
                else:
                    if good:
                        yield good
                    continue
                if good:
                    yield good
                self.restarts += 1
                await self._reopen(last + 1)
        finally:
            await self._drop()

    async def _reopen(self, start: int | datetime) -> None:
        """``_open`` until the server answers (a leader election, a restart): never a tight
        loop, never an exit for a moment without an answer. A consumer that is not there (or
        another error JetStream gives) is asked again too: the program's readiness and logs
        say so."""
        while True:
            try:
                await self._open(start)
                return
            except (nats.errors.Error, nats.js.errors.APIError, TimeoutError) as exc:
                self.failures += 1
                self.last_error = str(exc) or repr(exc)
                if self.failures == 1 or self.failures % 60 == 0:  # once a minute at most
                    log.warning("consumer_move_failed", consumer=self.name,
                                failures=self.failures, error=self.last_error)  # fmt: skip
                await asyncio.sleep(self.idle)

    async def _gone(self, want: int, got: int) -> bool:
        """Whether the sequences from ``want`` up to ``got`` are no longer in the stream (its
        limits dropped them): passed over, counted. False: they are there, read them."""
        try:
            st = await state(self.nc, self.stream)
        except (nats.errors.Error, TimeoutError):
            return False  # read again from ``want``: safe either way
        if st.first_seq >= got:
            self.missing += got - want
            return True
        return False
