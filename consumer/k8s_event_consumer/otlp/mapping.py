"""A message of the stream → one OpenTelemetry log record and its resource (docs/consumers.md,
"k8s-event-otlp: the mapping", side by side with the collector's ``k8sevents`` receiver).

A Kubernetes Event keeps every attribute the collector's receiver gives it, where that receiver
puts it (the involved object on the resource as ``k8s.object.*``; reason, action, name, uid,
start time, count and the namespace on the record), so queries and dashboards written for the
receiver's records read these too; it adds what the receiver leaves out: the cluster and the
namespace on the resource, the semantic conventions' ``k8s.<kind>.name``/``.uid`` for the
workload kinds and ``k8s.container.name`` from the field path, the type, the reporting
component, the resourceVersion, the series-aware count, the CloudEvent's id, source, type and
subject (``cloudevents.*``: a backend deduplicates by ``cloudevents.event_id``), the stream's
sequence, and the bridge's enrichment. A status event of the bridge (a gap, an outage, a
dropped message ...) is a record of its own: ``event_name`` its CloudEvent type
(``io.k8s.bridge.<what>``), ``k8s_event_bridge.status`` its kind.

An Event's references are judged by the one rule (``k8s_event_common.tenancy``): the namespace
is always the Event's own (``metadata.namespace``), and an involved object this namespace may
not name (a Pod of another namespace, any Node from a tenant's namespace) leaves only its kind
and apiVersion on the resource, no name, uid, field path, node name or CloudEvent subject; the
record says why in ``k8s_event_bridge.untrusted`` (``object:other_namespace``, and
``related:<why>`` for ``related``).

Every value is the message's word, and anyone who may publish into an Event subject writes
it: nothing here fails on an odd one (a field of the wrong type is left out, a string that is
no valid UTF-8 has the offending code points replaced, a time outside what OTLP holds is 0),
and no attribute's name comes from a message but a status event's known fields.

A digest (``io.k8s.digest``, read with ``nats.reads: digests``: one series in one window,
``k8s_event_common.digests``) is one record too (``digest``): the series' object on the resource
as an Event's is, the reason and ``k8s.event.count`` = its occurrences in the window on the
record, the rest under ``k8s_event_bridge.digest.*``, its time the window's end. Its series is
judged by the same rule: one its writer marked ``untrusted``, or that the rule would not trust
from its namespace (a Node named from a tenant's namespace), names no object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, SeverityNumber

from k8s_event_common import digests, tenancy
from k8s_event_consumer.consuming import Delivery
from k8s_event_consumer.events import KubeEvent, Status, parse_time

SCOPE = "k8s_event_consumer.otlp"
# the status events that say something went wrong (WARN); the others are INFO
WARNING_STATUS = frozenset({"gap", "apiserver_unreachable", "apiserver_degraded", "dropped"})
# the involved object's kinds with their own attributes in the semantic conventions
# (k8s.<kind>.name / k8s.<kind>.uid)
SEMCONV_KINDS = frozenset(
    {"pod", "deployment", "replicaset", "statefulset", "daemonset", "job", "cronjob", "namespace"}
)
_CONTAINER = re.compile(r"spec\.(?:initContainers|containers|ephemeralContainers)\{([^}]*)\}")

Attr = tuple[str, Any]
Resource = tuple[Attr, ...]


@dataclass(frozen=True)
class Mapped:
    """One message as OTLP has it: its resource's attributes and its log record."""

    resource: Resource
    record: LogRecord
    id: str  # the CloudEvent id

    def size(self) -> int:
        """Bytes it adds to a request, about (the resource counted in full)."""
        return int(self.record.ByteSize()) + sum(len(k) + len(str(v)) + 8 for k, v in self.resource)


MAX_NANOS = 2**64 - 1  # OTLP's times are fixed64 nanoseconds since the epoch
# a status event's data: the fields written as attributes, at most this many, named so
_FIELD = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
MAX_STATUS_FIELDS = 32


def nanos(t: datetime | None) -> int:
    """Nanoseconds since the epoch; 0 (unset) for no time or one OTLP can not hold."""
    if t is None:
        return 0
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        n = int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1_000
    except (OverflowError, ValueError, OSError):
        return 0
    return n if 0 <= n <= MAX_NANOS else 0


