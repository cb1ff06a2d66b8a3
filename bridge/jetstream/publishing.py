"""Pipelined JetStream publishing with a bounded window of outstanding acks.

Each message is published with a reply inbox of ours and a token of its own, the same for all
its attempts; JetStream's ack comes back there. Up to ``nats.max_inflight`` messages and
``nats.max_inflight_bytes`` bytes wait for their ack at once (one message more than the
bytes allow may go, so that one larger message is never stuck); each has a deadline
(``nats.ack_timeout``). A message whose ack did not come in time, or whose send failed, or
that JetStream refused for a passing reason, is sent again with the **same** ``Nats-Msg-Id``,
so the stream's duplicate window drops it if an earlier attempt was stored after all. The
first ack for any attempt settles the message.

An ack counts only when it names the bridge's stream (``stream``), with a sequence, and (with
``nats.domain``) the bridge's JetStream domain: one from any other stream (made to take the
bridge's subjects while its own is missing) or domain is counted as a failure
(``wrong_stream``), logged, and the message sent again, as for a refusal. The stream's shape is
checked again when no stream answers and every ``recheck_every`` seconds (``on_no_stream``);
found remade in another shape, no ack counts any more and the bridge stops (``refuse``).

Nothing is given up except a message no server of this stream can ever take (larger than
the connection's max_payload, or than the stream's max_msg_size): that one is counted,
logged and let go so that it can not stop the pipeline or hold the checkpoint for ever; when
the runtime gives ``on_dropped``, a ``dropped`` status event takes its place (and its progress
entry), so subscribers learn what they will not get.

nats-py's own ``publish_async`` is not used: its futures never time out, and a failed send
leaks a window slot. The publisher takes everything waiting in the queue (up to the window)
and sends it as one batch. How the batch reaches the socket and how acks come back is either
nats-py's public API (``PlainWriter``, the subscription's callback) or the fast path of
``bridge.jetstream.fastpath``, which uses the client's private parts when they are as tested.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bridge import logs
from bridge.core.messages import Message, Outgoing
from bridge.core.queueing import BoundedQueue
from bridge.errors import StreamConfigMismatch
from bridge.jetstream import fastpath
from bridge.metrics import Metrics
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("publishing")


class _PubAck(msgspec.Struct):
    """JetStream's answer to a publish: the stream and sequence, or an error."""

    stream: str | None = None
    seq: Any = None
    duplicate: Any = None
    error: Any = None
    domain: Any = None


_decode_ack = msgspec.json.Decoder(_PubAck).decode

_RETRY_CAP = 10.0
# Messages per write: bounds what is copied at once on the way to the socket (one bytes
# object, then the transport's buffer); larger batches saved no CPU that could be measured.
BATCH_MAX = 128
# JetStream errors that the same message will meet on every attempt.
PERMANENT_ERRORS = frozenset({10054})  # message size exceeds the stream's max_msg_size


class PlainWriter:
    """Sends through ``Client.publish``, one message at a time (the public API)."""

    def __init__(self, nc: NATS) -> None:
        self._nc = nc

    async def write(self, batch: list[tuple[Message, str]]) -> None:
        for msg, reply in batch:
            await self._nc.publish(msg.subject, msg.payload, reply=reply, headers=msg.headers)


