"""The watcher against the scripted in-memory source (tests/support.py): no I/O, no sleeping."""

import msgspec
import pytest

from bridge import errors
from bridge.metrics import Metrics
from bridge.runtime.health import Health
from bridge.runtime.watching import Watcher
from bridge.settings import KubernetesSettings
from k8s_event_common.clock import ManualClock
from tests import support
from tests.support import FakeSource, RecordingSink, Stop


def ev(name, rv, reason="BackOff"):
    return support.event(name, rv, reason=reason)


def line(type_, obj):
    return support.watch_line(obj, type_)


def bookmark(rv):
    return line(
        "BOOKMARK", {"kind": "Event", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}}
    )


def expired():
    return line(
        "ERROR",
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"},
    )


def make(source, checkpoint=None, checkpoint_at=None, include_deleted=False, **settings):
    clock = ManualClock()
    sink = RecordingSink()
    metrics = Metrics()
    w = Watcher(
        source,
        sink,
        KubernetesSettings(**settings),
        namespace=None,
        checkpoint=checkpoint,
        field_selector="",
        metrics=metrics,
        health=Health(60, clock=clock).scope("*"),
        clock=clock,
        checkpoint_at=checkpoint_at,
        include_deleted=include_deleted,
    )
    return w, sink, clock.slept, metrics, clock


def page(rv, items, cont=None):
    meta = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return {"metadata": meta, "items": items}


async def run_until_stop(w):
    with pytest.raises(Stop):
        await w.run()


async def test_first_start_lists_all_pages_then_watches_from_list_rv():
    src = FakeSource(
        lists=[page(100, [ev("b", 90), ev("a", 50)], cont="t1"), page(100, [ev("c", 70)])],
        watches=[[line("ADDED", ev("d", 101))]],
    )
    w, sink, *_ = make(src, page_size=2)
    await run_until_stop(w)
    assert [c["cont"] for c in src.list_calls] == [None, "t1"]
    # list items carry no rv of their own: only the list's rv moves the checkpoint
    assert sink.got[:3] == [("ADDED", "b", None), ("ADDED", "a", None), ("ADDED", "c", None)]
    assert sink.marks == [100]
    assert src.watch_calls[0]["rv"] == "100"
    assert sink.got[3] == ("ADDED", "d", 101)


async def test_initial_new_skips_what_exists():
    src = FakeSource(lists=[page(100, [ev("a", 50)], cont="more")], watches=[[]])
    w, sink, *_ = make(src, initial="new")
    await run_until_stop(w)
    assert src.list_calls == [{"limit": 1, "cont": None}]
    assert sink.got == [] and sink.marks == [100]


async def test_watch_timeout_is_random_between_5_and_10_minutes():
    src = FakeSource(watches=[[line("ADDED", ev("a", 11))]])
    w, *_ = make(src, checkpoint=10)
    w.clock.rand = 0.999
    await run_until_stop(w)
    assert 300 <= src.watch_calls[0]["timeout"] < 600


async def test_normal_close_watches_again_from_last_rv_at_once():
    src = FakeSource(
        watches=[
            [line("ADDED", ev("a", 11)), line("MODIFIED", ev("a", 12))],
            [line("MODIFIED", ev("a", 13))],
        ]
    )
    w, sink, sleeps, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert [c["rv"] for c in src.watch_calls] == ["10", "12", "13"]
    assert sleeps == []
    assert [i[2] for i in sink.got] == [11, 12, 13]


async def test_a_quiet_watch_is_a_normal_close_not_an_outage():
    """No bookmarks on Event watches: a scope with nothing new ends its watch by the read
    timeout. Watch again at once from the same resourceVersion; no back-off, no unreachable
    status event, the watch not marked failing, counted as its own cause."""
    quiet = errors.QuietWatch("the watch sent nothing for kubernetes.read_timeout")
    src = FakeSource(
        watches=[
            [line("ADDED", ev("a", 11)), quiet],
            [quiet],
            [quiet],
            [line("MODIFIED", ev("a", 12))],
        ]
    )
    w, sink, sleeps, metrics, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert [c["rv"] for c in src.watch_calls] == ["10", "11", "11", "11", "12"]
    assert sleeps == [] and sink.reach == [True]  # the first answer, told once: no outage
    assert [i[2] for i in sink.got] == [11, 12]
    assert metrics.watch_restarts.labels("quiet")._value.get() == 3
    assert metrics.watch_restarts.labels("error")._value.get() == 0
    health = w.report.health
    assert health.synced and health.bad_since is None  # never marked failing


