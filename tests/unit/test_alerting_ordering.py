"""The alerting subscriber orders by the stream, not by the message: a scope's status events
apply in the order JetStream stored them, a time ahead of the stream's timestamp is taken as
the stream's, a future-dated ``apiserver_reachable`` resolves nothing, and what the metrics'
labels take from a message is bounded. Messages are written by the bridge's own converter, as a
forger with publish rights would write them (the documented CloudEvent form); the state runs on
an injected clock."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.core.converting import Converter
from k8s_event_consumer.alerting import alertmanager
from k8s_event_consumer.alerting.alerts import Alert, Rules, State, Stored, rfc3339
from k8s_event_consumer.alerting.holding import Why
from k8s_event_consumer.alerting.running import COUNTERS, METRICS_PREFIX, Alerting
from k8s_event_consumer.consuming import Delivery
from k8s_event_consumer.events import Decoded, decode
from k8s_event_consumer.metrics import Metrics
from tests import support

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
FORGED = datetime(2099, 1, 1, tzinfo=UTC)
CLUSTER = "prod-eu-1"
GEN = "nats://K8S_EVENTS/k8s-event-alerting"


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def rules(**kw: Any) -> Rules:
    base: dict[str, Any] = {
        "reasons": frozenset({"BackOff"}),
        "generator_url": GEN,
        "max_clock_skew": timedelta(seconds=30),
    }
    return Rules(**{**base, **kw})


def message(what: str, data: dict[str, Any], time: datetime, n: int = 0) -> Decoded:
    """A status event in the documented CloudEvent form (the bridge's converter)."""
    msg = Converter(CLUSTER, "k8s.events", "structured").status(
        what, f"{what}/host/{n}/{rfc3339(time)}", data, rfc3339(time)
    )
    return decode(msg.subject, msg.headers, msg.payload)


def unreachable(at: datetime, n: int = 0, scope: str = "*") -> Any:
    data = {"scope": scope, "detail": "connection refused", "at": rfc3339(at)}
    return message("apiserver_unreachable", data, at, n).status


def reachable(at: datetime, n: int = 0, scope: str = "*") -> Any:
    return message("apiserver_reachable", {"scope": scope, "detail": "ok", "at": rfc3339(at)},
                   at, n).status  # fmt: skip


def gap(detected: datetime) -> Any:
    data = {
        "scope": "*",
        "fromResourceVersion": "10",
        "toResourceVersion": "20",
        "detectedAt": rfc3339(detected),
        "certainty": "likely",
        "why": "410",
    }
    return message("gap", data, detected).status


def dropped(time: datetime, n: int = 0, reason: str = "too_large") -> Any:
    data = {
        "id": f"uid-{n}/{n}",
        "subject": "k8s.events.prod-eu-1.shop.Pod.BackOff",
        "size": 2_000_000,
        "reason": reason,
        "detail": "maximum payload exceeded",
    }
    return message("dropped", data, time, n).status


def event(last: datetime, rv: int = 100) -> Any:
    obj = support.event(
        "web-1.x", rv, namespace="shop", uid="u-1", created=rfc3339(T0),
        involved_object={"namespace": "shop"}, message="Back-off", count=2,
        first=rfc3339(T0), last=rfc3339(last),
    )  # fmt: skip
    msg = Converter(CLUSTER, "k8s.events", "structured").convert(obj)
    return decode(msg.subject, msg.headers, msg.payload).event


def at(seq: int, seconds: float) -> Stored:
    """Stored as the ``seq``-th message of the stream, ``seconds`` after T0 by the server."""
    return Stored(seq, T0 + timedelta(seconds=seconds))


def only(alerts: list[Alert]) -> Alert:
    assert len(alerts) == 1, alerts
    return alerts[0]


def outage(state: State) -> list[Alert]:
    return [a for a in state.firing() if a.name == "KubernetesControlPlaneUnreachable"]


# ----------------------------------------------------------------------------- the attack


def test_a_forged_future_dated_reachable_does_not_silence_a_real_outage() -> None:
    clock = Clock(T0 + timedelta(seconds=10))
    state = State(rules(), clock)
    state.unreachable(unreachable(T0), at(1, 0))
    # the forger's message, stored 5 s later, dated 2099
    answer = only(state.reachable(reachable(FORGED, n=1), at(2, 5)))
    assert answer.ends_at is None  # the alert as it is: still firing
    assert [a.starts_at for a in outage(state)] == [T0]
    # the real end of the outage resolves it, at its own time
    clock.now = T0 + timedelta(seconds=70)
    back = only(state.reachable(reachable(T0 + timedelta(seconds=60), n=2), at(3, 60)))
    assert (back.starts_at, back.ends_at) == (T0, T0 + timedelta(seconds=60))
    assert outage(state) == []
    # and a real outage after that fires again: nothing made it look stale
    clock.now = T0 + timedelta(seconds=130)
    again = only(state.unreachable(unreachable(T0 + timedelta(seconds=120), n=3), at(4, 120)))
    assert again.ends_at is None and again.starts_at == T0 + timedelta(seconds=120)
    assert outage(state) == [again]


def test_without_the_stream_order_the_forged_reachable_would_have_won() -> None:
    """What the attack did before: ordered by their own ``at``, the 2099 reachable resolves
    the outage and every later real unreachable is taken for stale. (The ``State`` fed by
    hand, without ``Stored``, still orders so: this test shows what the order changes.)"""
    state = State(rules(), Clock(T0 + timedelta(seconds=10)))
    state.unreachable(unreachable(T0))
    state.reachable(reachable(FORGED, n=1))
    state.unreachable(unreachable(T0 + timedelta(seconds=120), n=3))
    assert outage(state) == []


def test_a_forged_reachable_dated_within_the_skew_is_taken_as_the_bridge_would_send_it() -> None:
    """Within ``max_clock_skew`` a clock a little ahead is a clock, not a forgery."""
    state = State(rules(), Clock(T0 + timedelta(seconds=10)))
    state.unreachable(unreachable(T0), at(1, 0))
    back = only(state.reachable(reachable(T0 + timedelta(seconds=25)), at(2, 5)))
    assert back.ends_at == T0 + timedelta(seconds=5)  # never after it was stored
    assert outage(state) == []


@pytest.mark.parametrize(
    ("messages", "firing_since"),
    [
        # (kind, at in seconds after T0, stream sequence, stored at seconds)
        pytest.param([("down", 0, 1, 0), ("up", 10, 2, 10)], None, id="down-then-up"),
        pytest.param(
            # the bridge's clock behind: the reachable says it came first, the stream knows
            [("down", 0, 1, 0), ("up", -50, 2, 10)],
            None,
            id="up-dated-before-down-but-stored-after",
        ),
        pytest.param(
            # a held unreachable delivered again after the reachable: stale by its sequence
            [("down", 0, 1, 0), ("up", 10, 2, 10), ("down", 0, 1, 0)],
            None,
            id="redelivered-late",
        ),
        pytest.param(
            # delivered out of order (held messages come back in any order)
            [("up", 10, 2, 10), ("down", 0, 1, 0)],
            None,
            id="out-of-order",
        ),
        pytest.param(
            [("down", 0, 1, 0), ("up", 10, 2, 10), ("down", 20, 3, 20)], 20, id="down-again"
        ),
        pytest.param(
            # a future-dated unreachable: as written when stored
            [("down", 10**9, 1, 5)],
            5,
            id="future-dated-down",
        ),
        pytest.param([("down", 0, 1, 0), ("down", 30, 2, 30)], 0, id="down-twice-keeps-its-start"),
    ],
)
def test_a_scopes_state_follows_the_stream_order(
    messages: list[tuple[str, float, int, float]], firing_since: float | None
) -> None:
    state = State(rules(), Clock(T0 + timedelta(minutes=5)))
    for kind, at_s, seq, stored_s in messages:
        t = T0 + timedelta(seconds=at_s)
        if kind == "down":
            state.unreachable(unreachable(t, n=seq), at(seq, stored_s))
        else:
            state.reachable(reachable(t, n=seq), at(seq, stored_s))
    since = [a.starts_at for a in outage(state)]
    assert since == ([] if firing_since is None else [T0 + timedelta(seconds=firing_since)])


def test_a_status_applied_long_ago_and_forgotten_still_makes_its_redelivery_stale() -> None:
    clock = Clock(T0)
    state = State(rules(), clock)
    state.unreachable(unreachable(T0), at(1, 0))
    state.reachable(reachable(T0 + timedelta(seconds=10)), at(2, 10))
    clock.now = T0 + timedelta(hours=2)
    assert state.due() == []  # resolved and forgotten after resolved_retention
    assert state.unreachable(unreachable(T0), at(1, 0)) == []
    assert outage(state) == []


def test_future_dated_gap_and_event_times_are_taken_as_the_streams() -> None:
    state = State(rules(), Clock(T0))
    g = only(state.gap(gap(FORGED), at(1, 3)))
    assert g.starts_at == T0 + timedelta(seconds=3)
    assert g.ends_at == T0 + timedelta(seconds=3, hours=1)  # not 2100
    e = only(state.event(event(FORGED), at(2, 4)))
    assert e.ends_at == T0 + timedelta(seconds=4, minutes=15)
    # and the next real version is not taken for an older one
    e2 = only(state.event(event(T0 + timedelta(minutes=1), rv=101), at(3, 60)))
    assert e2.annotations["last_seen"] == rfc3339(T0 + timedelta(minutes=1))


# ----------------------------------------------------------------------------- dropped


def test_a_dropped_message_raises_one_alert_per_cluster_counting_the_drops() -> None:
    state = State(rules(labels={"severity": "warning"}), Clock(T0))
    a = only(state.dropped(dropped(T0, n=1), at(1, 0)))
    assert a.labels == {
        "alertname": "KubernetesEventsDropped",
        "cluster": CLUSTER,
        "severity": "warning",
    }
    assert a.annotations["dropped"] == "1"
    assert a.annotations["last_id"] == "uid-1/1"
    assert a.annotations["reason"] == "too_large"
    assert (a.starts_at, a.ends_at) == (T0, T0 + timedelta(hours=1))
    # redelivered: not counted twice; a second drop while it fires: counted, end moved
    assert only(state.dropped(dropped(T0, n=1), at(1, 0))) == a
    b = only(state.dropped(dropped(T0 + timedelta(minutes=5), n=2), at(2, 300)))
    assert b.annotations["dropped"] == "2" and b.annotations["last_id"] == "uid-2/2"
    assert (b.starts_at, b.ends_at) == (T0, T0 + timedelta(minutes=65))
    # after it ended, a new drop is a new alert
    c = only(state.dropped(dropped(T0 + timedelta(hours=3), n=3), at(3, 3 * 3600)))
    assert c.annotations["dropped"] == "1" and c.starts_at == T0 + timedelta(hours=3)


def test_the_dropped_alert_is_taken_back_after_a_restart() -> None:
    before = State(rules(), Clock(T0))
    before.dropped(dropped(T0, n=1), at(1, 0))
    shown = [alertmanager.parse(alertmanager.postable(a, T0, timedelta(minutes=4)))
             for a in before.firing()]  # fmt: skip
    after = State(rules(), Clock(T0 + timedelta(minutes=1)))
    assert after.adopt(shown) == 1
    b = only(after.dropped(dropped(T0 + timedelta(minutes=1), n=2), at(2, 60)))
    assert b.annotations["dropped"] == "2"


# ----------------------------------------------------------------------------- replicas


def feed(state: State) -> list[Alert]:
    out = []
    out += state.unreachable(unreachable(T0), at(1, 0.2))
    out += state.unreachable(unreachable(T0 + timedelta(seconds=30), n=1), at(2, 30.1))
    out += state.reachable(reachable(T0 + timedelta(seconds=60), n=2), at(3, 60.3))
    out += state.gap(gap(T0 + timedelta(seconds=61)), at(4, 61))
    out += state.dropped(dropped(T0 + timedelta(seconds=62)), at(5, 62))
    return out


def test_two_replicas_reading_the_same_stream_at_different_times_send_identical_alerts() -> None:
    """Alertmanager holds one alert per label set, and keeps the earliest startsAt: each
    replica's alerts must be the same, whatever its own clock says when it reads."""
    early = feed(State(rules(), Clock(T0 + timedelta(seconds=61))))
    late = feed(State(rules(), Clock(T0 + timedelta(minutes=50))))
    assert early == late
    assert early[2].ends_at == T0 + timedelta(seconds=60)


# ----------------------------------------------------------------------------- the handlers


def delivery(d: Decoded, seq: int, stored_s: float) -> Delivery:
    return Delivery(d, seq, 1, T0 + timedelta(seconds=stored_s))


def alerting(clock: Clock) -> Alerting:
    return Alerting(
        State(rules(), clock),
        alertmanager.Client(["http://127.0.0.1:1"]),
        Metrics(METRICS_PREFIX, COUNTERS),
        hold=1.0,
        resend_interval=60,
    )


def test_the_read_back_at_start_orders_by_the_stream_too(caplog: pytest.LogCaptureFixture) -> None:
    a = alerting(Clock(T0 + timedelta(seconds=10)))
    with caplog.at_level(logging.WARNING, logger="k8s_event_consumer.alerting"):
        a.apply(delivery(message("apiserver_unreachable", {"scope": "*", "at": rfc3339(T0)},
                                 T0), 1, 0))  # fmt: skip
        forged = message("apiserver_reachable", {"scope": "*", "at": rfc3339(FORGED)}, FORGED, 1)
        a.apply(delivery(forged, 2, 5))
        a.apply(delivery(forged, 2, 5))  # read again (the durable after the read-back)
    assert outage(a.state)
    [line] = [r for r in caplog.records if r.getMessage() == "future_dated"]
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["id"] == forged.id
    assert fields["claimed"] == "2099-01-01T00:00:00Z"
    assert fields["stored"] == "2026-11-30T12:00:05Z"
    assert a.metrics.value("future_dated_total", what="apiserver_reachable") == 2


async def test_metric_labels_take_no_unbounded_value_from_a_message() -> None:
    """A status event of a kind this version does not know names itself: counted as other.
    Every label of every family is from a fixed set afterwards."""
    a = alerting(Clock(T0))
    for n, what in enumerate(["\x1b]8;;evil\x07", "x" * 500, "io.k8s.bridge.new", "gap "]):
        d = message(what, {"scope": "*"}, T0, n)
        assert d.status is not None and d.status.what == what
        await a.on_status(d.status, delivery(d, n + 1, 0))
    text = a.metrics.render().decode()
    assert 'k8s_event_alerting_status_events_total{what="other"} 4.0' in text
    for ln in text.splitlines():
        if not ln.startswith("k8s_event_alerting_") or "{" not in ln:
            continue  # python_info's labels are the interpreter's
        for pair in ln[ln.index("{") + 1 : ln.rindex("}")].split('",'):
            name, _, value = pair.partition('="')
            assert value.rstrip('"') in ALLOWED[name], ln


ALLOWED: dict[str, set[str]] = {
    "what": {
        "gap", "apiserver_unreachable", "apiserver_reachable", "apiserver_degraded",
        "apiserver_recovered", "dropped", "leader_changed", "started", "stopped", "other",
        "event", "digest",
    },
    "result": {"alerted", "under", "ignored", "refused", "ok", "unavailable", "rejected", "failed"},
    "why": {w.value for w in Why},
    "alertmanager": {"http://127.0.0.1:1"},
    "alertname": {
        "KubernetesWarningEvent", "KubernetesControlPlaneUnreachable", "KubernetesEventsGap",
        "KubernetesEventsDropped", "KubernetesWarningEventsRefused",
        "KubernetesWarningEventSeries",
    },
    "state": {"firing", "resolved"},
}  # fmt: skip
