"""The alerting subscriber on digests (``nats.reads: digests``): a series alerts once its
occurrences in one window reach its reason's threshold, stays firing while consecutive windows
reach it, resolves when one does not; the tenant rule, the bounds, the handlers, the read-back
and the settings. Digests are built and encoded with ``k8s_event_common.digests``, as the digest
program writes them, and decoded as the consumer does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from k8s_event_common import digests
from k8s_event_common.digests import Digest, Series
from k8s_event_consumer.alerting import alertmanager
from k8s_event_consumer.alerting.__main__ import main
from k8s_event_consumer.alerting.alerts import Alert, Rules, State, Stored, rfc3339
from k8s_event_consumer.alerting.holding import Bounds
from k8s_event_consumer.alerting.running import COUNTERS, METRICS_PREFIX, Alerting
from k8s_event_consumer.consuming import Delivery
from k8s_event_consumer.events import decode
from k8s_event_consumer.metrics import Metrics

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)  # a window's start (5-minute windows)
W = timedelta(minutes=5)
GRACE = timedelta(minutes=2)
CLUSTER = "prod-eu-1"
SERIES = "KubernetesWarningEventSeries"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def rules(**kw: Any) -> Rules:
    base: dict[str, Any] = {
        "reasons": frozenset({"BackOff", "OOMKilling", "FailedScheduling"}),
        "generator_url": "nats://K8S_DIGESTS/alerting",
        "min_occurrences": 3,
        "thresholds": {"BackOff": 5, "OOMKilling": 1},
        "digest_grace": GRACE,
    }
    return Rules(**{**base, **kw})


def series(
    name: str = "web-1",
    reason: str = "BackOff",
    *,
    namespace: str = "shop",
    kind: str = "Pod",
    type_: str = "Warning",
    untrusted: bool = False,
    uid: str | None = None,
) -> Series:
    return Series(
        cluster=CLUSTER,
        namespace=namespace,
        kind=kind,
        name="" if untrusted else name,
        uid="" if untrusted else (uid if uid is not None else f"uid-{name}"),
        reason=reason,
        type=type_,
        reporting_component="kubelet",
        untrusted=untrusted,
    )


def digest(s: Series, window: int, occurrences: int, *, seq: int = 100) -> Digest:
    """The digest of ``s`` for the ``window``-th 5-minute window from T0."""
    start = T0 + window * W
    return Digest(
        series=s,
        start=start,
        end=start + W,
        occurrences=occurrences,
        versions=min(occurrences, 10),
        first_seen=start + timedelta(seconds=3),
        last_seen=start + timedelta(seconds=290),
        count_from=10,
        count_to=10 + occurrences,
        uids=("ev-1",),
        uids_omitted=0,
        first_message="Back-off restarting failed container web",
        last_message="Back-off restarting failed container web (again)",
        sampled=occurrences > 10,
        combined=False,
        stream="K8S_EVENTS",
        first_seq=seq,
        last_seq=seq + 9,
    )


def stored(window: int, seq: int, late: float = 10.0) -> Stored:
    """Stored in the digests stream ``late`` seconds after the window's end."""
    return Stored(seq, T0 + (window + 1) * W + timedelta(seconds=late))


def state(**kw: Any) -> State:
    return State(rules(**kw), Clock(T0 + W + timedelta(seconds=30)))


def only(alerts: list[Alert]) -> Alert:
    assert len(alerts) == 1, alerts
    return alerts[0]


# ----------------------------------------------------------------------------- thresholds


def test_a_series_reaching_the_threshold_fires_one_alert_with_the_digests_fields() -> None:
    s = state()
    d = digest(series(), 0, 57)
    a = only(s.digest(d, stored(0, 1)))
    assert a.labels == {
        "alertname": SERIES,
        "cluster": CLUSTER,
        "namespace": "shop",
        "kind": "Pod",
        "name": "web-1",
        "reason": "BackOff",
    }
    n = a.annotations
    assert n["summary"] == "BackOff: Pod shop/web-1 57 times in 5m (cluster prod-eu-1)"
    assert n["occurrences"] == "57" and n["threshold"] == "5" and n["windows"] == "1"
    assert n["window_start"] == "2026-11-30T12:00:00Z"
    assert n["window_end"] == "2026-11-30T12:05:00Z"
    assert n["versions"] == "10" and n["sampled"] == "true" and n["combined"] == "false"
    assert n["stream"] == "K8S_EVENTS"
    assert (n["first_sequence"], n["last_sequence"]) == ("100", "109")
    assert n["digest"] == d.id
    assert n["message"] == d.last_message
    assert a.starts_at == T0
    # the next window's digest may come up to the grace after the next window's end
    assert a.ends_at == T0 + 2 * W + GRACE
    assert a.generator_url == "nats://K8S_DIGESTS/alerting"


