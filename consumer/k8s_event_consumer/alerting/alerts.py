"""From the bridge's Events and status events to Alertmanager alerts: a pure state machine.

No I/O and an injected clock. ``State`` holds one alert per label set and answers, for each
message, the alerts to send now; ``due()`` answers what to send again (firing alerts, and
resolved ones for a while, as Prometheus re-sends them so an Alertmanager restart loses none).

Four alerts, by ``alertname``:

- ``KubernetesWarningEvent`` {cluster, namespace, kind, name, reason}: a Warning Event of a
  chosen reason. The key is the object and the reason, never the Event's uid or
  resourceVersion, so a repeated Event (count bumped, a new version, even a new Event object for
  the same object and reason) updates ONE alert: startsAt = first seen, endsAt = last seen +
  ``resolve_after`` (the alert resolves by itself once the Event stays quiet that long),
  annotations message, count, first_seen, last_seen (of the newest version) and summary.
  ``namespace`` is the Event's namespace, as in the stream's subject (an Event about a Node
  is recorded in ``default``). An Event whose involved object (or ``related``) its namespace
  may not name, by the one rule (``k8s_event_common.tenancy``: a Pod of another namespace, a
  Node from a tenant's namespace), has no ``name`` and an ``untrusted`` label saying why
  (``object:other_namespace``); the label is absent on every other alert.
- ``KubernetesWarningEventSeries`` {cluster, namespace, kind, name, reason}: from a digest (the
  digests stream's, with ``nats.reads: digests``: one series, one window) of a Warning series of
  a chosen reason whose occurrences in its window reach the reason's threshold
  (``Rules.threshold``); a digest under it fires nothing, so one restart pages nobody. The
  label set and the tenant rule are the Event alert's (an untrusted series has no ``name``, and
  ``untrusted`` is ``object``: a digest says that its object is foreign, not why). startsAt =
  the start of the first of the consecutive windows that reached the threshold; endsAt = the
  window's end + one window + ``digest_grace``: the next window's digest comes only after the
  next window ends (and the digests program's delay), so the alert stays firing while
  consecutive windows keep reaching the threshold and ends by itself after a window with no
  digest. A later window's digest under the threshold resolves it at once (endsAt = that
  window's start: the end of the last window that reached it). Annotations: the digest's
  fields (occurrences, the window, versions, sampled, combined, the versions stream's sequence
  range) and ``windows``, the consecutive windows at the threshold. Times are the digest's (the
  versions stream's stored time), never now: a replay decides as the first reading did.
- ``KubernetesControlPlaneUnreachable`` {cluster, scope}: from ``apiserver_unreachable``,
  firing with no end (the sender gives each send a short horizon, as Prometheus does) until
  ``apiserver_reachable`` resolves it (endsAt = when it was reachable again).
- ``KubernetesEventsGap`` {cluster, scope}: from ``gap``; endsAt = detected + ``gap_alert_for``;
  a second gap while it fires widens the range in its annotations.
- ``KubernetesEventsDropped`` {cluster}: from ``dropped`` (a message no server of the stream
  could take: subscribers never get it); endsAt = the last drop + ``dropped_alert_for``; each
  drop while it fires counts in its annotations.
- ``KubernetesWarningEventsRefused`` {cluster, namespace}: Event alerts of a namespace refused
  because it holds its most (``Bounds.namespace_alerts`` or ``namespace_bytes``), or of every
  namespace (cluster and namespace ``*``) because all hold their most; endsAt = the last
  refusal + ``resolve_after``; each refusal while it fires counts in its annotations.

**Bounded.** What an alert keeps of a message is cut (``holding.cut``: the message to
``message_bytes``, every other value to ``holding.VALUE_BYTES``), and the alerts held are
bounded in count and bytes per namespace and in all (``holding.Held``): an alert past a bound
is refused (``on_refused`` is told, and the refusal alert fires), never held. The other maps
are bounded too: the Event uids of an alert (``VERSIONS_KEPT``), the status keys' sequences
(``SEQUENCES_KEPT``, by digest).

Every alert also carries the static labels of the rules, and an Event alert the enrichment
extensions the rules name (``extension_labels``: ``team``, ``ownername``...) as the newest
version has them. A version without such a value (a partial enrichment) keeps the one shown; a
changed value changes the alert's identity in Alertmanager, so the alert under its old labels
is resolved (kept and sent like any resolved alert) and the alert fires under the new ones.

Redeliveries are harmless: a message already applied (or older than what was applied: a
version of the Event, or a status event stored before the last one applied for its scope)
changes nothing and answers the alert as it is, so a message held while Alertmanager was away
sends it again when delivered again.

**The stream orders, not the message.** A message's times are its publisher's word: anyone who
may publish on the subject can date a message 2099. So a scope's status events apply in the
order JetStream stored them (``Stored``: the stream sequence, and the server's timestamp), never
by their own ``at``; and a time that lies ahead of the stream's timestamp by more than
``max_clock_skew`` (``future_dated``) is taken as the stream's timestamp. A future-dated
``apiserver_reachable`` resolves nothing: the bridge writes ``at`` just before it publishes, so
such a message is forged or from a broken clock, and an outage alert errs on firing. Without a
``Stored`` (a ``State`` fed by hand) messages are ordered by their own times.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Final

from k8s_event_common.clock import SYSTEM
from k8s_event_common.digests import Digest, Series
from k8s_event_consumer.alerting import holding
from k8s_event_consumer.alerting.holding import Bounds, Held, Kind, Where, Why, cut, value
from k8s_event_consumer.events import (
    ApiserverReachable,
    ApiserverUnreachable,
    Dropped,
    Gap,
    KubeEvent,
    Status,
    parse_time,
)


class AlertName(enum.StrEnum):
    EVENT = "KubernetesWarningEvent"
    SERIES = "KubernetesWarningEventSeries"
    UNREACHABLE = "KubernetesControlPlaneUnreachable"
    GAP = "KubernetesEventsGap"
    DROPPED = "KubernetesEventsDropped"
    REFUSED = "KubernetesWarningEventsRefused"


# ``untrusted``: only on the alert of an Event whose references the one rule does not trust
# (k8s_event_common.tenancy): ``object:other_namespace``...; absent otherwise
UNTRUSTED: Final = "untrusted"
EVENT_LABELS: Final = ("alertname", "cluster", "namespace", "kind", "name", "reason", UNTRUSTED)
STATUS_LABELS: Final = ("alertname", "cluster", "scope")
DROPPED_LABELS: Final = ("alertname", "cluster")
REFUSED_LABELS: Final = ("alertname", "cluster", "namespace")
# the labels each alert is keyed by (and all it carries besides the rules' static ones)
OWN_LABELS: Final = {
    AlertName.EVENT: EVENT_LABELS,
    AlertName.SERIES: EVENT_LABELS,
    AlertName.UNREACHABLE: STATUS_LABELS,
    AlertName.GAP: STATUS_LABELS,
    AlertName.DROPPED: DROPPED_LABELS,
    AlertName.REFUSED: REFUSED_LABELS,
}
# the annotations each alert carries (an alert taken back keeps these only)
ANNOTATIONS: Final = {
    AlertName.EVENT: ("summary", "message", "count", "first_seen", "last_seen"),
    AlertName.SERIES: (
        "summary",
        "message",
        "occurrences",
        "threshold",
        "windows",
        "window_start",
        "window_end",
        "first_seen",
        "last_seen",
        "versions",
        "sampled",
        "combined",
        "stream",
        "first_sequence",
        "last_sequence",
        "digest",
    ),
    AlertName.UNREACHABLE: ("summary", "description", "detail", "since", "resolved_detail"),
    AlertName.GAP: (
        "summary",
        "from_resource_version",
        "to_resource_version",
        "certainty",
        "why",
        "detected_at",
    ),
    AlertName.DROPPED: (
        "summary",
        "description",
        "dropped",
        "last_id",
        "subject",
        "size",
        "reason",
        "detail",
        "last_dropped_at",
    ),
    AlertName.REFUSED: (
        "summary",
        "description",
        "refused",
        "why",
        "last_refused",
        "last_refused_at",
    ),
}
ALL_NAMESPACES: Final = "*"  # the refusal alert of the total bound: every cluster and namespace

_NAMES: Final = frozenset(n.value for n in AlertName)
# what an alert taken back from Alertmanager must hold, and its annotation of the latest time
_ADOPT_NEEDS: Final = {
    AlertName.EVENT: (frozenset({"message", "count", "first_seen", "last_seen"}), "last_seen"),
    AlertName.SERIES: (
        frozenset({"occurrences", "windows", "window_start", "window_end"}),
        "window_end",
    ),
    AlertName.GAP: (
        frozenset({"from_resource_version", "to_resource_version", "certainty", "detected_at"}),
        "detected_at",
    ),
    AlertName.DROPPED: (frozenset({"dropped", "last_dropped_at"}), "last_dropped_at"),
    AlertName.REFUSED: (frozenset({"refused", "last_refused_at"}), "last_refused_at"),
}
MAX_LABEL_VALUE: Final = 256  # an extension's value longer than this is no label
# the stream sequences of the status keys applied (by a digest of the key): kept after their
# alert is forgotten (a message held for longer still finds itself stale), the oldest left
# beyond this many
SEQUENCES_KEPT: Final = 10_000
VERSIONS_KEPT: Final = 8  # Event uids an alert remembers its newest version of, the newest
SERIES_MARK: Final = "object"  # a series alert's untrusted label (a digest says no more)

Clock = Callable[[], datetime]
Key = tuple[tuple[str, str], ...]


def rfc3339(t: datetime) -> str:
    """``2026-11-30T22:40:01Z`` (fraction only when there is one)."""
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Stored:
    """Where JetStream stored a message: its stream sequence, and the stream's timestamp (the
    server's clock when it stored the message, not the publisher's word). None: not known."""

    sequence: int
    time: datetime | None = None


def claimed_time(m: KubeEvent | Status | Digest) -> datetime | None:
    """The time a message says it was written: an Event's last seen; a digest's window end; a
    status event's own time (``at``, a gap's ``detectedAt``), else its CloudEvent's ``time``."""
    if isinstance(m, Digest):
        return m.end
    if isinstance(m, KubeEvent):
        return m.last_seen
    if isinstance(m, Gap):
        return m.detected_at or m.time
    own = getattr(m, "at", None)
    return own if isinstance(own, datetime) else m.time


