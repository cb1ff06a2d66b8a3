"""The Events' stream read whole and in sequence order, from a place, for as long as it runs:
through a consumer of the program's own (``<prefix>-<8 hex>``: no acks, in memory, deleted at
the end, gone after a minute of nobody reading when a crash left it). A sequence that does not
follow the last one read (a pull answer lost with the connection) makes a new consumer from
the one after the last read; messages JetStream no longer has (its limits dropped them) are
passed over, counted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from k8s_event_common.cloudevents import parse_time
from k8s_event_consumer import fetching
from k8s_event_consumer.options import MAX_BATCH_BYTES

BATCH = 256
INACTIVE = 60.0  # seconds: JetStream removes a consumer nobody read this long


@dataclass(frozen=True)
class StreamState:
    """The stream as the server answered at ``ts`` (its own clock)."""

    first_seq: int
    last_seq: int
    ts: datetime | None


async def state(nc: NATS, stream: str, timeout: float = 5.0) -> StreamState:
    """``$JS.API.STREAM.INFO``: the first and last sequence, and the server's time of the
    answer (``ts``, nats-server 2.10 and later)."""
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=timeout)
    resp: dict[str, Any] = json.loads(msg.data)
    if "error" in resp:
        nats.js.errors.APIError.from_error(resp["error"])
    st = resp.get("state", {})
    return StreamState(
        int(st.get("first_seq", 0)), int(st.get("last_seq", 0)), parse_time(resp.get("ts"))
    )


class Reader:
    """``batches(after)``: lists of messages in sequence order, each the next one; an empty
    list when ``idle`` passed with nothing new (the caller may close a window then)."""

    def __init__(self, nc: NATS, stream: str, prefix: str, *, idle: float = 1.0) -> None:
        self.nc = nc
        self.stream = stream
        self.prefix = prefix
        self.idle = idle
        self.name = ""
        self.fetcher: fetching.Fetcher | None = None
        self.restarts = 0  # consumers made again after a gap
        self.missing = 0  # sequences JetStream no longer had when read

    async def _open(self, start: int | datetime) -> None:
        await self._drop()
        self.name = f"{self.prefix}-{secrets.token_hex(4)}"
        cfg = ConsumerConfig(
            name=self.name,
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=INACTIVE,
        )
        if isinstance(start, datetime):
            cfg.deliver_policy = DeliverPolicy.BY_START_TIME
            cfg.opt_start_time = start.isoformat()  # type: ignore[assignment]  # as sent
        else:
            cfg.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = max(1, start)
        await self.nc.jetstream().add_consumer(self.stream, cfg)
        self.fetcher = fetching.Fetcher(self.nc, self.stream, self.name)

    async def _drop(self) -> None:
        if self.fetcher is not None:
            with contextlib.suppress(Exception):
                await self.fetcher.unsubscribe()
            self.fetcher = None
        if self.name:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await self.nc.jetstream().delete_consumer(self.stream, self.name)
            self.name = ""

    async def batches(
        self, after: int, since: datetime | None = None
    ) -> AsyncGenerator[list[Msg], None]:
        """From the sequence after ``after`` (or, when ``after`` is 0 and ``since`` given, the
        first stored at or after ``since``), on and on."""
        last = after
        await self._open(since if after == 0 and since is not None else after + 1)
        max_bytes = max(MAX_BATCH_BYTES, fetching.floor(self.nc.max_payload or (1 << 20)))
        try:
            while True:
                assert self.fetcher is not None
                try:
                    msgs = await self.fetcher.fetch(BATCH, max_bytes, timeout=self.idle)
                except (nats.errors.TimeoutError, TimeoutError):
                    yield []
                    continue
                except nats.js.errors.APIError:  # the consumer is gone (a server restart...)
                    await asyncio.sleep(self.idle)  # never a tight loop
                    await self._open(last + 1)
                    self.restarts += 1
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
                await self._open(last + 1)
        finally:
            await self._drop()

    async def _gone(self, want: int, got: int) -> bool:
        """Whether the sequences from ``want`` up to ``got`` are no longer in the stream (its
        limits dropped them): passed over, counted. False: they are there, read them."""
        st = await state(self.nc, self.stream)
        if st.first_seq >= got:
            self.missing += got - want
            return True
        return False