@pytest.mark.parametrize(
    ("reason", "occurrences", "fires"),
    [
        ("BackOff", 4, False),  # its own threshold: 5
        ("BackOff", 5, True),
        ("OOMKilling", 1, True),  # its own threshold: 1 (every OOM kill pages)
        ("FailedScheduling", 2, False),  # min_occurrences: 3
        ("FailedScheduling", 3, True),
        ("FailedMount", 1000, False),  # a reason not kept
    ],
)
def test_the_threshold_is_the_reasons_own_else_the_default(
    reason: str, occurrences: int, fires: bool
) -> None:
    s = state()
    alerts = s.digest(digest(series(reason=reason), 0, occurrences), stored(0, 1))
    assert bool(alerts) is fires
    assert len(s.due()) == (1 if fires else 0)  # under the threshold: nothing held either


def test_a_single_restart_pages_nobody() -> None:
    s = state(thresholds={})
    assert s.digest(digest(series(), 0, 1), stored(0, 1)) == []
    assert s.due() == []


def test_a_normal_series_never_alerts() -> None:
    s = state()
    assert s.digest(digest(series(type_="Normal"), 0, 500), stored(0, 1)) == []


def test_an_empty_reason_list_takes_every_warning_series() -> None:
    s = state(reasons=frozenset(), thresholds={})
    assert only(s.digest(digest(series(reason="FailedMount"), 0, 3), stored(0, 1)))


# ----------------------------------------------------------------------------- the tenant


def test_an_untrusted_series_names_no_object() -> None:
    s = state()
    a = only(s.digest(digest(series(untrusted=True, kind="Node"), 0, 9), stored(0, 1)))
    assert a.labels.get("name", "") == ""  # an empty label: Alertmanager drops it
    assert a.labels["untrusted"] == "object"
    assert a.annotations["summary"] == (
        "BackOff: Node in shop (untrusted) 9 times in 5m (cluster prod-eu-1)"
    )


def test_an_untrusted_series_that_names_its_object_anyway_names_it_nowhere() -> None:
    """The digest's own word that it is untrusted is enough: a name beside it is dropped."""
    s = state()
    forged = Series(CLUSTER, "shop", "Pod", "victim-0", "victim-uid", "BackOff", "Warning",
                    untrusted=True)  # fmt: skip
    a = only(s.digest(digest(forged, 0, 9), stored(0, 1)))
    assert a.labels.get("name", "") == ""
    assert "victim" not in repr((a.labels, a.annotations))


def test_the_untrusted_label_is_absent_on_a_trusted_series() -> None:
    s = state()
    assert "untrusted" not in only(s.digest(digest(series(), 0, 9), stored(0, 1))).labels


# ----------------------------------------------------------------------------- windows


def test_consecutive_windows_at_the_threshold_keep_one_alert_firing() -> None:
    s = state()
    first = only(s.digest(digest(series(), 0, 20), stored(0, 1)))
    second = only(s.digest(digest(series(), 1, 30, seq=200), stored(1, 2)))
    assert second.labels == first.labels
    assert second.starts_at == first.starts_at == T0  # one alert since the first window
    assert second.ends_at == T0 + 3 * W + GRACE
    assert second.annotations["windows"] == "2"
    assert second.annotations["occurrences"] == "30"
    assert "2 windows in a row" in second.annotations["summary"]
    assert second.annotations["first_sequence"] == "200"


def test_a_later_window_under_the_threshold_resolves_the_alert_at_its_start() -> None:
    s = state()
    only(s.digest(digest(series(), 0, 20), stored(0, 1)))
    gone = only(s.digest(digest(series(), 1, 2), stored(1, 2)))
    assert gone.ends_at == T0 + W  # the end of the last window that reached it
    assert gone.resolved(T0 + 2 * W)
    assert gone.annotations["occurrences"] == "20"  # what fired, as it was
    # said once: the same digest again answers it as it is, a third under says nothing
    assert only(s.digest(digest(series(), 1, 2), stored(1, 2))) == gone
    assert s.digest(digest(series(), 2, 1), stored(2, 3)) == []


