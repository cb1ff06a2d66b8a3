"""The projection: the versions stream, read in order, folded into digests. Pure: no I/O, no
clock, no randomness; the same messages in the same order give the same digests, byte for byte
(``k8s_event_common.digests.encode``), however often and wherever it runs.

Time is the stream's: each message's stored time, made monotone (``now`` is the latest stored
time read so far, so a message stored with an earlier time than one before it counts at the
later one). A window is ``[k * window, (k + 1) * window)`` of that time. A window closes when a
message of a later window arrives (``add``), or when the program knows no more can come for it
(``close``: the server's time is past its end by ``grace``, and every message stored before has
been read). Closing a window gives one digest per series that had versions in it, in the order
of their keys; then the series quiet for ``idle`` are forgotten.

Occurrences are what the recorders' counts advanced (``KubeEvent.count``: ``series.count``,
else ``count``, else 1). Per Event uid the projection keeps the highest count it has seen:

- a version of a known uid adds how far its count went past that (nothing for a duplicate, a
  relist of the same version, or an older version read after a newer one);
- a new uid adds its whole count when it began while the series was followed: its first
  occurrence at most one window before the series' first version read (or ``idle`` before
  the version, whichever is later; for a new series, the version itself): a recorder's new
  Event ("combined from similar events", one evicted from its cache or expired, the new
  broadcaster's next series), or a new Event read after an outage;
- else nothing: it was there before the projection knew it (the bridge's first list, with one
  or more Events of the series, a series forgotten), and counts from where it stood.

So for every uid, what its digests add up to is its highest count less where it stood when
first seen (``conservation`` in the tests).

Memory holds the series seen in the last ``idle`` (their uids' counts) and, for the open window,
one accumulator per active series, each with two messages of at most ``MAX_MESSAGE``
characters; at most ``max_series`` series. At the cap, the least recently seen series that is
not in the open window is forgotten (``forgotten`` counts it); when every held series is in the
open window, a new one's versions go to that window's overflow digest (``Series.overflow``,
one per cluster; ``overflowed`` counts them). Neither is silent: the program exports both as
metrics and logs them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from k8s_event_common import digests
from k8s_event_common.digests import Digest, Series
from k8s_event_consumer.events import KubeEvent

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
COMBINED = "(combined from similar events)"
MAX_COUNT = 2**31 - 1  # an Event's count is an int32 in the API: a larger one is a forgery
MAX_UIDS = 1000  # Event uids followed per series (the least recently seen forgotten past it)


def micros(t: datetime) -> int:
    """A time as whole microseconds since the epoch (exact: no float)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return (t - EPOCH) // US


def _text(value: str) -> str:
    return digests.bounded(value, digests.MAX_TEXT)


def at(us: int) -> datetime:
    return EPOCH + us * US


@dataclass
class _Window:
    """What one series did in the open window."""

    occurrences: int = 0
    versions: int = 0
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    count_from: int = 0
    count_to: int = 0
    uids: list[str] = field(default_factory=list)
    uids_omitted: int = 0
    first_message: str = ""
    last_message: str = ""
    sampled: bool = False
    combined: bool = False
    first_seq: int = 0
    last_seq: int = 0


@dataclass
class _Series:
    series: Series
    counts: dict[str, int] = field(default_factory=dict)  # uid -> the highest count seen
    touched: dict[str, int] = field(default_factory=dict)  # uid -> stream time last seen
    since: int = 0  # stream time (µs) of its first version read (since it was last forgotten)
    last: int = 0  # stream time (µs) of its last version
    window: _Window | None = None


@dataclass
class Figures:
    """What the projection did, for the program's metrics."""

    versions: int = 0
    digests: int = 0
    windows: int = 0
    forgotten: int = 0  # series forgotten at the cap
    expired: int = 0  # series forgotten after ``idle`` of quiet
    overflowed: int = 0  # versions folded into an overflow digest
    late: int = 0  # messages stored with a time before the window they were read in
    uids_forgotten: int = 0  # Event uids past MAX_UIDS in one series


