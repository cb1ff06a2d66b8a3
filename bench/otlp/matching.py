"""What a path's output holds, matched against the truth (pure: no I/O).

The truth is every Event version the API server accepted (``load.Version``: uid,
resourceVersion, count, lastTimestamp, the phase it was written in). Each path's output is the
log records its collector's file exporter wrote (``tests.standins.otelcol.Record``). A record
*matches* a version when:

- **path B** (bridge → JetStream → k8s-event-otlp → collector): its ``cloudevents.event_id`` is the
  version's id, ``<uid>/<resourceVersion>``. A copy whose id is not its own
  ``k8s.event.uid`` / ``k8s.event.resource_version`` counts in ``copies_with_another_id``; the
  bridge's status records (``k8s_event_bridge.status``) are counted apart, by kind;
- **path A** (the collector's ``k8s_events`` receiver): the receiver gives no resourceVersion of
  the Event (only ``k8s.event.uid``, ``k8s.event.count`` and the record's time), so a record
  matches the version of the same uid and count, and its time must be the version's
  ``lastTimestamp`` (the receiver's record time for a core/v1 Event without ``eventTime``).
  The load makes this exact: every Event starts at count 1, each repeat adds one, nothing else
  writes them, so uid + count names one version. A record with the uid and count of a version
  and another time counts in ``time_mismatches`` (and does not match).

Then, per path and per phase: **lost** = versions with no matching record, **duplicates** =
matching records beyond one per version. Records matching no version (another namespace's
Events) are ``unmatched``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class VersionLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def occurred(self) -> float: ...
    @property
    def phase(self) -> str: ...
    @property
    def sent_at(self) -> float: ...


STATUS = "k8s_event_bridge.status"
EVENT_ID = "cloudevents.event_id"
UID = "k8s.event.uid"
RESOURCE_VERSION = "k8s.event.resource_version"
COUNT = "k8s.event.count"
LOST_LISTED = 100  # the lost versions a summary names (the first, in the order written)


@dataclass
class Tally:
    """One path's output against the truth."""

    copies: Counter[str] = field(default_factory=Counter)  # version id -> matching records
    records: int = 0
    unmatched: int = 0
    copies_with_another_id: int = 0  # path B: an id that is not the record's own version
    time_mismatches: int = 0  # path A: uid and count of a version, another time
    status: Counter[str] = field(default_factory=Counter)  # path B: status records by kind

    def lost(self, truth: Iterable[VersionLike]) -> list[str]:
        return [v.id for v in truth if self.copies[v.id] == 0]

    def duplicates(self, truth: Iterable[VersionLike]) -> int:
        return sum(max(0, self.copies[v.id] - 1) for v in truth)

    def summary(self, truth: Sequence[VersionLike], phases: Sequence[str]) -> dict[str, Any]:
        lost = self.lost(truth)
        per_phase = {}
        for phase in phases:
            mine = [v for v in truth if v.phase == phase]
            per_phase[phase] = {
                "versions": len(mine),
                "lost": len(self.lost(mine)),
                "duplicates": self.duplicates(mine),
            }
        dup = {v.id: self.copies[v.id] for v in truth if self.copies[v.id] > 1}
        return {
            "records": self.records,
            "matched": sum(self.copies[v.id] for v in truth),
            "unmatched": self.unmatched,
            "lost": len(lost),
            "duplicates": self.duplicates(truth),
            "versions_duplicated": len(dup),
            "most_copies": max((self.copies[v.id] for v in truth), default=0),
            "copies_with_another_id": self.copies_with_another_id,
            "time_mismatches": self.time_mismatches,
            "status_records": dict(sorted(self.status.items())),
            "per_phase": per_phase,
            "lost_ids": lost[:LOST_LISTED],
        }


def bridge_path(truth: Iterable[VersionLike], records: Iterable[dict[str, Any]]) -> Tally:
    """Path B's records matched by ``cloudevents.event_id`` (module docstring)."""
    ids = {v.id for v in truth}
    t = Tally()
    for r in records:
        t.records += 1
        attrs = r["attributes"]
        if STATUS in attrs:
            t.status[str(attrs[STATUS])] += 1
            continue
        got = attrs.get(EVENT_ID)
        if got != f"{attrs.get(UID)}/{attrs.get(RESOURCE_VERSION)}":
            t.copies_with_another_id += 1
        if got in ids:
            t.copies[got] += 1
        else:
            t.unmatched += 1
    return t


def receiver_path(truth: Iterable[VersionLike], records: Iterable[dict[str, Any]]) -> Tally:
    """Path A's records matched by uid + count, checked by time (module docstring)."""
    by_key: dict[tuple[str, int], VersionLike] = {}
    for v in truth:
        by_key[(v.uid, v.count)] = v
    t = Tally()
    for r in records:
        t.records += 1
        attrs = r["attributes"]
        version = by_key.get((str(attrs.get(UID)), int(attrs.get(COUNT) or 0)))
        if version is None:
            t.unmatched += 1
        elif r["time_unix_nano"] != int(version.occurred) * 1_000_000_000:
            t.time_mismatches += 1
            t.unmatched += 1
        else:
            t.copies[version.id] += 1
    return t


def certain_lost(truth: Iterable[VersionLike], restart: tuple[float, float] | None) -> list[str]:
    """What the receiver's source (v0.139.0) makes certain of path A's restart in the restart
    phase (``restart``: when its collector was killed, when it was started again): a version whose
    write was sent after the collector died, and which happened (``lastTimestamp``) before the
    new one started, is never sent. The new receiver drops every Event that happened before its
    own start when it lists or watches it, and a later version is another (count + 1)."""
    if restart is None:
        return []
    killed, started = restart
    return [v.id for v in truth if v.sent_at > killed and v.occurred < started]