async def test_bookmark_advances_rv_without_an_item():
    src = FakeSource(watches=[[bookmark(500)], []])
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.marks == [500] and sink.got == []
    assert src.watch_calls[1]["rv"] == "500"


async def test_410_in_stream_relists_from_consistent_read_and_reports_gap():
    src = FakeSource(
        watches=[[expired()], [line("ADDED", ev("z", 301))]],
        lists=[page(300, [ev("old", 5), ev("new", 250)])],
    )
    w, sink, sleeps, metrics, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.gaps == [(10, 300)]
    # not newer than what was passed on: not published again
    assert [i[1] for i in sink.got] == ["new", "z"]
    assert src.watch_calls[1]["rv"] == "300"
    assert sleeps == [0.8]  # a relist backs off like any failure
    assert metrics.relists.labels("expired")._value.get() == 0  # first list of this watcher


async def test_http_410_on_watch_relists():
    src = FakeSource(watches=[errors.ResourceExpired("410"), []], lists=[page(20, [ev("n", 15)])])
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.gaps == [(10, 20)]


async def test_expired_continue_token_restarts_the_list():
    src = FakeSource(
        lists=[
            page(100, [ev("a", 1)], cont="t"),
            errors.ResourceExpired("410"),
            page(120, [ev("a", 1), ev("b", 2)]),
        ],
        watches=[[]],
    )
    w, sink, *_ = make(src)
    await run_until_stop(w)
    assert [c["cont"] for c in src.list_calls] == [None, "t", None]
    assert sink.marks == [120]


@pytest.mark.parametrize(
    "failure",
    [
        errors.KubeUnavailable("503", status=503),
        errors.KubeUnavailable("reset"),
        errors.TooManyRequests("429"),
    ],
)
async def test_retriable_failures_back_off_and_keep_the_rv(failure):
    src = FakeSource(watches=[failure, failure, failure, [line("ADDED", ev("a", 11))]])
    w, sink, sleeps, _, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sleeps == [0.8, 1.6, 3.2]
    assert [c["rv"] for c in src.watch_calls[:4]] == ["10"] * 4
    assert sink.got == [("ADDED", "a", 11)]


async def test_retry_after_is_honoured():
    src = FakeSource(watches=[errors.TooManyRequests("429", retry_after=7.0), [bookmark(11)]])
    w, _, sleeps, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sleeps == [7.0]


async def test_backoff_is_capped_at_30s():
    src = FakeSource(watches=[errors.KubeUnavailable("down")] * 9)
    w, _, sleeps, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert max(sleeps) == 30.0 and sleeps[:3] == [0.8, 1.6, 3.2]


async def test_401_backs_off_and_reloads_credentials():
    src = FakeSource(watches=[errors.Unauthorized("401"), [line("ADDED", ev("a", 11))]])
    w, sink, sleeps, metrics, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert src.reloads == 1 and sleeps == [0.8]
    assert metrics.auth_failures.labels("401")._value.get() == 1
    assert sink.got == [("ADDED", "a", 11)]


async def test_a_watch_that_closes_at_once_is_not_a_tight_loop():
    src = FakeSource(watches=[[], [], []])
    w, _, sleeps, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sleeps == [0.8, 1.6, 3.2]


