"""The first start by age: which listed Events are too old to publish (pure).

``kubernetes.initial`` may be a maximum age (a duration such as ``15m``). Then the first list
of a scope that has no checkpoint hands on only the Events whose last occurrence is not older
than that; the rest are counted and left out. The watcher asks, item by item, on a cutoff it
computes once per list from its clock's wall time (Event timestamps are wall time too):

- the last occurrence is the Event's CloudEvent ``time``
  (``bridge.core.converting.occurrence_time``: ``series.lastObservedTime``, ``lastTimestamp``,
  ``eventTime``, ``metadata.creationTimestamp``, the first valid one);
- too old: that time is before ``now - max_age``. An Event exactly at the cutoff is exactly
  ``max_age`` old, not older: it is kept;
- undated: no valid time at all (or one that is no real date, such as February 30). Its age
  is unknown, so it is kept and counted apart: leaving out what can not be judged would lose
  it for good, while publishing it costs one old Event at most.

The API server's clock and the bridge's are taken to agree; a skew of a few seconds moves the
cutoff by as much.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final, Literal

from bridge.core.converting import occurrence_time
from bridge.core.events import Event, View

Verdict = Literal["keep", "too_old", "undated"]
KEEP: Final = "keep"
TOO_OLD: Final = "too_old"
UNDATED: Final = "undated"

_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_YEAR_ONE: Final = datetime(1, 1, 1, tzinfo=UTC).timestamp()


def cutoff(now: float, max_age: float) -> float:
    """The oldest last occurrence kept, in epoch seconds: ``now`` (wall time) less the age."""
    return now - max_age


def epoch_seconds(t: str) -> float | None:
    """An RFC 3339 time as epoch seconds; None when it is not one or names no real instant
    (a month 13, a February 30, an offset of 24 hours or more). A leap second (``:60``) is
    the second after ``:59``."""
    m = _TIME.fullmatch(t)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    leap = second == 60
    try:
        at = datetime(year, month, day, hour, minute, 59 if leap else second, tzinfo=UTC)
    except ValueError:
        return None
    seconds = at.timestamp() + (1 if leap else 0)
    fraction = m.group(7)
    if fraction:
        seconds += int(fraction) / 10 ** len(fraction)
    sign = m.group(8)
    if sign:
        off_hours, off_minutes = int(m.group(9)), int(m.group(10))
        if off_hours > 23 or off_minutes > 59:
            return None
        offset = off_hours * 3600 + off_minutes * 60
        seconds += -offset if sign == "+" else offset
    return seconds


def last_occurrence(ev: Event | View | dict[str, Any]) -> float | None:
    """When the Event last happened, in epoch seconds; None when it carries no valid time."""
    view = ev.view if isinstance(ev, Event) else ev
    t = occurrence_time(view)
    return None if t is None else epoch_seconds(t)


def verdict(ev: Event | View | dict[str, Any], oldest: float) -> Verdict:
    """``too_old`` when the Event last happened before ``oldest`` (the cutoff); ``undated``
    when it has no valid time (kept); ``keep`` otherwise."""
    at = last_occurrence(ev)
    if at is None:
        return UNDATED
    return TOO_OLD if at < oldest else KEEP


def rfc3339(seconds: float) -> str:
    """Epoch seconds as an RFC 3339 UTC time: whole seconds, or microseconds when there are.
    A time before year 1 (a maximum age of millennia) reads as year 1."""
    at = datetime.fromtimestamp(max(seconds, _YEAR_ONE), UTC)
    return at.isoformat().replace("+00:00", "Z")


class FirstList:
    """The tally of one first list by age: each listed Event judged and counted.

    ``published`` counts what is handed on (the undated ones too; the filter runs after),
    ``skipped`` what is too old, ``undated`` what has no valid time."""

    __slots__ = ("cutoff", "max_age", "published", "skipped", "undated")

    def __init__(self, max_age: str, now: float, max_age_seconds: float) -> None:
        self.max_age = max_age  # as configured, e.g. "15m"
        self.cutoff = cutoff(now, max_age_seconds)
        self.published = 0
        self.skipped = 0
        self.undated = 0

    def take(self, ev: Event | View | dict[str, Any]) -> bool:
        """Whether to hand ``ev`` on; counted either way."""
        v = verdict(ev, self.cutoff)
        if v == TOO_OLD:
            self.skipped += 1
            return False
        if v == UNDATED:
            self.undated += 1
        self.published += 1
        return True

    @property
    def why(self) -> str:
        return (
            f"older than kubernetes.initial ({self.max_age}): "
            f"last occurrence before {rfc3339(self.cutoff)}"
        )

    def report(self) -> dict[str, Any]:
        """What the first list did, for the ``started`` status event and the log."""
        return {
            "max_age": self.max_age,
            "cutoff": rfc3339(self.cutoff),
            "published": self.published,
            "skipped": self.skipped,
            "undated": self.undated,
            "why": self.why,
        }
