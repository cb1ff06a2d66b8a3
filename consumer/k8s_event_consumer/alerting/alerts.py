"""From the bridge's Events and status events to Alertmanager alerts: a pure state machine.

No I/O and an injected clock. ``State`` holds one alert per label set and answers, for each
message, the alerts to send now; ``due()`` answers what to send again (firing alerts, and
resolved ones for a while, as Prometheus re-sends them so an Alertmanager restart loses none).

Three alerts, by ``alertname``:

- ``KubernetesWarningEvent`` {cluster, namespace, kind, name, reason}: a Warning Event of a
  chosen reason. The key is the object and the reason, never the Event's uid or
  resourceVersion, so a repeated Event (count bumped, a new version, even a new Event object for
  the same object and reason) updates ONE alert: startsAt = first seen, endsAt = last seen +
  ``resolve_after`` (the alert resolves by itself once the Event stays quiet that long),
  annotations message, count, first_seen, last_seen (of the newest version) and summary.
  ``namespace`` is the Event's namespace, as in the stream's subject (an Event about a Node
  is recorded in ``default``).
- ``KubernetesControlPlaneUnreachable`` {cluster, scope}: from ``apiserver_unreachable``,
  firing with no end (the sender gives each send a short horizon, as Prometheus does) until
  ``apiserver_reachable`` resolves it (endsAt = when it was reachable again).
- ``KubernetesEventsGap`` {cluster, scope}: from ``gap``; endsAt = detected + ``gap_alert_for``;
  a second gap while it fires widens the range in its annotations.

Every alert also carries the static labels of the rules. Redeliveries are harmless: a message
already applied (or older than what was applied: a version of the Event, or a status event
older than the last one for its scope) changes nothing and answers the alert as it is, so a
message held while Alertmanager was away sends it again when delivered again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Final

from k8s_event_consumer.events import (
    ApiserverReachable,
    ApiserverUnreachable,
    Gap,
    KubeEvent,
    Status,
    parse_time,
)


class AlertName(enum.StrEnum):
    EVENT = "KubernetesWarningEvent"
    UNREACHABLE = "KubernetesControlPlaneUnreachable"
    GAP = "KubernetesEventsGap"


EVENT_LABELS: Final = ("alertname", "cluster", "namespace", "kind", "name", "reason")
STATUS_LABELS: Final = ("alertname", "cluster", "scope")

_NAMES: Final = frozenset(n.value for n in AlertName)
# what an alert taken back from Alertmanager must hold, and its annotation of the latest time
_ADOPT_NEEDS: Final = {
    AlertName.EVENT: (frozenset({"message", "count", "first_seen", "last_seen"}), "last_seen"),
    AlertName.GAP: (
        frozenset({"from_resource_version", "to_resource_version", "certainty", "detected_at"}),
        "detected_at",
    ),
}

Clock = Callable[[], datetime]
Key = tuple[tuple[str, str], ...]


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(t: datetime) -> str:
    """``2026-11-30T22:40:01Z`` (fraction only when there is one)."""
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Rules:
    """What becomes an alert and for how long (the ``alerts`` settings)."""

    reasons: frozenset[str] = frozenset()  # empty: every Warning Event
    resolve_after: timedelta = timedelta(minutes=15)
    gap_alert_for: timedelta = timedelta(hours=1)
    resolved_retention: timedelta = timedelta(minutes=15)
    labels: Mapping[str, str] = field(default_factory=dict)  # static, on every alert
    generator_url: str = "nats://K8S_EVENTS/k8s-event-alerting"

    def wants(self, ev: KubeEvent) -> bool:
        return ev.warning and (not self.reasons or ev.reason in self.reasons)


@dataclass(frozen=True)
class Alert:
    """One alert as Alertmanager's API takes it. ``ends_at`` None: firing until resolved
    explicitly (the sender sets a near endsAt on each send)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime | None
    generator_url: str

    @property
    def name(self) -> str:
        return self.labels["alertname"]

    def resolved(self, now: datetime) -> bool:
        return self.ends_at is not None and self.ends_at <= now


@dataclass
class _Record:
    alert: Alert
    # Event alerts: when the version shown was last seen; status alerts: the time of the
    # last status event applied (an older one is stale)
    latest: datetime
    # Event alerts: the newest resourceVersion applied per Event uid
    versions: dict[str, int] = field(default_factory=dict)


def _key(labels: Mapping[str, str], own: Iterable[str]) -> Key:
    return tuple((name, labels.get(name, "")) for name in own)