def text(s: str) -> str:
    """``s`` as protobuf takes a string: a lone surrogate (JSON lets one through) replaced."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")
    return s


def go_time(value: Any) -> str:
    """A timestamp as the receiver writes ``k8s.event.start_time`` (Go's ``time.Time.String``
    of a metav1.Time: ``2026-12-04 10:00:00 +0000 UTC``); "" when there is none."""
    t = parse_time(value) if isinstance(value, str) else None
    if t is None:
        return ""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def value(v: Any) -> AnyValue:
    """A JSON value as an OTLP ``AnyValue`` (maps and lists kept as such)."""
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        if -(2**63) <= v < 2**63:
            return AnyValue(int_value=v)
        return AnyValue(string_value=str(v))
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, str):
        return AnyValue(string_value=text(v))
    out = AnyValue()
    if isinstance(v, Mapping):
        out.kvlist_value.values.extend(_kvs((text(str(k)), x) for k, x in v.items()))
    elif isinstance(v, list | tuple):
        out.array_value.values.extend(value(x) for x in v)
    elif v is not None:
        out.string_value = text(str(v))
    return out


def _kvs(attrs: Iterable[Attr]) -> list[KeyValue]:
    return [KeyValue(key=text(k), value=value(v)) for k, v in attrs if v is not None and v != ""]


def _str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    return v if isinstance(v, str) else ""


def _dict(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def cloudevent_attrs(d: Delivery, named: bool = True) -> list[Attr]:
    """The CloudEvent's attributes; ``named`` False: its subject is left out (it names the
    involved object, and the one rule does not trust it)."""
    ce = d.decoded.cloudevent
    return [
        ("cloudevents.event_id", ce.get_id()),
        ("cloudevents.event_source", ce.get_source()),
        ("cloudevents.event_type", ce.get_type()),
        ("cloudevents.event_spec_version", ce.get_specversion()),
        ("cloudevents.event_subject", (ce.get_subject() or "") if named else ""),
        ("k8s_event_bridge.stream_sequence", d.stream_sequence),
    ]


def event(ev: KubeEvent, d: Delivery, extra: Resource = ()) -> Mapped:
    """A Kubernetes Event's version → its record (module docstring)."""
    data = ev.data
    meta = _dict(data, "metadata")
    source = _dict(data, "source")
    obj = ev.involved
    kind = obj.kind.lower()
    judged = ev.tenancy
    # the Event's own namespace, always; "" (left out, as the receiver has it) for a trusted
    # cluster-scoped object
    namespace = judged.involved.object_namespace
    resource: list[Attr] = [
        ("k8s.cluster.name", ev.cluster),
        ("k8s.namespace.name", namespace),
    ]
    if judged.involved.trusted:
        ref = _dict(data, "involvedObject") or _dict(data, "regarding")
        resource += [
            ("k8s.node.name", _str(source, "host") or (obj.name if kind == "node" else "")),
            ("k8s.object.kind", obj.kind),
            ("k8s.object.name", obj.name),
            ("k8s.object.uid", obj.uid),
            ("k8s.object.fieldpath", obj.field_path),
            ("k8s.object.api_version", obj.api_version),
            ("k8s.object.resource_version", _str(ref, "resourceVersion")),
        ]
        if kind in SEMCONV_KINDS:
            resource += [(f"k8s.{kind}.name", obj.name), (f"k8s.{kind}.uid", obj.uid)]
        elif kind == "node":
            resource.append(("k8s.node.uid", obj.uid))
        container = _CONTAINER.search(obj.field_path)
        if container:
            resource.append(("k8s.container.name", container.group(1)))
    else:
        # another namespace's object, or any Node: none of its names, uids, field path or
        # node name; the kind and the mark say what it claimed
        resource += [("k8s.object.kind", obj.kind), ("k8s.object.api_version", obj.api_version)]
    attrs: list[Attr] = [
        # the receiver's
        ("k8s.event.reason", ev.reason),
        ("k8s.event.action", _str(data, "action")),
        ("k8s.event.start_time", go_time(meta.get("creationTimestamp"))),
        ("k8s.event.name", ev.name),
        ("k8s.event.uid", ev.uid),
        ("k8s.namespace.name", namespace),
        ("k8s.event.count", ev.count or None),
        # ours
        ("k8s.event.type", ev.type),
        ("k8s.event.resource_version", ev.resource_version),
        ("k8s.event.reporting_component", ev.reporting_component),
        ("k8s.event.reporting_instance", ev.reporting_instance),
        ("k8s.event.first_timestamp", ev.first_seen.isoformat() if ev.first_seen else ""),
        *cloudevent_attrs(d, judged.involved.trusted),
    ]
    if judged.marks:
        attrs.append(("k8s_event_bridge.untrusted", list(judged.marks)))
    attrs += [(f"k8s_event_bridge.enrichment.{k}", v) for k, v in sorted(ev.extensions.items())]
    if ev.enriched:
        attrs.append(("k8s_event_bridge.enriched", ev.enriched))
    if ev.missing:
        attrs.append(("k8s_event_bridge.missing", [f"{p}:{w}" for p, w in ev.missing]))
    record = LogRecord(
        time_unix_nano=nanos(ev.last_seen),
        observed_time_unix_nano=nanos(d.timestamp),
        severity_number=(
            SeverityNumber.SEVERITY_NUMBER_WARN
            if ev.warning
            else SeverityNumber.SEVERITY_NUMBER_INFO
        ),
        severity_text=text(ev.type),
        body=AnyValue(string_value=text(ev.message)),
        event_name=text(d.decoded.cloudevent.get_type()),
    )
    record.attributes.extend(_kvs(attrs))
    return Mapped(_resource(resource, extra), record, ev.id)