def test_the_storm_back_after_a_resolution_is_a_new_firing() -> None:
    s = state()
    s.digest(digest(series(), 0, 20), stored(0, 1))
    s.digest(digest(series(), 1, 0), stored(1, 2))
    again = only(s.digest(digest(series(), 2, 20), stored(2, 3)))
    assert again.starts_at == T0 + 2 * W
    assert again.annotations["windows"] == "1"
    assert not again.resolved(T0 + 3 * W)


def test_a_quiet_window_without_a_digest_ends_the_alert_by_itself() -> None:
    s = state()
    a = only(s.digest(digest(series(), 0, 20), stored(0, 1)))
    assert a.ends_at is not None
    assert not a.resolved(T0 + 2 * W)  # the next window's digest may still come
    assert a.resolved(T0 + 2 * W + GRACE)


def test_a_window_read_again_or_an_older_one_changes_nothing() -> None:
    s = state()
    s.digest(digest(series(), 0, 20), stored(0, 1))
    newest = only(s.digest(digest(series(), 1, 30), stored(1, 2)))
    assert only(s.digest(digest(series(), 1, 30), stored(1, 2))) == newest  # redelivered
    assert only(s.digest(digest(series(), 0, 20), stored(0, 1))) == newest  # older
    assert only(s.digest(digest(series(), 0, 1), stored(0, 1))) == newest  # older, under


def test_two_series_of_one_label_set_in_one_window_show_the_larger_whatever_the_order() -> None:
    """A StatefulSet's Pod made again keeps its name under a new uid: two series, one alert."""
    old, new = series(uid="uid-a"), series(uid="uid-b")
    shown = []
    for order in ((old, 40), (new, 9)), ((new, 9), (old, 40)):
        s = state()
        for ser, n in order:
            s.digest(digest(ser, 0, n), stored(0, 1))
        [a] = s.due()
        shown.append(a)
    assert shown[0] == shown[1]
    assert shown[0].annotations["occurrences"] == "40"


def test_replicas_reading_at_different_times_send_identical_alerts() -> None:
    def feed(s: State) -> list[Alert]:
        out = []
        for w, n in enumerate([20, 30, 1, 8]):
            out += s.digest(digest(series(), w, n), stored(w, w + 1))
        return out

    early = feed(State(rules(), Clock(T0 + 5 * W)))
    late = feed(State(rules(), Clock(T0 + timedelta(days=3))))
    assert early == late and len(early) == 4


def test_a_digest_dated_ahead_of_its_stream_is_taken_as_ending_when_stored() -> None:
    s = state()
    forged = digest(series(), 100_000, 20)  # a window years ahead
    at = Stored(1, T0 + W + timedelta(seconds=5))
    a = only(s.digest(forged, at))
    assert a.annotations["window_end"] == rfc3339(T0 + W + timedelta(seconds=5))
    assert a.ends_at == T0 + 2 * W + timedelta(seconds=5) + GRACE


# ----------------------------------------------------------------------------- bounds


def test_series_alerts_go_through_the_namespace_bound() -> None:
    s = state(
        bounds=Bounds(alerts=100, bytes=1 << 24, namespace_alerts=2, namespace_bytes=1 << 20),
        thresholds={},
    )
    for n in range(2):
        only(s.digest(digest(series(f"web-{n}"), 0, 9), stored(0, n + 1)))
    refused = s.digest(digest(series("web-2"), 0, 9), stored(0, 3))
    [refusal] = refused
    assert refusal.labels["alertname"] == "KubernetesWarningEventsRefused"
    assert refusal.labels["namespace"] == "shop"
    assert s.held.namespace((CLUSTER, "shop")).alerts == 2
    # another namespace is not crowded out
    assert only(s.digest(digest(series("db-0", namespace="data"), 0, 9), stored(0, 4)))


# ----------------------------------------------------------------------------- a restart


def test_a_series_alert_taken_back_from_alertmanager_continues() -> None:
    before = state()
    a = only(before.digest(digest(series(), 0, 20), stored(0, 1)))
    after = state()
    assert after.adopt([a]) == 1
    b = only(after.digest(digest(series(), 1, 25), stored(1, 2)))
    assert b.starts_at == T0 and b.annotations["windows"] == "2"


# ----------------------------------------------------------------------------- the handlers


