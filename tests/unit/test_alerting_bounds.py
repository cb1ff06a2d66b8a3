"""What the alerting subscriber holds, bounded: every value an alert takes from a message cut
(holding.cut), the alerts held bounded in count and bytes per namespace and in all, the
refusals counted, logged and told as an alert that fires and resolves, the status alerts and
the other maps bounded; Alertmanager's bodies bounded both ways (a resend's POSTs, an error's
body, the alerts read back at start one at a time)."""

from __future__ import annotations

import json
import logging
import random
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from aiohttp import web

from k8s_event_common.cloudevents import MAX_ID
from k8s_event_consumer.alerting import alertmanager, holding
from k8s_event_consumer.alerting.alerts import (
    SEQUENCES_KEPT,
    VERSIONS_KEPT,
    Alert,
    AlertName,
    Refusal,
    State,
    Stored,
)
from k8s_event_consumer.alerting.holding import Bounds, Why, cut
from k8s_event_consumer.alerting.running import COUNTERS, METRICS_PREFIX, Alerting
from k8s_event_consumer.metrics import Metrics
from tests.unit.test_alerting import (
    CLUSTER,
    T0,
    Clock,
    client,
    delivery,
    gap,
    kube_event,
    only,
    rules,
    unreachable,
)

HUGE = 900_000
HUGE_ANSWER = b"e" * (8 << 20)  # made before any memory is traced


def utf8(s: str) -> int:
    return len(s.encode())


# ----------------------------------------------------------------------------- cut


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("x" * 5000, 1024),
        ("é" * 5000, 1024),  # 2 bytes a character
        ("語" * 5000, 1024),  # 3
        ("😀" * 5000, 1024),  # 4
        ("a" + "😀" * 400, 100),
        ("x" * 300, 256),
    ],
)
def test_cut_keeps_at_most_limit_bytes_on_a_character_boundary_saying_what_was_left_out(
    text: str, limit: int
) -> None:
    got = cut(text, limit)
    assert utf8(got) <= limit
    head, marker = got.split("...[cut: ")
    assert text.startswith(head)  # whole characters only
    assert marker == f"{utf8(text) - utf8(head)} bytes]"
    assert utf8(head) > limit - 40  # the marker takes what it needs, not more


def test_cut_leaves_what_fits_and_a_distinct_cut_keeps_two_values_two() -> None:
    assert cut("x" * 1024, 1024) == "x" * 1024
    assert cut("語" * 341, 1024) == "語" * 341  # 1,023 bytes
    a, b = cut("x" * 5000 + "a", 256, distinct=True), cut("x" * 5000 + "b", 256, distinct=True)
    assert a != b and utf8(a) <= 256 and utf8(b) <= 256
    assert cut("\ud800" * 2000, 256)  # a lone surrogate (JSON allows one) cuts too


# ----------------------------------------------------------------------------- what an alert keeps


def test_a_huge_message_is_cut_to_message_bytes_and_every_other_value_to_256() -> None:
    state = State(rules(), Clock(T0))
    ev = kube_event(message="m" * HUGE, name="n" * 300, namespace="shop", reason="BackOff")
    a = only(state.event(ev))
    message = a.annotations["message"]
    assert utf8(message) <= 1024
    head = message.split("...[cut: ")[0]
    assert message.endswith(f"...[cut: {HUGE - utf8(head)} bytes]")
    assert utf8(a.labels["name"]) <= holding.VALUE_BYTES
    assert all(utf8(v) <= 2 * 1024 for v in a.annotations.values())
    assert sum(map(utf8, [*a.labels.values(), *a.annotations.values()])) < 4096


def test_a_message_within_the_cap_is_kept_whole_and_the_cap_is_the_rules() -> None:
    state = State(rules(message_bytes=4096), Clock(T0))
    a = only(state.event(kube_event(message="m" * 3000)))
    assert a.annotations["message"] == "m" * 3000


def test_status_events_values_are_cut_too() -> None:
    state = State(rules(), Clock(T0))
    a = only(state.unreachable(unreachable(T0, scope="s" * HUGE, detail="d" * HUGE)))
    assert utf8(a.labels["scope"]) <= holding.VALUE_BYTES
    assert utf8(a.annotations["detail"]) <= 1024
    assert utf8(a.annotations["description"]) <= 1024
    g = only(state.gap(gap(T0, "1" * HUGE, "2", certainty="c" * HUGE)))
    assert max(map(utf8, g.annotations.values())) <= 1024 + 6 * holding.VALUE_BYTES


# ----------------------------------------------------------------------------- the bounds


def bounded(**bounds: Any) -> tuple[State, list[Refusal]]:
    told: list[Refusal] = []
    b = Bounds(**{"alerts": 100, "bytes": 10**9, "namespace_alerts": 3, **bounds})
    return State(rules(bounds=b), Clock(T0), told.append), told


