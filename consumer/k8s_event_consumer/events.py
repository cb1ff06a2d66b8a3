"""What a message of the bridge's stream holds, decoded: a CloudEvent plus a typed view.

``decode(subject, headers, body)`` takes one NATS message in either CloudEvents mode
(structured: ``Content-Type: application/cloudevents+json`` and the JSON CloudEvent as the body;
binary: ``ce-*`` headers, percent-encoded, and the Event as the body) and returns a
``Decoded``: the ``cloudevents`` SDK's ``CloudEvent`` and exactly one of

- ``KubeEvent``: a Kubernetes Event (types ``io.k8s.event.warning`` / ``io.k8s.event.normal``),
  with the series-aware ``count`` and ``last_seen`` the bridge's README defines, and what the
  bridge's enrichment added: ``extensions`` (``{"team": "payments"}``), ``enriched`` and
  ``missing``;
- a status event of the bridge itself (types ``io.k8s.bridge.<what>``): ``Gap``,
  ``ApiserverUnreachable``, ``ApiserverReachable``, ``ApiserverDegraded``,
  ``ApiserverRecovered``, ``Dropped``, ``LeaderChanged``, ``Started``, ``Stopped``, or
  ``Status`` for a kind this version does not know (newer bridges may add some);
- a digest of a series for a window (type ``io.k8s.digest``, the digests stream's:
  ``k8s_event_common.digests.Digest``), made by ``k8s-event-digests``.

A message that is none of these raises ``BadMessage`` naming what is wrong. The envelope (the
two modes, the attributes every CloudEvent has) is read by ``k8s_event_common.cloudevents``, the
one decoder ``k8s-event-bridge tail`` reads through too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from cloudevents.core.v1.event import CloudEvent

from k8s_event_common import cloudevents, digests, tenancy
from k8s_event_common.cloudevents import (
    DIGEST_TYPE,
    EVENT_TYPE_PREFIX,
    STATUS_TYPE_PREFIX,
    BadMessage,
    parse_time,
)

# the envelope is read by k8s_event_common.cloudevents (tail reads through it too); these
# names stay the kit's API
__all__ = [
    "EVENT_TYPE_PREFIX",
    "STATUS_KINDS",
    "STATUS_TYPE_PREFIX",
    "ApiserverDegraded",
    "ApiserverReachable",
    "ApiserverRecovered",
    "ApiserverUnreachable",
    "BadMessage",
    "Decoded",
    "Dropped",
    "Gap",
    "KubeEvent",
    "LeaderChanged",
    "ObjectRef",
    "Started",
    "Status",
    "Stopped",
    "decode",
    "kind",
    "parse_time",
]

# The status events this version knows, by their own name (a CloudEvent's ``subject``). A
# message's kind is its publisher's word: a handler, a metric label or a count is chosen from
# this table, never by the name a message gives itself (one naming itself ``event`` must not
# reach the Event handler; a new name per message must not make a new key); anything else is
# ``other``.
STATUS_KINDS = (
    "gap",
    "apiserver_unreachable",
    "apiserver_reachable",
    "apiserver_degraded",
    "apiserver_recovered",
    "dropped",
    "leader_changed",
    "started",
    "stopped",
)

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class ObjectRef:
    """The Event's ``involvedObject`` (``regarding`` in events.k8s.io terms)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = ""
    field_path: str = ""


@dataclass(frozen=True)
class KubeEvent:
    """One version of a Kubernetes Event, as the bridge published it.

    ``count`` and ``last_seen`` follow the series when there is one (``series.count``,
    ``series.lastObservedTime``), as the CloudEvent's ``k8scount`` and ``time`` do;
    ``first_seen`` is ``firstTimestamp``, else ``eventTime``, else the creation time.

    With the bridge's enrichment on: ``extensions`` holds its values by extension name (a label
    the object or namespace does not have is absent, not empty), ``enriched`` is ``complete`` or
    ``partial``, and ``missing`` says what a partial one lacks (``("object", "timeout")``).
    Without it: ``{}``, ``""`` and ``()``. Like every field, they are the message's word; only
    values in the bridge's shape are kept (``k8s_event_common.cloudevents.enrichment``)."""

    id: str  # the CloudEvent id: "<uid>/<resourceVersion>", one per version
    cluster: str
    uid: str
    resource_version: str
    namespace: str
    name: str
    reason: str
    type: str  # "Warning" or "Normal"
    message: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    involved: ObjectRef
    reporting_component: str
    reporting_instance: str
    data: dict[str, Any] = field(repr=False, compare=False)
    extensions: dict[str, str] = field(default_factory=dict, hash=False)
    enriched: str = ""  # "complete", "partial", or "" (no enrichment)
    missing: tuple[tuple[str, str], ...] = ()  # (part, why) of a partial enrichment

    @property
    def warning(self) -> bool:
        return self.type == "Warning"

    @property
    def tenancy(self) -> tenancy.Tenancy:
        """The one rule's verdicts on its involved object and ``related``
        (``k8s_event_common.tenancy``): which of them this Event's namespace may name. Judged
        here, from the Event, never taken from the bridge's ``k8suntrusted``."""
        inv = self.involved
        involved = {"kind": inv.kind, "namespace": inv.namespace, "name": inv.name}
        return tenancy.judge(self.namespace, involved, self.data.get("related"))

    @property
    def partial(self) -> bool:
        """The bridge published it without some enrichment values (``missing`` says which)."""
        return self.enriched == "partial"