def future_dated(claimed: datetime | None, stored: Stored | None, skew: timedelta) -> bool:
    """The message's time lies ahead of the stream's timestamp by more than ``skew``."""
    return (
        claimed is not None
        and stored is not None
        and stored.time is not None
        and claimed > stored.time + skew
    )


@dataclass(frozen=True)
class Rules:
    """What becomes an alert and for how long (the ``alerts`` settings)."""

    reasons: frozenset[str] = frozenset()  # empty: every Warning Event
    resolve_after: timedelta = timedelta(minutes=15)
    gap_alert_for: timedelta = timedelta(hours=1)
    dropped_alert_for: timedelta = timedelta(hours=1)
    resolved_retention: timedelta = timedelta(minutes=15)
    # a message's time ahead of its stream timestamp by more: taken as the stream's timestamp
    max_clock_skew: timedelta = timedelta(seconds=30)
    labels: Mapping[str, str] = field(default_factory=dict)  # static, on every alert
    extension_labels: tuple[str, ...] = ()  # enrichment extensions an Event alert carries
    generator_url: str = "nats://K8S_EVENTS/k8s-event-alerting"
    # an Event's message (and a status event's detail) kept, in bytes of UTF-8 at most
    message_bytes: int = holding.MESSAGE_BYTES
    bounds: Bounds = field(default_factory=Bounds)  # the alerts held at most
    # a digest alerts when its occurrences reach its reason's threshold, else this one
    min_occurrences: int = 3
    thresholds: Mapping[str, int] = field(default_factory=dict)  # reason -> occurrences
    # how late after its window's end a digest may come (a series alert's end: window end +
    # one window + this)
    digest_grace: timedelta = timedelta(minutes=2)

    @property
    def annotation_bytes(self) -> int:
        """The longest annotation this version writes: a text and a few values around it."""
        return self.message_bytes + 6 * holding.VALUE_BYTES

    def wants(self, ev: KubeEvent) -> bool:
        return ev.warning and (not self.reasons or ev.reason in self.reasons)

    def wants_series(self, s: Series) -> bool:
        return s.type == "Warning" and (not self.reasons or s.reason in self.reasons)

    def threshold(self, reason: str) -> int:
        """The occurrences in one window at which a series of ``reason`` alerts."""
        return self.thresholds.get(reason, self.min_occurrences)


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