def status(s: Status, d: Delivery, extra: Resource = ()) -> Mapped:
    """A status event of the bridge → a record of its own (module docstring): its data's
    fields as ``k8s_event_bridge.status.<field>``."""
    warning = s.what in WARNING_STATUS
    attrs: list[Attr] = [("k8s_event_bridge.status", s.what), *cloudevent_attrs(d)]
    fields = [k for k in sorted(s.data) if isinstance(k, str) and _FIELD.fullmatch(k)]
    for key in fields[:MAX_STATUS_FIELDS]:
        v = s.data[key]
        if isinstance(v, str | int | float | bool):
            attrs.append((f"k8s_event_bridge.status.{key}", v))
        elif v is not None:
            attrs.append((f"k8s_event_bridge.status.{key}", json.dumps(v, sort_keys=True)))
    record = LogRecord(
        time_unix_nano=nanos(s.time),
        observed_time_unix_nano=nanos(d.timestamp),
        severity_number=(
            SeverityNumber.SEVERITY_NUMBER_WARN if warning else SeverityNumber.SEVERITY_NUMBER_INFO
        ),
        severity_text="Warning" if warning else "Normal",
        body=AnyValue(string_value=text(describe(s))),
        event_name=text(d.decoded.cloudevent.get_type()),
    )
    record.attributes.extend(_kvs(attrs))
    return Mapped(_resource([("k8s.cluster.name", s.cluster)], extra), record, s.id)


def describe(s: Status) -> str:
    """A status event in a sentence (the record's body)."""
    data = s.data
    scope = _str(data, "scope")
    where = f" for {scope}" if scope else ""
    detail = _str(data, "detail") or _str(data, "why") or _str(data, "reason")
    text = {
        "gap": f"Event versions{where} between resourceVersion "
        f"{_str(data, 'fromResourceVersion')} and {_str(data, 'toResourceVersion')} may be "
        f"missing ({_str(data, 'certainty') or 'possible'})",
        "apiserver_unreachable": f"The bridge can not reach the API server{where}",
        "apiserver_reachable": f"The API server answers the bridge again{where}",
        "apiserver_degraded": f"The bridge's circuit breaker opened{where}",
        "apiserver_recovered": f"The bridge's circuit breaker closed{where}",
        "dropped": f"No server of the stream took message {_str(data, 'id')}: subscribers "
        "will not get it",
        "leader_changed": f"{_str(data, 'identity')} leads the bridge now",
        "started": f"The bridge started on {_str(data, 'host')}",
        "stopped": f"The bridge stopped on {_str(data, 'host')}",
    }.get(s.what, f"The bridge's status event {s.what}")
    return f"{text}: {detail}" if detail else text


DIGEST = "k8s_event_bridge.digest."  # the digest's own attributes


