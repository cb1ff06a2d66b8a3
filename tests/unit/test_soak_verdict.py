"""The soak's verdict (soak/verdict.py) on made-up samples and streams: each check fails on the
leak or the loss it names."""

import pytest

from soak.verdict import Bounds, Version, flat, truth

BOUNDS = Bounds(queue_events=100, queue_bytes=1 << 20, inflight=10, inflight_bytes=1 << 20)
HELD = ("queue", "queue_bytes", "publisher_pending", "publisher_pending_bytes")


def samples(rss=lambda t: 60_000, fds=lambda t: 10, tasks=lambda t: 13, **internals):
    """A sample every 2 s for 100 s; ``internals`` map a key to a function of t."""
    out = []
    for t in range(0, 102, 2):
        row = dict.fromkeys(HELD, 0)
        row.update({"asyncio_tasks": tasks(t), "valid_time_cache": 50, "progress_entries:*": 0})
        row.update({k: f(t) for k, f in internals.items()})
        out.append({"t": float(t), "rss_kib": rss(t), "fds": fds(t), "internals": row})
    return out


def failed(rows):
    return {c.name for c in flat(rows, 20.0, BOUNDS, tail_from=60.0).checks if not c.ok}


def test_a_flat_run_passes():
    assert failed(samples()) == set()


def test_a_queue_that_filled_during_a_fault_and_drained_passes():
    assert failed(samples(queue=lambda t: 100 if 40 <= t < 50 else 0)) == set()


@pytest.mark.parametrize(
    ("leak", "names"),
    [
        ({"rss": lambda t: 60_000 + 200 * t}, {"rss_end", "rss_tail_flat", "rss_peak"}),
        ({"rss": lambda t: 60_000 + (12_000 if t > 50 else 0)}, {"rss_end"}),
        ({"fds": lambda t: 10 + t // 20}, {"fds_end"}),
        ({"tasks": lambda t: 13 + t // 10}, {"asyncio_tasks_end"}),
        ({"publisher_pending": lambda t: 1 if t > 90 else 0}, {"publisher_pending_drained"}),
        ({"progress_entries:*": lambda t: t}, {"progress_entries:*_drained"}),
        (
            {"progress_entries:*": lambda t: 10 * t},
            {"progress_entries:*_bounded", "progress_entries:*_drained"},
        ),
        ({"queue": lambda t: 150 if t == 50 else 0}, {"queue_bounded"}),
        ({"valid_time_cache": lambda t: 100 * t}, {"valid_time_cache_bounded"}),
    ],
)
def test_a_leak_fails_the_check_that_names_it(leak, names):
    got = failed(samples(**leak))
    assert names <= got, got


def v(uid, rv, kept=True):
    return Version(f"{uid}/{rv}", uid, rv, kept)


WRITTEN = [v("a", 10), v("b", 11), v("a", 12), v("c", 13, kept=False), v("a", 14), v("b", 15)]


def names_failed(ids, gaps=(), expired=0):
    verdict, figures = truth(WRITTEN, ids, list(gaps), expired_faults=expired)
    return {c.name for c in verdict.checks if not c.ok}, figures


def test_every_kept_version_once_passes():
    assert names_failed(["a/10", "b/11", "a/12", "a/14", "b/15"])[0] == set()


def test_a_duplicate_or_a_filtered_version_fails():
    assert names_failed(["a/10", "a/10", "b/11", "a/12", "a/14", "b/15"])[0] == {"no_duplicates"}
    extra = ["a/10", "b/11", "a/12", "a/14", "b/15", "c/13"]
    assert names_failed(extra)[0] == {"nothing_unexpected"}


def test_a_missing_version_is_lost_unless_a_gap_covers_it_and_a_newer_one_is_there():
    ids = ["a/10", "b/11", "a/14", "b/15"]  # a/12 missing
    assert names_failed(ids)[0] == {"nothing_lost"}
    assert names_failed(ids, gaps=[(12, 20)], expired=1)[0] == {
        "nothing_lost"
    }  # (12, 20] leaves 12 out
    got, figures = names_failed(ids, gaps=[(11, 14)], expired=1)
    assert got == set() and figures["missing_in_gap"] == 1
    # the newest version of an Event missing: the relist would have published it
    assert names_failed(["a/10", "b/11", "a/12", "a/14"], gaps=[(11, 16)], expired=1)[0] == {
        "nothing_lost"
    }


def test_a_gap_without_a_410_fails():
    assert names_failed(["a/10", "b/11", "a/12", "a/14", "b/15"], gaps=[(1, 2)])[0] == {
        "gaps_only_from_410"
    }