def _rv(value: str) -> int | None:
    return int(value) if value.isdigit() else None


class State:
    """The alerts of the stream read so far; every method answers the alerts to send."""

    def __init__(self, rules: Rules, clock: Clock = utcnow) -> None:
        self.rules = rules
        self._clock = clock
        self._records: dict[Key, _Record] = {}

    # -- messages -------------------------------------------------------------------------

    def event(self, ev: KubeEvent) -> list[Alert]:
        """A version of a Kubernetes Event: [its alert], or [] when it makes none."""
        if not self.rules.wants(ev):
            return []
        now = self._clock()
        own = {
            "alertname": AlertName.EVENT.value,
            "cluster": ev.cluster,
            "namespace": ev.namespace,
            "kind": ev.involved.kind,
            "name": ev.involved.name,
            "reason": ev.reason,
        }
        key = _key(own, EVENT_LABELS)
        last = ev.last_seen or now
        first = min(ev.first_seen or last, last)
        rv = _rv(ev.resource_version)
        count, message = str(ev.count), ev.message
        record = self._records.get(key)
        if record is not None:
            applied = record.versions.get(ev.uid)
            if applied is not None and (rv is None or rv <= applied):
                return [record.alert]  # this version or a newer one is in already
            if last < record.latest:  # an older Event than the one shown: keep that one
                shown = record.alert.annotations
                count, message, last = shown["count"], shown["message"], record.latest
            first = min(first, record.alert.starts_at)
        versions = dict(record.versions) if record is not None else {}
        if rv is not None:
            versions[ev.uid] = rv
        alert = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"{ev.reason}: {ev.involved.kind} {ev.namespace}/"
                f"{ev.involved.name} in cluster {ev.cluster}, seen {count} times",
                "message": message,
                "count": count,
                "first_seen": rfc3339(first),
                "last_seen": rfc3339(last),
            },
            starts_at=first,
            ends_at=last + self.rules.resolve_after,
            generator_url=self.rules.generator_url,
        )
        self._records[key] = _Record(alert, last, versions)
        return [alert]

    def unreachable(self, s: ApiserverUnreachable) -> list[Alert]:
        """The API server is unreachable for a scope: the alert fires until it is reachable."""
        at = self._at(s, s.at)
        key, own = self._status_key(AlertName.UNREACHABLE, s.cluster, s.scope)
        record = self._records.get(key)
        if record is not None and at <= record.latest:
            return [record.alert]  # stale: a later status of this scope is applied
        firing = record is not None and record.alert.ends_at is None
        since = record.alert.starts_at if record is not None and firing else at
        alert = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"control plane unreachable for cluster {s.cluster}",
                "description": f"The bridge can not reach the Kubernetes API server of "
                f"cluster {s.cluster} (scope {s.scope}) since {rfc3339(since)}; Events "
                "written meanwhile are read when it answers again.",
                "detail": s.detail,
                "since": rfc3339(since),
            },
            starts_at=since,
            ends_at=None,
            generator_url=self.rules.generator_url,
        )
        self._records[key] = _Record(alert, at)
        return [alert]

    def reachable(self, s: ApiserverReachable) -> list[Alert]:
        """The API server answers again: the unreachable alert of the scope resolves (also one
        this process never saw fire: Alertmanager may still hold it)."""
        at = self._at(s, s.at)
        key, own = self._status_key(AlertName.UNREACHABLE, s.cluster, s.scope)
        record = self._records.get(key)
        if record is not None and at <= record.latest:
            return [record.alert]
        ended = min(at, self._clock())
        if record is not None:
            starts = min(record.alert.starts_at, ended)
            annotations = dict(record.alert.annotations)
        else:
            starts = ended
            annotations = {"summary": f"control plane unreachable for cluster {s.cluster}"}
        annotations["resolved_detail"] = s.detail
        alert = Alert(
            labels=self._labels(own),
            annotations=annotations,
            starts_at=starts,
            ends_at=ended,
            generator_url=self.rules.generator_url,
        )
        self._records[key] = _Record(alert, at)
        return [alert]

    def gap(self, s: Gap) -> list[Alert]:
        """Versions of Events may be missing: an alert for ``gap_alert_for``."""
        detected = self._at(s, s.detected_at)
        key, own = self._status_key(AlertName.GAP, s.cluster, s.scope)
        record = self._records.get(key)
        from_rv, to_rv, certainty = (
            s.from_resource_version,
            s.to_resource_version,
            s.certainty,
        )
        starts, ends = detected, detected + self.rules.gap_alert_for
        if record is not None and not record.alert.resolved(self._clock()):
            # a second gap while the first fires (or the same one again): one wider range
            shown = record.alert.annotations
            from_rv = _rv_min(shown["from_resource_version"], from_rv)
            to_rv = _rv_max(shown["to_resource_version"], to_rv)
            if shown["certainty"] == "likely":
                certainty = "likely"
            starts = min(starts, record.alert.starts_at)
            assert record.alert.ends_at is not None
            ends = max(ends, record.alert.ends_at)
            detected = max(detected, record.latest)
        alert = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"Kubernetes Events of cluster {s.cluster} (scope {s.scope}) may "
                f"be missing between resourceVersions {from_rv} and {to_rv} ({certainty})",
                "from_resource_version": from_rv,
                "to_resource_version": to_rv,
                "certainty": certainty,
                "why": s.why,
                "detected_at": rfc3339(detected),
            },
            starts_at=starts,
            ends_at=ends,
            generator_url=self.rules.generator_url,
        )
        self._records[key] = _Record(alert, detected)
        return [alert]

    # -- the resend loop and a restart ----------------------------------------------------

    def due(self) -> list[Alert]:
        """Every alert to send again now: the firing ones and those resolved less than
        ``resolved_retention`` ago; older resolved ones are forgotten here."""
        now = self._clock()
        horizon = now - self.rules.resolved_retention
        for key in [
            k
            for k, r in self._records.items()
            if r.alert.ends_at is not None and r.alert.ends_at < horizon
        ]:
            del self._records[key]
        return [r.alert for r in self._records.values()]

    def firing(self) -> list[Alert]:
        now = self._clock()
        return [r.alert for r in self._records.values() if not r.alert.resolved(now)]

    def summary(self) -> dict[tuple[str, str], int]:
        """How many alerts are kept, by (alertname, "firing" or "resolved")."""
        now = self._clock()
        out: dict[tuple[str, str], int] = {}
        for r in self._records.values():
            key = (r.alert.name, "resolved" if r.alert.resolved(now) else "firing")
            out[key] = out.get(key, 0) + 1
        return out

    def adopt(self, alerts: Iterable[Alert]) -> int:
        """Take back the alerts of this subscriber (its ``generator_url``) that Alertmanager
        still shows firing, after a restart: the control plane alert keeps firing and every
        alert is sent again until it resolves. Answers how many were taken."""
        taken = 0
        for a in alerts:
            if a.generator_url != self.rules.generator_url or a.name not in _NAMES:
                continue
            own_names = EVENT_LABELS if a.name == AlertName.EVENT else STATUS_LABELS
            own = {n: a.labels.get(n, "") for n in own_names}
            key = _key(own, own_names)
            if key in self._records:
                continue
            try:
                record = self._adopted(a, own)
            except (KeyError, ValueError):
                continue  # not in the shape this version writes
            self._records[key] = record
            taken += 1
        return taken

    def _adopted(self, a: Alert, own: dict[str, str]) -> _Record:
        labels = self._labels(own)
        if a.name == AlertName.UNREACHABLE:
            return _Record(replace(a, labels=labels, ends_at=None), a.starts_at)
        needs, when = _ADOPT_NEEDS[AlertName(a.name)]
        missing = needs - set(a.annotations)
        latest = parse_time(a.annotations.get(when))
        if missing or latest is None or a.ends_at is None:
            raise ValueError(f"annotations missing: {sorted(missing) or when}")
        return _Record(replace(a, labels=labels), latest)

    # -- helpers --------------------------------------------------------------------------

    def _labels(self, own: Mapping[str, str]) -> dict[str, str]:
        return {**self.rules.labels, **own}

    def _status_key(self, name: AlertName, cluster: str, scope: str) -> tuple[Key, dict[str, str]]:
        own = {"alertname": name.value, "cluster": cluster, "scope": scope}
        return _key(own, STATUS_LABELS), own

    def _at(self, s: Status, at: datetime | None) -> datetime:
        """When a status event happened: its own time, else the CloudEvent's, else now."""
        return at or s.time or self._clock()


def _rv_min(a: str, b: str) -> str:
    ia, ib = _rv(a), _rv(b)
    if ia is None or ib is None:
        return min(a, b)
    return a if ia <= ib else b


def _rv_max(a: str, b: str) -> str:
    ia, ib = _rv(a), _rv(b)
    if ia is None or ib is None:
        return max(a, b)
    return a if ia >= ib else b