def _iso(t: datetime | None) -> str:
    """RFC 3339 in UTC with ``Z``, as a digest spells its times; "" for none."""
    if t is None:
        return ""
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def digest(dg: digests.Digest, d: Delivery, extra: Resource = ()) -> Mapped:
    """A digest → its record (module docstring): one record per series per window.

    ``time_unix_nano`` is the window's end, not the series' last seen: the digest is the word
    on ``[start, end)`` of the stream's own time and is complete only at its end (the
    CloudEvent's ``time`` says the same); the end is always there and the same for every copy
    of the digest, where ``last_seen`` is the recorder's clock, absent for some, and can lag
    the window by half an hour (the new broadcaster refreshes a series that seldom), or lie
    outside it. ``last_seen`` is kept as an attribute."""
    s, ident = dg.series, dg.id
    verdict = tenancy.reference(
        s.namespace, s.kind, "" if tenancy.cluster_kind(s.kind) else s.namespace, s.name
    )
    trusted = verdict.trusted and not s.untrusted
    if not trusted:  # nothing of it names the object, the body neither
        s = replace(s, name="", uid="", untrusted=True)
        dg = replace(dg, series=s)
    namespace = verdict.object_namespace if trusted else s.namespace
    kind = s.kind.lower()
    resource: list[Attr] = [
        ("k8s.cluster.name", s.cluster),
        ("k8s.namespace.name", namespace),
        ("k8s.object.kind", s.kind),
    ]
    if trusted:
        resource += [("k8s.object.name", s.name), ("k8s.object.uid", s.uid)]
        if kind in SEMCONV_KINDS:
            resource += [(f"k8s.{kind}.name", s.name), (f"k8s.{kind}.uid", s.uid)]
        elif kind == "node":
            resource += [("k8s.node.name", s.name), ("k8s.node.uid", s.uid)]
    attrs: list[Attr] = [
        # the receiver's names, for what they mean on a series
        ("k8s.event.reason", s.reason),
        ("k8s.namespace.name", namespace),
        ("k8s.event.count", dg.occurrences),  # in this window: what the counts advanced
        ("k8s.event.type", s.type),
        ("k8s.event.reporting_component", s.reporting_component),
        *cloudevent_attrs(d, trusted),  # cloudevents.event_id: the digest's id
        # ours
        (DIGEST + "window_start", _iso(dg.start)),
        (DIGEST + "window_end", _iso(dg.end)),
        (DIGEST + "window_seconds", dg.window),
        (DIGEST + "versions", dg.versions),
        (DIGEST + "count_from", dg.count_from),
        (DIGEST + "count_to", dg.count_to),
        (DIGEST + "first_seen", _iso(dg.first_seen)),
        (DIGEST + "last_seen", _iso(dg.last_seen)),
        (DIGEST + "sampled", dg.sampled),
        (DIGEST + "combined", dg.combined),
        (DIGEST + "first_message", dg.first_message),
        (DIGEST + "last_message", dg.last_message),
        (DIGEST + "stream", dg.stream),
        (DIGEST + "first_sequence", dg.first_seq),
        (DIGEST + "last_sequence", dg.last_seq),
        (DIGEST + "events", list(dg.uids) or None),
        (DIGEST + "events_omitted", dg.uids_omitted or None),
    ]
    if not trusted:
        # why, when the rule says; else the writer's word, which does not carry its reason
        why = verdict.why if not verdict.trusted else "untrusted"
        attrs.append(("k8s_event_bridge.untrusted", [f"{tenancy.OBJECT}:{why}"]))
    record = LogRecord(
        time_unix_nano=nanos(dg.end),
        observed_time_unix_nano=nanos(d.timestamp),
        severity_number=(
            SeverityNumber.SEVERITY_NUMBER_WARN
            if s.type == "Warning"
            else SeverityNumber.SEVERITY_NUMBER_INFO
        ),
        severity_text=text(s.type),
        body=AnyValue(string_value=text(digests.line(dg))),
        event_name=digests.TYPE,
    )
    record.attributes.extend(_kvs(attrs))
    return Mapped(_resource(resource, extra), record, ident)


def mapped(d: Delivery, extra: Resource = ()) -> Mapped:
    """A delivery → its record; ``extra``: resource attributes every record gets (the
    configuration's ``resource_attributes``, e.g. ``k8s.cluster.uid``)."""
    if d.decoded.event is not None:
        return event(d.decoded.event, d, extra)
    if d.decoded.digest is not None:
        return digest(d.decoded.digest, d, extra)
    assert d.decoded.status is not None
    return status(d.decoded.status, d, extra)


def _resource(attrs: Sequence[Attr], extra: Resource) -> Resource:
    """Each key once (a resource with a key twice is taken as it comes by a collector, and a
    backend keeps either): the last value that is not empty, in the place of the first; then
    ``extra``, whose keys win."""
    own = {k for k, _ in extra}
    kept: dict[str, Any] = {}
    for k, v in attrs:
        if k not in own and v not in (None, ""):
            kept[k] = v
    return tuple(kept.items()) + tuple(extra)


def request(items: Sequence[Mapped], version: str = "") -> ExportLogsServiceRequest:
    """One export request: a ``ResourceLogs`` per distinct resource (in order of first
    appearance), each with one scope and its records in the given order."""
    req = ExportLogsServiceRequest()
    by_resource: dict[Resource, Any] = {}
    for item in items:
        scope_logs = by_resource.get(item.resource)
        if scope_logs is None:
            rl = req.resource_logs.add()
            rl.resource.attributes.extend(_kvs(item.resource))
            scope_logs = rl.scope_logs.add()
            scope_logs.scope.CopyFrom(InstrumentationScope(name=SCOPE, version=version))
            by_resource[item.resource] = scope_logs
        scope_logs.log_records.append(item.record)
    return req
