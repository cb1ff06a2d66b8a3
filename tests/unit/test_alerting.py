"""The alerting subscriber's pure parts: the state machine (Events and status events as the
bridge's converter writes them → alerts) on an injected clock, the Alertmanager client against
an in-process stand-in, the handlers' hold when no Alertmanager takes an alert, the settings
and the command line."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bridge.core.converting import Converter
from k8s_event_consumer.alerting import alertmanager, settings
from k8s_event_consumer.alerting.__main__ import main
from k8s_event_consumer.alerting.alerts import Alert, Rules, State, rfc3339
from k8s_event_consumer.alerting.running import COUNTERS, METRICS_PREFIX, Alerting
from k8s_event_consumer.consuming import Delivery, Retry
from k8s_event_consumer.events import (
    ApiserverReachable,
    ApiserverUnreachable,
    Gap,
    KubeEvent,
    decode,
)
from k8s_event_consumer.metrics import Metrics
from tests import support

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CLUSTER = "prod-eu-1"
GEN = "nats://K8S_EVENTS/alerting"


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def rules(**kw: Any) -> Rules:
    base: dict[str, Any] = {
        "reasons": frozenset({"BackOff", "OOMKilling", "FailedScheduling"}),
        "resolve_after": timedelta(minutes=15),
        "gap_alert_for": timedelta(hours=1),
        "resolved_retention": timedelta(minutes=15),
        "labels": {},
        "generator_url": GEN,
    }
    return Rules(**{**base, **kw})


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def event_obj(
    *,
    uid: str = "u-1",
    rv: int = 100,
    namespace: str = "shop",
    kind: str = "Pod",
    name: str = "web-1",
    reason: str = "BackOff",
    type_: str = "Warning",
    count: int = 1,
    first: datetime = T0,
    last: datetime = T0,
    message: str = "Back-off restarting failed container",
) -> dict[str, Any]:
    """A core/v1 Event as the API returns it."""
    return support.event(
        f"{name}.{uid}",
        rv,
        namespace=namespace,
        uid=uid,
        reason=reason,
        type=type_,
        kind=kind,
        involved_object={
            "apiVersion": "v1",
            **({"namespace": namespace} if kind != "Node" else {}),
        },
        count=count,
        first=first,
        last=last,
        created=first,
        message=message,
        source={"component": "kubelet", "host": "node-1"},
    )


def kube_event(mode: str = "structured", **kw: Any) -> KubeEvent:
    """An Event through the bridge's converter and the kit's decoder: what the subscriber
    gets."""
    msg = Converter(CLUSTER, "k8s.events", mode).convert(event_obj(**kw))  # type: ignore[arg-type]
    ev = decode(msg.subject, msg.headers, msg.payload).event
    assert ev is not None
    return ev


def series_event(*, uid: str, rv: int, count: int | None, last: datetime) -> KubeEvent:
    """An events.k8s.io-style Event (eventTime, a series once repeated)."""
    obj = event_obj(uid=uid, rv=rv, reason="FailedScheduling", name="api-0")
    obj.update(count=None, firstTimestamp=None, lastTimestamp=None, eventTime=_ts(T0))
    if count is not None:
        obj["series"] = {"count": count, "lastObservedTime": _ts(last)}
    msg = Converter(CLUSTER, "k8s.events", "structured").convert(obj)
    ev = decode(msg.subject, msg.headers, msg.payload).event
    assert ev is not None
    return ev


def status(what: str, data: dict[str, Any], at: datetime = T0) -> Any:
    msg = Converter(CLUSTER, "k8s.events", "structured").status(
        what, f"{what}/{rfc3339(at)}", data, rfc3339(at)
    )
    s = decode(msg.subject, msg.headers, msg.payload).status
    assert s is not None
    return s


def unreachable(at: datetime, scope: str = "all", detail: str = "connection refused") -> Any:
    s = status("apiserver_unreachable", {"scope": scope, "detail": detail, "at": rfc3339(at)}, at)
    assert isinstance(s, ApiserverUnreachable)
    return s


def reachable(at: datetime, scope: str = "all") -> Any:
    s = status("apiserver_reachable", {"scope": scope, "detail": "ok", "at": rfc3339(at)}, at)
    assert isinstance(s, ApiserverReachable)
    return s


def gap(detected: datetime, from_rv: str, to_rv: str, certainty: str = "likely") -> Any:
    s = status(
        "gap",
        {
            "scope": "all",
            "fromResourceVersion": from_rv,
            "toResourceVersion": to_rv,
            "detectedAt": rfc3339(detected),
            "certainty": certainty,
            "why": "410 Expired",
        },
        detected,
    )
    assert isinstance(s, Gap)
    return s


def only(alerts: list[Alert]) -> Alert:
    assert len(alerts) == 1, alerts
    return alerts[0]


# ----------------------------------------------------------------------------- Event alerts


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_a_warning_event_of_a_kept_reason_is_one_alert_with_exact_labels(mode: str) -> None:
    state = State(rules(), Clock(T0))
    a = only(state.event(kube_event(mode, count=3, first=T0 - timedelta(minutes=5))))
    assert a.labels == {
        "alertname": "KubernetesWarningEvent",
        "cluster": CLUSTER,
        "namespace": "shop",
        "kind": "Pod",
        "name": "web-1",
        "reason": "BackOff",
    }
    assert a.annotations == {
        "summary": f"BackOff: Pod shop/web-1 in cluster {CLUSTER}, seen 3 times",
        "message": "Back-off restarting failed container",
        "count": "3",
        "first_seen": "2026-11-30T11:55:00Z",
        "last_seen": "2026-11-30T12:00:00Z",
    }
    assert a.starts_at == T0 - timedelta(minutes=5)
    assert a.ends_at == T0 + timedelta(minutes=15)
    assert a.generator_url == GEN


def test_a_repeated_event_updates_one_alert_with_the_newest_count_and_end() -> None:
    clock = Clock()
    state = State(rules(), clock)
    for i, count in enumerate((1, 2, 5)):
        clock.now = T0 + timedelta(minutes=i)
        state.event(kube_event(rv=100 + i, count=count, last=clock.now))
    assert len(state.firing()) == 1
    a = state.firing()[0]
    assert a.annotations["count"] == "5"
    assert a.starts_at == T0
    assert a.ends_at == T0 + timedelta(minutes=2 + 15)
    assert a.annotations["last_seen"] == "2026-11-30T12:02:00Z"


def test_a_series_of_the_events_api_updates_one_alert_too() -> None:
    state = State(rules(), Clock())
    state.event(series_event(uid="s-1", rv=10, count=None, last=T0))
    for i, count in enumerate((2, 3, 4), start=1):
        state.event(series_event(uid="s-1", rv=10 + i, count=count, last=T0 + timedelta(i)))
    a = only(state.firing())
    assert a.annotations["count"] == "4"
    assert a.ends_at == T0 + timedelta(days=3, minutes=15)


def test_a_new_event_object_for_the_same_object_and_reason_updates_the_same_alert() -> None:
    state = State(rules(), Clock())
    state.event(kube_event(uid="old", rv=100, count=7, first=T0 - timedelta(hours=1)))
    # the first Event expired (TTL); the kubelet records a new one for the same container
    state.event(kube_event(uid="new", rv=300, count=1, first=T0 + timedelta(minutes=3),
                           last=T0 + timedelta(minutes=3)))  # fmt: skip
    a = only(state.firing())
    assert a.annotations["count"] == "1"  # the newest Event's count
    assert a.starts_at == T0 - timedelta(hours=1)  # first seen of any
    assert a.ends_at == T0 + timedelta(minutes=18)


def test_a_redelivered_or_older_version_changes_nothing_and_answers_the_alert_as_it_is() -> None:
    state = State(rules(), Clock())
    state.event(kube_event(rv=100, count=1))
    newest = only(state.event(kube_event(rv=105, count=4, last=T0 + timedelta(minutes=1))))
    assert only(state.event(kube_event(rv=105, count=4, last=T0 + timedelta(minutes=1)))) == newest
    assert only(state.event(kube_event(rv=100, count=1))) == newest
    assert only(state.firing()).annotations["count"] == "4"


def test_different_objects_and_reasons_are_different_alerts() -> None:
    state = State(rules(), Clock())
    state.event(kube_event(uid="a", name="web-1"))
    state.event(kube_event(uid="b", name="web-2"))
    state.event(kube_event(uid="c", name="web-1", reason="FailedScheduling"))
    state.event(kube_event(uid="d", name="web-1", namespace="other"))
    state.event(kube_event(uid="e", kind="Node", name="node-1", namespace="default",
                           reason="OOMKilling"))  # fmt: skip
    keys = sorted(
        (a.labels["namespace"], a.labels["kind"], a.labels["name"], a.labels["reason"])
        for a in state.firing()
    )
    assert keys == [
        ("default", "Node", "node-1", "OOMKilling"),
        ("other", "Pod", "web-1", "BackOff"),
        ("shop", "Pod", "web-1", "BackOff"),
        ("shop", "Pod", "web-1", "FailedScheduling"),
        ("shop", "Pod", "web-2", "BackOff"),
    ]


def test_an_event_left_quiet_for_resolve_after_resolves_and_is_forgotten_after_retention() -> None:
    clock = Clock()
    state = State(rules(), clock)
    a = only(state.event(kube_event()))
    clock.advance(15 * 60 - 1)
    assert state.firing() == [a]
    clock.advance(1)
    assert state.firing() == []
    assert a.resolved(clock.now)
    assert state.due() == [a]  # still sent for resolved_retention
    clock.advance(15 * 60 + 1)
    assert state.due() == []


def test_an_event_seen_again_after_it_resolved_fires_again() -> None:
    clock = Clock()
    state = State(rules(), clock)
    state.event(kube_event(rv=100))
    clock.advance(20 * 60)
    assert state.firing() == []
    again = only(state.event(kube_event(rv=200, count=2, last=clock.now)))
    assert state.firing() == [again]
    assert again.ends_at == clock.now + timedelta(minutes=15)


@pytest.mark.parametrize(
    ("reasons", "reason", "type_", "alerts"),
    [
        (frozenset({"BackOff"}), "BackOff", "Warning", 1),
        (frozenset({"BackOff"}), "FailedMount", "Warning", 0),  # a reason not listed
        (frozenset({"BackOff"}), "BackOff", "Normal", 0),  # Normal never alerts
        (frozenset(), "FailedMount", "Warning", 1),  # []: every Warning Event
        (frozenset(), "Pulled", "Normal", 0),
        (frozenset({"backoff"}), "BackOff", "Warning", 0),  # exact, case-sensitive
    ],
)
def test_only_warning_events_of_the_chosen_reasons_alert(
    reasons: frozenset[str], reason: str, type_: str, alerts: int
) -> None:
    state = State(rules(reasons=reasons), Clock())
    assert len(state.event(kube_event(reason=reason, type_=type_))) == alerts
    assert len(state.firing()) == alerts


def test_static_labels_go_on_every_alert() -> None:
    state = State(rules(labels={"severity": "warning", "team": "sre"}), Clock())
    state.event(kube_event())
    state.unreachable(unreachable(T0))
    state.gap(gap(T0, "10", "20"))
    assert len(state.firing()) == 3
    for a in state.firing():
        assert a.labels["severity"] == "warning"
        assert a.labels["team"] == "sre"


# ----------------------------------------------------------------------------- status alerts


def test_unreachable_fires_until_reachable_resolves_it() -> None:
    clock = Clock()
    state = State(rules(), clock)
    a = only(state.unreachable(unreachable(T0)))
    assert a.labels == {
        "alertname": "KubernetesControlPlaneUnreachable",
        "cluster": CLUSTER,
        "scope": "all",
    }
    assert a.annotations["summary"] == f"control plane unreachable for cluster {CLUSTER}"
    assert a.ends_at is None and a.starts_at == T0
    clock.advance(3600)
    assert state.firing() == [a]  # no end of its own, however long
    clock.advance(1)
    back = only(state.reachable(reachable(clock.now - timedelta(seconds=1))))
    assert back.labels == a.labels
    assert back.starts_at == T0
    assert back.ends_at == clock.now - timedelta(seconds=1)
    assert state.firing() == []


def test_unreachable_again_while_firing_keeps_its_start() -> None:
    state = State(rules(), Clock(T0 + timedelta(minutes=5)))
    state.unreachable(unreachable(T0))
    a = only(state.unreachable(unreachable(T0 + timedelta(minutes=2), detail="timeout")))
    assert a.starts_at == T0
    assert a.annotations["detail"] == "timeout"


def test_a_stale_unreachable_delivered_after_reachable_does_not_fire_again() -> None:
    state = State(rules(), Clock(T0 + timedelta(minutes=5)))
    state.unreachable(unreachable(T0))
    state.reachable(reachable(T0 + timedelta(minutes=1)))
    # the unreachable was held (Alertmanager away) and JetStream delivers it again late
    again = only(state.unreachable(unreachable(T0)))
    assert again.ends_at == T0 + timedelta(minutes=1)
    assert state.firing() == []
    # a new outage after that does fire
    state.unreachable(unreachable(T0 + timedelta(minutes=2)))
    assert only(state.firing()).starts_at == T0 + timedelta(minutes=2)


def test_reachable_never_seen_unreachable_still_sends_a_resolved_alert() -> None:
    state = State(rules(), Clock(T0))
    a = only(state.reachable(reachable(T0)))
    assert a.resolved(T0)
    assert a.labels["alertname"] == "KubernetesControlPlaneUnreachable"


def test_scopes_and_clusters_are_separate_unreachable_alerts() -> None:
    state = State(rules(), Clock(T0))
    state.unreachable(unreachable(T0, scope="shop"))
    state.unreachable(unreachable(T0, scope="payments"))
    state.reachable(reachable(T0 + timedelta(seconds=1), scope="shop"))
    assert [a.labels["scope"] for a in state.firing()] == ["payments"]


def test_a_gap_raises_its_own_alert_for_gap_alert_for() -> None:
    clock = Clock(T0)
    state = State(rules(), clock)
    a = only(state.gap(gap(T0, "100", "250", "possible")))
    assert a.labels == {"alertname": "KubernetesEventsGap", "cluster": CLUSTER, "scope": "all"}
    assert a.annotations["from_resource_version"] == "100"
    assert a.annotations["to_resource_version"] == "250"
    assert a.annotations["certainty"] == "possible"
    assert a.annotations["why"] == "410 Expired"
    assert a.starts_at == T0 and a.ends_at == T0 + timedelta(hours=1)
    clock.advance(3600)
    assert state.firing() == []


def test_a_second_gap_while_the_first_fires_widens_one_alert() -> None:
    clock = Clock(T0)
    state = State(rules(), clock)
    state.gap(gap(T0, "100", "250", "possible"))
    clock.advance(600)
    a = only(state.gap(gap(clock.now, "900", "1200", "likely")))
    assert only(state.firing()) == a
    assert (a.annotations["from_resource_version"], a.annotations["to_resource_version"]) == (
        "100",
        "1200",
    )
    assert a.annotations["certainty"] == "likely"
    assert a.starts_at == T0 and a.ends_at == clock.now + timedelta(hours=1)
    # the same gap delivered again changes nothing
    assert only(state.gap(gap(clock.now, "900", "1200", "likely"))) == a


# ----------------------------------------------------------------------------- a restart


def _as_alertmanager_shows(a: Alert, now: datetime) -> Alert:
    """An alert sent, then read back with GET /api/v2/alerts (milliseconds, horizon)."""
    sent = alertmanager.postable(a, now, timedelta(minutes=4))
    return alertmanager.parse(sent)


def test_adopt_takes_back_firing_alerts_of_this_subscriber_only() -> None:
    before = State(rules(labels={"team": "sre"}), Clock(T0))
    before.event(kube_event(count=4))
    before.unreachable(unreachable(T0))
    before.gap(gap(T0, "1", "2"))
    shown = [_as_alertmanager_shows(a, T0) for a in before.firing()]
    ours = next(a for a in shown if a.name == "KubernetesWarningEvent")
    # the same shape from someone else (another subscriber, a Prometheus rule): not ours
    foreign = replace(
        ours, labels={**ours.labels, "name": "web-9"}, generator_url="http://prom:9090/graph"
    )
    after = State(rules(labels={"team": "sre"}), Clock(T0 + timedelta(minutes=1)))
    assert after.adopt([*shown, foreign]) == 3
    by_name = {a.name: a for a in after.firing()}
    assert by_name["KubernetesControlPlaneUnreachable"].ends_at is None  # open again
    assert by_name["KubernetesWarningEvent"].annotations["count"] == "4"
    # a newer version of the Event updates the adopted alert, the reachable resolves its
    after.event(kube_event(rv=101, count=5, last=T0 + timedelta(minutes=1)))
    after.reachable(reachable(T0 + timedelta(minutes=1)))
    names = sorted(a.name for a in after.firing())
    assert names == ["KubernetesEventsGap", "KubernetesWarningEvent"]
    assert len(after.due()) == 3
    ev = next(a for a in after.firing() if a.name == "KubernetesWarningEvent")
    assert ev.annotations["count"] == "5"


def test_adopt_skips_alerts_not_in_this_versions_shape() -> None:
    broken = Alert(
        {"alertname": "KubernetesWarningEvent", "cluster": "c"}, {"count": "1"}, T0, T0, GEN
    )
    state = State(rules(), Clock(T0))
    assert state.adopt([broken]) == 0
    assert state.due() == []


# ----------------------------------------------------------------------------- the wire


def test_postable_gives_an_open_alert_a_horizon_and_keeps_a_fixed_end() -> None:
    state = State(rules(), Clock(T0))
    open_ = only(state.unreachable(unreachable(T0)))
    fixed = only(state.event(kube_event()))
    now = T0 + timedelta(minutes=30)
    assert alertmanager.postable(open_, now, timedelta(minutes=4))["endsAt"] == (
        "2026-11-30T12:34:00Z"
    )
    body = alertmanager.postable(fixed, now, timedelta(minutes=4))
    assert body == {
        "labels": dict(fixed.labels),
        "annotations": dict(fixed.annotations),
        "startsAt": "2026-11-30T12:00:00Z",
        "endsAt": "2026-11-30T12:15:00Z",
        "generatorURL": GEN,
    }


@dataclass
class FakeAlertmanager:
    """``/api/v2/alerts`` in process: answers from ``statuses`` (then 200), records posts."""

    statuses: list[int] = field(default_factory=list)
    posts: list[tuple[dict[str, str], list[dict[str, Any]]]] = field(default_factory=list)
    shown: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def post(self, request: web.Request) -> web.Response:
        self.posts.append((dict(request.headers), await request.json()))
        code = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=code, text="" if code == 200 else f"status {code}")

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self.shown)


@pytest.fixture
async def fake_am() -> AsyncIterator[Callable[[], Any]]:
    runners: list[web.AppRunner] = []

    async def start() -> FakeAlertmanager:
        fake = FakeAlertmanager()
        app = web.Application()
        app.router.add_post("/api/v2/alerts", fake.post)
        app.router.add_get("/api/v2/alerts", fake.get)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        return fake

    yield start
    for r in runners:
        await r.cleanup()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def client(urls: list[str], **kw: Any) -> alertmanager.Client:
    return alertmanager.Client(urls, timeout=2, attempts=3, sleep=no_sleep, **kw)


def an_alert() -> Alert:
    return only(State(rules(), Clock(T0)).event(kube_event()))


async def test_a_send_reaches_every_alertmanager(fake_am: Any) -> None:
    a, b = await fake_am(), await fake_am()
    c = client([a.url, b.url])
    try:
        outcome = await c.send([an_alert()])
    finally:
        await c.close()
    assert outcome.delivered == [a.url, b.url] and not outcome.failed
    assert [p[1][0]["labels"]["reason"] for p in a.posts + b.posts] == ["BackOff", "BackOff"]


async def test_503_and_429_are_retried_then_delivered(fake_am: Any) -> None:
    am = await fake_am()
    am.statuses = [503, 429]
    c = client([am.url])
    try:
        outcome = await c.send([an_alert()])
    finally:
        await c.close()
    assert outcome.delivered == [am.url]
    assert len(am.posts) == 3


async def test_no_alertmanager_taking_the_alerts_raises_not_delivered(fake_am: Any) -> None:
    am = await fake_am()
    am.statuses = [500, 500, 500]
    down = closed_port_url()
    c = client([am.url, down])
    try:
        with pytest.raises(alertmanager.NotDelivered) as info:
            await c.send([an_alert()])
    finally:
        await c.close()
    assert set(info.value.failures) == {am.url, down}
    assert all(isinstance(e, alertmanager.Unavailable) for e in info.value.failures.values())
    assert "HTTP 500" in str(info.value)
    assert len(am.posts) == 3


async def test_one_alertmanager_down_is_not_a_failure_when_another_took_the_alerts(
    fake_am: Any,
) -> None:
    am = await fake_am()
    down = closed_port_url()
    c = client([down, am.url])
    try:
        outcome = await c.send([an_alert()])
    finally:
        await c.close()
    assert outcome.delivered == [am.url]
    assert isinstance(outcome.failed[down], alertmanager.Unavailable)


async def test_a_400_is_rejected_at_once_and_not_raised(fake_am: Any) -> None:
    am = await fake_am()
    am.statuses = [400]
    c = client([am.url])
    try:
        outcome = await c.send([an_alert()])
    finally:
        await c.close()
    assert list(outcome.rejected) == [am.url]
    assert len(am.posts) == 1


async def test_a_timeout_is_unavailable() -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response()

    app = web.Application()
    app.router.add_post("/api/v2/alerts", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    c = alertmanager.Client([url], timeout=0.2, attempts=1)
    try:
        with pytest.raises(alertmanager.NotDelivered) as info:
            await c.send([an_alert()])
    finally:
        release.set()
        await c.close()
        await runner.cleanup()
    assert isinstance(info.value.failures[url], alertmanager.Unavailable)
    assert "TimeoutError" in str(info.value)


@pytest.mark.parametrize(
    ("auth", "header"),
    [
        (alertmanager.Auth(user="am", password="pw"), "Basic YW06cHc="),
        (alertmanager.Auth(bearer_token="t0k"), "Bearer t0k"),
        (alertmanager.Auth(), None),
    ],
)
async def test_auth_headers(fake_am: Any, auth: alertmanager.Auth, header: str | None) -> None:
    am = await fake_am()
    c = client([am.url], auth=auth)
    try:
        await c.send([an_alert()])
    finally:
        await c.close()
    assert am.posts[0][0].get("Authorization") == header


async def test_a_rotated_bearer_token_file_is_read_on_each_request(
    fake_am: Any, tmp_path: Any
) -> None:
    am = await fake_am()
    token = tmp_path / "token"
    token.write_text("one\n")
    c = client([am.url], auth=alertmanager.Auth(bearer_token_file=str(token)))
    try:
        await c.send([an_alert()])
        token.write_text("two\n")
        await c.send([an_alert()])
    finally:
        await c.close()
    assert [p[0]["Authorization"] for p in am.posts] == ["Bearer one", "Bearer two"]


async def test_alerts_are_read_back_for_adoption(fake_am: Any) -> None:
    am = await fake_am()
    sent = alertmanager.postable(an_alert(), T0, timedelta(minutes=4))
    am.shown = [{**sent, "fingerprint": "x", "status": {"state": "active"}, "receivers": []}]
    c = client([am.url])
    try:
        got = [a async for a in c.alerts(am.url)]
    finally:
        await c.close()
    assert got == [alertmanager.parse(sent)]
    assert got[0].labels["reason"] == "BackOff"


# ----------------------------------------------------------------------------- the handlers


def delivery(n: int = 1) -> Delivery:
    msg = Converter(CLUSTER, "k8s.events", "structured").convert(event_obj())
    return Delivery(decode(msg.subject, msg.headers, msg.payload), 1, n, None)


async def test_an_alert_no_alertmanager_takes_holds_its_message_and_the_next_at_once() -> None:
    c = client([closed_port_url()])
    alerting = Alerting(
        State(rules(), Clock(T0)),
        c,
        Metrics(METRICS_PREFIX, COUNTERS),
        hold=7.0,
        resend_interval=60,
    )
    try:
        with pytest.raises(Retry) as first:
            await alerting.on_event(kube_event(), delivery())
        assert first.value.delay == 7.0
        with pytest.raises(Retry):  # no new attempts while it is known to be down
            await alerting.on_event(kube_event(uid="other", name="web-9"), delivery())
    finally:
        await c.close()
    assert alerting.metrics.value("held_total") == 2
    assert alerting.metrics.value("sends_total", alertmanager=c.urls[0], result="unavailable") == 1
    # the state has both: the resend loop sends them once an Alertmanager is back
    assert len(alerting.state.due()) == 2


async def test_an_ignored_event_sends_nothing(fake_am: Any) -> None:
    am = await fake_am()
    c = client([am.url])
    alerting = Alerting(
        State(rules(), Clock(T0)),
        c,
        Metrics(METRICS_PREFIX, COUNTERS),
        hold=1.0,
        resend_interval=60,
    )
    try:
        await alerting.on_event(kube_event(type_="Normal", reason="Pulled"), delivery())
        await alerting.on_event(kube_event(uid="x", reason="BackOff"), delivery())
        await alerting.resend()
    finally:
        await c.close()
    assert len(am.posts) == 2  # the BackOff alert, then the resend of it
    assert alerting.metrics.value("events_total", result="ignored") == 1
    assert b"k8s_event_alerting_alerts{alertname=" in alerting.metrics.render()


@pytest.mark.parametrize(
    ("handler", "message", "alertname", "resolved"),
    [
        ("on_event", lambda: kube_event(), "KubernetesWarningEvent", False),
        ("on_gap", lambda: gap(T0, "1", "2"), "KubernetesEventsGap", False),
        (
            "on_apiserver_unreachable",
            lambda: unreachable(T0),
            "KubernetesControlPlaneUnreachable",
            False,
        ),
        (
            "on_apiserver_reachable",
            lambda: reachable(T0),
            "KubernetesControlPlaneUnreachable",
            True,
        ),
    ],
)
async def test_each_handler_sends_its_alert_at_once(
    fake_am: Any, handler: str, message: Callable[[], Any], alertname: str, resolved: bool
) -> None:
    am = await fake_am()
    c = client([am.url])
    clock = Clock(T0 + timedelta(seconds=1))
    alerting = Alerting(
        State(rules(), clock), c, Metrics(METRICS_PREFIX, COUNTERS), hold=1.0, resend_interval=60
    )
    try:
        await getattr(alerting.handlers(), handler)(message(), delivery())
    finally:
        await c.close()
    [(_, [sent])] = am.posts
    assert sent["labels"]["alertname"] == alertname
    ends = datetime.fromisoformat(sent["endsAt"].replace("Z", "+00:00"))
    assert (ends <= clock.now) is resolved


# ----------------------------------------------------------------------------- settings, CLI


def test_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text("alertmanager: {urls: ['http://am:9093/']}\nalerts: {resolve_after: 5m}\n")
    monkeypatch.setenv("ALERTING_ALERTS__REASONS", '["OOMKilling"]')
    cfg = settings.load(str(f))
    assert cfg.alertmanager.urls == ["http://am:9093"]
    assert cfg.alerts.resolve_after == 300.0
    assert cfg.alerts.reasons == ["OOMKilling"]
    assert cfg.nats.stream == "K8S_EVENTS" and cfg.nats.subjects == ["k8s.events.>"]
    assert cfg.generator_url == "nats://K8S_EVENTS/k8s-event-alerting"
    assert "BackOff" in settings.AlertsSettings().reasons


@pytest.mark.parametrize(
    ("yaml_text", "env", "names"),
    [
        ("alerts: {resolve_aftr: 5m}\n", {}, "alerts.resolve_aftr: unknown key"),
        ("alerts: {resolve_after: soon}\n", {}, "alerts.resolve_after"),
        ("alertmanager: {urls: []}\n", {}, "alertmanager.urls"),
        ("alertmanager: {urls: ['am:9093']}\n", {}, "alertmanager.urls"),
        ("alerts: {labels: {cluster: x}}\n", {}, "alerts.labels"),
        ("nats: {servers: ['http://x']}\n", {}, "nats.servers"),
        ("", {"ALERTING_ALERTMANGER__URLS": "[]"}, "ALERTING_ALERTMANGER__URLS"),
        ("", {"ALERTING_ALERTS__REASONS": "BackOff"}, 'field "alerts" from source'),
        ("alerts: {message_bytes: 10}\n", {}, "alerts.message_bytes"),
        ("alerts: {max_alerts: 10}\n", {}, "max_alerts_per_namespace (500) is above max_alerts"),
        ("alerts: {message_bytes: 4096, max_bytes_per_namespace: 16384}\n", {}, "fewer than four"),
        ("nats: {max_batch_bytes: 1000}\n", {}, "nats.max_batch_bytes"),
    ],
)
def test_a_config_error_prints_one_line_naming_the_key_and_exits_2(
    yaml_text: str,
    env: dict[str, str],
    names: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text(yaml_text)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["check-config", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("k8s-event-alerting: invalid configuration")
    assert names.lower() in err.lower()


def test_a_missing_config_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", "/nonexistent/alerting.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_check_config_prints_the_effective_config_without_secrets(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text("alertmanager: {user: am, password: hunter2}\nnats: {token: s3cret}\n")
    assert main(["check-config", "--config", str(f)]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "s3cret" not in out
    assert "password: '***'" in out and "resolve_after: 900.0" in out


def test_the_deployments_config_is_valid_and_its_command_runs_the_subscriber(
    tmp_path: Path,
) -> None:
    import yaml

    root = Path(__file__).resolve().parents[2]
    docs = {d["kind"]: d for d in yaml.safe_load_all(
        (root / "deploy/consumers/alerting.yaml").read_text()
    )}  # fmt: skip
    config_map, deployment = docs["ConfigMap"], docs["StatefulSet"]
    f = tmp_path / "alerting.yaml"
    f.write_text(config_map["data"]["alerting.yaml"])
    cfg = settings.load(str(f))
    assert cfg.alerts.labels == {"severity": "warning"}
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == [
        "python",
        "-m",
        "k8s_event_consumer.alerting",
        "--config",
        "/etc/k8s-event-alerting/alerting.yaml",
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert deployment["spec"]["replicas"] == 2  # test_alerting_deploy.py: the HA pair


@pytest.mark.parametrize("rv", ["²", "1" * 5_000, "-1", " 1", "١٢"])
def test_a_resource_version_no_int_holds_is_no_number_not_an_error(rv: str) -> None:
    """``str.isdigit`` takes "²" and Arabic-Indic digits, and ``int`` refuses a string of over
    4,300 digits: each once raised on every delivery, and 1,000 such Events filled the
    durable's max_ack_pending (a stalled subscriber). A resourceVersion is ASCII digits."""
    from k8s_event_consumer.alerting import alerts

    assert alerts._rv(rv) is None
    assert alerts._rv("12") == 12
    assert alerts._rv_max("12", rv) in ("12", rv)