async def test_bad_lines_are_counted_and_skipped_and_the_loop_goes_on():
    src = FakeSource(
        watches=[
            [
                b"not json",
                b'{"type":"ADDED","object":',
                line("WEIRD", {}),
                b'{"type":"ADDED"}',
                line("ADDED", {"metadata": {}}),
                line("ADDED", ev("ok", 11)),
            ]
        ]
    )
    w, sink, _, metrics, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.got == [("ADDED", "ok", 11)]
    assert metrics.skipped.labels("malformed_line")._value.get() == 3
    assert metrics.skipped.labels("unknown_type")._value.get() == 1
    assert metrics.skipped.labels("no_resource_version")._value.get() == 1


async def test_stale_events_not_newer_than_rv_are_dropped():
    src = FakeSource(watches=[[line("MODIFIED", ev("a", 9)), line("MODIFIED", ev("a", 12))]])
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.got == [("MODIFIED", "a", 12)]


async def test_unreachable_then_reachable_is_reported_once_each():
    down = errors.KubeUnavailable("refused")
    src = FakeSource(watches=[down, down, [line("ADDED", ev("a", 11))]])
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.reach == [False, True]


async def test_repeated_410_relists_back_off_more_each_time():
    src = FakeSource(
        watches=[[expired()], [expired()], [expired()], [line("ADDED", ev("a", 400))]],
        lists=[page(100, [ev("a", 50)]), page(200, [ev("b", 150)]), page(300, [ev("c", 250)])],
    )
    w, sink, sleeps, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sleeps == [0.8, 1.6, 3.2]
    assert sink.gaps == [(10, 100), (100, 200), (200, 300)]


async def test_expired_continue_token_during_relist_reports_one_gap_from_the_old_rv():
    src = FakeSource(
        watches=[[expired()], [line("ADDED", ev("z", 301))]],
        lists=[
            page(250, [ev("a", 20)], cont="t"),
            errors.ResourceExpired("410"),
            page(300, [ev("a", 20), ev("b", 290)]),
        ],
    )
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.gaps == [(10, 300)]
    assert sink.marks == [300]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "ADDED", "object": {"metadata": "x"}},
        {"type": "MODIFIED", "object": {"metadata": ["x"]}},
        {"type": "BOOKMARK", "object": {"metadata": [1]}},
        {"type": "ADDED", "object": {"metadata": {"resourceVersion": 12}}},
        {"type": "ADDED", "object": {"metadata": {"resourceVersion": "١٢"}}},  # non-ASCII digits
        {"type": ["ADDED"], "object": {}},
        {"type": "ERROR", "object": {"code": "410"}},
    ],
)
async def test_malformed_structures_never_stop_the_loop(bad):
    src = FakeSource(watches=[[msgspec.json.encode(bad), line("ADDED", ev("ok", 11))]])
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    if bad["type"] != "ERROR":
        assert sink.got == [("ADDED", "ok", 11)]


async def test_malformed_list_items_are_skipped():
    src = FakeSource(
        lists=[
            {
                "metadata": {"resourceVersion": "50"},
                "items": ["x", {"metadata": "y"}, None, ev("good", 40)],
            }
        ],
        watches=[[bookmark(60)]],
    )
    w, sink, _, metrics, _ = make(src)
    await run_until_stop(w)
    assert sink.got == [("ADDED", "good", None)]
    assert metrics.skipped.labels("malformed_item")._value.get() == 2  # "x", None
    assert metrics.skipped.labels("no_resource_version")._value.get() == 1


async def test_a_watch_of_garbage_that_closes_at_once_backs_off():
    src = FakeSource(watches=[[b"<html>", b"oops"], [bookmark(10)], [bookmark(11)]])
    w, _, sleeps, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sleeps == [0.8, 1.6]  # garbage, then a stale bookmark: neither moved on


async def test_list_items_get_the_kind_and_api_version_watch_objects_have():
    seen = []

    class Sink(RecordingSink):
        async def items(self, batch):
            seen.extend(obj for _, obj, _ in batch)

    src = FakeSource(lists=[page(10, [ev("a", 5)])], watches=[[bookmark(11)]])
    w, *_ = make(src)
    w.sink = Sink()
    await run_until_stop(w)
    data = msgspec.json.decode(b"".join(seen[0].data_parts()))
    assert data["kind"] == "Event" and data["apiVersion"] == "v1"
    assert data["metadata"]["name"] == "a"