def warning(ns: str, i: int, **kw: Any) -> Any:
    return kube_event(namespace=ns, name=f"web-{i}", uid=f"{ns}-{i}", **kw)


def names(alerts: list[Alert]) -> list[str]:
    return [a.name for a in alerts]


def test_a_namespace_at_its_bound_is_refused_and_told_and_the_others_still_alert() -> None:
    state, told = bounded()
    for i in range(3):
        assert names(state.event(warning("noisy", i))) == [AlertName.EVENT]
    refused = state.event(warning("noisy", 3))
    assert names(refused) == [AlertName.REFUSED]
    assert refused[0].labels["namespace"] == "noisy" and refused[0].labels["cluster"] == CLUSTER
    assert refused[0].annotations["refused"] == "1"
    again = state.event(warning("noisy", 4))
    assert again[0].annotations["refused"] == "2"  # one alert, counting
    assert names(state.event(warning("quiet", 0))) == [AlertName.EVENT]
    assert [r.why for r in told] == [Why.NAMESPACE_ALERTS] * 2
    assert state.held.namespace((CLUSTER, "noisy")).alerts == 3
    # an alert held keeps being updated (its count, its end) at the bound
    bumped = state.event(warning("noisy", 0, rv=101, count=5))
    assert bumped[0].annotations["count"] == "5"


def test_a_namespace_at_its_bytes_bound_is_refused() -> None:
    state, told = bounded(namespace_alerts=100, namespace_bytes=8000)
    n = 0
    while not told:
        state.event(warning("big", n, message="m" * 1000))
        n += 1
    assert told[0].why is Why.NAMESPACE_BYTES
    assert state.held.namespace((CLUSTER, "big")).bytes <= 8000


@pytest.mark.parametrize(
    ("bound", "why"), [({"alerts": 4}, Why.ALERTS), ({"bytes": 6000}, Why.BYTES)]
)
def test_the_total_bound_refuses_into_one_alert_of_every_namespace(
    bound: dict[str, int], why: Why
) -> None:
    state, told = bounded(namespace_alerts=2, **bound)
    out: list[Alert] = []
    for i in range(8):
        out = state.event(warning(f"ns-{i}", 0, message="m" * 700))
    assert told and told[-1].why is why
    refusal = out[-1]
    assert refusal.labels["namespace"] == "*" and refusal.labels["cluster"] == "*"
    assert state.held.events.alerts <= bound.get("alerts", 100)
    assert state.held.events.bytes <= bound.get("bytes", 10**9)


def test_the_refusal_alert_resolves_when_refusals_stop_and_room_comes_back() -> None:
    clock = Clock(T0)
    state = State(rules(bounds=Bounds(namespace_alerts=1)), clock)
    state.event(warning("ns", 0))
    [refusal] = state.event(warning("ns", 1))
    assert refusal.ends_at == T0 + timedelta(minutes=15)  # the refusal + resolve_after
    clock.advance(15 * 60 + 1)
    assert not [a for a in state.firing() if a.name == AlertName.REFUSED]
    clock.advance(15 * 60)  # past resolved_retention: both forgotten, the namespace empty
    assert state.due() == []
    assert state.held.namespace((CLUSTER, "ns")).alerts == 0
    later = warning("ns", 1, first=clock.now, last=clock.now)
    assert names(state.event(later)) == [AlertName.EVENT]


def test_status_alerts_are_bounded_and_their_refusal_only_told() -> None:
    told: list[Refusal] = []
    state = State(rules(bounds=Bounds(status_alerts=2)), Clock(T0), told.append)
    for i in range(3):
        state.unreachable(unreachable(T0, scope=f"ns-{i}"), Stored(i + 1, T0))
    assert state.held.count(holding.Kind.STATUS) == 2
    assert [r.why for r in told] == [Why.STATUS_ALERTS]
    assert state.unreachable(unreachable(T0, scope="ns-9"), Stored(9, T0)) == []


def test_an_alert_remembers_the_newest_event_uids_only_and_the_sequences_are_bounded() -> None:
    state = State(rules(), Clock(T0))
    for i in range(3 * VERSIONS_KEPT):
        # a uid as long as the id allows (an id is refused past cloudevents.MAX_ID)
        state.event(kube_event(uid=f"u{i}" + "x" * (MAX_ID - 64), rv=100 + i))
    [record] = list(state.held.values())
    assert len(record.versions) == VERSIONS_KEPT
    assert all(utf8(uid) <= holding.VALUE_BYTES for uid in record.versions)
    for i in range(SEQUENCES_KEPT):
        state._sequences[i.to_bytes(16)] = i  # as _apply keeps them: the oldest first
    for i in range(3):
        state.unreachable(unreachable(T0, scope="s" * HUGE + str(i)), Stored(10**6 + i, T0))
    assert len(state._sequences) == SEQUENCES_KEPT
    assert (0).to_bytes(16) not in state._sequences and (3).to_bytes(16) in state._sequences
    assert all(len(k) == 16 for k in state._sequences)