def delivered(d: Digest, seq: int) -> Delivery:
    """``d`` as the digest program publishes it and the consumer decodes it."""
    decoded = decode(
        digests.subject("k8s.digests", d.series), digests.headers(d), digests.encode(d)
    )
    assert decoded.digest == d
    at = stored(int((d.start - T0) / W), seq)
    return Delivery(decoded, seq, 1, at.time)


class Sent:
    def __init__(self) -> None:
        self.sent: list[list[Alert]] = []
        self.urls = ["http://127.0.0.1:1"]

    async def send(self, alerts: list[Alert]) -> alertmanager.Outcome:
        self.sent.append(list(alerts))
        return alertmanager.Outcome(delivered=list(self.urls))


def alerting() -> tuple[Alerting, Sent]:
    client = Sent()
    a = Alerting(
        State(rules(), Clock(T0 + W + timedelta(seconds=30))),
        client,  # type: ignore[arg-type]
        Metrics(METRICS_PREFIX, COUNTERS),
        hold=1.0,
        resend_interval=60,
    )
    return a, client


async def test_the_digest_handler_sends_what_reaches_the_threshold_and_counts_the_rest() -> None:
    a, client = alerting()
    handlers = a.handlers()
    for seq, d in enumerate(
        [
            digest(series("web-1"), 0, 57),  # a storm
            digest(series("web-2"), 0, 1),  # one restart
            digest(series("web-3", reason="FailedMount"), 0, 99),  # not kept
        ],
        start=1,
    ):
        assert await handlers.outcome(delivered(d, seq)) is None
    [[sent]] = client.sent
    assert sent.labels["name"] == "web-1"
    for result, n in (("alerted", 1), ("under", 1), ("ignored", 1), ("refused", 0)):
        assert a.metrics.value("digests_total", result=result) == n, result


def test_the_read_back_at_start_applies_digests() -> None:
    a, client = alerting()
    a.apply(delivered(digest(series(), 0, 57), 1))
    a.apply(delivered(digest(series(), 1, 60), 2))
    [shown] = a.state.due()
    assert shown.annotations["windows"] == "2"
    assert client.sent == []  # nothing sent while reading back


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("yaml_text", "names"),
    [
        ("digests: {min_occurrences: 0}\n", "digests.min_occurrences"),
        ("digests: {min_occurrences: -3}\n", "digests.min_occurrences"),
        ("digests: {reasons: {BackOff: 0}}\n", "BackOff: 0 is not a positive number"),
        ("digests: {reasons: {BackOff: true}}\n", "BackOff: True is not a positive number"),
        ("digests: {reasons: {BackOff: many}}\n", "BackOff: 'many' is not a positive number"),
        ("digests: {reasons: {BackOff: 2.5}}\n", "BackOff: 2.5 is not a positive number"),
        ("digests: {reasons: {'Back Off': 3}}\n", "'Back Off' is not an Event reason"),
        ("digests: {reasons: {'': 3}}\n", "'' is not an Event reason"),
        (
            "alerts: {reasons: [BackOff]}\ndigests: {reasons: {OOMKilling: 1}}\n",
            "digests.reasons: OOMKilling not in alerts.reasons",
        ),
        ("digests: {grace: 0s}\n", "digests.grace"),
        ("digests: {threshold: 3}\n", "digests.threshold"),
    ],
)
def test_a_bad_digests_section_exits_2_naming_what_is_wrong(
    yaml_text: str, names: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text(yaml_text)
    assert main(["check-config", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("k8s-event-alerting: invalid configuration")
    assert names.lower() in err.lower(), err


def test_a_digests_config_checks_and_reads_the_digests_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text(
        "nats: {reads: digests, durable: k8s-event-alerting-digests}\n"
        "digests: {min_occurrences: 3, reasons: {BackOff: 5, OOMKilling: 1}, grace: 90s}\n"
    )
    assert main(["check-config", "--config", str(f)]) == 0
    out = capsys.readouterr().out
    assert "reads: digests" in out and "min_occurrences: 3" in out and "grace: 90.0" in out
    from k8s_event_consumer.alerting import settings

    cfg = settings.load(str(f))
    assert cfg.nats.read_stream == "K8S_DIGESTS"
    assert cfg.nats.filters == ["k8s.digests.>"]
    assert cfg.generator_url == "nats://K8S_DIGESTS/k8s-event-alerting-digests"