async def test_list_items_as_listed_bytes_get_kind_and_lose_managed_fields():
    seen = []

    class Sink(RecordingSink):
        async def items(self, batch):
            seen.extend(obj for _, obj, _ in batch)

    item = ev("a", 5)
    item["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:count": {}}}]
    raw = msgspec.json.encode(item)
    src = FakeSource(lists=[page(10, [msgspec.Raw(raw), raw])], watches=[[bookmark(11)]])
    w, *_ = make(src)
    w.sink = Sink()
    await run_until_stop(w)
    assert len(seen) == 2
    for e in seen:
        data = msgspec.json.decode(b"".join(e.data_parts()))
        want = {
            **item,
            "metadata": {k: v for k, v in item["metadata"].items() if k != "managedFields"},
        }
        assert data == {**want, "apiVersion": "v1", "kind": "Event"}


async def test_410_relist_with_nothing_newer_and_recent_rv_is_not_a_gap():
    """Event watches come from etcd without bookmarks: a quiet or narrow scope falls behind
    compaction. If this process watched the scope up to the 410 (a watch that ended
    normally: it would have shown a deletion), nothing listed is newer and the rv is younger
    than the TTL, nothing was missed: no gap event."""
    src = FakeSource(watches=[[], [expired()], [bookmark(300)]], lists=[page(300, [ev("old", 5)])])
    w, sink, _, _, clock = make(src, checkpoint=10, checkpoint_at=1_000_000.0 - 600)
    src.on_watch = lambda: clock.advance(5)  # a quiet watch that lasts
    await run_until_stop(w)
    assert sink.gaps == [] and sink.got == [] and sink.marks[0] == 300


async def test_410_first_thing_after_a_restart_is_a_possible_gap():
    """Back from a checkpoint, the first watch meets a 410: the bridge was not watching in
    between, and a namespace deleted meanwhile takes its Events with it, leaving nothing in a
    list. Nothing newer is listed, yet the gap is reported, as "possible"."""
    src = FakeSource(watches=[[expired()], [bookmark(300)]], lists=[page(300, [ev("old", 5)])])
    w, sink, _, metrics, _ = make(src, checkpoint=10, checkpoint_at=1_000_000.0 - 600)
    await run_until_stop(w)
    assert sink.gaps == [(10, 300)] and sink.certainty == ["possible"]
    assert "not watching" in sink.why[0]
    assert metrics.gaps.labels("possible")._value.get() == 1


async def test_410_after_a_failed_watch_is_a_possible_gap():
    """A watch that failed (a reset, an outage of unknown length) breaks the coverage too."""
    src = FakeSource(
        watches=[[], errors.KubeUnavailable("reset"), [expired()], [bookmark(300)]],
        lists=[page(300, [])],
    )
    w, sink, _, _, clock = make(src, checkpoint=10, checkpoint_at=1_000_000.0 - 600)
    src.on_watch = lambda: clock.advance(5)
    await run_until_stop(w)
    assert sink.gaps == [(10, 300)] and sink.certainty == ["possible"]


@pytest.mark.parametrize(
    ("age", "include_deleted"),
    [(3601, False), (60, True)],  # older than the TTL: an Event may have expired unseen
)
async def test_410_relist_reports_a_gap_when_nothing_proves_otherwise(age, include_deleted):
    src = FakeSource(watches=[[expired()], [bookmark(300)]], lists=[page(300, [])])
    w, sink, _, _, clock = make(
        src, checkpoint=10, checkpoint_at=1_000_000.0 - age, include_deleted=include_deleted
    )
    src.watches.insert(0, [])  # watched without a break: only the TTL or deletions speak
    src.on_watch = lambda: clock.advance(5)
    await run_until_stop(w)
    assert sink.gaps == [(10, 300)] and sink.certainty == ["likely"]


