"""The digests' program on the runtime (``k8s_event_consumer.runtime``), without a durable:
the digests' stream checked (made, with an operator's credentials); where the digests stored
end (``writing.frontier``); the Events' stream read in order from ``idle`` and a window before
that digest's window (``reading.Reader``), folded (``fold.Projection``), and each digest the
fold closes written once (``writing.Writer``). A window with nothing after it closes once the
server's clock is ``grace`` past its end and every message stored before has been read."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS

from k8s_event_common import streams
from k8s_event_common.digests import Digest
from k8s_event_consumer import events, runtime
from k8s_event_consumer.digests import fold, reading, writing
from k8s_event_consumer.digests.settings import Settings
from k8s_event_consumer.events import BadMessage
from k8s_event_consumer.metrics import Counter
from k8s_event_consumer.seen import NoSeen, Seen

RETRY = 2.0  # seconds between tries of a write the stream did not answer
COUNTERS = (
    Counter.by(
        "digests_total",
        "digests by result: written (stored by this process), passed (stored already, by an "
        "earlier run or another replica)",
        "result",
        ("written", "passed"),
    ),
    Counter("versions_total", "Event versions folded"),
    Counter("windows_total", "windows closed"),
    Counter(
        "bad_messages_total",
        "messages of the Events' stream that are no CloudEvent of "
        "the bridge's (logged, passed over; they move the time only)",
    ),
    Counter(
        "series_forgotten_total",
        "series forgotten at digests.max_series (the least recently seen not in the open window)",
    ),
    Counter("series_expired_total", "series forgotten after digests.idle of quiet"),
    Counter(
        "overflow_versions_total",
        "versions folded into a window's overflow digest: "
        "every held series was in the open window at digests.max_series",
    ),
    Counter(
        "late_messages_total",
        "messages stored with a time before a window already "
        "closed (a server's clock behind by more than digests.grace): counted in the next",
    ),
    Counter("write_retries_total", "writes of a digest tried again (the stream did not answer)"),
    Counter("reader_restarts_total", "consumers made again after a gap in the sequence"),
    Counter(
        "missing_versions_total",
        "sequences of the Events' stream gone (its limits) before they were read",
    ),
)


def reading_point(start: datetime, *, idle: float, window: float) -> datetime:
    """Where a restart reads from to write the window at ``start`` as a run that never stopped
    would: the state of a window depends on the versions of at most twice ``idle`` and a window
    before it (a series is forgotten after ``idle`` of quiet, and whether a new uid began while
    its series was followed looks back ``idle`` more; design.md)."""
    return start - timedelta(seconds=2 * idle + window)


class Program(runtime.Subscriber):
    """The digests' program: ``k8s-event-digests``."""

    name = "digests"
    counters = COUNTERS
    durable = False
    stop_timeout = 10.0
    projection: fold.Projection | None = None
    writer: writing.Writer | None = None
    reader: reading.Reader | None = None

    async def setup(self) -> None:
        self.metrics.gauge(
            "series_held",
            "series held (memory grows with these)",
            lambda: float(self.projection.held()[0] if self.projection else 0),
        )
        self.metrics.gauge(
            "uids_held",
            "Event uids held with their counts",
            lambda: float(self.projection.held()[1] if self.projection else 0),
        )
        self.metrics.gauge(
            "read_sequence",
            "the last sequence of the Events' stream folded",
            lambda: float(self.projection.through if self.projection else 0),
        )

    def status(self) -> dict[str, Any]:
        cfg: Settings = self.settings
        out: dict[str, Any] = {
            "digest_stream": cfg.nats.digest_stream,
            "window": cfg.digests.window,
        }
        if self.projection is not None:
            f = self.projection.figures
            out.update(
                read_sequence=self.projection.through,
                versions=f.versions,
                digests=f.digests,
                series=self.projection.held()[0],
            )
        if self.writer is not None:
            out.update(written=self.writer.written, passed=self.writer.passed)
        return out

    async def provide(self, nc: NATS) -> Seen:
        n, d = self.settings.nats, self.settings.digests
        await streams.ensure(
            nc,
            streams.digest_stream(
                n.digest_stream,
                n.digest_prefix,
                max_age=d.max_age,
                max_bytes=d.max_bytes,
                num_replicas=d.replicas,
            ),
            "digests' stream",
            unchecked=["num_replicas"],
        )
        try:
            await reading.check(nc, n.stream, n.durable)
        except nats.js.errors.NotFoundError:
            # made where the credentials may (an operator's, or a server without
            # permissions); the shipped ones may not: then waited for, saying what to do
            try:
                await reading.provision(nc, n.stream, n.durable)
            except (nats.errors.Error, TimeoutError) as exc:
                self.log.warning(
                    "consumer_missing",
                    stream=n.stream,
                    consumer=n.durable,
                    error=str(exc) or repr(exc),
                    note="k8s-event-digests provision makes it (docs/deploy.md)",
                )
                raise nats.js.errors.NotFoundError from exc
            self.log.info("consumer_created", stream=n.stream, consumer=n.durable)
        return NoSeen()

    async def prepare(self, nc: NATS, consumer: Any) -> None:
        n, d = self.settings.nats, self.settings.digests
        try:
            at = await writing.frontier(nc, n.digest_stream)
        except writing.Refused as exc:
            raise runtime.Unusable(str(exc)) from exc
        self.projection = fold.Projection(
            window=d.window, idle=d.idle, max_series=d.max_series, stream=n.stream
        )
        self.writer = writing.Writer(nc, n.digest_stream, n.digest_prefix, at)
        self.reader = reading.Reader(nc, n.stream, n.durable)
        self.since = None
        if at.digest is not None:
            self.since = reading_point(at.digest.start, idle=d.idle, window=d.window)
        self.log.info(
            "resuming",
            digests_stored_until=at.digest.id if at.digest else None,
            window=at.digest.start.isoformat() if at.digest else None,
            reading_from=self.since.isoformat() if self.since else "the start",
        )
        self.nc = nc

    async def consume(self, consumer: Any) -> None:
        assert self.reader is not None and self.projection is not None
        n, d = self.settings.nats, self.settings.digests
        p = self.projection
        last = dict(vars(p.figures))
        async with contextlib.aclosing(self.reader.batches(0, self.since)) as batches:
            async for msgs in batches:
                if consumer.stopping.is_set():
                    return
                out: list[Digest] = []
                if not msgs:
                    try:
                        st = await reading.state(self.nc, n.stream)
                    except (nats.errors.Error, TimeoutError) as exc:  # asked again next time
                        self.log.warning("stream_info_failed", error=str(exc) or repr(exc))
                        continue
                    if st.last_seq <= p.through and st.ts is not None:
                        out = p.close(st.ts, d.grace)
                for msg in msgs:
                    meta = msg.metadata
                    event = None
                    try:
                        decoded = events.decode(msg.subject, msg.headers, msg.data or b"")
                        event = decoded.event
                    except BadMessage as exc:
                        self.metrics.inc("bad_messages_total")
                        self.log.warning(
                            "bad_message", stream_sequence=meta.sequence.stream, error=str(exc)
                        )
                    assert meta.timestamp is not None
                    out.extend(p.add(meta.sequence.stream, meta.timestamp, event))
                for digest in out:
                    if not await self._write(digest, consumer):
                        return  # stopped while the stream did not answer: the next run writes it
                last = self._count(last)

    async def _write(self, d: Digest, consumer: Any) -> bool:
        """Until it is stored (True): a digest is never given up. False: stopped while the
        stream did not answer (the next run writes it: its frontier is before it)."""
        assert self.writer is not None
        while True:
            try:
                stored = await self.writer.write(d)
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
                self.metrics.inc("write_retries_total")
                self.log.warning("digest_write_failed", id=d.id, error=str(exc) or repr(exc))
                if consumer.stopping.is_set():
                    return False
                await asyncio.sleep(RETRY)
                continue
            self.metrics.inc("digests_total", result="written" if stored else "passed")
            return True

    def _count(self, last: dict[str, int]) -> dict[str, int]:
        assert self.projection is not None and self.reader is not None
        now = dict(vars(self.projection.figures))
        for key, metric in (
            ("versions", "versions_total"),
            ("windows", "windows_total"),
            ("forgotten", "series_forgotten_total"),
            ("expired", "series_expired_total"),
            ("overflowed", "overflow_versions_total"),
            ("late", "late_messages_total"),
        ):
            if now[key] > last[key]:
                self.metrics.inc(metric, now[key] - last[key])
                if key in ("forgotten", "overflowed", "late"):
                    self.log.warning(
                        f"series_{key}" if key != "late" else "late_messages",
                        count=now[key] - last[key],
                        total=now[key],
                    )
        now["restarts"] = self.reader.restarts
        now["missing"] = self.reader.missing
        for key, metric in (
            ("restarts", "reader_restarts_total"),
            ("missing", "missing_versions_total"),
        ):
            if now[key] > last.get(key, 0):
                self.metrics.inc(metric, now[key] - last.get(key, 0))
        return now
