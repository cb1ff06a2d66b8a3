"""Where a watch scope resumes (bridge.core.resume) and how resourceVersions are read
(bridge.core.events.parse_rv): integers, compared; anything else is no resourceVersion."""

from __future__ import annotations

import pytest

from bridge.core.events import parse_rv
from bridge.core.resume import Expiry, ResumePoint


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("0", 0),
        ("12", 12),
        ("007", 7),
        ("18446744073709551616", 2**64),  # beyond int64: still compared exactly
        # unparseable: never guessed at
        (None, None),
        ("", None),
        (12, None),  # a JSON number, not the string the API server writes
        (12.0, None),
        ("12a", None),
        ("-5", None),
        ("+5", None),
        (" 12", None),
        ("1e3", None),
        ("1_000", None),
        ("١٢", None),  # non-ASCII digits: str.isdigit takes them, int() would too
        ("²", None),  # a superscript: isdigit but not decimal
        (["12"], None),
    ],
)
def test_resource_versions_are_decimal_integers_or_nothing(value, parsed):
    assert parse_rv(value) == parsed


def test_from_nothing_there_is_nothing_to_watch_from():
    r = ResumePoint(None, None, now=1000.0)
    assert r.rv is None and r.expired is None and not r.covered
    assert r.seen_at == 1000.0
    assert not r.can_watch  # a list first
    r.expire()  # a 410 on the first list's continue token: no history was passed on
    assert r.expired is None and not r.can_watch


def test_from_a_checkpoint_the_bridge_was_away():
    r = ResumePoint(10, saved_at=500.0, now=1000.0)
    assert r.rv == 10 and not r.covered
    assert r.seen_at == 499.0  # seen before it was saved
    assert ResumePoint(10, None, now=1000.0).seen_at == 999.0


def test_a_410_keeps_what_was_known_until_a_list_succeeds():
    r = ResumePoint(10, saved_at=500.0, now=1000.0)
    r.synced()  # a watch ended normally
    assert r.can_watch
    r.expire()
    assert r.expired == Expiry(10, 499.0, True)
    assert not r.can_watch  # the one owner of "a relist is due": until a list succeeds
    r.rv, r.seen_at = 20, 1900.0  # whatever moved since,
    r.expire()  # a second 410 (the relist's continue token) keeps the first start
    assert r.expired == Expiry(10, 499.0, True)
    r.broken()  # the relist failed: still due
    assert not r.can_watch
    r.listed(300, now=2000.0)
    assert r.rv == 300 and r.seen_at == 2000.0 and r.expired is None and r.can_watch


def test_a_failure_breaks_the_coverage_also_of_a_pending_expiry():
    r = ResumePoint(10, None, now=1000.0)
    r.synced()
    r.expire()
    r.broken()  # the relist failed: an outage of unknown length
    assert not r.covered and r.expired is not None and not r.expired.covered
    r.synced()  # a later success does not make the expired history covered again
    assert r.covered and not r.expired.covered


def test_a_read_that_moved_on_is_seen_now():
    r = ResumePoint(10, None, now=1000.0)
    r.rv = 12
    r.moved_on(1500.0)
    assert r.seen_at == 1500.0