def test_the_counts_held_always_add_up() -> None:
    """Whatever comes (updates, new objects, retired labels, resolution and forgetting), what
    Held counts per namespace and in all is what it holds."""
    rng = random.Random(7)
    clock = Clock(T0)
    state = State(
        rules(bounds=Bounds(alerts=40, bytes=60_000, namespace_alerts=8, namespace_bytes=9000)),
        clock,
    )
    for step in range(600):
        ns, i = f"ns-{rng.randrange(8)}", rng.randrange(12)
        when = clock.now
        ev = warning(ns, i, rv=100 + step, count=step + 1, first=when, last=when,
                     message="m" * rng.randrange(1, 1500))  # fmt: skip
        state.event(ev)
        clock.advance(rng.choice([1, 1, 1, 60, 900]))
        if step % 50 == 0:
            state.due()
        held = state.held
        by_ns: dict[tuple[str, str], list[int]] = {}
        for entry in held._entries.values():
            if entry.kind is holding.Kind.EVENT:
                assert entry.where is not None
                use = by_ns.setdefault(entry.where, [0, 0])
                use[0] += 1
                use[1] += entry.cost
        for where, (n, b) in by_ns.items():
            assert held.namespace(where).alerts == n <= 8
            assert held.namespace(where).bytes == b <= 9000
        assert held.events.alerts == sum(n for n, _ in by_ns.values()) <= 40
        assert held.events.bytes == sum(b for _, b in by_ns.values()) <= 60_000
        assert held.namespaces() == len(by_ns)


def test_adopted_alerts_are_cut_to_what_this_version_writes_and_bounded() -> None:
    source = State(rules(), Clock(T0))
    shown = []
    for i in range(5):
        a = only(source.event(warning("ns", i)))
        annotations = {**a.annotations, "message": "m" * HUGE, "extra": "e" * HUGE}
        shown.append(alertmanager.parse(alertmanager.postable(
            Alert(a.labels, annotations, a.starts_at, a.ends_at, a.generator_url), T0,
            timedelta(minutes=4))))  # fmt: skip
    state, told = bounded()
    assert state.adopt(shown) == 3  # the namespace's bound
    assert [r.why for r in told] == [Why.NAMESPACE_ALERTS] * 2
    for a in state.due():
        if a.name == AlertName.REFUSED:
            assert a.annotations["refused"] == "2"
            continue
        assert "extra" not in a.annotations
        assert utf8(a.annotations["message"]) <= 1024 + 6 * holding.VALUE_BYTES


# ----------------------------------------------------------------------------- the subscriber


async def test_refusals_are_counted_and_logged_sampled(caplog: pytest.LogCaptureFixture) -> None:
    alerting = Alerting(
        State(rules(bounds=Bounds(namespace_alerts=1)), Clock(T0)),
        client(["http://127.0.0.1:1"]),
        Metrics(METRICS_PREFIX, COUNTERS),
        hold=1.0,
        resend_interval=60,
    )
    alerting._down_until = float("inf")  # no Alertmanager: the messages are held, still counted
    with caplog.at_level(logging.WARNING, logger="k8s_event_consumer.alerting"):
        for i in range(20):
            try:
                await alerting.on_event(warning("noisy", i), delivery())
            except Exception:
                pass
    await alerting.client.close()
    m = alerting.metrics
    assert m.value("alerts_refused_total", why="namespace_alerts") == 19
    assert m.value("events_total", result="refused") == 19
    assert m.value("events_total", result="alerted") == 1
    lines = [r for r in caplog.records if r.getMessage() == "alert_refused"]
    assert len(lines) == 1  # sampled: once a minute per why
    assert lines[0].fields["namespace"] == "noisy"  # type: ignore[attr-defined]
    text = m.render().decode()
    assert 'k8s_event_alerting_alerts_refused_total{why="bytes"} 0.0' in text  # from 0 on
    assert "k8s_event_alerting_alert_bytes " in text


