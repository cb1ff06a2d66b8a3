"""A digest: one series of Events, one window of the stream, said once.

A series is what the recorders repeat: one involved object (its uid, else its kind and name, in
the Event's namespace) and one reason, across however many Event objects the recorders made
for it. A window is a stretch of the versions stream's own time (the time JetStream stored each
message), ``[start, end)``, ``window`` seconds long, counted from the Unix epoch. The digest of
a series for a window says how many times it happened in that window (``occurrences``: what
its counts advanced), from which versions (their number and the stream's sequence numbers),
and what it said first and last. ``k8s-event-digests`` makes them (``k8s_event_consumer.
digests``); this module is their one format, for the program that writes them and for every
reader (the alerting and OTLP subscribers, ``k8s-event-bridge tail --digests``).

A digest is a CloudEvent of type ``io.k8s.digest``, structured mode, its bytes a pure function
of its content (``encode``): the same series and window give the same id and, from the same
versions, the same bytes. Its id is ``digest/`` and 32 hex digits of a SHA-256 over the
cluster, the series and the window's start: a reader deduplicates by it (the program stores
each once without a ``Nats-Msg-Id``: ``k8s_event_consumer.digests.writing``; ``headers`` is
what another publisher, a test, may send). ``decode`` reads one
back, refusing (``BadMessage``) what is not in this shape: a digest is its writer's word like
any message, and the readers hold none of it beyond the bounds below.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from k8s_event_common import subjects
from k8s_event_common.cloudevents import BadMessage, Envelope, cut, parse_time, quoted

TYPE: Final = "io.k8s.digest"
ID_PREFIX: Final = "digest/"
DEFAULT_PREFIX: Final = (
    "k8s.digests"  # the digests' subjects: <prefix>.<cluster>.<ns>.<kind>.<reason>
)
DEFAULT_STREAM: Final = "K8S_DIGESTS"
MAX_MESSAGE: Final = 1024  # characters of the first and the last message a digest keeps
MAX_UIDS: Final = 16  # Event uids a digest names; ``uids_omitted`` counts the rest
MAX_TEXT: Final = 1024  # characters of any other string a reader takes from a digest
# a count a reader takes: an Event's count is an int32 in the API; occurrences add up many
MAX_NUMBER: Final = 2**53


@dataclass(frozen=True)
class Series:
    """What a digest is about. ``uid`` is the involved object's, "" when it has none; ``name``
    and ``uid`` are "" when the Event's namespace may not name the object (``untrusted``:
    the tenant's word, k8s_event_common.tenancy), so a series never speaks for another
    namespace. ``type`` and ``reporting_component`` are the last version's."""

    cluster: str
    namespace: str
    kind: str
    name: str
    uid: str
    reason: str
    type: str = "Normal"
    reporting_component: str = ""
    untrusted: bool = False
    # the versions of series past the program's cap (``digests.max_series``), folded into one
    # digest per window; its occurrences count each version once (counts are not followed)
    overflow: bool = False

    @property
    def key(self) -> tuple[str, ...]:
        """What makes two versions one series: the object (its uid, else kind and name, in the
        Event's namespace) and the reason."""
        if self.overflow:
            return (self.cluster, "\uffff", "overflow")  # sorts after every namespace
        obj = ("uid", self.uid) if self.uid else ("name", self.kind, self.name)
        return (self.cluster, self.namespace, *obj, self.reason)


@dataclass(frozen=True)
class Digest:
    """One series in one window. ``first_seq`` and ``last_seq`` bound the versions stream's
    sequence numbers of the versions it folded (each of them is there: drill down with
    ``k8s-event-bridge tail --from-seq``); ``count_from`` is where the series' count stood
    before the window, ``count_to`` where its last version left it; ``sampled``: a count
    jumped by more than one between two versions (a recorder's spam filter skipped writes);
    ``combined``: a version said "(combined from similar events)"."""

    series: Series
    start: datetime
    end: datetime
    occurrences: int
    versions: int
    first_seen: datetime | None
    last_seen: datetime | None
    count_from: int
    count_to: int
    uids: tuple[str, ...]
    uids_omitted: int
    first_message: str
    last_message: str
    sampled: bool
    combined: bool
    stream: str
    first_seq: int
    last_seq: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def id(self) -> str:
        return digest_id(self.series, self.start)

    @property
    def window(self) -> float:
        return (self.end - self.start).total_seconds()


