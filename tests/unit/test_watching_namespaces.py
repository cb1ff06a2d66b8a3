"""The Namespaces of the enrichment on the one list/watch loop (bridge.runtime.namespaces): a
state, not a history. Each list is handed on whole and replaces the table; a 410 relists
through the Events' path; the breaker, Retry-After, the back-off and the bad-input counts are
the Events' too. Against the scripted source of tests/support.py, on a ManualClock."""

from __future__ import annotations

import msgspec
import pytest

from bridge import errors
from bridge.core.converting import Converter
from bridge.core.queueing import BoundedQueue
from bridge.core.resources import NAMESPACES
from bridge.metrics import Metrics
from bridge.runtime import namespaces
from bridge.runtime.enriching import Enricher
from bridge.runtime.health import Health
from bridge.runtime.staging import Converting
from bridge.runtime.watching import Watcher
from bridge.settings import KubernetesSettings, Settings
from k8s_event_common.clock import ManualClock
from tests.support import FakeSource, Reader, RecordingSink
from tests.unit.test_watching import bookmark, expired, line, run_until_stop


def ns(name, rv, team="a"):
    return {"metadata": {"name": name, "resourceVersion": str(rv), "labels": {"team": team}}}


def page(rv, items, cont=None):
    meta = {"resourceVersion": str(rv), **({"continue": cont} if cont else {})}
    return {"metadata": meta, "items": [msgspec.json.encode(i) for i in items]}


def watcher(source, **kubernetes):
    """The namespace watch of a real Enricher, on a ManualClock."""
    clock = ManualClock()
    s = Settings(enrich={"namespace": {"labels": {"team": "team"}}}, kubernetes=kubernetes)
    metrics = Metrics()
    converter = Converter("c", "k8s.events", "structured", s.nats.subject_template)
    out = Converting(converter, BoundedQueue(10, 1 << 20), metrics)
    enricher = Enricher(s, Reader(), out, metrics, clock=clock)
    w = namespaces.watcher(source, enricher, s.kubernetes, metrics, clock)
    return w, enricher, metrics, clock


def teams(enricher):
    return {name: enricher.namespaces.get(name) for name in ("shop", "blog", "new")}


async def test_a_state_is_handed_on_whole_and_a_relist_hands_on_all_of_it():
    """Events: a relist hands on only what is newer than what was passed on. A state: every
    listed item (a namespace unchanged since is still there), in one batch, and no gap."""
    src = FakeSource(
        lists=[
            page(100, [ns("shop", 50)], cont="t"),
            page(100, [ns("blog", 60)]),
            page(300, [ns("shop", 50)]),  # blog deleted while the history was compacted
        ],
        watches=[[line("ADDED", ns("new", 101))], [expired()], [bookmark(301)]],
        resource=NAMESPACES,
    )
    clock = ManualClock()
    sink = RecordingSink()
    metrics = Metrics()
    w = Watcher(
        src,
        sink,
        KubernetesSettings(page_size=1, initial="new"),  # kubernetes.initial is the Events'
        resource=NAMESPACES,
        namespace=None,
        checkpoint=None,
        field_selector="",
        metrics=metrics,
        health=Health(60, clock=clock).scope("ns"),
        clock=clock,
        scope="ns",
    )
    await run_until_stop(w)
    assert [c["limit"] for c in src.list_calls] == [1, 1, 1]  # pages, not initial=new's one
    assert sink.got == [
        ("ADDED", "shop", None),
        ("ADDED", "blog", None),  # the first list, whole
        ("ADDED", "new", 101),
        ("ADDED", "shop", None),  # the relist: rv 50 is not newer, and handed on all the same
    ]
    assert sink.gaps == [] and sink.marks == [100, 300, 301]
    assert clock.slept == [0.8]  # the 410 backed off, as the Events' does
    assert metrics.relists.labels("expired")._value.get() == 1


