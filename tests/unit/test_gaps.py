"""The gap decision after a 410 relist (bridge.core.gaps): a table, no I/O."""

from __future__ import annotations

import pytest

from bridge.core.gaps import LIKELY, POSSIBLE, after_relist

TTL = 3600.0


@pytest.mark.parametrize(
    ("to_rv", "newer", "age", "covered", "include_deleted", "certainty", "because"),
    [
        # watched throughout, nothing newer, young, deletions not published: nothing missed
        (300, 0, 600.0, True, False, None, "watched throughout"),
        # each one condition broken is enough for "likely"
        (300, 2, 600.0, True, False, LIKELY, "2 Events were created or changed since"),
        (300, 0, TTL, True, False, LIKELY, "longer than the event TTL"),
        (300, 0, 600.0, True, True, LIKELY, "deletions are published"),
        # not watching in between (a restart, a failed watch): only "possible"
        (300, 0, 600.0, False, False, POSSIBLE, "not watching in between"),
        # "likely" wins over "possible"
        (300, 1, 600.0, False, False, LIKELY, "1 Events were created"),
    ],
)
def test_the_verdict_after_a_relist(
    to_rv, newer, age, covered, include_deleted, certainty, because
):
    gap = after_relist(
        10,
        to_rv,
        newer=newer,
        age=age,
        covered=covered,
        event_ttl=TTL,
        include_deleted=include_deleted,
    )
    assert gap is not None
    assert (gap.from_rv, gap.to_rv, gap.newer, gap.age) == (10, to_rv, newer, age)
    assert gap.certainty == certainty and gap.missed is (certainty is not None)
    assert because in gap.why


def test_every_reason_for_likely_is_given():
    gap = after_relist(
        10, 300, newer=3, age=TTL + 1, covered=True, event_ttl=TTL, include_deleted=True
    )
    assert gap is not None and gap.certainty == LIKELY
    assert gap.why.count("; ") == 2


@pytest.mark.parametrize("to_rv", [10, 9])
def test_a_list_not_past_the_expired_rv_has_no_history_to_judge(to_rv):
    assert (
        after_relist(
            10, to_rv, newer=5, age=TTL * 2, covered=False, event_ttl=TTL, include_deleted=True
        )
        is None
    )
