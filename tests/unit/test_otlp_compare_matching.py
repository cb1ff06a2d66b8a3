"""How ``make bench-otlp`` (bench/otlp/matching.py) matches each path's log records to the Event
versions written: path B by ``cloudevents.event_id``, path A by uid + count with the record's
time checked; lost, duplicated, unmatched, per phase. And what the receiver's source makes
certain of its restart (``matching.certain_lost``)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.otlp import matching
from bench.otlp.load import Version

T0 = 1_764_842_400  # 2025-12-04T10:00:00Z


def version(uid: str, rv: int, count: int, *, at: int = T0, phase: str = "p1") -> Version:
    stamp = f"2025-12-04T10:{(at - T0) // 60:02d}:{(at - T0) % 60:02d}Z"
    return Version(uid, str(rv), "ns", f"e-{uid}", count, stamp, at, at, phase, count == 1)


def record(attributes: dict[str, Any], time_s: int = T0) -> dict[str, Any]:
    return {"attributes": attributes, "time_unix_nano": time_s * 1_000_000_000}


def b(uid: str, rv: int, event_id: str | None = None) -> dict[str, Any]:
    return record(
        {
            matching.EVENT_ID: event_id or f"{uid}/{rv}",
            matching.UID: uid,
            matching.RESOURCE_VERSION: str(rv),
        }
    )


def a(uid: str, count: int, time_s: int = T0) -> dict[str, Any]:
    return record({matching.UID: uid, matching.COUNT: count}, time_s)


TRUTH = [
    version("u1", 10, 1, phase="p1"),
    version("u1", 12, 2, at=T0 + 5, phase="p2"),
    version("u2", 11, 1, phase="p1"),
]


@pytest.mark.parametrize(
    ("records", "lost", "duplicates", "unmatched"),
    [
        ([b("u1", 10), b("u1", 12), b("u2", 11)], 0, 0, 0),
        ([b("u1", 10), b("u1", 10), b("u1", 10), b("u1", 12), b("u2", 11)], 0, 2, 0),
        ([b("u1", 10), b("u2", 11)], 1, 0, 0),
        ([b("u1", 10), b("u1", 12), b("u2", 11), b("other", 99)], 0, 0, 1),
        ([], 3, 0, 0),
    ],
    ids=["each-once", "a-version-thrice", "one-lost", "another-event", "nothing"],
)
def test_bridge_path_is_matched_by_the_cloudevent_id(
    records: list[dict[str, Any]], lost: int, duplicates: int, unmatched: int
) -> None:
    t = matching.bridge_path(TRUTH, records)
    s = t.summary(TRUTH, ["p1", "p2"])
    assert (s["lost"], s["duplicates"], s["unmatched"]) == (lost, duplicates, unmatched)
    assert s["copies_with_another_id"] == 0


def test_a_bridge_copy_whose_id_is_not_its_own_version_is_counted() -> None:
    t = matching.bridge_path(TRUTH, [b("u1", 10), b("u1", 12, event_id="u1/10")])
    s = t.summary(TRUTH, ["p1", "p2"])
    assert s["copies_with_another_id"] == 1
    assert (s["lost"], s["duplicates"]) == (2, 1)  # u1/12 and u2/11 lost; u1/10 twice


def test_status_records_are_counted_apart_by_kind() -> None:
    status = record({matching.STATUS: "gap", matching.EVENT_ID: "otlp/gap/1"})
    t = matching.bridge_path(TRUTH, [status, status, b("u1", 10)])
    s = t.summary(TRUTH, ["p1"])
    assert s["status_records"] == {"gap": 2}
    assert s["unmatched"] == 0 and s["records"] == 3


@pytest.mark.parametrize(
    ("records", "lost", "duplicates", "unmatched", "mismatched"),
    [
        ([a("u1", 1), a("u1", 2, T0 + 5), a("u2", 1)], 0, 0, 0, 0),
        ([a("u1", 1), a("u1", 1), a("u1", 2, T0 + 5), a("u2", 1), a("u2", 1)], 0, 2, 0, 0),
        ([a("u1", 2, T0 + 5)], 2, 0, 0, 0),
        ([a("u1", 1), a("u1", 2, T0 + 6), a("u2", 1)], 1, 0, 1, 1),  # another time
        ([a("u1", 3, T0 + 9), a("u9", 1)], 3, 0, 2, 0),  # no such count, another Event
    ],
    ids=["each-once", "two-replicas", "first-versions-lost", "time-differs", "unknown"],
)
def test_receiver_path_is_matched_by_uid_and_count_at_the_versions_time(
    records: list[dict[str, Any]], lost: int, duplicates: int, unmatched: int, mismatched: int
) -> None:
    t = matching.receiver_path(TRUTH, records)
    s = t.summary(TRUTH, ["p1", "p2"])
    assert (s["lost"], s["duplicates"], s["unmatched"]) == (lost, duplicates, unmatched)
    assert s["time_mismatches"] == mismatched


def test_lost_and_duplicated_are_told_per_phase() -> None:
    t = matching.receiver_path(TRUTH, [a("u1", 2, T0 + 5), a("u1", 2, T0 + 5)])
    s = t.summary(TRUTH, ["p1", "p2"])
    assert s["per_phase"] == {
        "p1": {"versions": 2, "lost": 2, "duplicates": 0},
        "p2": {"versions": 1, "lost": 0, "duplicates": 1},
    }


def test_certain_lost_is_what_was_written_after_the_kill_and_happened_before_the_restart() -> None:
    killed, started = T0 + 10.5, T0 + 13.2
    truth = [
        version("u1", 1, 1, at=T0 + 9),  # written before the kill: maybe sent
        version("u2", 2, 1, at=T0 + 11),  # after the kill, before the restart: never
        version("u3", 3, 1, at=T0 + 13),  # the restart's own second, before it: never
        version("u4", 4, 1, at=T0 + 14),  # after the restart: sent
    ]
    assert matching.certain_lost(truth, (killed, started)) == ["u2/2", "u3/3"]
    assert matching.certain_lost(truth, None) == []
