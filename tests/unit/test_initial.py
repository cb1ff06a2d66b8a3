"""The first start by age, the pure decision (bridge.core.initial): the cutoff, which time is an
Event's last occurrence, too old or not, undated."""

from datetime import UTC, datetime

import pytest

from bridge.core import events
from bridge.core.initial import (
    KEEP,
    TOO_OLD,
    UNDATED,
    FirstList,
    cutoff,
    epoch_seconds,
    last_occurrence,
    rfc3339,
    verdict,
)
from tests import support

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
CUT = NOW - 900  # 15m: 2025-01-01T11:45:00Z


def at(seconds: float) -> str:
    """An RFC 3339 UTC time as Kubernetes writes it (whole seconds)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro(seconds: float) -> str:
    """As Kubernetes writes an eventTime or a series' lastObservedTime (microseconds)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ev(*, series=None, last=None, event_time=None, created=None):
    return support.event(
        rv=5,
        series=None if series is None else {"count": 3, "lastObservedTime": series},
        created=created,
        lastTimestamp=last,
        eventTime=event_time,
    )


def test_the_cutoff_is_now_less_the_maximum_age():
    assert cutoff(NOW, 900) == CUT
    assert rfc3339(cutoff(NOW, 900)) == "2025-01-01T11:45:00Z"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2025-01-01T11:45:00Z", CUT),
        ("2025-01-01t11:45:00z", CUT),
        ("2025-01-01T11:45:00.250000Z", CUT + 0.25),
        ("2025-01-01T11:45:00.5Z", CUT + 0.5),
        ("2025-01-01T13:45:00+02:00", CUT),
        ("2025-01-01T11:15:00-00:30", CUT),
        ("2024-12-31T23:59:60Z", datetime(2025, 1, 1, tzinfo=UTC).timestamp()),  # a leap second
    ],
)
def test_rfc3339_times_are_read_as_epoch_seconds(text, seconds):
    assert epoch_seconds(text) == pytest.approx(seconds, abs=1e-6)


def test_nanoseconds_are_read_too():
    assert epoch_seconds("2025-01-01T11:45:00.123456789Z") == pytest.approx(CUT + 0.123456789)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "yesterday",
        "2025-01-01",
        "2025-01-01 11:45:00Z",
        "2025-01-01T11:45:00",  # no offset
        "2025-13-01T11:45:00Z",
        "2025-02-30T11:45:00Z",
        "2025-01-01T25:00:00Z",
        "2025-01-01T11:45:00+24:00",
        "0000-01-01T00:00:00Z",
        "٢٠٢٥-01-01T11:45:00Z",  # digits, but not ASCII ones
        "2025-01-01T11:45:00Z\n",
    ],
)
def test_what_names_no_real_instant_has_no_epoch_seconds(text):
    assert epoch_seconds(text) is None


def test_exactly_at_the_cutoff_is_not_older_than_the_maximum_age_and_is_kept():
    assert verdict(ev(last=at(CUT)), CUT) == KEEP
    assert verdict(ev(event_time=micro(CUT)), CUT) == KEEP
    assert verdict(ev(event_time=micro(CUT - 0.000001)), CUT) == TOO_OLD
    assert verdict(ev(last=at(CUT - 1)), CUT) == TOO_OLD
    assert verdict(ev(last=at(CUT + 1)), CUT) == KEEP


def test_the_last_occurrence_is_the_series_then_last_timestamp_then_event_time_then_creation():
    old, new = at(CUT - 3600), at(CUT + 60)
    # a series still going on is recent, whatever the Event's first times say
    assert verdict(ev(series=micro(CUT + 60), last=old, event_time=old, created=old), CUT) == KEEP
    # a series that ended long ago is old, though its Event was created later (clock oddities)
    assert verdict(ev(series=micro(CUT - 60), last=new, event_time=new, created=new), CUT) == (
        TOO_OLD
    )
    # lastTimestamp (core/v1's count bumps) before eventTime and creationTimestamp
    assert verdict(ev(last=new, event_time=old, created=old), CUT) == KEEP
    assert verdict(ev(last=old, event_time=new, created=new), CUT) == TOO_OLD
    # events.k8s.io writes eventTime and no lastTimestamp
    assert verdict(ev(event_time=micro(CUT + 60), created=old), CUT) == KEEP
    assert verdict(ev(event_time=micro(CUT - 60), created=new), CUT) == TOO_OLD
    # creationTimestamp last
    assert verdict(ev(created=new), CUT) == KEEP
    assert verdict(ev(created=old), CUT) == TOO_OLD


def test_a_time_that_is_not_valid_gives_way_to_the_next_one():
    assert verdict(ev(series="soon", last=None, event_time="", created=at(CUT - 60)), CUT) == (
        TOO_OLD
    )
    assert verdict(ev(last=12345, created=at(CUT + 60)), CUT) == KEEP


def test_an_event_with_no_valid_time_is_undated_and_kept():
    assert last_occurrence(ev()) is None
    assert verdict(ev(), CUT) == UNDATED
    assert verdict(ev(series="never", last="", event_time=7, created="now"), CUT) == UNDATED
    # the first valid-looking time is taken (as the CloudEvent's time is); no real date: undated
    assert verdict(ev(last="2025-02-30T11:50:00Z", created=at(CUT - 60)), CUT) == UNDATED


def test_events_views_and_dicts_read_alike():
    obj = ev(last=at(CUT + 5))
    event = events.from_item(obj)
    assert last_occurrence(obj) == last_occurrence(event) == last_occurrence(event.view) == CUT + 5


def test_the_first_list_counts_and_tells_why():
    first = FirstList("15m", NOW, 900)
    taken = [
        first.take(ev(last=at(CUT - 3600))),
        first.take(ev(last=at(CUT + 60))),
        first.take(ev()),
        first.take(ev(created=at(CUT - 1))),
        first.take(ev(last=at(CUT))),
    ]
    assert taken == [False, True, True, False, True]
    assert first.report() == {
        "max_age": "15m",
        "cutoff": "2025-01-01T11:45:00Z",
        "published": 3,  # the undated one among them
        "skipped": 2,
        "undated": 1,
        "why": "older than kubernetes.initial (15m): last occurrence before 2025-01-01T11:45:00Z",
    }


def test_a_cutoff_with_a_fraction_of_a_second_reads_in_microseconds():
    assert FirstList("1h", NOW + 0.25, 3600).report()["cutoff"] == "2025-01-01T11:00:00.250000Z"


def test_a_maximum_age_of_millennia_keeps_everything_and_still_tells_its_cutoff():
    first = FirstList("99999999999h", NOW, 99999999999 * 3600)
    assert first.take(ev(created="0001-01-01T00:00:00Z"))
    assert first.report()["cutoff"] == "0001-01-01T00:00:00Z"