async def test_a_relist_replaces_the_namespace_table():
    src = FakeSource(
        lists=[page(100, [ns("shop", 50), ns("blog", 60, "content")]), page(300, [])],
        watches=[[line("MODIFIED", ns("shop", 101, "payments")), expired()], [bookmark(301)]],
        resource=NAMESPACES,
    )
    w, enricher, _, _ = watcher(src)
    await run_until_stop(w)
    assert enricher._synced.is_set()
    # the watch changed shop; then the empty relist replaced everything
    assert teams(enricher) == {"shop": None, "blog": None, "new": None}
    assert len(enricher.namespaces) == 0


async def test_the_namespace_watch_keeps_its_changes_in_order():
    src = FakeSource(
        lists=[page(100, [ns("shop", 50), ns("blog", 60, "content")])],
        watches=[
            [
                line("MODIFIED", ns("shop", 101, "payments")),
                line("ADDED", ns("new", 102, "infra")),
                line("DELETED", ns("blog", 103)),
                line("MODIFIED", ns("shop", 99, "stale")),  # not newer: dropped
            ]
        ],
        resource=NAMESPACES,
    )
    w, enricher, metrics, _ = watcher(src)
    await run_until_stop(w)
    assert teams(enricher) == {"shop": {"team": "payments"}, "blog": None, "new": {"team": "infra"}}
    assert metrics.skipped.labels("not_newer")._value.get() == 1


async def test_the_namespace_watch_opens_the_breaker_and_probes_before_it_relists():
    """Before, the namespace loop had no breaker: it relisted into an API server that was
    failing. Now three failures open it, the 410 that follows waits for a probe (a list of one
    Namespace) answered in time, and only then the relist; Retry-After is honoured."""
    down = errors.KubeUnavailable("503", status=503)
    src = FakeSource(
        lists=[page(100, [ns("shop", 50)]), down, page(250, []), page(300, [ns("blog", 60)])],
        watches=[
            errors.TooManyRequests("429", retry_after=7.0),
            down,
            down,
            errors.ResourceExpired("410"),
            [bookmark(301)],
        ],
        resource=NAMESPACES,
    )
    w, enricher, metrics, clock = watcher(src)
    await run_until_stop(w)
    assert [c["limit"] for c in src.list_calls] == [500, 1, 1, 500]  # list, probe, probe, relist
    assert clock.slept == pytest.approx([7.0, 1.6, 3.2, 6.4, 12.8])
    assert metrics.breaker_opened.labels("enrich:namespaces", "failures")._value.get() == 1
    assert metrics.breaker_state.labels("enrich:namespaces")._value.get() == 0  # closed again
    assert teams(enricher)["blog"] == {"team": "a"} and teams(enricher)["shop"] is None


async def test_a_failed_first_list_stops_events_waiting_until_a_list_succeeds():
    src = FakeSource(
        lists=[errors.Forbidden("403: namespaces is forbidden"), page(100, [ns("shop", 50)])],
        watches=[],
        resource=NAMESPACES,
    )
    w, enricher, metrics, clock = watcher(src)
    seen = []
    src.on_watch = lambda: seen.append((enricher._synced.is_set(), enricher._list_failed))
    await run_until_stop(w)
    assert enricher._list_failed  # set by the 403, before any list came
    assert seen == [(True, True)]  # then the list: Events need not wait any more
    assert metrics.auth_failures.labels("403")._value.get() == 1
    assert clock.slept == [0.8]
    assert src.reloads == 1  # credentials re-read, as for Events


async def test_bad_namespace_lines_are_counted_and_a_watch_of_nothing_backs_off():
    src = FakeSource(
        lists=[page(100, [ns("shop", 50), {"metadata": "x"}])],
        watches=[[b"not json", line("ADDED", {"metadata": {"name": "x"}})], []],
        resource=NAMESPACES,
    )
    w, enricher, metrics, clock = watcher(src)
    await run_until_stop(w)
    assert metrics.skipped.labels("malformed_line")._value.get() == 1
    assert metrics.skipped.labels("no_resource_version")._value.get() == 2
    assert clock.slept == [0.8, 1.6]  # no tight loop: neither watch moved on
    assert teams(enricher)["shop"] == {"team": "a"}