class Publisher:
    def __init__(
        self,
        nc: NATS,
        metrics: Metrics,
        *,
        ack_timeout: float = 5.0,
        max_inflight: int = 1024,
        max_inflight_bytes: int = 4 * 2**20,
        clock: Clock = SYSTEM,
        on_no_stream: Callable[[], Coroutine[Any, Any, None]] | None = None,
        fast_path: bool = True,
        stream: str,
        domain: str | None = None,
        recheck_every: float = 30.0,
    ) -> None:
        self._nc = nc
        self.stream = stream  # the stream every ack must name
        self.domain = domain  # with nats.domain: the JetStream domain every ack must name
        self.refused: str | None = None  # why no ack is taken any more (``refuse``)
        # ``on_no_stream`` also runs this often: a stream deleted and remade by someone between
        # two publishes answers them, in whatever shape it has now
        self.recheck_every = recheck_every
        self._next_check = clock.monotonic() + recheck_every
        self._m = metrics
        self.ack_timeout = ack_timeout
        self.max_inflight = max_inflight
        self.max_inflight_bytes = max_inflight_bytes
        self._clock = clock
        self._now = clock.monotonic  # read per batch and per ack: one lookup less
        self._on_no_stream = on_no_stream
        self._pending: dict[str, Outgoing] = {}  # by reply token, in send order
        self._pending_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self.connected = asyncio.Event()
        self.connected.set()
        self._prefix = ""
        self._next_token = 0
        self.held = 0  # taken from the queue, not yet sent
        self._no_stream_task: asyncio.Task[None] | None = None
        self._fast_path = fast_path
        # builds the `dropped` status event for a message no server can take (set by the runtime)
        self.on_dropped: Callable[[Message, str, str], Message] | None = None
        self._writer: fastpath.RawWriter | PlainWriter = PlainWriter(nc)
        self._tap: fastpath.AckTap | None = None

    async def start(self) -> None:
        """Subscribe to the ack inbox; take the fast path where this nats-py has it."""
        self._prefix = self._nc.new_inbox() + "."
        sub = await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)
        if not self._fast_path:
            return
        missing = fastpath.problems(fastpath.RAW_WRITER_USES, self._nc)
        if missing:
            fastpath.turned_off("raw_writer", "; ".join(missing))
        else:
            self._writer = fastpath.RawWriter(self._nc)
        missing = fastpath.problems(fastpath.ACK_TAP_USES, self._nc, sub)
        if missing:
            fastpath.turned_off("ack_tap", "; ".join(missing))
        else:
            self._tap = fastpath.AckTap(self._nc, sub, self._prefix, self._ack)
            self._tap.install()

    @property
    def fast_writer(self) -> bool:
        """Batches go to the socket through ``fastpath.RawWriter``."""
        return isinstance(self._writer, fastpath.RawWriter)

    @property
    def tapped(self) -> bool:
        """Acks are taken from the parser by ``fastpath.AckTap``."""
        return self._tap is not None and self._tap.active

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
            return self._now() - p.first_sent
        return 0.0

    async def run(self, queue: BoundedQueue[Outgoing]) -> None:
        """Publish from the queue forever; ``reap()`` must run beside it.

        Takes what is waiting (up to the room in the window) and sends it as one batch.
        """
        while True:
            out = await queue.get()
            self.held = 1
            while not self._has_room():
                self._room.clear()
                await self._room.wait()
            if not self.connected.is_set():
                await self.connected.wait()
            batch = [out]
            size = out.msg.wire_size
            room = min(self.max_inflight - len(self._pending), BATCH_MAX) - 1
            budget = self.max_inflight_bytes - self._pending_bytes
            while room > 0 and size < budget:
                more = queue.get_nowait()
                if more is None:
                    break
                batch.append(more)
                size += more.msg.wire_size
                room -= 1
            now = self._now()
            pending = self._pending
            token = self._next_token
            for out in batch:
                token += 1
                out.token = key = str(token)
                out.first_sent = now
                pending[key] = out
            self._next_token = token
            self._pending_bytes += size
            self.held = 0
            await self._send(batch)

    def _has_room(self) -> bool:
        pending = self._pending
        return len(pending) < self.max_inflight and (
            not pending or self._pending_bytes < self.max_inflight_bytes
        )

    def sizes(self) -> dict[str, int]:
        """How much the publisher holds: for tests and soak runs that watch it stay flat."""
        return {"pending": len(self._pending), "pending_bytes": self._pending_bytes}

    async def _send(self, ps: list[Outgoing]) -> None:
        """One attempt for each (its own reply token, the same Nats-Msg-Id every time)."""
        limit = self._nc.max_payload
        deadline = self._now() + self.ack_timeout
        batch: list[tuple[Message, str]] = []
        prefix = self._prefix
        for p in ps:
            msg = p.msg
            if msg.wire_size > limit > 0:
                # The server would cut the connection for it, on every attempt.
                self._give_up(p, "too_large", f"{msg.wire_size} bytes > max_payload")
                continue
            p.attempts += 1
            p.deadline = deadline
            batch.append((msg, prefix + p.token))
        if not batch:
            return
        try:
            await self._write(batch)
        except (nats.errors.Error, OSError) as exc:
            # Not sent (buffer full while reconnecting, connection closed): the deadline
            # sends them again.
            self._m.failed.labels("send").inc(len(batch))
            log.warn_sampled(
                "send",
                "publish_send_failed",
                interval=10,
                messages=len(batch),
                msg_id=batch[0][0].msg_id,
                error=type(exc).__name__,
            )

    async def _write(self, batch: list[tuple[Message, str]]) -> None:
        try:
            await self._writer.write(batch)
        except (nats.errors.Error, OSError):
            raise
        except Exception as exc:
            if not isinstance(self._writer, fastpath.RawWriter):
                raise
            # A surprise from nats-py's private parts: the public API from now on.
            fastpath.turned_off("raw_writer", f"{type(exc).__name__}: {exc}")
            self._writer = PlainWriter(self._nc)
            await self._writer.write(batch)

    def _give_up(self, p: Outgoing, reason: str, detail: str) -> None:
        self._m.failed.labels(reason).inc()
        self._m.dropped.labels(reason).inc()
        log.error(
            "publish_impossible",
            reason=reason,
            detail=detail,
            msg_id=p.msg.msg_id,
            subject=p.msg.subject,
            action="skipped: no attempt can succeed; raise the limit to keep such events",
        )
        if self.on_dropped is None or p.notice:
            self._settle(p)
            return
        # Subscribers are told, durably: the notice takes the message's place in the ledger,
        # so the checkpoint passes the message only once the notice is stored.
        notice = Outgoing(self.on_dropped(p.msg, reason, detail), p.entry)
        notice.notice = True
        p.entry = None
        self._settle(p)
        self._adopt(notice)

    def _adopt(self, out: Outgoing) -> None:
        """Take a message in flight outside the queue; the reaper sends it at its next tick."""
        self._next_token += 1
        out.token = str(self._next_token)
        out.first_sent = self._now()
        out.deadline = 0.0
        self._pending[out.token] = out
        self._pending_bytes += out.msg.wire_size

    def _settle(self, p: Outgoing) -> None:
        if p.settled:
            return
        p.settled = True
        if self._pending.pop(p.token, None) is not None:
            self._pending_bytes -= p.msg.wire_size
        if self._has_room():
            self._room.set()
        entry = p.entry
        if entry is not None:
            entry.settle()

    async def _on_reply(self, msg: Msg) -> None:
        """An ack through nats-py's subscription (the public path, when the tap is not in)."""
        hdrs = msg.headers
        self._ack(
            msg.subject[len(self._prefix) :],
            msg.data,
            bool(hdrs and hdrs.get("Status") == "503"),
        )

    def _ack(self, token: str, data: bytes, no_responders: bool) -> None:
        p = self._pending.get(token)
        if p is None or p.settled:
            return
        if no_responders:
            self._retry_later(p, "no_responders", "no stream takes the subject")
            # the stream is gone: check the one that comes back soon after it does
            self._next_check = min(self._next_check, self._now() + 1.0)
            if self._on_no_stream is not None and (
                self._no_stream_task is None or self._no_stream_task.done()
            ):
                self._no_stream_task = asyncio.create_task(self._no_stream(self._on_no_stream))
            return
        try:
            resp = _decode_ack(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self._retry_later(p, "bad_ack", data[:100].decode("utf-8", "replace"))
            return
        err = resp.error
        if err is not None or resp.stream is None:
            err = err if isinstance(err, dict) else {"description": str(err or data[:100])}
            code = err.get("err_code", err.get("code", ""))
            if code in PERMANENT_ERRORS:
                self._give_up(p, f"jetstream_{code}", str(err.get("description", err)))
            else:
                self._retry_later(p, f"jetstream_{code}", str(err.get("description", err)))
            return
        if self.refused is not None:
            self._retry_later(p, "stream_refused", self.refused)
            return
        if resp.stream != self.stream:
            # stored by some other stream (one made to take our subjects while ours is
            # missing), or an answer that is no ack of ours: not stored where it must be
            self._retry_later(
                p, "wrong_stream", f"acked by stream {resp.stream!r}, not {self.stream!r}"
            )
            return
        seq = resp.seq
        if seq.__class__ is not int or seq < 1:
            # a stored message has a sequence: an answer without one stored nothing
            self._retry_later(
                p, "wrong_stream", f"an ack of stream {resp.stream!r} with seq {seq!r}"
            )
            return
        if self.domain is not None and resp.domain != self.domain:
            # stored by the stream of that name in another JetStream domain
            self._retry_later(
                p, "wrong_stream", f"acked in domain {resp.domain!r}, not {self.domain!r}"
            )
            return
        m = self._m
        m.latency.observe(self._now() - p.first_sent)
        m.published.inc()
        if resp.duplicate is True:
            m.duplicates.inc()
        self._settle(p)

    async def _no_stream(self, answer: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await answer()
        except StreamConfigMismatch as exc:
            self.refuse(str(exc))

    def refuse(self, why: str) -> None:
        """The stream was remade in another shape while the bridge runs: no ack of it counts
        from now on (nothing more is settled, the checkpoint stays), and ``reap`` ends with
        ``StreamConfigMismatch``, which stops the bridge (exit 1)."""
        if self.refused is None:
            self.refused = why
            log.error("stream_refused", stream=self.stream, error=why)

    def _retry_later(self, p: Outgoing, reason: str, detail: str) -> None:
        self._m.failed.labels(reason).inc()
        # never longer than an ack wait: a stream without a leader answers at once ("no
        # responders") while it elects one, and the window must not sleep past the election
        delay = min(_RETRY_CAP, self.ack_timeout, 0.5 * 2 ** min(p.attempts, 5))
        p.deadline = self._now() + delay
        log.warn_sampled(
            reason,
            "publish_rejected",
            interval=10,
            reason=reason,
            detail=detail,
            msg_id=p.msg.msg_id,
            subject=p.msg.subject,
            retry_in=delay,
        )

    async def resend_all(self) -> None:
        """After a reconnect: whatever was in flight may have died with the old socket."""
        for p in self._pending.values():
            p.deadline = 0.0
        await self._resend_due()

    async def _resend_due(self) -> None:
        if not self.connected.is_set():
            return
        now = self._now()
        due = [p for p in self._pending.values() if p.deadline <= now and not p.settled]
        if due:
            self._m.retries.inc(sum(1 for p in due if p.attempts))
            await self._send(due)

    async def reap(self, interval: float | None = None) -> None:
        """Send again what has waited past its deadline; runs forever."""
        tick = interval if interval is not None else min(0.25, self.ack_timeout / 4)
        while True:
            await self._clock.sleep(tick)
            if self.refused is not None:
                raise StreamConfigMismatch(self.refused)
            if self._on_no_stream is not None and self._now() >= self._next_check:
                self._next_check = self._now() + self.recheck_every
                if self._no_stream_task is None or self._no_stream_task.done():
                    self._no_stream_task = asyncio.create_task(self._no_stream(self._on_no_stream))
            if self._pending and self.connected.is_set():
                await self._resend_due()