def digest_id(series: Series, start: datetime) -> str:
    key = json.dumps([*series.key, _time(start)], ensure_ascii=True, separators=(",", ":"))
    return ID_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]


def subject(prefix: str, series: Series) -> str:
    """``<prefix>.<cluster>.<namespace>.<kind>.<reason>``, each a token (``subjects.token``)."""
    s = series
    return ".".join(
        [prefix, *(subjects.token(v) for v in (s.cluster, s.namespace, s.kind, s.reason))]
    )


def subject_filter(prefix: str) -> str:
    return f"{prefix}.>"


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """At most ``limit`` characters, whatever UTF-8 can not carry (a lone surrogate) made
    U+FFFD, so that the bytes are always writable and always the same."""
    t = text[:limit]
    try:
        t.encode()
    except UnicodeEncodeError:  # one U+FFFD per surrogate: the length stays within the bound
        t = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in t)
    return t


def _time(t: datetime | None) -> str | None:
    """RFC 3339 in UTC, ``Z``, microseconds only when there are some: one spelling per instant."""
    if t is None:
        return None
    t = t.astimezone(UTC)
    frac = f".{t.microsecond:06d}" if t.microsecond else ""
    # the year in four digits always (strftime's %Y writes year 999 as "999": no RFC 3339)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}{frac}Z"
    )


def document(d: Digest) -> dict[str, Any]:
    """The CloudEvent of ``d`` as a JSON object, every member in one order."""
    s = d.series
    return {
        "specversion": "1.0",
        "id": d.id,
        "source": f"k8s://{s.cluster}/namespaces/{s.namespace}",
        "type": TYPE,
        "subject": f"{s.kind}/{s.name}",
        "time": _time(d.end),
        "datacontenttype": "application/json",
        "k8scluster": s.cluster,
        "k8snamespace": s.namespace,
        "k8skind": s.kind,
        "k8sname": s.name,
        "k8sreason": s.reason,
        "k8soccurrences": d.occurrences,
        "data": {
            "series": {
                "cluster": s.cluster,
                "namespace": s.namespace,
                "kind": s.kind,
                "name": s.name,
                "uid": s.uid,
                "reason": s.reason,
                "type": s.type,
                "reportingComponent": s.reporting_component,
                "untrusted": s.untrusted,
                "overflow": s.overflow,
            },
            "window": {"start": _time(d.start), "end": _time(d.end)},
            "occurrences": d.occurrences,
            "versions": d.versions,
            "firstSeen": _time(d.first_seen),
            "lastSeen": _time(d.last_seen),
            "counts": {"from": d.count_from, "to": d.count_to},
            "events": list(d.uids),
            "eventsOmitted": d.uids_omitted,
            "firstMessage": d.first_message,
            "lastMessage": d.last_message,
            "sampled": d.sampled,
            "combined": d.combined,
            "stream": {"name": d.stream, "firstSequence": d.first_seq, "lastSequence": d.last_seq},
        },
    }


def encode(d: Digest) -> bytes:
    """The message body: the CloudEvent in structured mode, the same bytes for the same digest."""
    return json.dumps(document(d), ensure_ascii=False, separators=(",", ":")).encode()


HEADERS: Final = {"Content-Type": "application/cloudevents+json; charset=utf-8"}


def headers(d: Digest) -> dict[str, str]:
    return {**HEADERS, "Nats-Msg-Id": d.id}


# --- reading one back -------------------------------------------------------------------------


