"""Durations, read once (``k8s_event_common.durations``): by the bridge's settings, the
subscribers' settings and ``tail --since``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge import settings as bridge_settings
from bridge.jetstream.tailing import parse_since
from k8s_event_common.durations import parse_duration, parse_with_unit
from k8s_event_consumer import configuring

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        (" 1.5s ", 1.5),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("7d", 604800.0),
        ("0", 0.0),
    ],
)
def test_a_duration_reads_as_seconds(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "1x", "1m 30s", "s", "-1s", -1, True, None, [1]])
def test_what_is_no_duration_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_each_program_reads_durations_with_the_one_parser() -> None:
    assert bridge_settings.parse_duration is parse_duration
    assert configuring.parse_duration is parse_duration


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("1h30m", 5400), ("500ms", 0.5)])
def test_with_a_unit(text: str, seconds: float) -> None:
    assert parse_with_unit(text) == seconds
    assert parse_since(text, NOW) == NOW - timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["10", "1.5", "inf", "nan", "-5m", ""])
def test_a_number_without_its_unit_is_no_time_ago(text: str) -> None:
    with pytest.raises(ValueError):
        parse_with_unit(text)
    with pytest.raises(ValueError, match="--since"):
        parse_since(text, NOW)
