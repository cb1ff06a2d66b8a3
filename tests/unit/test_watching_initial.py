"""The first start by age (kubernetes.initial a duration) in the watcher, against the scripted
in-memory source of tests/support.py: only a scope's first list without a checkpoint leaves out
what is too old; a checkpoint, a relist after a 410 and every watch event publish as before."""

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from bridge import errors
from bridge.core.converting import Converter
from bridge.core.filtering import Filter
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.metrics import Metrics
from bridge.runtime.health import Health
from bridge.runtime.intake import Intake
from bridge.runtime.staging import Converting
from bridge.runtime.watching import Watcher
from bridge.settings import FilterSettings, KubernetesSettings
from k8s_event_common.clock import ManualClock
from tests import support
from tests.support import FakeSource, RecordingSink, Stop
from tests.unit.test_watching import (
    expired,
    line,
    page,
    run_until_stop,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
CUTOFF = "2025-01-01T11:45:00Z"  # NOW less 15m
WHY = f"older than kubernetes.initial (15m): last occurrence before {CUTOFF}"

CONVERTER = Converter("c", "k8s.events", "structured")


def at(seconds_ago: float) -> str:
    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ev(name, rv, *, ago=None):
    """An Event last seen ``ago`` seconds before NOW (None: no time at all)."""
    if ago is None:
        return support.event(name, rv)
    return support.event(name, rv, created=at(ago + 60), last=at(ago))


OLD, NEW = 3600, 60  # an hour ago, a minute ago


def make(source, sink=None, checkpoint=None, metrics=None, **settings):
    clock = ManualClock(wall_at_zero=NOW)
    metrics = metrics or Metrics()
    w = Watcher(
        source,
        sink or RecordingSink(),
        KubernetesSettings(**settings),
        namespace=None,
        checkpoint=checkpoint,
        field_selector="",
        metrics=metrics,
        health=Health(60, clock=clock).scope("*"),
        clock=clock,
    )
    return w, metrics


def names(sink):
    return [name for _, name, _ in sink.got]


def too_old(metrics):
    return metrics.too_old._value.get()


async def test_the_first_list_hands_on_only_what_is_recent_and_tells_how_it_went():
    src = FakeSource(
        lists=[
            page(100, [ev("old", 40, ago=OLD), ev("new", 50, ago=NEW)], cont="t"),
            page(100, [ev("undated", 60), ev("older", 70, ago=2 * OLD)]),
        ],
        watches=[[line("ADDED", ev("seen-again", 101, ago=OLD))]],
    )
    sink = RecordingSink()
    w, metrics = make(src, sink, initial="15m")
    assert not w.initial.done()  # not known before the first list
    await run_until_stop(w)
    # the watch after the first list publishes everything, however old its Events
    assert names(sink) == ["new", "undated", "seen-again"]
    assert sink.marks == [100] and src.watch_calls[0]["rv"] == "100"
    assert w.initial.result() == {
        "max_age": "15m",
        "cutoff": CUTOFF,
        "published": 2,  # the undated one among them: its age is unknown, it is kept
        "skipped": 2,
        "undated": 1,
        "why": WHY,
    }
    assert too_old(metrics) == 2


async def test_too_old_events_never_reach_the_queue_and_the_checkpoint_moves_past_them():
    metrics = Metrics()
    progress = Progress(None)
    queue = BoundedQueue(100, 1 << 20)
    intake = Intake(
        "*",
        progress,
        Filter(FilterSettings()),
        CONVERTER,
        Converting(CONVERTER, queue, metrics),
        metrics,
    )
    src = FakeSource(
        lists=[page(100, [ev("old", 40, ago=OLD), ev("new", 50, ago=NEW), ev("old2", 60, ago=OLD)])]
    )
    w, _ = make(src, intake, metrics=metrics, initial="15m")
    await run_until_stop(w)
    outs = []
    while (out := queue.get_nowait()) is not None:
        outs.append(out)
    # the scope's first answer (a status event), then the one Event young enough
    assert [o.msg.msg_id.split("/")[1] for o in outs[:1]] == ["apiserver_reachable"]
    assert [o.msg.msg_id for o in outs[1:]] == ["uid-new/50"]
    assert progress.safe_rv is None  # the one published holds it until its ack
    outs[1].entry.settle()
    assert progress.safe_rv == 100  # past the old ones: the list's end


async def test_a_first_list_of_only_old_events_publishes_no_event_and_moves_the_checkpoint():
    metrics = Metrics()
    progress = Progress(None)
    queue = BoundedQueue(100, 1 << 20)
    intake = Intake(
        "*",
        progress,
        Filter(FilterSettings()),
        CONVERTER,
        Converting(CONVERTER, queue, metrics),
        metrics,
    )
    src = FakeSource(lists=[page(100, [ev("old", 40, ago=OLD), ev("old2", 60, ago=OLD)])])
    w, _ = make(src, intake, metrics=metrics, initial="15m")
    await run_until_stop(w)
    # nothing but the scope's first answer (a status event)
    outs = []
    while (out := queue.get_nowait()) is not None:
        outs.append(out)
    assert [o.msg.msg_id.split("/")[1] for o in outs] == ["apiserver_reachable"]
    assert progress.in_flight == 0
    assert progress.safe_rv == 100
    assert w.initial.result()["skipped"] == 2 and too_old(metrics) == 2


async def test_a_checkpoint_wins_nothing_is_left_out_by_age():
    src = FakeSource(
        watches=[[line("ADDED", ev("old", 11, ago=OLD)), expired()]],
        lists=[page(300, [ev("old-relisted", 250, ago=OLD)])],
    )
    sink = RecordingSink()
    w, metrics = make(src, sink, checkpoint=10, initial="15m")
    assert w.initial.done() and w.initial.result() is None  # known at once
    await run_until_stop(w)
    assert names(sink) == ["old", "old-relisted"]
    assert too_old(metrics) == 0


async def test_a_relist_after_a_410_does_not_apply_the_age():
    src = FakeSource(
        lists=[
            page(100, [ev("old", 40, ago=OLD), ev("new", 50, ago=NEW)]),
            page(300, [ev("old", 40, ago=OLD), ev("old-changed", 250, ago=OLD)]),
        ],
        watches=[[expired()], []],
    )
    sink = RecordingSink()
    w, metrics = make(src, sink, initial="15m")
    await run_until_stop(w)
    assert [c["cont"] for c in src.list_calls] == [None, None]  # the first list, the relist
    # the relist hands on what is newer than the first list, however old it is
    assert names(sink) == ["new", "old-changed"]
    assert sink.gaps == [(100, 300)]
    assert w.initial.result()["skipped"] == 1 and too_old(metrics) == 1


async def test_a_first_list_tried_again_after_a_failure_still_applies_the_age():
    src = FakeSource(
        lists=[
            page(100, [ev("new", 50, ago=NEW)], cont="t"),
            errors.KubeUnavailable("reset"),
            page(120, [ev("new", 50, ago=NEW), ev("old", 60, ago=OLD)], cont="t"),
            page(120, [ev("newer", 110, ago=NEW)]),
        ],
        watches=[[]],
    )
    sink = RecordingSink()
    w, metrics = make(src, sink, initial="15m")
    await run_until_stop(w)
    # "new" twice: from the failed list and its retry (one id: the stream keeps it once)
    assert names(sink) == ["new", "new", "newer"]
    # told of the list that finished, once
    assert w.initial.result()["published"] == 2 and w.initial.result()["skipped"] == 1
    assert too_old(metrics) == 1


async def test_the_cutoff_is_taken_from_the_clock_when_the_list_starts():
    src = FakeSource(lists=[page(100, [ev("ten-minutes", 50, ago=600)])], watches=[[]])
    sink = RecordingSink()
    w, _ = make(src, sink, initial="15m")
    w.clock.advance(301)  # the Event is now 15m01s old
    await run_until_stop(w)
    assert names(sink) == []
    assert w.initial.result()["cutoff"] == "2025-01-01T11:50:01Z"


@pytest.mark.parametrize("initial", ["all", "new"])
async def test_all_and_new_tell_nothing(initial):
    src = FakeSource(lists=[page(100, [ev("old", 40, ago=OLD)])], watches=[[]])
    sink = RecordingSink()
    w, metrics = make(src, sink, initial=initial)
    assert w.initial.done() and w.initial.result() is None
    await run_until_stop(w)
    assert names(sink) == (["old"] if initial == "all" else [])
    assert too_old(metrics) == 0


async def test_the_future_is_cancelled_when_run_ends_before_the_first_list():
    src = FakeSource(lists=[])  # the first list call ends the run (Stop)
    w, _ = make(src, initial="15m")
    waiter = asyncio.ensure_future(w.initial)
    await run_until_stop(w)
    assert w.initial.cancelled()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_the_future_is_cancelled_when_the_watcher_task_is_cancelled():
    gate = asyncio.Event()

    class Hanging(FakeSource):
        async def list_page(self, resource, namespace, **kw):
            await gate.wait()
            raise AssertionError("not reached")

    w, _ = make(Hanging(), initial="15m")
    task = asyncio.create_task(w.run())
    await asyncio.sleep(0)
    assert not w.initial.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert w.initial.cancelled()


def test_a_watcher_made_without_a_running_loop_makes_its_future_in_the_loop_that_runs_it():
    src = FakeSource(lists=[page(100, [ev("old", 40, ago=OLD)])], watches=[[]])
    w, _ = make(src, initial="15m")  # no loop runs here (filterwarnings: error)

    async def go():
        with pytest.raises(Stop):
            await w.run()
        return await w.initial

    assert asyncio.run(go())["skipped"] == 1


async def test_the_end_of_the_first_list_is_logged_with_scope_skipped_and_cutoff():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("bridge.watching")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        src = FakeSource(lists=[page(100, [ev("old", 40, ago=OLD), ev("new", 50, ago=NEW)])])
        w, _ = make(src, initial="15m")
        await run_until_stop(w)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    [rec] = [r for r in records if r.getMessage() == "initial_by_age"]
    assert rec.fields == {
        "scope": "*",
        "resource_version": 100,
        "max_age": "15m",
        "cutoff": CUTOFF,
        "published": 1,
        "skipped": 1,
        "undated": 0,
    }
