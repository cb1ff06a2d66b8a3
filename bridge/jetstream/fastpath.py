"""The publisher's uses of nats-py's private parts, in this one module: delete it the day
nats-py publishes as fast through its public API. (The connection's own, shared with the
subscribers, are in ``k8s_event_common.connecting``, checked the same way.)

Two things the public API does per message cost more than the rest of the bridge's work on it:

- ``Client.publish`` encodes the header dict and queues a flush for every message.
  ``RawWriter`` frames the HPUB commands of a whole batch from the header block the converter
  encoded once, and hands the batch to the client's outgoing buffer in one piece.
- Through a subscription every JetStream ack becomes a ``Msg``, a queue entry and a callback on
  another task. ``AckTap`` takes the acks for the publisher's inbox straight from the client's
  protocol parser, as one synchronous call with the raw subject and payload.

Each private part they use is listed below (``RAW_WRITER_USES``, ``ACK_TAP_USES``) as it was
in the nats-py they were tested with (2.16; the dependency is pinned to that minor version).
``problems()`` checks each one's presence, type and call signature before it is used. Any
mismatch, an unexpected exception from ``RawWriter``, or any exception inside the tap turns
that part off: the publisher goes on through ``Client.publish`` and the subscription's
callback (``bridge.jetstream.publishing``), and the log says so once.

The tap must never let an exception reach nats-py's read loop, which stops reading for good
on one (every later ack would be lost with it): inside the tap everything is caught, the tap
is taken out, and the message goes the public way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS

from bridge import logs
from bridge.core.messages import Message
from k8s_event_common import connecting
from k8s_event_common.connecting import Private

log = logs.get("publishing")


# What RawWriter uses of the client, as in nats-py 2.16.
RAW_WRITER_USES = (
    Private("_send_command", params=("cmd", "priority")),  # queue outgoing bytes
    Private("_flush_pending", params=("force_flush",)),  # wake the flusher task
    Private("_pending_data_size", types=(int,)),  # bytes waiting to be written
    Private("_max_pending_size", types=(int,)),  # the bound while reconnecting
    Private("_flush_queue", types=(asyncio.Queue, type(None))),  # flusher wake-ups
    Private("stats", types=(dict,)),  # in/out message and byte counters
)
# What AckTap uses of the client and of the inbox's subscription, as in nats-py 2.16.
ACK_TAP_USES = (
    Private("_process_msg", params=("sid", "subject", "reply", "data", "headers")),
    Private("stats", types=(dict,)),
    Private("_id", types=(int,), owner="Subscription"),  # the sid the parser passes on
)


def problems(uses: tuple[Private, ...], nc: Any, sub: Any = None) -> list[str]:
    """What this nats-py lacks of ``uses``; empty when every part is as tested (the check is
    the shared connection's, which leans on nats-py's private parts too)."""
    return connecting.problems(nc, uses, sub)


def turned_off(part: str, reason: str) -> None:
    """Say once, for one part, that the public path is used from now on."""
    log.warning(
        "publish_fast_path_off",
        part=part,
        reason=reason,
        action="publishing goes on through nats-py's public API",
    )


class RawWriter:
    """Frames HPUB commands and queues a whole batch in the client's outgoing buffer at once.

    Does what ``Client.publish`` does (closed/draining/buffer checks, stats, kick the
    flusher) once per batch instead of once per message; the subject is one the converter
    built from sanitised tokens, the header block one it encoded (no line breaks).
    """

    def __init__(self, nc: NATS) -> None:
        self._nc = nc

    async def write(self, batch: list[tuple[Message, str]]) -> None:
        nc = self._nc
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if nc.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        parts: list[bytes] = []
        add = parts.append
        size = 0
        for msg, reply in batch:
            head = msg.head
            payload = msg.payload
            hl = len(head)
            n = hl + len(payload)
            size += n
            add(f"HPUB {msg.subject} {reply} {hl} {n}\r\n".encode())
            add(head)
            add(payload)
            add(b"\r\n")
        data = b"".join(parts)
        if not nc.is_connected:
            limit = nc._max_pending_size
            if limit <= 0 or len(data) + nc._pending_data_size > limit:
                raise nats.errors.OutboundBufferLimitError
        nc.stats["out_msgs"] += len(batch)
        nc.stats["out_bytes"] += size
        await nc._send_command(data)
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()


# (reply token, ack payload, no responders): the publisher's handler for one ack
AckHandler = Callable[[str, bytes, bool], None]


class AckTap:
    """Hands the messages of one subscription (the publisher's inbox) to ``ack`` straight from
    the protocol parser, by standing in for the client's ``_process_msg``; every other
    subscription's messages go on to nats-py's own."""

    def __init__(self, nc: NATS, sub: Any, prefix: str, ack: AckHandler) -> None:
        self._nc = nc
        self._sid: int = sub._id
        self._plen = len(prefix)
        self._ack = ack
        self._original = nc._process_msg
        self.active = False

    def install(self) -> None:
        nc = self._nc
        original = self._original
        inbox_sid = self._sid
        plen = self._plen
        ack = self._ack
        stats = nc.stats

        # The parameters are named as nats-py's own, so that a tap checks out on a tapped client.
        async def process_msg(
            sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
        ) -> None:
            if sid != inbox_sid:
                await original(sid, subject, reply, data, headers)
                return
            try:
                # a status-only message: "NATS/1.0 503\r\n\r\n" (no responders)
                no_responders = bool(headers) and headers[9:12] == b"503"
                ack(subject[plen:].decode(), data, no_responders)
            except Exception as exc:  # never into nats-py's read loop
                self.remove(f"{type(exc).__name__} in the ack tap: {exc}")
                await original(sid, subject, reply, data, headers)  # counts it, as below
                return
            stats["in_msgs"] += 1
            stats["in_bytes"] += len(data)

        nc._process_msg = process_msg  # type: ignore[method-assign]
        self.active = True

    def remove(self, reason: str) -> None:
        """Give the client its own ``_process_msg`` back: acks go through the subscription."""
        if self.active:
            self.active = False
            self._nc._process_msg = self._original  # type: ignore[method-assign]
            turned_off("ack_tap", reason)