async def test_breaker_open_holds_the_relist_until_a_cheap_probe_is_answered():
    """Three failures in a row open the breaker (apiserver_degraded). The next watch, its
    probe, gets an HTTP 410; no relist while the breaker is not healthy: a list of one Event
    without the field selector probes, and fails; the next step's probe is answered
    (apiserver_recovered); only then the relist."""
    down = errors.KubeUnavailable("503", status=503)
    src = FakeSource(
        watches=[down, down, down, errors.ResourceExpired("410"), [line("ADDED", ev("z", 301))]],
        lists=[down, page(250, []), page(300, [ev("new", 250)])],
    )
    w, sink, sleeps, metrics, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.degraded == [(True, "failures"), (False, None)]
    assert [c["limit"] for c in src.list_calls] == [1, 1, 500]  # probe, probe, relist
    assert src.probe_selectors == ["", ""]
    # the same back-off steps as without a breaker: one request per step
    assert sleeps == [0.8, 1.6, 3.2, 6.4, 12.8]
    assert metrics.breaker_opened.labels("*", "failures")._value.get() == 1
    assert metrics.breaker_state.labels("*")._value.get() == 0
    assert [i[1] for i in sink.got] == ["new", "z"]


async def test_slow_answers_open_the_breaker_and_a_fast_probe_closes_it():
    """Response times count: watches that take 3 s to open push the p95 past 2 s; the
    breaker opens (reason latency), the next watch waits a back-off step and goes as the
    probe; answered at once, it closes the breaker."""
    src = FakeSource(watches=[[bookmark(11 + i)] for i in range(6)])
    w, sink, sleeps, metrics, clock = make(src, checkpoint=10, breaker={"latency_samples": 5})
    slow = iter([3.0] * 5)
    src.on_watch = lambda: clock.advance(next(slow, 0.0))
    await run_until_stop(w)
    assert sink.degraded == [(True, "latency"), (False, None)]
    assert sleeps == [pytest.approx(0.8)]  # one step before the probe
    assert metrics.breaker_opened.labels("*", "latency")._value.get() == 1
    assert sink.marks == [11, 12, 13, 14, 15, 16]  # the slow watches were used all the same


async def test_auth_failures_and_410s_do_not_open_the_breaker():
    src = FakeSource(
        watches=[errors.Forbidden("403")] * 4 + [[expired()]] * 3 + [[bookmark(400)]],
        lists=[page(100, []), page(200, []), page(300, [])],
    )
    w, sink, *_ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.degraded == [] and w.breaker.healthy


@pytest.mark.parametrize("rv", ["12a", "", "-12", "1e3", " 12", "١٢"])
async def test_an_unparseable_resource_version_is_skipped_never_guessed(rv):
    """resourceVersions are compared as integers (bridge.core.events.parse_rv): a watch event
    or bookmark whose resourceVersion is no decimal integer is skipped and counted, the resume
    point does not move, and the events around it go on."""
    odd = ev("odd", 0)
    odd["metadata"]["resourceVersion"] = rv
    odd_bookmark = line("BOOKMARK", {"metadata": {"resourceVersion": rv}})
    src = FakeSource(
        watches=[[line("ADDED", ev("a", 11)), line("ADDED", odd), odd_bookmark], [bookmark(12)]]
    )
    w, sink, _, metrics, _ = make(src, checkpoint=10)
    await run_until_stop(w)
    assert sink.got == [("ADDED", "a", 11)] and sink.marks == [12]
    assert [c["rv"] for c in src.watch_calls] == ["10", "11", "12"]
    assert metrics.skipped.labels("no_resource_version")._value.get() == 2


async def test_a_list_with_an_unparseable_resource_version_is_a_failed_answer():
    src = FakeSource(
        lists=[page("v100", [ev("a", 5)]), page(100, [ev("a", 5)])], watches=[[bookmark(101)]]
    )
    w, sink, sleeps, metrics, _ = make(src)
    await run_until_stop(w)
    assert sleeps == [0.8]  # backed off, then listed again
    assert sink.got == [("ADDED", "a", None)] and sink.marks == [100, 101]
    assert metrics.watch_restarts.labels("error")._value.get() == 1
