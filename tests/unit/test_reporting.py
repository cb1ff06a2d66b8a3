"""What a watch scope tells (bridge.runtime.reporting.WatchReport): each thing that happened
gives its log line, metrics and status event once, in the watcher's logger. The Watcher's own
tests (test_watching.py) drive these through the loop; here each is called alone."""

import logging

import pytest

from bridge import errors, logs
from bridge.core import gaps
from bridge.core.backoff import Backoff
from bridge.core.breaker import Breaker, Change
from bridge.core.watchstate import WatchState
from bridge.metrics import Metrics
from bridge.runtime import reporting
from bridge.runtime.health import Health
from bridge.runtime.reporting import WatchReport
from bridge.settings import KubernetesSettings
from k8s_event_common.clock import ManualClock
from tests.support import RecordingSink


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def events(self):
        return [r.getMessage() for r in self.records]

    def fields(self, event):
        return [r.fields for r in self.records if r.getMessage() == event]


@pytest.fixture
def lines(monkeypatch):
    """The ``bridge.watching`` records, with warnings sampled afresh (a new Logger)."""
    monkeypatch.setattr(reporting, "log", logs.get("watching"))
    handler = Lines()
    logger = logging.getLogger("bridge.watching")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def make(namespace=None):
    clock = ManualClock()
    settings = KubernetesSettings()
    breaker = Breaker(
        settings.breaker, Backoff.from_settings(settings.backoff, clock=clock), clock=clock
    )
    sink, metrics = RecordingSink(), Metrics()
    health = Health(60, clock=clock).scope(namespace or "*")
    report = WatchReport(
        sink,
        scope=namespace or "*",
        namespace=namespace,
        metrics=metrics,
        health=health,
        breaker=breaker,
    )
    return report, sink, metrics, health


def value(metric, *labels):
    return (metric.labels(*labels) if labels else metric)._value.get()


async def test_unreachable_and_reachable_again_are_told_once_each(lines):
    report, sink, metrics, health = make()
    down = errors.KubeUnavailable("connection refused")
    await report.failed(down, WatchState.WATCHING, None)
    await report.failed(down, WatchState.LISTING, None)
    assert sink.told == [("reachability", False, "connection refused")]
    assert value(metrics.apiserver_reachable) == 0
    assert value(metrics.watch_restarts, "error") == 2
    assert health.last_error == "KubeUnavailable: connection refused"
    assert [f["state"] for f in lines.fields("kube_request_failed")] == ["watching", "listing"]
    await report.answered(None, reached=True)
    await report.answered(None, reached=True)
    assert sink.told[1:] == [("reachability", True, "the API server answers again")]
    assert value(metrics.apiserver_reachable) == 1
    assert health.synced and health.bad_since is None


async def test_the_first_answer_is_told_once_so_an_earlier_process_outage_ends(lines):
    """A process that never saw the API server away still tells its first answer: an outage an
    earlier leader told before it was fenced ends in the stream, and the gauge says 1 from then."""
    report, sink, metrics, _ = make()
    assert value(metrics.apiserver_reachable) == 0  # nothing answered yet
    await report.answered(None, reached=False)  # a probe's answer counts
    await report.answered(None, reached=True)
    assert sink.told == [("reachability", True, "the first answer of this process")]
    assert value(metrics.apiserver_reachable) == 1
    await report.failed(errors.KubeUnavailable("refused"), WatchState.WATCHING, None)
    await report.answered(None, reached=True)
    assert sink.told[1:] == [
        ("reachability", False, "refused"),
        ("reachability", True, "the API server answers again"),
    ]


async def test_a_failure_that_is_no_outage_leaves_reachability_alone(lines):
    report, sink, _, _ = make()
    await report.failed(errors.TooManyRequests("slow down", status=429), WatchState.WATCHING, None)
    assert sink.told == []
    assert lines.events() == ["kube_request_failed"]


async def test_a_probe_answered_does_not_mark_the_scope_synced(lines):
    report, _, _, health = make()
    await report.answered(None, reached=False)
    assert not health.synced


