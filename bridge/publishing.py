"""Pipelined JetStream publishing with a bounded window of outstanding acks.

Each message is published with a reply inbox of ours; JetStream's ack comes back there.
Up to ``nats.max_inflight`` acks are outstanding at once; each has a deadline
(``nats.ack_timeout``). A message whose ack did not come in time, or whose send failed, or
that JetStream refused for a passing reason, is sent again with the **same** ``Nats-Msg-Id``,
so the stream's duplicate window drops it if the first attempt was stored after all.
Nothing is given up except a message NATS can never take (larger than max_payload): that
one is counted, logged and let go so that it can not stop the pipeline.

nats-py's own ``publish_async`` is not used: its futures never time out, and a failed send
leaks a window slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import nats.errors
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bridge import logs
from bridge.converting import Message
from bridge.metrics import Metrics
from bridge.progress import Entry
from bridge.queueing import BoundedQueue

log = logs.get("publishing")

# JetStream errors after which a later attempt can succeed: stream or leader unavailable,
# storage full for now, no responders while the stream is created. Everything else is
# retried too (losing an event is worse than a stuck pipeline that alerts), but logged as
# an error.
_RETRY_CAP = 10.0


@dataclass(slots=True)
class Outgoing:
    msg: Message
    entry: Entry | None  # None for status events: they move no checkpoint
    enqueued: float = 0.0


class _Pending:
    __slots__ = ("attempts", "deadline", "first_sent", "out", "token")

    def __init__(self, out: Outgoing) -> None:
        self.out = out
        self.token = ""
        self.deadline = 0.0
        self.first_sent = 0.0
        self.attempts = 0


class Publisher:
    def __init__(
        self,
        nc: NATS,
        metrics: Metrics,
        *,
        ack_timeout: float = 5.0,
        max_inflight: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nc = nc
        self._m = metrics
        self.ack_timeout = ack_timeout
        self.max_inflight = max_inflight
        self._clock = clock
        self._inflight: dict[str, _Pending] = {}
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.connected = asyncio.Event()
        self.connected.set()
        self._prefix = ""
        self._next = 0
        self._sub: object | None = None
        self.acked = 0

    async def start(self) -> None:
        self._prefix = f"_INBOX.{self._nc._nuid.next().decode()}."
        self._sub = await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)

    def set_connected(self, up: bool) -> None:
        if up:
            self.connected.set()
        else:
            self.connected.clear()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def run(self, queue: BoundedQueue[Outgoing]) -> None:
        """Publish from the queue forever; ``reap()`` must run beside it."""
        while True:
            out = await queue.get()
            while len(self._inflight) >= self.max_inflight:
                self._room.clear()
                await self._room.wait()
            if not self.connected.is_set():
                await self.connected.wait()
            p = _Pending(out)
            p.first_sent = self._clock()
            await self._send(p)
            self._m.queue_depth.set(len(queue))
            self._m.queue_bytes.set(queue.bytes)

    async def publish_now(self, msg: Message) -> None:
        """Send one message outside the queue (status events at stop); acks as usual."""
        p = _Pending(Outgoing(msg, None))
        p.first_sent = self._clock()
        await self._send(p)

    async def _send(self, p: _Pending) -> None:
        self._next += 1
        p.token = str(self._next)
        p.attempts += 1
        p.deadline = self._clock() + self.ack_timeout
        self._inflight[p.token] = p
        self._idle.clear()
        self._m.inflight.set(len(self._inflight))
        msg = p.out.msg
        try:
            await self._nc.publish(
                msg.subject, msg.payload, reply=self._prefix + p.token, headers=msg.headers
            )
        except nats.errors.MaxPayloadError:
            self._forget(p.token)
            self._m.failed.labels("too_large").inc()
            log.error(
                "publish_too_large",
                msg_id=msg.msg_id,
                subject=msg.subject,
                bytes=len(msg.payload),
                action="skipped: NATS max_payload is smaller",
            )
            self._settle(p)
        except (nats.errors.Error, OSError) as exc:
            # Not sent (buffer full while reconnecting, connection closed): the deadline
            # sends it again.
            self._m.failed.labels("send").inc()
            log.warn_sampled(
                "send",
                "publish_send_failed",
                interval=10,
                msg_id=msg.msg_id,
                error=type(exc).__name__,
            )

    def _forget(self, token: str) -> _Pending | None:
        p = self._inflight.pop(token, None)
        if not self._inflight:
            self._idle.set()
        if len(self._inflight) < self.max_inflight:
            self._room.set()
        return p

    def _settle(self, p: _Pending) -> None:
        entry = p.out.entry
        if entry is not None:
            entry.progress.ack(entry)

    async def _on_reply(self, msg: Msg) -> None:
        token = msg.subject[len(self._prefix) :]
        p = self._inflight.get(token)
        if p is None:
            return  # an ack for an attempt that was already sent again, or settled
        hdrs = msg.headers
        if hdrs and hdrs.get("Status") == "503":
            self._retry_later(p, "no_responders", "no stream takes the subject")
            return
        try:
            resp = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            self._retry_later(p, "bad_ack", msg.data[:100].decode("utf-8", "replace"))
            return
        err = resp.get("error") if isinstance(resp, dict) else None
        if err:
            self._retry_later(
                p,
                f"jetstream_{err.get('err_code', err.get('code', ''))}",
                str(err.get("description", err)),
            )
            return
        self._forget(token)
        self._m.latency.observe(self._clock() - p.first_sent)
        self._m.published.inc()
        self.acked += 1
        if resp.get("duplicate"):
            self._m.duplicates.inc()
        self._settle(p)

    def _retry_later(self, p: _Pending, reason: str, detail: str) -> None:
        self._m.failed.labels(reason).inc()
        delay = min(_RETRY_CAP, 0.5 * 2 ** min(p.attempts, 5))
        p.deadline = self._clock() + delay
        log.warn_sampled(
            reason,
            "publish_rejected",
            interval=10,
            reason=reason,
            detail=detail,
            msg_id=p.out.msg.msg_id,
            subject=p.out.msg.subject,
            retry_in=delay,
        )

    async def resend_all(self) -> None:
        """After a reconnect: whatever was in flight may have died with the old socket."""
        for p in list(self._inflight.values()):
            p.deadline = 0.0
        await self._resend_due()

    async def _resend_due(self) -> None:
        now = self._clock()
        due = [p for p in self._inflight.values() if p.deadline <= now]
        for p in due:
            if not self.connected.is_set():
                return
            if self._inflight.pop(p.token, None) is None:
                continue
            self._m.retries.inc()
            await self._send(p)

    async def reap(self, interval: float | None = None) -> None:
        """Send again what has waited past its deadline; runs forever."""
        tick = interval if interval is not None else min(0.25, self.ack_timeout / 4)
        while True:
            await asyncio.sleep(tick)
            if self._inflight and self.connected.is_set():
                await self._resend_due()

    async def wait_idle(self) -> None:
        await self._idle.wait()
