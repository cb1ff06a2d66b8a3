import asyncio

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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

CONVERTER = Converter("c", "k8s.events", "structured")


def intake(max_items=10, **filter_settings):
    m = Metrics()
    p = Progress(1)
    q = BoundedQueue(max_items, 1 << 20)
    return (
        Intake(
            "*",
            p,
            Filter(FilterSettings(**filter_settings)),
            CONVERTER,
            Converting(CONVERTER, q, m),
            m,
        ),
        p,
        q,
        m,
    )


def ev(rv, **over):
    return support.as_event(support.event(rv=rv, **over))


async def test_published_item_holds_the_checkpoint_until_acked():
    it, p, q, _ = intake()
    await it.items([("ADDED", ev(5), 5)])
    assert p.safe_rv == 1 and len(q) == 1
    out = q.get_nowait()
    out.entry.settle()
    assert p.safe_rv == 5


async def test_filtered_item_moves_the_checkpoint_at_once():
    it, p, q, m = intake(reasons=["OOMKilling"])
    await it.items([("ADDED", ev(5), 5)])
    assert p.safe_rv == 5 and len(q) == 0
    assert m.filtered.value == 1


async def test_item_that_breaks_the_converter_is_skipped_and_counted():
    it, p, q, m = intake()
    await it.items([("ADDED", ev(6, metadata={"uid": "u"}), 6)])  # no resourceVersion in the object
    await it.items([("ADDED", ev(7, involvedObject=["odd"], reason={"x": 1}), 7)])
    assert len(q) == 1  # the second still converts: odd fields become empty tokens
    assert m.skipped.labels("invalid_event")._value.get() == 1
    q.get_nowait().entry.settle()
    assert p.safe_rv == 7


async def test_full_queue_waits_mid_batch_with_what_is_in_hand_counted_and_keeps_the_order():
    it, p, q, m = intake(max_items=2, reasons=["BackOff"])
    batch = [
        ("ADDED", ev(2), 2),
        ("ADDED", ev(3, reason="Pulled"), 3),  # filtered
        ("ADDED", ev(4, metadata={"uid": "u"}), 4),  # does not convert: skipped
        ("ADDED", ev(5), 5),
        ("ADDED", ev(6), 6),  # the queue is full: the intake waits here
        ("ADDED", ev(7, reason="Pulled"), 7),  # filtered
        ("ADDED", ev(8), 8),
    ]
    task = asyncio.create_task(it.items(batch))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done() and len(q) == 2
    assert m.received.value == 5  # taken up to the one in hand, not the rest of the batch
    assert m.skipped.labels("invalid_event")._value.get() == 1
    ids = []
    while not task.done() or len(q):
        out = q.get_nowait()
        if out is None:
            await asyncio.sleep(0)
            continue
        ids.append(out.msg.msg_id)
        out.entry.settle()
    await task
    assert ids == ["uid-web-1/2", "uid-web-1/5", "uid-web-1/6", "uid-web-1/8"]
    assert m.received.value == 7 and m.filtered.value == 2
    assert p.safe_rv == 8


async def test_the_enricher_takes_a_batch_one_event_at_a_time_and_waits_when_full():
    """The same intake in front of the enricher: each Event enters its stage in order, the
    one that finds it full waits there, counted as received with what came before it."""
    from bridge.runtime.enriching import Enricher
    from bridge.settings import EnrichSettings, Settings

    m = Metrics()
    p = Progress(1)
    q = BoundedQueue(10, 1 << 20)
    settings = Settings(enrich=EnrichSettings(max_pending=2))
    enricher = Enricher(settings, None, Converting(CONVERTER, q, m), m, ManualClock())
    it = Intake("*", p, Filter(FilterSettings()), CONVERTER, enricher, m)
    task = asyncio.create_task(it.items([("ADDED", ev(rv), rv) for rv in (2, 3, 4, 5)]))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done() and len(enricher) == 2 and m.received.value == 3
    running = asyncio.create_task(enricher.run())
    try:
        await task
        while len(q) < 4:
            await asyncio.sleep(0)
    finally:
        running.cancel()
    assert [q.get_nowait().msg.msg_id for _ in range(4)] == [
        "uid-web-1/2",
        "uid-web-1/3",
        "uid-web-1/4",
        "uid-web-1/5",
    ]
    assert m.received.value == 4


# Any JSON value, for the fields of Events and for whole lines that are not Events.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = st.dictionaries(
    st.sampled_from(
        [
            "reason",
            "type",
            "count",
            "series",
            "involvedObject",
            "lastTimestamp",
            "eventTime",
            "message",
            "metadata",
            "kind",
            "apiVersion",
            "object",
            "note",
        ]
    ),
    JSON,
    max_size=5,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("event"), st.sampled_from(["ADDED", "MODIFIED"]), FIELDS),
            st.tuples(st.just("junk"), JSON, st.booleans()),
        ),
        max_size=25,
    )
)
async def test_any_shapes_through_the_whole_intake_never_pass_an_unhandled_event(script):
    """Events with any odd fields among lines that are not Events at all, through the watcher
    and the intake: nothing raises out of the loop, every Event is queued (the default filter
    keeps all), and the checkpoint stays before the first one not acked."""
    from tests.support import FakeSource, Stop

    lines, wanted, rv = [], [], 10
    for kind, a, b in script:
        if kind == "event":
            rv += 1
            obj = {
                **b,
                "metadata": {"uid": f"u{rv}", "resourceVersion": str(rv), "namespace": "ns"},
            }
            if isinstance(b.get("metadata"), dict):  # odd metadata fields next to the real ones
                obj["metadata"] = {**b["metadata"], **obj["metadata"]}
            lines.append(msgspec.json.encode({"type": a, "object": obj}))
            wanted.append(rv)
        else:
            lines.append(msgspec.json.encode(a) if b else msgspec.json.encode(a)[:-1])
    m = Metrics()
    progress = Progress(10)
    queue = BoundedQueue(1000, 1 << 24)
    sink = Intake(
        "*",
        progress,
        Filter(FilterSettings()),
        CONVERTER,
        Converting(CONVERTER, queue, m),
        m,
    )
    watcher = Watcher(
        FakeSource(watches=[lines]),
        sink,
        KubernetesSettings(),
        namespace=None,
        checkpoint=10,
        field_selector="",
        metrics=m,
        health=Health(60).scope("*"),
        clock=ManualClock(),
    )
    with pytest.raises(Stop):  # the script's end; anything else escaping fails the test
        await watcher.run()
    outs = []
    while (out := queue.get_nowait()) is not None:
        if out.entry is not None:
            outs.append(out)
    assert [int(o.msg.msg_id.rsplit("/", 1)[1]) for o in outs] == wanted
    assert progress.safe_rv == 10  # nothing acked: the checkpoint has not moved
    if outs:  # acks in any order: the checkpoint stops before the one not acked yet
        k = len(outs) // 2
        for o in outs[:k] + outs[k + 1 :]:
            o.entry.settle()
        assert progress.safe_rv == (wanted[k - 1] if k else 10)
        outs[k].entry.settle()
        assert progress.safe_rv == wanted[-1]