def _obj(d: dict[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    if not isinstance(v, dict):
        raise BadMessage(f"digest {key} {quoted(v)} is not an object")
    return v


def _text(d: dict[str, Any], key: str, limit: int = MAX_TEXT) -> str:
    v = d.get(key, "")
    if not isinstance(v, str):
        raise BadMessage(f"digest {key} {quoted(v)} is not a string")
    if len(v) > limit:
        raise BadMessage(f"digest {key} of {len(v)} characters, over {limit}")
    return v


def _int(d: dict[str, Any], key: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_NUMBER:
        raise BadMessage(f"digest {key} {quoted(v)} is not a count")
    return v


def _bool(d: dict[str, Any], key: str) -> bool:
    v = d.get(key, False)
    if not isinstance(v, bool):
        raise BadMessage(f"digest {key} {quoted(v)} is not true or false")
    return v


def _when(d: dict[str, Any], key: str, required: bool = True) -> datetime | None:
    try:
        t = parse_time(d.get(key))
    except BadMessage as exc:
        raise BadMessage(f"digest {key} {exc}") from None
    if t is None and required:
        raise BadMessage(f"digest {key} is missing")
    return t


def from_envelope(envelope: Envelope) -> Digest:
    """The ``Digest`` of a decoded CloudEvent of type ``io.k8s.digest``. Raises ``BadMessage``
    naming the member that is not in the shape."""
    data = envelope.data
    s = _obj(data, "series")
    w = _obj(data, "window")
    c = _obj(data, "counts")
    st = _obj(data, "stream")
    uids = data.get("events", [])
    if (
        not isinstance(uids, list)
        or len(uids) > MAX_UIDS
        or not all(isinstance(u, str) and len(u) <= MAX_TEXT for u in uids)
    ):
        raise BadMessage(f"digest events {quoted(uids)} is not a list of at most {MAX_UIDS} uids")
    series = Series(
        cluster=_text(s, "cluster"),
        namespace=_text(s, "namespace"),
        kind=_text(s, "kind"),
        name=_text(s, "name"),
        uid=_text(s, "uid"),
        reason=_text(s, "reason"),
        type=_text(s, "type") or "Normal",
        reporting_component=_text(s, "reportingComponent"),
        untrusted=_bool(s, "untrusted"),
        overflow=_bool(s, "overflow"),
    )
    start, end = _when(w, "start"), _when(w, "end")
    assert start is not None and end is not None
    if end <= start:
        raise BadMessage(f"digest window ends ({_time(end)}) before it starts ({_time(start)})")
    d = Digest(
        series=series,
        start=start,
        end=end,
        occurrences=_int(data, "occurrences"),
        versions=_int(data, "versions"),
        first_seen=_when(data, "firstSeen", required=False),
        last_seen=_when(data, "lastSeen", required=False),
        count_from=_int(c, "from"),
        count_to=_int(c, "to"),
        uids=tuple(uids),
        uids_omitted=_int(data, "eventsOmitted"),
        first_message=_text(data, "firstMessage"),
        last_message=_text(data, "lastMessage"),
        sampled=_bool(data, "sampled"),
        combined=_bool(data, "combined"),
        stream=_text(st, "name"),
        first_seq=_int(st, "firstSequence"),
        last_seq=_int(st, "lastSequence"),
        extra=envelope.extensions,
    )
    if envelope.attributes.get("id") != d.id:
        raise BadMessage(
            f"digest id {quoted(envelope.attributes.get('id'))} is not its series' and "
            f"window's ({d.id})"
        )
    return d


def line(d: Digest) -> str:
    """One line a person reads: "BackOff Pod shop/web-1: 57 times in 5m0s from 12:00:00Z ..."."""
    s = d.series
    what = (
        f"{s.kind} {s.namespace}/{s.name}" if s.name else f"{s.kind} in {s.namespace} (untrusted)"
    )
    extra = []
    if d.sampled:
        extra.append("sampled")
    if d.combined:
        extra.append("combined")
    tail = f" [{', '.join(extra)}]" if extra else ""
    return (
        f"{_time(d.start)} +{_seconds(d.window)} {s.reason} {what}: {d.occurrences} times "
        f"in {d.versions} versions, count {d.count_from}->{d.count_to}, "
        f"seq {d.first_seq}-{d.last_seq}{tail}: {cut(d.last_message)}"
    )


def _seconds(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"
