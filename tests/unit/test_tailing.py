"""``tail``'s filters and ``--since``, pure (the command itself: test_bridge_flow.py)."""

from datetime import UTC, datetime, timedelta

import pytest

from bridge.jetstream.tailing import Filters, parse_since

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ce(ns="shop", reason="BackOff", kind="Pod", type_="io.k8s.event.warning"):
    return {"type": type_, "k8snamespace": ns, "k8sreason": reason, "k8skind": kind}


STATUS = {"type": "io.k8s.bridge.gap"}


def test_no_filter_keeps_everything_and_reads_every_subject():
    f = Filters()
    assert f.keeps(ce()) and f.keeps(STATUS)
    assert f.subject("k8s.events") == "k8s.events.>"


def test_each_filter_is_a_set_and_they_are_and_ed():
    f = Filters(namespaces=frozenset({"shop", "pay"}), types=frozenset({"warning"}))
    assert f.keeps(ce(ns="pay"))
    assert not f.keeps(ce(ns="web"))
    assert not f.keeps(ce(type_="io.k8s.event.normal"))
    assert not f.keeps(STATUS)  # the bridge's own events only without an Event filter
    f = Filters(reasons=frozenset({"OOMKilling"}), kinds=frozenset({"Node"}))
    assert f.keeps(ce(reason="OOMKilling", kind="Node"))
    assert not f.keeps(ce(reason="OOMKilling", kind="Pod"))


def test_single_values_narrow_the_subject_for_jetstream():
    f = Filters(namespaces=frozenset({"shop"}), reasons=frozenset({"BackOff", "OOMKilling"}))
    assert f.subject("k8s.events") == "k8s.events.*.shop.*.*"
    f = Filters(kinds=frozenset({"Pod"}), reasons=frozenset({"Back Off"}))
    assert f.subject("p") == "p.*.*.Pod.Back_Off"  # the bridge's sanitised token
    assert Filters(types=frozenset({"warning"})).subject("p") == "p.>"  # not in the subject


@pytest.mark.parametrize(
    ("text", "ago"),
    [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1.5m", 90)],
)
def test_since_a_duration_ago(text, ago):
    assert parse_since(text, NOW) == NOW - timedelta(seconds=ago)


def test_since_an_rfc3339_time():
    assert parse_since("2026-11-30T11:00:00Z") == datetime(2026, 11, 30, 11, tzinfo=UTC)
    assert parse_since("2026-11-30T12:00:00+01:00") == datetime(2026, 11, 30, 11, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "10", "5w", "2026-11-30T11:00:00"])
def test_since_refuses_what_it_can_not_place(text):
    with pytest.raises(ValueError, match="--since"):
        parse_since(text, NOW)
