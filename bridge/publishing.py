"""Pipelined JetStream publishing with a bounded window of outstanding acks.

Each message is published with a reply inbox of ours; JetStream's ack comes back there.
Up to ``nats.max_inflight`` messages wait for their ack at once; each has a deadline
(``nats.ack_timeout``). A message whose ack did not come in time, or whose send failed, or
that JetStream refused for a passing reason, is sent again with the **same** ``Nats-Msg-Id``,
so the stream's duplicate window drops it if an earlier attempt was stored after all. The
first ack for any attempt settles the message.

Nothing is given up except a message no server of this stream can ever take (larger than
the connection's max_payload, or than the stream's max_msg_size): that one is counted,
logged and let go so that it can not stop the pipeline or hold the checkpoint for ever.

nats-py's own ``publish_async`` is not used: its futures never time out, and a failed send
leaks a window slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

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

_RETRY_CAP = 10.0
# JetStream errors that the same message will meet on every attempt.
PERMANENT_ERRORS = frozenset({10054})  # message size exceeds the stream's max_msg_size
_HEADER_OVERHEAD = len("NATS/1.0\r\n\r\n")
_HEADROOM = 4096  # more than the headers of any message the bridge builds


@dataclass(slots=True)
class Outgoing:
    msg: Message
    entry: Entry | None  # None for status events: they move no checkpoint


class _Pending:
    __slots__ = ("attempts", "deadline", "first_sent", "out", "serial", "settled", "tokens")

    def __init__(self, out: Outgoing, serial: int) -> None:
        self.out = out
        self.serial = serial
        self.tokens: list[str] = []
        self.deadline = 0.0
        self.first_sent = 0.0
        self.attempts = 0
        self.settled = False


def wire_size(msg: Message) -> int:
    """Bytes the server counts against max_payload: headers block plus payload."""
    hdr = sum(len(k) + len(v) + 4 for k, v in msg.headers.items()) + _HEADER_OVERHEAD
    return hdr + len(msg.payload)


class Publisher:
    def __init__(
        self,
        nc: NATS,
        metrics: Metrics,
        *,
        ack_timeout: float = 5.0,
        max_inflight: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        on_no_stream: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self._nc = nc
        self._m = metrics
        self.ack_timeout = ack_timeout
        self.max_inflight = max_inflight
        self._clock = clock
        self._on_no_stream = on_no_stream
        self._pending: dict[int, _Pending] = {}  # by serial, in send order
        self._tokens: dict[str, _Pending] = {}  # every attempt's reply token
        self._room = asyncio.Event()
        self._room.set()
        self.connected = asyncio.Event()
        self.connected.set()
        self._prefix = ""
        self._next_token = 0
        self._next_serial = 0
        self.held = 0  # taken from the queue, not yet sent
        self.acked = 0
        self._no_stream_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._prefix = f"_INBOX.{self._nc._nuid.next().decode()}."
        await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)

    def set_connected(self, up: bool) -> None:
        if up:
            self.connected.set()
        else:
            self.connected.clear()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def busy(self) -> bool:
        return bool(self._pending) or self.held > 0

    def oldest_wait(self) -> float:
        """Seconds the oldest unacked message has waited (0 when none)."""
        for p in self._pending.values():
            return self._clock() - p.first_sent
        return 0.0

    async def run(self, queue: BoundedQueue[Outgoing]) -> None:
        """Publish from the queue forever; ``reap()`` must run beside it."""
        while True:
            out = await queue.get()
            self.held = 1
            while len(self._pending) >= self.max_inflight:
                self._room.clear()
                await self._room.wait()
            if not self.connected.is_set():
                await self.connected.wait()
            self._next_serial += 1
            p = _Pending(out, self._next_serial)
            p.first_sent = self._clock()
            self._pending[p.serial] = p
            self.held = 0
            await self._send(p)

    async def _send(self, p: _Pending) -> None:
        msg = p.out.msg
        # headers are small: count them only for a payload near the limit
        limit = self._nc.max_payload
        if len(msg.payload) > limit - _HEADROOM and wire_size(msg) > limit > 0:
            # The server would cut the connection for it, on every attempt.
            self._give_up(p, "too_large", f"{wire_size(msg)} bytes > max_payload")
            return
        self._next_token += 1
        token = str(self._next_token)
        p.tokens.append(token)
        self._tokens[token] = p
        p.attempts += 1
        p.deadline = self._clock() + self.ack_timeout
        try:
            await self._nc.publish(
                msg.subject, msg.payload, reply=self._prefix + token, headers=msg.headers
            )
        except nats.errors.MaxPayloadError:
            self._give_up(p, "too_large", f"{len(msg.payload)} bytes > max_payload")
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

    def _give_up(self, p: _Pending, reason: str, detail: str) -> None:
        self._m.failed.labels(reason).inc()
        log.error(
            "publish_impossible",
            reason=reason,
            detail=detail,
            msg_id=p.out.msg.msg_id,
            subject=p.out.msg.subject,
            action="skipped: no attempt can succeed; raise the limit to keep such events",
        )
        self._settle(p)

    def _settle(self, p: _Pending) -> None:
        if p.settled:
            return
        p.settled = True
        self._pending.pop(p.serial, None)
        for token in p.tokens:
            self._tokens.pop(token, None)
        if len(self._pending) < self.max_inflight:
            self._room.set()
        entry = p.out.entry
        if entry is not None:
            entry.progress.ack(entry)

    async def _on_reply(self, msg: Msg) -> None:
        p = self._tokens.get(msg.subject[len(self._prefix) :])
        if p is None or p.settled:
            return
        hdrs = msg.headers
        if hdrs and hdrs.get("Status") == "503":
            self._retry_later(p, "no_responders", "no stream takes the subject")
            if self._on_no_stream is not None and (
                self._no_stream_task is None or self._no_stream_task.done()
            ):
                self._no_stream_task = asyncio.create_task(self._on_no_stream())
            return
        try:
            resp = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            self._retry_later(p, "bad_ack", msg.data[:100].decode("utf-8", "replace"))
            return
        err = resp.get("error") if isinstance(resp, dict) else None
        if err or not isinstance(resp, dict):
            err = err if isinstance(err, dict) else {"description": str(resp)[:100]}
            code = err.get("err_code", err.get("code", ""))
            if code in PERMANENT_ERRORS:
                self._give_up(p, f"jetstream_{code}", str(err.get("description", err)))
            else:
                self._retry_later(p, f"jetstream_{code}", str(err.get("description", err)))
            return
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
        for p in self._pending.values():
            p.deadline = 0.0
        await self._resend_due()

    async def _resend_due(self) -> None:
        now = self._clock()
        due = [p for p in self._pending.values() if p.deadline <= now]
        for p in due:
            if not self.connected.is_set():
                return
            if p.settled or p.deadline > now:
                continue  # acked meanwhile, or already sent again by the other caller
            self._m.retries.inc()
            await self._send(p)

    async def reap(self, interval: float | None = None) -> None:
        """Send again what has waited past its deadline; runs forever."""
        tick = interval if interval is not None else min(0.25, self.ack_timeout / 4)
        while True:
            await asyncio.sleep(tick)
            if self._pending and self.connected.is_set():
                await self._resend_due()
