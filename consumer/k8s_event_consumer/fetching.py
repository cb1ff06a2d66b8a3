"""A durable's messages fetched in batches bounded in count and in bytes: ``Fetcher``.

nats-py's ``PullSubscription.fetch`` asks JetStream for a number of messages only, and each may
be as large as the server's ``max_payload`` (1 MiB by default): 64 of them could bring 64 MiB
before any handler ran. A pull request of JetStream's protocol also takes ``max_bytes``: the
server sends no more for it than that many bytes (a message's subject, reply subject, headers
and body, as it counts them) and ends it with a status. ``Fetcher.fetch`` speaks that protocol
through nats-py's public client (one subscription, a publish per request):

- a ``no_wait`` request first: what the durable has now, at most ``batch`` messages and
  ``max_bytes``; JetStream ends it with a status (404: nothing more; 409: the batch or the bytes
  are done, or the next message would not fit: it comes with the next request);
- when that brought nothing, a request for one message that waits (``expires``): JetStream
  ends it with 408 when none came in time.

Small messages come as many a request as before (the byte budget never binds them); a
message larger than a request's ``max_bytes`` would never come, so ``max_bytes`` is at least
the largest message the server takes (``floor``: its ``max_payload`` and a subject's room).

Each request has a reply subject of its own (``<inbox>.<n>``), which JetStream's status
messages come back on, so the end of an earlier request (one given up after its timeout, NATS
away meanwhile) ends nothing; such a request's messages that came late are the next fetch's,
counted in its bytes. Errors are nats-py's: ``nats.errors.TimeoutError`` when nothing came,
``nats.js.errors.APIError`` for a status that is no end (the durable deleted, a leader change).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from k8s_event_common.clock import SYSTEM, Clock

API = "$JS.API"  # the subscribers use the default JetStream API prefix (no domain)
EXPIRES_MARGIN = 0.1  # seconds: a waiting request expires this long before the fetch gives up
DEFAULT_MAX_PAYLOAD = 1 << 20  # nats-server's default max_payload
# what one message may take besides its payload (headers and body, which max_payload bounds):
# its subject (a protocol line is at most 4 KiB by default) and the $JS.ACK reply subject
SUBJECT_ROOM = 8 * 1024
# the statuses that end a request in the ordinary way
DONE = frozenset({"404", "408", "409"})
TOO_LARGE = "Message Size Exceeds MaxBytes"  # the next message would not fit: the end (409)
# 409s that are no ordinary end: the durable or its server changed (nats-py raises for these)
CONFLICTS = ("Consumer Deleted", "Consumer is push based", "Leadership Change", "Server Shutdown")


def floor(max_payload: int) -> int:
    """The least ``max_bytes`` a request may ask for: the largest message the server takes."""
    return max_payload + SUBJECT_ROOM


def size(msg: Msg) -> int:
    """A message's bytes as JetStream counts them against ``max_bytes``, near enough: subject,
    reply subject, headers and body."""
    head = sum(len(k) + len(v) + 4 for k, v in (msg.headers or {}).items()) + 12
    return len(msg.subject) + len(msg.reply) + len(msg.data or b"") + head


class Fetcher:
    """The pull requests of one durable on ``stream``, through one inbox subscription."""

    def __init__(self, nc: NATS, stream: str, durable: str, clock: Clock = SYSTEM) -> None:
        self._nc = nc
        self._next = f"{API}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._clock = clock
        self._inbox = ""
        self._sub: Any = None
        self._got: asyncio.Queue[Msg] = asyncio.Queue()
        self._requests = 0

    async def fetch(self, batch: int, max_bytes: int, timeout: float) -> list[Msg]:
        """At most ``batch`` messages holding at most ``max_bytes`` (the late messages of an
        earlier request come alone): those the durable has now, else the first to come within
        ``timeout``; [] when the next message is larger than ``max_bytes``. Raises
        ``nats.errors.TimeoutError`` when none came."""
        if self._sub is None:
            self._inbox = self._nc.new_inbox()
            self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._got.put)
        late = self._late()
        if late:
            return late
        msgs, end = await self._request(batch, max_bytes, timeout, wait=False)
        if not msgs and end != TOO_LARGE:
            msgs, end = await self._request(1, max_bytes, timeout, wait=True)
        if not msgs and end != TOO_LARGE:
            raise nats.errors.TimeoutError
        return msgs

    async def unsubscribe(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()

    def _late(self) -> list[Msg]:
        """The messages that came after their request was given up (statuses dropped)."""
        out: list[Msg] = []
        while not self._got.empty():
            msg = self._got.get_nowait()
            if not _status(msg):
                out.append(msg)
        return out

    async def _request(
        self, batch: int, max_bytes: int, timeout: float, *, wait: bool
    ) -> tuple[list[Msg], str]:
        """One pull request: its messages, and the description of the status that ended it
        ("" when the batch filled or the time ran out first)."""
        self._requests += 1
        reply = f"{self._inbox}.{self._requests}"
        req: dict[str, Any] = {"batch": batch, "max_bytes": max_bytes}
        if wait:
            req["expires"] = int(max(timeout - EXPIRES_MARGIN, EXPIRES_MARGIN) * 1e9)
        else:
            req["no_wait"] = True
        await self._nc.publish(self._next, json.dumps(req).encode(), reply=reply)
        deadline = self._clock.monotonic() + timeout
        msgs: list[Msg] = []
        while len(msgs) < batch:
            try:
                if self._got.empty():
                    left = max(deadline - self._clock.monotonic(), 0.0)
                    msg = await self._clock.wait_for(self._got.get(), left)
                else:
                    msg = self._got.get_nowait()
            except TimeoutError:
                break  # what came is handed; the rest of this request, if any, comes late
            status = _status(msg)
            if not status:
                msgs.append(msg)
                continue
            if msg.subject != reply or status == "100":
                continue  # an earlier request's end, or a heartbeat
            description = str((msg.headers or {}).get("Description", ""))
            if (status in DONE and description not in CONFLICTS) or msgs:
                return msgs, description  # with messages: the next request meets any trouble
            raise nats.js.errors.APIError.from_msg(msg)
        return msgs, ""


def _status(msg: Msg) -> str:
    return (msg.headers or {}).get("Status", "") if msg.headers else ""