@dataclass(frozen=True)
class Status:
    """A status event of the bridge (``io.k8s.bridge.<what>``); the subclasses type its data."""

    id: str
    cluster: str
    what: str
    time: datetime | None
    data: dict[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Gap(Status):
    """Versions of Events between two resourceVersions may be missing (compacted history)."""

    scope: str = ""
    from_resource_version: str = ""
    to_resource_version: str = ""
    detected_at: datetime | None = None
    certainty: str = ""  # "likely" or "possible"
    why: str = ""


@dataclass(frozen=True)
class ApiserverUnreachable(Status):
    """The bridge can not reach the API server for ``scope`` ("" = the whole cluster)."""

    scope: str = ""
    detail: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class ApiserverReachable(Status):
    """The API server answers again for ``scope`` (or answers a bridge process for the first
    time: an outage an earlier process told ends too)."""

    scope: str = ""
    detail: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class ApiserverDegraded(Status):
    """The bridge's circuit breaker opened for ``scope`` (``reason``: failures or latency)."""

    scope: str = ""
    reason: str = ""
    detail: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class ApiserverRecovered(Status):
    scope: str = ""
    degraded_for_seconds: float = 0.0
    at: datetime | None = None


@dataclass(frozen=True)
class Dropped(Status):
    """A message no server of the stream could take: subscribers will not get it."""

    dropped_id: str = ""
    subject: str = ""
    size: int = 0
    reason: str = ""
    detail: str = ""


@dataclass(frozen=True)
class LeaderChanged(Status):
    identity: str = ""
    previous_holder: str = ""
    lease: str = ""
    transitions: int = 0
    at: datetime | None = None


@dataclass(frozen=True)
class Started(Status):
    host: str = ""
    pid: int = 0


@dataclass(frozen=True)
class Stopped(Status):
    host: str = ""
    pid: int = 0


@dataclass(frozen=True)
class Decoded:
    """One message: the CloudEvent and exactly one of ``event``, ``status`` or ``digest``."""

    subject: str
    cloudevent: CloudEvent
    event: KubeEvent | None = None
    status: Status | None = None
    digest: digests.Digest | None = None

    @property
    def id(self) -> str:
        return self.cloudevent.get_id()

    @property
    def kind(self) -> str:
        """``event``, ``digest``, a status event's name of ``STATUS_KINDS``, or ``other``."""
        if self.digest is not None:
            return "digest"
        return kind(self.event if self.event is not None else self.status)


def kind(m: KubeEvent | Status | digests.Digest | None) -> str:
    """A message's kind from the fixed set: ``event``, ``digest``, one of ``STATUS_KINDS``, or
    ``other`` (a kind this version does not know, whatever name it gives itself)."""
    if isinstance(m, KubeEvent):
        return "event"
    if isinstance(m, digests.Digest):
        return "digest"
    return m.what if m is not None and m.what in STATUS_KINDS else "other"


def decode(subject: str, headers: dict[str, str] | None, body: bytes) -> Decoded:
    """One NATS message of the stream → ``Decoded``. Raises ``BadMessage``, and nothing else:
    a value no check foresaw is a bad message too (terminated once), never an error that
    stops a consumer and comes back with every redelivery."""
    try:
        return _decode(subject, headers, body)
    except BadMessage:
        raise
    except Exception as exc:
        raise BadMessage(f"undecodable: {type(exc).__name__}: {cloudevents.cut(str(exc))}") from exc


def _decode(subject: str, headers: dict[str, str] | None, body: bytes) -> Decoded:
    envelope = cloudevents.decode(headers, body)
    attrs, data, ce = envelope.attributes, envelope.data, envelope.cloudevent
    if envelope.type.startswith(EVENT_TYPE_PREFIX):
        return Decoded(subject, ce, event=_kube_event(attrs, data))
    if envelope.type == DIGEST_TYPE:
        return Decoded(subject, ce, digest=digests.from_envelope(envelope))
    return Decoded(subject, ce, status=_status(attrs, data))


def _str(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return v if isinstance(v, str) else ""


def _dict(d: dict[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _number(d: dict[str, Any], key: str, kind: type[N]) -> N:
    """A number of a status event's data (0 when absent); anything else is a ``BadMessage``,
    not a ``ValueError`` that would stop the consumer."""
    v = d.get(key) or 0
    if not isinstance(v, int | float | str):
        raise BadMessage(f"{key} {cloudevents.quoted(v)} is not a number")
    try:
        return kind(v)
    except (TypeError, ValueError, OverflowError):
        raise BadMessage(f"{key} {cloudevents.quoted(v)} is not a number") from None


def _kube_event(attrs: dict[str, Any], data: dict[str, Any]) -> KubeEvent:
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not _str(meta, "uid"):
        raise BadMessage(f"{cloudevents.cut(attrs['id'])}: data is no Event (metadata.uid missing)")
    obj = _dict(data, "involvedObject") or _dict(data, "regarding")
    series = _dict(data, "series")
    count = series.get("count") or data.get("count") or 1
    try:
        count = int(count)
    except (TypeError, ValueError, OverflowError):  # 1e999 is JSON's inf
        raise BadMessage(
            f"{cloudevents.cut(attrs['id'])}: count {cloudevents.quoted(count)} is not a number"
        ) from None
    last = (
        series.get("lastObservedTime")
        or data.get("lastTimestamp")
        or data.get("eventTime")
        or meta.get("creationTimestamp")
    )
    first = data.get("firstTimestamp") or data.get("eventTime") or meta.get("creationTimestamp")
    source = _dict(data, "source")
    return KubeEvent(
        id=attrs["id"],
        cluster=str(attrs.get("k8scluster", "")),
        uid=_str(meta, "uid"),
        resource_version=_str(meta, "resourceVersion"),
        namespace=_str(meta, "namespace"),
        name=_str(meta, "name"),
        reason=_str(data, "reason"),
        type=_str(data, "type") or "Normal",
        message=_str(data, "message"),
        count=count,
        first_seen=parse_time(first),
        last_seen=parse_time(last),
        involved=ObjectRef(
            kind=_str(obj, "kind"),
            namespace=_str(obj, "namespace"),
            name=_str(obj, "name"),
            uid=_str(obj, "uid"),
            api_version=_str(obj, "apiVersion"),
            field_path=_str(obj, "fieldPath"),
        ),
        reporting_component=_str(data, "reportingComponent") or _str(source, "component"),
        reporting_instance=_str(data, "reportingInstance") or _str(source, "host"),
        data=data,
        extensions=cloudevents.enrichment(attrs),
        enriched=cloudevents.enriched(attrs),
        missing=cloudevents.missing(attrs),
    )


def _status(attrs: dict[str, Any], data: dict[str, Any]) -> Status:
    # The type drops the underscores (io.k8s.bridge.apiserverunreachable); the CloudEvent's
    # subject is the status event's name as the README writes it (apiserver_unreachable).
    what = str(attrs.get("subject") or "") or attrs["type"].removeprefix(STATUS_TYPE_PREFIX)
    base: dict[str, Any] = {
        "id": attrs["id"],
        "cluster": str(attrs.get("k8scluster", "")),
        "what": what,
        "time": parse_time(attrs.get("time")),
        "data": data,
    }

    def s(key: str) -> str:
        return _str(data, key)

    if what == "gap":
        return Gap(
            **base,
            scope=s("scope"),
            from_resource_version=s("fromResourceVersion"),
            to_resource_version=s("toResourceVersion"),
            detected_at=parse_time(data.get("detectedAt")),
            certainty=s("certainty"),
            why=s("why"),
        )
    if what in ("apiserver_unreachable", "apiserver_reachable"):
        cls = ApiserverUnreachable if what == "apiserver_unreachable" else ApiserverReachable
        return cls(**base, scope=s("scope"), detail=s("detail"), at=parse_time(data.get("at")))
    if what == "apiserver_degraded":
        return ApiserverDegraded(
            **base,
            scope=s("scope"),
            reason=s("reason"),
            detail=s("detail"),
            at=parse_time(data.get("at")),
        )
    if what == "apiserver_recovered":
        return ApiserverRecovered(
            **base,
            scope=s("scope"),
            degraded_for_seconds=_number(data, "degradedForSeconds", float),
            at=parse_time(data.get("at")),
        )
    if what == "dropped":
        return Dropped(
            **base,
            dropped_id=s("id"),
            subject=s("subject"),
            size=_number(data, "size", int),
            reason=s("reason"),
            detail=s("detail"),
        )
    if what == "leader_changed":
        return LeaderChanged(
            **base,
            identity=s("identity"),
            previous_holder=s("previousHolder"),
            lease=s("lease"),
            transitions=_number(data, "transitions", int),
            at=parse_time(data.get("at")),
        )
    if what in ("started", "stopped"):
        cls2 = Started if what == "started" else Stopped
        return cls2(**base, host=s("host"), pid=_number(data, "pid", int))
    return Status(**base)