class Projection:
    """Fold ``add`` the messages of the versions stream in sequence order; each call gives the
    digests of the windows it closed."""

    def __init__(
        self,
        *,
        window: float,
        idle: float,
        max_series: int,
        stream: str,
    ) -> None:
        self.window = round(window * 1_000_000)
        if self.window < 1_000_000:
            raise ValueError("a window is at least one second")
        self.idle = round(idle * 1_000_000)
        self.max_series = max_series
        self.stream = stream
        self.now = 0  # the latest stored time read (µs); 0 before any
        self.open: int | None = None  # the open window's start (µs)
        self.closed_until = 0  # no message may fall before this (µs): the last closed end
        self.through = 0  # the last stream sequence folded
        self.series: dict[tuple[str, ...], _Series] = {}
        self.overflow: dict[str, _Series] = {}  # cluster -> the open window's overflow
        self.figures = Figures()
        self.quiet: deque[tuple[int, tuple[str, ...]]] | None = None

    # --- reading --------------------------------------------------------------------------

    def add(self, seq: int, stored: datetime, event: KubeEvent | None) -> list[Digest]:
        """The message at ``seq``, stored at ``stored``; ``event`` None for any message that is
        not a Kubernetes Event (a status event: it moves the time only)."""
        t = micros(stored)
        if t < self.closed_until:
            self.figures.late += 1
        t = max(t, self.now, self.closed_until)
        self.now = t
        self.through = seq
        start = t - t % self.window
        out: list[Digest] = []
        if self.open is not None and start > self.open:
            out = self._close()
        if self.open is None:
            self.open = start
            self._expire(start)  # quiet for idle by the time this window opens: forgotten
        if event is not None:
            self._fold(seq, t, event)
        return out

    def close(self, server_now: datetime, grace: float) -> list[Digest]:
        """The open window's digests when ``server_now`` is ``grace`` seconds past its end: the
        caller has read every message the stream held when the server said ``server_now``, so
        every later one is stored at or after it."""
        if self.open is None:
            return []
        end = self.open + self.window
        if micros(server_now) < end + round(grace * 1_000_000):
            return []
        return self._close()

    @property
    def open_end(self) -> datetime | None:
        return None if self.open is None else at(self.open + self.window)

    # --- folding --------------------------------------------------------------------------

    def _key(self, e: KubeEvent) -> Series:
        inv = e.involved
        trusted = e.tenancy.involved.trusted
        b = _text  # every string as a reader takes it: at most MAX_TEXT, always UTF-8
        return Series(
            cluster=b(e.cluster),
            namespace=b(e.namespace),
            kind=b(inv.kind),
            name=b(inv.name) if trusted else "",
            uid=b(inv.uid) if trusted else "",
            reason=b(e.reason),
            type=b(e.type),
            reporting_component=b(e.reporting_component),
            untrusted=not trusted,
        )

    def _fold(self, seq: int, t: int, e: KubeEvent) -> None:
        self.figures.versions += 1
        series = self._key(e)
        key = series.key
        s = self.series.get(key)
        known = s is not None
        if s is None:
            if len(self.series) >= self.max_series and not self._forget_one():
                self._overflow(seq, t, e, series)
                return
            s = self.series[key] = _Series(series, since=t)
        count = min(max(int(e.count), 0), MAX_COUNT)
        before = s.counts.get(e.uid)
        if before is not None:
            advance = max(0, count - before)
            stood = before
        elif self._began(t, e, s, known):
            advance = count
            stood = 0
        else:
            advance = 0
            stood = count
        s.counts[e.uid] = max(count, stood if before is None else before)
        s.touched[e.uid] = t
        s.last = t
        s.series = series  # type and reporting component: the last version's
        w = s.window
        if w is None:
            w = s.window = _Window(count_from=stood, first_seq=seq)
            w.first_message = digests.bounded(e.message)
            w.first_seen = e.last_seen
        w.occurrences += advance
        w.versions += 1
        w.count_to = s.counts[e.uid]
        if len(s.counts) > MAX_UIDS:  # one Event per occurrence (a new note each time)
            _, old = min((seen, uid) for uid, seen in s.touched.items() if uid != e.uid)
            del s.counts[old], s.touched[old]
            self.figures.uids_forgotten += 1
        w.last_seq = seq
        w.last_message = digests.bounded(e.message)
        if e.last_seen is not None and (w.last_seen is None or e.last_seen > w.last_seen):
            w.last_seen = e.last_seen
        if advance > 1:  # versions between were not written (a spam filter) or not read
            w.sampled = True
        if e.message.startswith(COMBINED):
            w.combined = True
        uid = _text(e.uid)
        if uid not in w.uids:
            if len(w.uids) < digests.MAX_UIDS:
                w.uids.append(uid)
            else:
                w.uids_omitted += 1  # counted per version past the bound: a bound, not a set

    def _began(self, t: int, e: KubeEvent, s: _Series, known: bool) -> bool:
        """Whether a uid not seen before began while the series was followed: its first
        occurrence at most a window before the series was first read (within ``idle``), or,
        for a new series, at most a window before it was stored. Else it was there before
        (two Events of one series at the bridge's first list) and counts from where it stood.
        A uid with no time of its own: only in a series followed already."""
        first = e.first_seen
        if first is None:
            return known
        start = max(s.since, t - self.idle) if known else t
        return micros(first) >= start - self.window

    def _overflow(self, seq: int, t: int, e: KubeEvent, series: Series) -> None:
        self.figures.overflowed += 1
        o = self.overflow.get(series.cluster)  # bounded as every series string
        if o is None:
            o = self.overflow[series.cluster] = _Series(
                Series(
                    cluster=series.cluster,
                    namespace="",
                    kind="",
                    name="",
                    uid="",
                    reason="",
                    overflow=True,
                )
            )
        w = o.window
        if w is None:
            w = o.window = _Window(first_seq=seq)
            w.first_message = digests.bounded(e.message)
            w.first_seen = e.last_seen
        w.occurrences += 1
        w.versions += 1
        w.last_seq = seq
        w.last_message = digests.bounded(e.message)
        if e.last_seen is not None and (w.last_seen is None or e.last_seen > w.last_seen):
            w.last_seen = e.last_seen

    def _forget_one(self) -> bool:
        """Forget the least recently seen series not in the open window; False: none is.
        ``quiet`` holds them in that order, sorted once a window when first needed: one that
        came back into the open window since (or was forgotten) is passed over, so this is the
        least of the series quiet now, and a storm of new series at the cap costs no scan
        each."""
        if self.quiet is None:
            self.quiet = deque(sorted((x.last, k) for k, x in self.series.items()
                                      if x.window is None))  # fmt: skip
        while self.quiet:
            last, key = self.quiet.popleft()
            s = self.series.get(key)
            if s is not None and s.window is None and s.last == last:
                del self.series[key]
                self.figures.forgotten += 1
                return True
        return False

    # --- closing --------------------------------------------------------------------------

    def _close(self) -> list[Digest]:
        assert self.open is not None
        start, end = self.open, self.open + self.window
        # one order, the writer's (its frontier is the last digest in it): by series key, the
        # overflow digests among them (each after its cluster's series)
        active = [s for s in self.series.values() if s.window is not None]
        active.extend(self.overflow.values())
        active.sort(key=lambda s: s.series.key)
        out = [self._digest(s, start, end) for s in active]
        for s in active:
            s.window = None
        self.overflow.clear()
        self.open = None
        self.closed_until = end
        self.figures.windows += 1
        self.figures.digests += len(out)
        self._expire(end)
        self.quiet = None  # sorted again when the cap is next met
        return out

    def _digest(self, s: _Series, start: int, end: int) -> Digest:
        w = s.window
        assert w is not None
        return Digest(
            series=s.series,
            start=at(start),
            end=at(end),
            occurrences=min(w.occurrences, digests.MAX_NUMBER),
            versions=w.versions,
            first_seen=w.first_seen,
            last_seen=w.last_seen,
            count_from=w.count_from,
            count_to=w.count_to,
            uids=tuple(w.uids),
            uids_omitted=w.uids_omitted,
            first_message=w.first_message,
            last_message=w.last_message,
            sampled=w.sampled,
            combined=w.combined,
            stream=self.stream,
            first_seq=w.first_seq,
            last_seq=w.last_seq,
        )

    def _expire(self, end: int) -> None:
        limit = end - self.idle
        for key in [k for k, s in self.series.items() if s.last <= limit]:
            del self.series[key]
            self.figures.expired += 1
        for s in self.series.values():
            for uid in [u for u, seen in s.touched.items() if seen <= limit]:
                del s.touched[uid]
                del s.counts[uid]

    def held(self) -> tuple[int, int]:
        """(series, uids) held: what memory grows with."""
        return len(self.series), sum(len(s.counts) for s in self.series.values())