@dataclass(frozen=True)
class Refusal:
    """An alert not held: why (a bound), which, and of which namespace ("" for a status
    alert)."""

    why: Why
    alertname: str
    cluster: str
    namespace: str


@dataclass
class _Record:
    alert: Alert
    # Event alerts: when the version shown was last seen; status alerts: the time of the
    # last status event applied (an older one is stale)
    latest: datetime
    # Event alerts: the newest resourceVersion applied per Event uid (the newest uids)
    versions: dict[str, int] = field(default_factory=dict)


def _key(labels: Mapping[str, str], own: Iterable[str]) -> Key:
    return tuple((name, labels.get(name, "")) for name in own)


def _rv(value: str) -> int | None:
    """A resourceVersion as a number, or None: ASCII digits only ("²" is a digit to
    ``str.isdigit`` and no number to ``int``), at most 64 of them (``int`` refuses a string of
    over 4,300)."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 64 else None


class State:
    """The alerts of the stream read so far; every method answers the alerts to send.

    ``stored``: where JetStream stored the message (``Stored``). The running subscriber always
    gives it; without it a message is ordered by its own time."""

    def __init__(
        self,
        rules: Rules,
        clock: Clock = SYSTEM.utcnow,
        on_refused: Callable[[Refusal], None] | None = None,
    ) -> None:
        self.rules = rules
        self._clock = clock
        # told of every alert not held (a bound reached): the subscriber counts and logs it
        self.on_refused: Callable[[Refusal], None] = on_refused or (lambda _: None)
        self._records: Held[Key, _Record] = Held(rules.bounds)
        # status keys (by digest): the last stream sequence applied
        self._sequences: dict[bytes, int] = {}

    @property
    def held(self) -> Held[Key, _Record]:
        """The records held, bounded (read only: ``count``, ``namespace``, ``events``)."""
        return self._records

    # -- messages -------------------------------------------------------------------------

    def event(self, ev: KubeEvent, stored: Stored | None = None) -> list[Alert]:
        """A version of a Kubernetes Event: [its alert], or [] when it makes none."""
        if not self.rules.wants(ev):
            return []
        judged = ev.tenancy
        own = {
            "alertname": AlertName.EVENT.value,
            "cluster": value(ev.cluster),
            "namespace": value(judged.namespace),
            "kind": value(ev.involved.kind),
            # another namespace's object (any Node, from a tenant's namespace): not its name
            "name": value(ev.involved.name) if judged.involved.trusted else "",
            "reason": value(ev.reason),
        }
        if judged.mark:
            own[UNTRUSTED] = value(judged.mark)
        key = _key(own, EVENT_LABELS)
        where = (own["cluster"], own["namespace"])
        ext = self._extensions(ev.extensions)
        last = self._when(ev.last_seen, stored)
        first = min(ev.first_seen or last, last)
        rv = _rv(ev.resource_version)
        uid = value(ev.uid)
        count, message = value(str(ev.count)), cut(ev.message, self.rules.message_bytes)
        record = self._records.get(key)
        if record is not None:
            applied = record.versions.get(uid)
            if applied is not None and (rv is None or rv <= applied):
                return [record.alert]  # this version or a newer one is in already
            shown_ext = self._extensions(record.alert.labels)
            if last < record.latest:  # an older Event than the one shown: keep that one
                shown = record.alert.annotations
                count, message, last = shown["count"], shown["message"], record.latest
                ext = shown_ext
            else:  # a value this version lacks (a partial enrichment) keeps the one shown
                ext = {**shown_ext, **ext}
            first = min(first, record.alert.starts_at)
        versions = dict(record.versions) if record is not None else {}
        if rv is not None:
            versions.pop(uid, None)  # to the end: the oldest are left first
            versions[uid] = rv
            while len(versions) > VERSIONS_KEPT:
                del versions[next(iter(versions))]
        alert = Alert(
            labels=self._labels(own, ext),
            annotations={
                "summary": f"{own['reason']}: {own['kind']} {own['namespace']}/"
                f"{own['name']} in cluster {own['cluster']}, seen {count} times",
                "message": message,
                "count": count,
                "first_seen": rfc3339(first),
                "last_seen": rfc3339(last),
            },
            starts_at=first,
            ends_at=last + self.rules.resolve_after,
            generator_url=self.rules.generator_url,
        )
        why = self._hold(key, _Record(alert, last, versions), Kind.EVENT, where)
        if why is not None:
            before = [record.alert] if record is not None else []
            return before + self._refused(why, where, alert, last)
        self._records.pop(_retired(alert.labels))  # its labels are firing again
        if record is None or record.alert.labels == alert.labels:
            return [alert]
        # another identity in Alertmanager: the old one resolves (sent with the others for
        # resolved_retention, so an Alertmanager away now hears of it too)
        old = record.alert
        gone = replace(old, ends_at=min(old.ends_at or last, last))
        why = self._hold(_retired(old.labels), _Record(gone, record.latest), Kind.EVENT, where)
        refusal = self._refused(why, where, gone, last) if why is not None else []
        return [gone, alert, *refusal]

    def digest(self, d: Digest, stored: Stored | None = None) -> list[Alert]:
        """A digest of one series for one window: [its series alert] when its occurrences
        reach the threshold (or the alert it resolves, or the alert as it is when this window
        or a later one is in already); [] when it makes none."""
        s = d.series
        if not self.rules.wants_series(s):
            return []
        own = {
            "alertname": AlertName.SERIES.value,
            "cluster": value(s.cluster),
            "namespace": value(s.namespace),
            "kind": value(s.kind),
            # a series of another namespace's object names none (the digest's name is "")
            "name": "" if s.untrusted else value(s.name),
            "reason": value(s.reason),
        }
        if s.untrusted:
            own[UNTRUSTED] = SERIES_MARK
        key = _key(own, EVENT_LABELS)
        where = (own["cluster"], own["namespace"])
        # the window as the stream dates it: one dated ahead of the digests stream's own time
        # is taken as ending when it was stored
        length = d.end - d.start
        end = self._when(d.end, stored)
        start = end - length
        threshold = self.rules.threshold(s.reason)
        over = d.occurrences >= threshold
        record = self._records.get(key)
        if record is None:
            if not over:
                return []  # under the threshold: nothing fires
        elif end < record.latest:
            return [record.alert]  # an older window than one applied: changes nothing
        elif end == record.latest:
            shown = record.alert.annotations
            if not (over and shown.get("window_end") == rfc3339(end)):
                return [record.alert]  # this window is in already
            if d.occurrences <= int(shown["occurrences"]):
                return [record.alert]
            # another series of the same labels (an object of the same name, a new uid) in
            # this window, more often: it is shown (the most, whatever the order)
        elif not over:
            if not _fires_at(record.alert, start):
                return []  # resolved already: nothing to say
            # a later window under the threshold: resolved at its start (the end of the last
            # window that reached it)
            gone = replace(record.alert, ends_at=max(record.alert.starts_at, start))
            why = self._hold(key, _Record(gone, end), Kind.EVENT, where)
            if why is not None:  # a smaller record is never refused: held as before
                return [record.alert]
            return [gone]
        windows, starts = 1, start
        if record is not None and _fires_at(record.alert, start) and start <= record.latest:
            # the window after the one shown (or the same one): the same alert, still firing
            shown = record.alert.annotations
            same = end == record.latest
            windows = int(shown["windows"]) + (0 if same else 1)
            starts = record.alert.starts_at
        what = (
            f"{own['kind']} {own['namespace']}/{own['name']}"
            if own["name"]
            else f"{own['kind']} in {own['namespace']} (untrusted)"
        )
        alert = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"{own['reason']}: {what} {d.occurrences} times in "
                f"{_span(length)} (cluster {own['cluster']}"
                + (f", {windows} windows in a row)" if windows > 1 else ")"),
                "message": self._text(d.last_message),
                "occurrences": str(d.occurrences),
                "threshold": str(threshold),
                "windows": str(windows),
                "window_start": rfc3339(start),
                "window_end": rfc3339(end),
                "first_seen": rfc3339(d.first_seen) if d.first_seen else "",
                "last_seen": rfc3339(d.last_seen) if d.last_seen else "",
                "versions": str(d.versions),
                "sampled": str(d.sampled).lower(),
                "combined": str(d.combined).lower(),
                "stream": value(d.stream),
                "first_sequence": str(d.first_seq),
                "last_sequence": str(d.last_seq),
                "digest": d.id,
            },
            starts_at=starts,
            ends_at=end + length + self.rules.digest_grace,
            generator_url=self.rules.generator_url,
        )
        why = self._hold(key, _Record(alert, end), Kind.EVENT, where)
        if why is not None:
            before = [record.alert] if record is not None else []
            return before + self._refused(why, where, alert, end)
        return [alert]

    def unreachable(self, s: ApiserverUnreachable, stored: Stored | None = None) -> list[Alert]:
        """The API server is unreachable for a scope: the alert fires until it is reachable."""
        at = self._when(claimed_time(s), stored)
        key, own = self._status_key(AlertName.UNREACHABLE, s.cluster, s.scope)
        record = self._records.get(key)
        if not self._newer(key, record, stored, at):
            return [record.alert] if record is not None else []
        firing = record is not None and record.alert.ends_at is None
        since = record.alert.starts_at if record is not None and firing else at
        cluster, scope = own["cluster"], own["scope"]
        alert = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"control plane unreachable for cluster {cluster}",
                "description": f"The bridge can not reach the Kubernetes API server of "
                f"cluster {cluster} (scope {scope}) since {rfc3339(since)}; Events "
                "written meanwhile are read when it answers again.",
                "detail": self._text(s.detail),
                "since": rfc3339(since),
            },
            starts_at=since,
            ends_at=None,
            generator_url=self.rules.generator_url,
        )
        return self._apply(key, _Record(alert, at), stored, record)

    def reachable(self, s: ApiserverReachable, stored: Stored | None = None) -> list[Alert]:
        """The API server answers again: the unreachable alert of the scope resolves (also one
        this process never saw fire: Alertmanager may still hold it). A future-dated one
        resolves nothing (the module's docstring says why)."""
        claimed = claimed_time(s)
        key, own = self._status_key(AlertName.UNREACHABLE, s.cluster, s.scope)
        record = self._records.get(key)
        if future_dated(claimed, stored, self.rules.max_clock_skew):
            return [record.alert] if record is not None else []
        at = self._when(claimed, stored)
        if not self._newer(key, record, stored, at):
            return [record.alert] if record is not None else []
        # never ahead of the stream (nor of now, fed by hand): it resolves when it was stored
        ended = min(at, stored.time if stored is not None and stored.time else self._clock())
        if record is not None:
            starts = min(record.alert.starts_at, ended)
            annotations = dict(record.alert.annotations)
        else:
            starts = ended
            annotations = {"summary": f"control plane unreachable for cluster {own['cluster']}"}
        annotations["resolved_detail"] = self._text(s.detail)
        alert = Alert(
            labels=self._labels(own),
            annotations=annotations,
            starts_at=starts,
            ends_at=ended,
            generator_url=self.rules.generator_url,
        )
        return self._apply(key, _Record(alert, at), stored, record)

    def gap(self, s: Gap, stored: Stored | None = None) -> list[Alert]:
        """Versions of Events may be missing: an alert for ``gap_alert_for``."""
        detected = self._when(claimed_time(s), stored)
        key, own = self._status_key(AlertName.GAP, s.cluster, s.scope)
        record = self._records.get(key)
        if stored is not None and not self._newer(key, record, stored, detected):
            return [record.alert] if record is not None else []
        from_rv, to_rv, certainty = (
            value(s.from_resource_version),
            value(s.to_resource_version),
            value(s.certainty),
        )
        starts, ends = detected, detected + self.rules.gap_alert_for
        if record is not None and _fires_at(record.alert, detected):
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
                "summary": f"Kubernetes Events of cluster {own['cluster']} (scope "
                f"{own['scope']}) may be missing between resourceVersions {from_rv} and "
                f"{to_rv} ({certainty})",
                "from_resource_version": from_rv,
                "to_resource_version": to_rv,
                "certainty": certainty,
                "why": self._text(s.why),
                "detected_at": rfc3339(detected),
            },
            starts_at=starts,
            ends_at=ends,
            generator_url=self.rules.generator_url,
        )
        return self._apply(key, _Record(alert, detected), stored, record)

    def dropped(self, s: Dropped, stored: Stored | None = None) -> list[Alert]:
        """A message no server of the stream could take: an alert for ``dropped_alert_for``
        after the last one, counting the drops while it fires."""
        at = self._when(claimed_time(s), stored)
        own = {"alertname": AlertName.DROPPED.value, "cluster": value(s.cluster)}
        key = _key(own, DROPPED_LABELS)
        record = self._records.get(key)
        if not self._newer(key, record, stored, at):
            return [record.alert] if record is not None else []
        count, starts, ends = _counting(record, at, self.rules.dropped_alert_for, "dropped")
        reason = value(s.reason)
        alert = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"{count} message(s) of cluster {own['cluster']} not in the "
                f"stream: no server of the stream takes them ({reason})",
                "description": "The bridge could not publish a message (an Event, or a status "
                "event) because no server of the stream takes it; subscribers will never get "
                "it. Raise the server's max_payload or the stream's max_msg_size to keep such "
                "messages (the bridge's K8sEventBridgeMessageDropped fires too).",
                "dropped": str(count),
                "last_id": value(s.dropped_id),
                "subject": value(s.subject),
                "size": value(str(s.size)),
                "reason": reason,
                "detail": self._text(s.detail),
                "last_dropped_at": rfc3339(at),
            },
            starts_at=starts,
            ends_at=ends,
            generator_url=self.rules.generator_url,
        )
        return self._apply(key, _Record(alert, at), stored, record)

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
            self._records.pop(key)
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
            name = AlertName(a.name)
            own_names = OWN_LABELS[name]
            own = {n: value(a.labels.get(n, "")) for n in own_names}
            key = _key(own, own_names)
            if key in self._records:
                continue
            try:
                record = self._adopted(a, own)
            except (KeyError, ValueError):
                continue  # not in the shape this version writes
            if name in (AlertName.EVENT, AlertName.SERIES):
                where: Where | None = (own["cluster"], own["namespace"])
                why = self._hold(key, record, Kind.EVENT, where)
            else:
                kind = Kind.REFUSAL if name is AlertName.REFUSED else Kind.STATUS
                where = None
                why = self._hold(key, record, kind, None)
            if why is not None:
                self._refused(why, where, record.alert, record.latest, alert_too=False)
                continue
            taken += 1
        return taken

    def _adopted(self, a: Alert, own: dict[str, str]) -> _Record:
        name = AlertName(a.name)
        ext = self._extensions(a.labels) if name is AlertName.EVENT else {}
        labels = self._labels(own, ext)
        # what this version writes only, each value no longer than this version writes it
        annotations = {
            k: cut(v, self.rules.annotation_bytes)
            for k, v in a.annotations.items()
            if k in ANNOTATIONS[name]
        }
        a = replace(
            a, labels=labels, annotations=annotations, generator_url=self.rules.generator_url
        )
        if name is AlertName.UNREACHABLE:
            return _Record(replace(a, ends_at=None), a.starts_at)
        needs, when = _ADOPT_NEEDS[name]
        missing = needs - set(a.annotations)
        latest = parse_time(a.annotations.get(when))
        if missing or latest is None or a.ends_at is None:
            raise ValueError(f"annotations missing: {sorted(missing) or when}")
        for counted in ("dropped", "refused"):
            if counted in a.annotations:
                int(a.annotations[counted])  # a ValueError when it is no count
        return _Record(a, latest)

    # -- what is held, and what is refused ------------------------------------------------

    def _hold(self, key: Key, record: _Record, kind: Kind, where: Where | None) -> Why | None:
        """``record`` held under ``key``, or why not (a bound: ``holding.Held``)."""
        a = record.alert
        size = holding.cost(holding.strings(a.labels, a.annotations, self.rules.labels))
        size += holding.cost(record.versions)
        return self._records.put(key, record, kind, where, size)

    def _refused(
        self, why: Why, where: Where | None, alert: Alert, at: datetime, *, alert_too: bool = True
    ) -> list[Alert]:
        """``alert`` was not held: tell ``on_refused``; an Event alert's refusal also fires
        (or counts in) the refusal alert of its namespace, or of every namespace when the
        total bound refused it (``alert_too``: and answers it, to be sent)."""
        cluster, namespace = where or (alert.labels.get("cluster", ""), "")
        self.on_refused(Refusal(why, alert.name, cluster, namespace))
        if where is None:
            return []
        if why not in (Why.NAMESPACE_ALERTS, Why.NAMESPACE_BYTES):
            cluster = namespace = ALL_NAMESPACES
        own = {"alertname": AlertName.REFUSED.value, "cluster": cluster, "namespace": namespace}
        key = _key(own, REFUSED_LABELS)
        record = self._records.get(key)
        count, starts, ends = _counting(record, at, self.rules.resolve_after, "refused")
        if namespace == ALL_NAMESPACES:
            held = f"all namespaces hold the most alerts ({why.value})"
        else:
            held = f"namespace {namespace} of cluster {cluster} holds its most alerts ({why.value})"
        labels = alert.labels
        refusal = Alert(
            labels=self._labels(own),
            annotations={
                "summary": f"{count} Warning Event alert(s) refused: {held}",
                "description": "The alerting subscriber holds a bounded number of alerts per "
                "namespace and in all (alerts.max_alerts_per_namespace, "
                "alerts.max_bytes_per_namespace, alerts.max_alerts, alerts.max_bytes); the "
                "Warning Events past a bound make no alert while it is reached. Look at the "
                "namespace's Events (kubectl get events), or raise the bound.",
                "refused": str(count),
                "why": why.value,
                "last_refused": f"{labels.get('reason', '')}: {labels.get('kind', '')} "
                f"{labels.get('namespace', '')}/{labels.get('name', '')}",
                "last_refused_at": rfc3339(at),
            },
            starts_at=starts,
            ends_at=ends,
            generator_url=self.rules.generator_url,
        )
        again = self._hold(key, _Record(refusal, at), Kind.REFUSAL, None)
        if again is not None:
            self.on_refused(Refusal(again, refusal.name, cluster, namespace))
            return []
        return [refusal] if alert_too else []

    # -- helpers --------------------------------------------------------------------------

    def _labels(
        self, own: Mapping[str, str], ext: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        # the untrusted mark is a label only when there is one
        mine = {k: v for k, v in own.items() if v or k != UNTRUSTED}
        return {**self.rules.labels, **(ext or {}), **mine}

    def _extensions(self, values: Mapping[str, str]) -> dict[str, str]:
        """The labels ``extension_labels`` names, from an Event's extensions (or an alert's
        labels): only non-empty strings of at most ``MAX_LABEL_VALUE`` characters."""
        out: dict[str, str] = {}
        for name in self.rules.extension_labels:
            value = values.get(name)
            if isinstance(value, str) and 0 < len(value) <= MAX_LABEL_VALUE:
                out[name] = value
        return out

    def _status_key(self, name: AlertName, cluster: str, scope: str) -> tuple[Key, dict[str, str]]:
        own = {"alertname": name.value, "cluster": value(cluster), "scope": value(scope)}
        return _key(own, STATUS_LABELS), own

    def _text(self, text: str) -> str:
        """A message or a status event's detail: at most ``message_bytes``."""
        return cut(text, self.rules.message_bytes)

    def _when(self, claimed: datetime | None, stored: Stored | None) -> datetime:
        """When a message was written: its own time, unless that lies ahead of the stream's
        timestamp by more than ``max_clock_skew`` (then the stream's); without one, the
        stream's, else now."""
        if claimed is None or future_dated(claimed, stored, self.rules.max_clock_skew):
            if stored is not None and stored.time is not None:
                return stored.time
            return claimed or self._clock()
        return claimed

    def _newer(self, key: Key, record: _Record | None, stored: Stored | None, at: datetime) -> bool:
        """Whether a status event comes after the last one applied for its key: by the
        stream's order when both are known, else (an alert taken back from Alertmanager, or no
        ``Stored``) by time."""
        last = self._sequences.get(_digest(key))
        if stored is not None and last is not None:
            return stored.sequence > last
        return record is None or at > record.latest

    def _apply(
        self, key: Key, record: _Record, stored: Stored | None, shown: _Record | None
    ) -> list[Alert]:
        """A status alert held (and its message's sequence kept); refused at its bound: the
        alert ``shown`` before, if any."""
        why = self._hold(key, record, Kind.STATUS, None)
        if why is not None:
            self._refused(why, None, record.alert, record.latest)
            return [shown.alert] if shown is not None else []
        if stored is not None:
            digest = _digest(key)
            self._sequences.pop(digest, None)  # to the end: the oldest are left first
            self._sequences[digest] = stored.sequence
            if len(self._sequences) > SEQUENCES_KEPT:
                del self._sequences[next(iter(self._sequences))]
        return [record.alert]


def _digest(key: Key) -> bytes:
    """A status key as the sequences keep it: 16 bytes, whatever its values' lengths."""
    return hashlib.blake2b(repr(key).encode("utf-8", "replace"), digest_size=16).digest()


def _retired(labels: Mapping[str, str]) -> Key:
    """The key of an Event alert resolved because its labels changed (never an own key)."""
    return (("", "retired"), *sorted(labels.items()))


def _fires_at(alert: Alert, t: datetime) -> bool:
    """Whether an alert with an end of its own still fires at ``t`` (a message's time, not
    now: replicas reading the same stream decide the same)."""
    return alert.ends_at is not None and alert.ends_at > t


def _counting(
    record: _Record | None, at: datetime, lasts: timedelta, counted: str
) -> tuple[int, datetime, datetime]:
    """An alert that counts what made it (dropped, refused) at ``at``: 1 and [at, at +
    ``lasts``]; or, while the one held still fires, one more than its ``counted`` annotation
    and its range widened."""
    count, starts, ends = 1, at, at + lasts
    if record is not None and _fires_at(record.alert, at):
        count += int(record.alert.annotations[counted])
        starts = min(starts, record.alert.starts_at)
        assert record.alert.ends_at is not None
        ends = max(ends, record.alert.ends_at)
    return count, starts, ends


def _span(t: timedelta) -> str:
    """A window's length as a person reads it: 5m, 30s, 1h, 2m30s."""
    left = int(t.total_seconds())
    parts = []
    for unit, n in (("h", 3600), ("m", 60), ("s", 1)):
        if left >= n:
            parts.append(f"{left // n}{unit}")
            left %= n
    return "".join(parts) or "0s"


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
