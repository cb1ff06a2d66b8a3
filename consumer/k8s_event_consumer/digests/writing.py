"""The digests' stream written as one chain: each digest published with the sequence the
stream's last message must have (``Nats-Expected-Last-Sequence``), so that however many
writers there are (replicas, a restart beside a writer not yet gone), each digest is stored
once and in the projection's order.

The place a writer resumes from is the last digest stored (``Frontier``): every digest before
it in the projection's order (windows by start, a window's digests by series key) is stored,
none after it. A write the stream refuses because the last sequence moved (another writer
was first) reads the last digest again: when it is at or past the one in hand, that one is
stored already (the same bytes: the projection is the same everywhere) and is passed over."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS

from k8s_event_common import cloudevents, digests
from k8s_event_common.digests import Digest
from k8s_event_consumer.digests import reading

WRONG_LAST_SEQUENCE = 10071  # JetStream's err_code


def place(d: Digest) -> tuple[datetime, tuple[str, ...]]:
    """Where a digest stands in the projection's order."""
    return (d.start, d.series.key)


@dataclass(frozen=True)
class Frontier:
    """The last digest stored: its stream sequence and its place (None: the stream is empty)."""

    seq: int
    at: tuple[datetime, tuple[str, ...]] | None
    digest: Digest | None = None

    def written(self, d: Digest) -> bool:
        return self.at is not None and place(d) <= self.at


class Rewound(Exception):
    """The last digest stored is before one this writer saw stored: the stream was purged
    (a rebuild) while it ran. It stops (the program exits 1 and starts again): every writer
    then replays from the new frontier, so the rebuild is whole and in order."""


class Refused(Exception):
    """The stream holds a last message that is no digest of this program (a writer other than
    ``k8s-event-digests``, or another format): nothing is written after it."""


async def frontier(nc: NATS, stream: str, timeout: float = 5.0) -> Frontier:
    st = await reading.state(nc, stream, timeout)
    last = st.last_seq
    if last == 0 or st.messages == 0:
        return Frontier(last, None)
    raw = await nc.jetstream().get_msg(stream, seq=last)
    try:
        env = cloudevents.decode(raw.headers, raw.data or b"")
        if env.type != digests.TYPE:
            raise cloudevents.BadMessage(f"type {env.type!r} is not {digests.TYPE}")
        d = digests.from_envelope(env)
    except cloudevents.BadMessage as exc:
        raise Refused(
            f"the last message of {stream} (sequence {last}) is no digest: {exc}"
        ) from exc
    return Frontier(last, place(d), d)


class Writer:
    """Digests appended to ``stream`` under ``prefix``, after ``at``."""

    def __init__(self, nc: NATS, stream: str, prefix: str, at: Frontier, *, timeout: float = 5.0):
        self.nc = nc
        self.js = nc.jetstream(timeout=timeout)
        self.stream = stream
        self.prefix = prefix
        self.at = at
        self.written = 0  # stored by this writer
        self.passed = 0  # stored already (by an earlier run or another replica)
        self.checked: datetime | None = None  # the window whose first write checked the stream

    async def _still_there(self) -> None:
        """Once a window: the last digest this writer knows is still in the stream. Gone (the
        stream purged while it ran, or everything aged out): ``Rewound``, before a digest of
        this window lands after the purge and makes another writer's rebuild pass over the
        windows before it."""
        st = await reading.state(self.nc, self.stream)
        if st.messages == 0 or st.first_seq > self.at.seq:
            raise Rewound(f"{self.stream} no longer holds sequence {self.at.seq}: purged")

    async def write(self, d: Digest) -> bool:
        """Store ``d`` once; True when this call stored it. Raises nats-py's errors for a
        stream that does not answer (the caller tries the same digest again)."""
        if d.start != self.checked and self.at.at is not None:
            await self._still_there()
            self.checked = d.start
        while True:
            if self.at.written(d):
                self.passed += 1
                return False
            # no Nats-Msg-Id: the chain stores each digest once without it, and JetStream
            # keeps the ids of its duplicate window through a purge, which would refuse the
            # digests written again after one
            hdrs = {**digests.HEADERS, "Nats-Expected-Last-Sequence": str(self.at.seq)}
            try:
                ack = await self.js.publish(
                    digests.subject(self.prefix, d.series),
                    digests.encode(d),
                    stream=self.stream,
                    headers=hdrs,
                )
            except nats.js.errors.APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
                before, self.at = self.at, await frontier(self.nc, self.stream)
                if self.at.seq == before.seq:  # refused, and nothing moved: never a tight loop
                    raise
                if before.at is not None and (self.at.at is None or self.at.at < before.at):
                    raise Rewound(
                        f"{self.stream} went back from {before.seq} to {self.at.seq}: purged"
                    ) from exc
                continue
            self.at = Frontier(ack.seq, place(d), d)
            self.written += 1
            return True