@pytest.mark.parametrize(
    ("namespace", "exc", "needs"),
    [
        (
            None,
            errors.Forbidden("no", status=403),
            "list and watch on events (core/v1) cluster-wide",
        ),
        (
            "shop",
            errors.Forbidden("no", status=403),
            "list and watch on events (core/v1) in namespace shop",
        ),
        (
            "shop",
            errors.Unauthorized("who", status=401),
            "valid credentials (token expired or rotated, or the kubeconfig is wrong)",
        ),
    ],
)
def test_a_denied_request_names_what_the_bridge_needs_once_a_minute(lines, namespace, exc, needs):
    report, sink, metrics, health = make(namespace)
    report.denied(exc)
    report.denied(exc)
    assert lines.fields("kube_permission_denied") == [
        {"status": exc.status, "scope": namespace or "*", "needs": needs, "detail": str(exc)}
    ]
    assert value(metrics.auth_failures, str(exc.status)) == 2
    assert value(metrics.watch_restarts, "auth") == 2
    assert health.bad_since is not None and sink.told == []


async def test_the_breaker_opening_and_closing_are_told_with_the_gauge(lines):
    report, sink, metrics, _ = make()
    await report.breaker_changed(None)
    assert sink.told == [] and lines.events() == []
    await report.breaker_changed(Change(True, "latency", "p95 9s"))
    await report.breaker_changed(Change(False, "probe", "answered in 0.1s", open_for=12.34))
    assert sink.told == [
        ("degradation", True, {"reason": "latency", "detail": "p95 9s"}),
        ("degradation", False, {"detail": "answered in 0.1s", "degradedForSeconds": 12.3}),
    ]
    assert lines.events() == ["apiserver_degraded", "apiserver_recovered"]
    assert lines.fields("apiserver_recovered")[0]["degraded_for_seconds"] == 12.3
    assert value(metrics.breaker_opened, "*", "latency") == 1
    assert value(metrics.breaker_state, "*") == 0  # the breaker itself never moved


async def test_after_a_relist_a_gap_is_told_and_nothing_missed_is_only_logged(lines):
    report, sink, metrics, _ = make()
    await report.relisted(None)
    assert sink.told == [] and lines.events() == []
    fine = gaps.after_relist(
        5, 9, newer=0, age=10.4, covered=True, event_ttl=3600, include_deleted=False
    )
    await report.relisted(fine)
    assert sink.told == []
    assert lines.fields("relisted_nothing_missed") == [
        {"scope": "*", "from_resource_version": 5, "to_resource_version": 9, "seconds_behind": 10}
    ]
    likely = gaps.after_relist(
        5, 9, newer=2, age=10, covered=True, event_ttl=3600, include_deleted=False
    )
    await report.relisted(likely)
    assert sink.told == [("gap", 5, 9, "likely")]
    assert lines.fields("history_gap")[0]["newer_events"] == 2
    assert value(metrics.gaps, "likely") == 1


def test_bad_input_is_counted_and_warned_about_once_a_minute_with_a_sample(lines):
    report, _, metrics, _ = make()
    report.skipped("malformed_line", b"\xff" + b"x" * 400)
    report.skipped("malformed_line", b"again")
    report.skipped("not_newer")  # no sample: nothing wrong with it, only counted
    assert value(metrics.skipped, "malformed_line") == 2
    assert value(metrics.skipped, "not_newer") == 1
    [warned] = lines.fields("input_skipped")
    assert warned["reason"] == "malformed_line"
    assert warned["sample"] == "\ufffd" + "x" * 299


def test_its_lines_are_the_watchers(lines):
    report, _, _, _ = make()
    report.listed(42, 3, 1, False)
    report.backing_off(1.23456)
    assert [r.name for r in lines.records] == ["bridge.watching", "bridge.watching"]
    assert lines.fields("backing_off") == [{"scope": "*", "seconds": 1.235}]
