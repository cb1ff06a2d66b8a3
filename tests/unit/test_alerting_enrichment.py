"""The alerting subscriber's ``alerts.extension_labels``: enrichment extensions of the bridge
(``team``, ``ownername``...) copied into the labels of ``KubernetesWarningEvent``, so an
Alertmanager route can send a team its own alerts. Only the names configured, only values in
the bridge's shape and of a bounded length; a partial enrichment does not change an alert's
identity; a changed value resolves the alert under its old labels. The messages are in the
documented CloudEvent form (tests/support.py's ``cloudevent``) with extensions set on them, as
anyone with publish rights could write them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from k8s_event_consumer.alerting import settings
from k8s_event_consumer.alerting.alerts import MAX_LABEL_VALUE, Alert, Rules, State, Stored
from k8s_event_consumer.events import KubeEvent, decode
from tests import support

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
GEN = "nats://K8S_EVENTS/k8s-event-alerting"
OWN = {"alertname", "cluster", "namespace", "kind", "name", "reason"}


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def event(rv: int, last: datetime = T0, **extensions: Any) -> KubeEvent:
    """A BackOff Event of Pod shop/web-1 as a structured CloudEvent with these extensions."""
    obj = support.event(
        "web-1.u",
        rv,
        namespace="shop",
        uid="u-1",
        involved_object={"namespace": "shop"},
        message="Back-off restarting failed container",
        count=rv,
        first=T0,
        last=last,
    )
    doc = support.cloudevent(obj, cluster="prod-eu-1", **extensions)
    headers = {"Content-Type": "application/cloudevents+json"}
    ev = decode("k8s.events.x", headers, json.dumps(doc).encode()).event
    assert ev is not None
    return ev


def state(*names: str, **kw: Any) -> State:
    return State(
        Rules(reasons=frozenset({"BackOff"}), generator_url=GEN, extension_labels=names, **kw),
        Clock(T0 + timedelta(minutes=1)),
    )


def extra(alert: Alert) -> dict[str, str]:
    return {k: v for k, v in alert.labels.items() if k not in OWN}


def test_the_named_extensions_become_labels_and_no_other() -> None:
    s = state("team", "ownername")
    [alert] = s.event(
        event(1, k8senriched="complete", team="payments", ownername="shop", oncall="alice")
    )
    assert extra(alert) == {"team": "payments", "ownername": "shop"}
    [plain] = state().event(event(1, k8senriched="complete", team="payments"))
    assert extra(plain) == {}  # none configured: the alert as it always was


def test_an_event_without_the_value_has_no_such_label() -> None:
    [alert] = state("team").event(event(1))
    assert extra(alert) == {}


def test_a_partial_enrichment_keeps_the_label_shown_so_the_alert_keeps_its_identity() -> None:
    s = state("team")
    [first] = s.event(event(1, k8senriched="complete", team="payments"))
    [second] = s.event(
        event(
            2,
            T0 + timedelta(seconds=10),
            k8senriched="partial",
            k8senrichmissing="namespace:timeout",
        )
    )
    assert second.labels == first.labels
    assert second.annotations["count"] == "2"
    assert len(s.due()) == 1


def test_a_value_that_comes_later_or_changes_resolves_the_old_identity() -> None:
    s = state("team")
    [first] = s.event(event(1, k8senriched="partial", k8senrichmissing="namespace:unknown"))
    later = T0 + timedelta(seconds=10)
    gone, now = s.event(event(2, later, k8senriched="complete", team="payments"))
    assert gone.labels == first.labels and gone.ends_at == later  # resolved when it changed
    assert extra(now) == {"team": "payments"} and now.ends_at is not None and now.ends_at > later
    assert now.starts_at == first.starts_at  # the same Event, first seen then
    # the resolved one is sent with the others (an Alertmanager away now hears of it too)
    assert {tuple(sorted(a.labels.items())) for a in s.due()} == {
        tuple(sorted(gone.labels.items())),
        tuple(sorted(now.labels.items())),
    }
    gone2, back = s.event(
        event(3, later + timedelta(seconds=10), k8senriched="complete", team="shop")
    )
    assert gone2.labels == now.labels and extra(back) == {"team": "shop"}
    # a redelivery changes nothing and sends the alert as it is
    assert s.event(event(3, later + timedelta(seconds=10), team="other")) == [back]


def test_an_older_version_keeps_the_labels_of_the_newer_one_shown() -> None:
    s = state("team")
    [new] = s.event(event(5, T0 + timedelta(seconds=30), k8senriched="complete", team="payments"))
    [same] = s.event(event(4, T0, k8senriched="complete", team="old"))
    assert same.labels == new.labels


@pytest.mark.parametrize(
    "value",
    [
        "x" * (MAX_LABEL_VALUE + 1),  # too long for a label
        "",  # Alertmanager drops an empty label
        {"a": 1},  # not a string
        ["payments"],
        7,
    ],
    ids=["long", "empty", "object", "list", "number"],
)
def test_a_value_not_fit_for_a_label_is_left_out(value: Any) -> None:
    [alert] = state("team").event(event(1, k8senriched="complete", team=value))
    assert extra(alert) == {}


def test_a_message_can_not_set_the_subscribers_own_labels_or_add_any_it_likes() -> None:
    many = {f"x{i}": "v" for i in range(200)}
    # even a Rules made by hand naming an own label (the settings refuse it): own labels win
    [alert] = state("team", "alertname").event(
        event(1, k8senriched="complete", team="payments", alertname="Forged", **many)
    )
    assert alert.labels["alertname"] == "KubernetesWarningEvent"
    assert set(alert.labels) == OWN | {"team"}


def test_static_labels_stay_static() -> None:
    s = State(
        Rules(
            reasons=frozenset({"BackOff"}),
            generator_url=GEN,
            labels={"severity": "warning"},
            extension_labels=("team",),
        ),
        Clock(),
    )
    [alert] = s.event(event(1, k8senriched="complete", team="payments"))
    assert extra(alert) == {"severity": "warning", "team": "payments"}


def test_an_alert_taken_back_from_alertmanager_keeps_its_extension_labels() -> None:
    s = state("team")
    [alert] = s.event(event(1, k8senriched="complete", team="payments"), Stored(1, T0))
    again = state("team")
    assert again.adopt([alert]) == 1
    [kept] = again.due()
    assert kept.labels == alert.labels
    # and the next version, partial, still updates that one alert
    [next_] = again.event(event(2, T0 + timedelta(seconds=5), k8senriched="partial"))
    assert next_.labels == alert.labels


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ("[cluster]", "set by the subscriber itself"),
        ("[Team]", "not an extension name"),
        ("[1team]", "not an extension name"),
        ("[aaaaaaaaaaaaaaaaaaaaa]", "not an extension name"),  # 21
        ("[team, team]", "twice"),
    ],
)
def test_extension_labels_are_checked_by_name(labels: str, says: str, tmp_path: Path) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text(f"alerts: {{extension_labels: {labels}}}\n")
    with pytest.raises(settings.ConfigError, match=r"alerts\.extension_labels") as err:
        settings.load(str(f))
    assert says in str(err.value)


def test_a_label_can_not_be_both_static_and_from_an_extension(tmp_path: Path) -> None:
    f = tmp_path / "alerting.yaml"
    f.write_text("alerts: {labels: {team: x}, extension_labels: [team]}\n")
    with pytest.raises(settings.ConfigError, match="team: in both"):
        settings.load(str(f))