# ----------------------------------------------------------------------------- Alertmanager

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def streamed(request: web.Request, body: bytes, status: int = 200) -> web.StreamResponse:
    """``body`` written as a peer sends it: a chunk at a time, each once the last is taken
    (the stand-in, in this process, holds no copy of it: what is measured is the client)."""
    response = web.StreamResponse(status=status)
    response.content_length = len(body)
    await response.prepare(request)
    view = memoryview(body)
    try:
        for i in range(0, len(body), 16384):
            await response.write(view[i : i + 16384])
    except ConnectionError:
        pass  # the client read what it wanted and left
    return response


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """An in-process Alertmanager stand-in answering ``post`` and ``get``: its URL."""
    runners: list[web.AppRunner] = []

    async def start(post: Handler | None = None, get: Handler | None = None) -> str:
        app = web.Application(client_max_size=64 << 20)
        if post is not None:
            app.router.add_post("/api/v2/alerts", post)
        if get is not None:
            app.router.add_get("/api/v2/alerts", get)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for r in runners:
        await r.cleanup()


def many(n: int, message: str = "m") -> list[Alert]:
    state = State(rules(bounds=Bounds(namespace_alerts=n)), Clock(T0))
    return [only(state.event(warning("ns", i, message=message))) for i in range(n)]


def test_bodies_are_bounded_in_alerts_and_bytes_and_carry_every_alert_once() -> None:
    alerts = many(600, "m" * 1000)
    got = list(alertmanager.bodies(alerts, T0, timedelta(minutes=4), 256, 100_000))
    assert all(len(b) <= 100_000 for b in got)
    posted = [a for b in got for a in json.loads(b)]
    assert len(posted) == 600 and max(len(json.loads(b)) for b in got) <= 256
    assert [a["labels"]["name"] for a in posted] == [a.labels["name"] for a in alerts]
    [alone] = list(alertmanager.bodies(alerts[:1], T0, timedelta(minutes=4), 256, 10))
    assert len(json.loads(alone)) == 1  # one alert larger than the bound goes alone


async def test_a_send_posts_bodies_bounded_in_bytes(serve: Any) -> None:
    posts: list[bytes] = []

    async def post(request: web.Request) -> web.Response:
        posts.append(await request.read())
        return web.Response()

    url = await serve(post=post)
    c = client([url])
    try:
        outcome = await c.send(many(800, "m" * 1000))
    finally:
        await c.close()
    assert outcome.delivered == [url]
    assert len(posts) >= 4 and sum(len(json.loads(p)) for p in posts) == 800
    assert all(len(p) <= alertmanager.MAX_POST_BYTES for p in posts)


async def test_an_error_answer_is_read_no_further_than_its_head(serve: Any) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        return await streamed(request, HUGE_ANSWER, status=400)

    url = await serve(post=huge, get=huge)
    c = client([url])
    alerts = many(1)
    tracemalloc.start()
    try:
        outcome = await c.send(alerts)
        with pytest.raises(alertmanager.Rejected) as got:
            [a async for a in c.alerts(url)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await c.close()
    assert len(str(outcome.failed[url])) < 400
    assert len(str(got.value)) < 400
    assert peak < 2 << 20, peak  # not the 8 MiB answer (twice: bytes and text)


async def test_the_alerts_read_back_come_one_at_a_time_and_an_item_too_large_stops(
    serve: Any,
) -> None:
    alerts = many(300, "m" * 500)
    shown = [alertmanager.postable(a, T0, timedelta(minutes=4)) for a in alerts]
    bodies = {
        "list": json.dumps(shown, indent=1).encode(),
        "large": json.dumps([shown[0], {"labels": {"x": "y" * (1 << 20)}}, shown[1]]).encode(),
        "none": b'{"not": "a list"}',
    }

    async def get(request: web.Request) -> web.StreamResponse:
        return await streamed(request, bodies[request.headers["X-Body"]])

    url = await serve(get=get)
    results: dict[str, Any] = {}
    for name in bodies:
        c = alertmanager.Client([url], auth=_Header(name))
        got: list[Alert] = []
        try:
            async for a in c.alerts(url):
                got.append(a)
        except alertmanager.Rejected as exc:
            results[name] = (len(got), str(exc))
        else:
            results[name] = (len(got), None)
        finally:
            await c.close()
    assert results["list"] == (300, None)
    # a long list is never whole in memory: one alert and a chunk at a time
    bodies["long"] = b"[" + b",".join([json.dumps(shown[0]).encode()] * 6000) + b"]"
    c = alertmanager.Client([url], auth=_Header("long"))
    tracemalloc.start()
    try:
        n = 0
        async for _ in c.alerts(url):
            n += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await c.close()
    assert n == 6000 and len(bodies["long"]) > 5 << 20
    assert peak < 2 << 20, peak
    assert results["large"][0] == 1 and "over" in results["large"][1]
    assert results["none"][0] == 0 and "no JSON array" in results["none"][1]


class _Header(alertmanager.Auth):
    """An ``Auth`` that names the body the stand-in answers with."""

    def __init__(self, name: str) -> None:
        super().__init__()
        object.__setattr__(self, "name", name)

    def headers(self) -> dict[str, str]:
        return {"X-Body": self.name}  # type: ignore[attr-defined]
