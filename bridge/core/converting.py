"""Event → CloudEvent 1.0 (pure), on the hot path without the SDK.

The envelope is a msgspec Struct serialised once, the Event's own bytes spliced in as
``data``; the cloudevents SDK stays the reference: the tests parse every shape this module
produces with it. Mapping (docs/design.md, "The CloudEvent"):

    id        <event uid>/<resourceVersion>        (also the Nats-Msg-Id: deterministic)
    source    k8s://<cluster>/namespaces/<namespace>
    type      io.k8s.event.<type lowercased>
    subject   <involvedObject.kind>/<involvedObject.name> (no name when it is not trusted)
    time      series.lastObservedTime | lastTimestamp | eventTime | metadata.creationTimestamp
    data      the Event, metadata.managedFields removed

With ``enrich`` configured, the enrichment's extensions follow ``k8scount`` (each value a
string; a value not found is left out) with ``k8senriched`` and, when partial,
``k8senrichmissing``; the subject is ``nats.subject_template`` filled in.

The involved object and ``related`` are judged by the one rule (``k8s_event_common.tenancy``):
a reference the Event's namespace may not make (another namespace's Pod, a Node named from a
tenant's namespace) is marked ``k8suntrusted`` (``object:other_namespace``...), and its name
is in neither ``subject`` nor ``k8sname``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, Literal
from urllib.parse import quote

import msgspec

from bridge.core import events, subjects
from bridge.core.enrichment import Enrichment
from bridge.core.events import Event, View, view_of
from bridge.core.filtering import event_count
from bridge.core.messages import MSG_ID_HEADER, Message
from bridge.errors import ConversionError
from k8s_event_common import tenancy
from k8s_event_common.subjects import DEFAULT_TEMPLATE, parse_template

STRUCTURED_CONTENT_TYPE: Final = "application/cloudevents+json"
DATA_CONTENT_TYPE: Final = "application/json"
SUBJECT_CACHE_SIZE: Final = 4096
# Only short keys are cached: the caches are bounded in bytes too, whatever a principal that
# may create Events writes into a reason, a kind or a timestamp (the API server bounds none).
CACHED_KEY_MAX: Final = 128

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
_match_time = _RFC3339.match
# CloudEvents binding rule: printable ASCII except space, '"' and '%' stays as it is.
_CE_SAFE: Final = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in ' "%')
_TYPE_CHARS = re.compile(r"[^a-z0-9]")
_encode = msgspec.json.Encoder().encode
_STRUCTURED_HEAD: Final = (
    f"NATS/1.0\r\nContent-Type: {STRUCTURED_CONTENT_TYPE}\r\n{MSG_ID_HEADER}: ".encode()
)


def occurrence_time(ev: View | dict[str, Any]) -> str | None:
    """The first valid RFC 3339 time of series.lastObservedTime, lastTimestamp, eventTime,
    metadata.creationTimestamp; None when none is (the attribute is then left out)."""
    v = view_of(ev)
    series = v.series
    for t in (
        series.get("lastObservedTime") if series.__class__ is dict else None,
        v.lastTimestamp,
        v.eventTime,
        v.metadata.creationTimestamp,
    ):
        if t.__class__ is str and (t in _valid_times or _valid_time(t)):
            return t
    return None


# Events of one burst share their timestamps: each distinct string is checked once.
_valid_times: set[str] = set()


def is_rfc3339(t: str) -> bool:
    """``_RFC3339`` decides; the two shapes Kubernetes writes (``...:05Z`` and
    ``...:05.123456Z``) are first tried with ``datetime.fromisoformat`` (in C, cheaper than
    the pattern), which accepts no such string that the pattern refuses."""
    n = len(t)
    if (n == 20 or (n == 27 and t[19] == ".")) and t[-1] == "Z" and t[10] == "T" and t.isascii():
        try:
            datetime.fromisoformat(t)
        except ValueError:
            pass
        else:
            if t[4] == "-" and t[7] == "-" and t[13] == ":" and t[16] == ":":
                return True
    return _match_time(t) is not None


def _valid_time(t: str) -> bool:
    if not is_rfc3339(t):
        return False
    if len(t) <= CACHED_KEY_MAX:
        if len(_valid_times) >= 4096:
            _valid_times.clear()  # bounded whatever the cluster sends
        _valid_times.add(t)
    return True


def event_type(value: Any) -> str:
    t = value.lower() if isinstance(value, str) and value else "unknown"
    if not t.isalnum() or not t.isascii():
        t = _TYPE_CHARS.sub("", t) or "unknown"
    return f"io.k8s.event.{t}"


class _Envelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A CloudEvent's attributes in this order; only ``time`` and ``k8suntrusted`` are ever
    left out (None)."""

    specversion: str
    id: str
    source: str
    type: str
    subject: str
    time: str | None = None
    datacontenttype: str
    k8scluster: str
    k8snamespace: str
    k8skind: str
    k8sname: str
    k8sreason: str
    k8scount: int
    k8suntrusted: str | None = None  # a reference not trusted (k8s_event_common.tenancy)

    def as_dict(self) -> dict[str, Any]:
        out = msgspec.structs.asdict(self)
        for left_out in ("time", "k8suntrusted"):
            if out[left_out] is None:
                del out[left_out]
        return out


def _untrusted(
    namespace: str, kind: str, inv_namespace: Any, name: str, related: Any
) -> str | None:
    """The ``k8suntrusted`` mark of an Event's references (``tenancy.Tenancy.mark``), None
    when both are trusted. The common case (the involved object in the Event's namespace, no
    ``related``) is decided before the rule is called."""
    if related is None and inv_namespace == namespace and namespace:
        if not tenancy.cluster_kind(kind):
            return None
    rel = related if related is None or related.__class__ is dict else {}
    inv = {"kind": kind, "namespace": inv_namespace, "name": name}
    return tenancy.judge(namespace, inv, rel).mark or None


class Converter:
    """Turns a raw Event dict into a ``Message``; one per bridge, static parts computed once."""

    def __init__(
        self,
        cluster: str,
        subject_prefix: str,
        mode: Literal["structured", "binary"],
        template: str = DEFAULT_TEMPLATE,
    ) -> None:
        self.cluster = cluster
        self.template = template
        # a template other than the default: its tokens, and its subjects cached by values
        self._tokens = None if template == DEFAULT_TEMPLATE else parse_template(template)
        self._templated: dict[tuple[str, ...], str] = {}
        self.subject_prefix = subject_prefix
        self.binary = mode == "binary"
        self._source_prefix = f"k8s://{cluster}/namespaces/"
        self._subject_prefix = f"{subject_prefix}.{subjects.token(cluster)}."
        # (namespace, kind, reason) -> (subject, source): few distinct values
        self._cached: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._types: dict[str, str] = {}  # Event type -> CloudEvent type

    def sizes(self) -> dict[str, int]:
        """How many entries its caches hold (each bounded by ``SUBJECT_CACHE_SIZE``)."""
        return {
            "subject_cache": len(self._cached),
            "template_cache": len(self._templated),
            "type_cache": len(self._types),
            "valid_time_cache": len(_valid_times),
        }

    def convert(self, ev: Event | dict[str, Any], enrichment: Enrichment | None = None) -> Message:
        """The message for one Event (a dict is taken as a watch would give it), with the
        enrichment's extensions when given."""
        if not isinstance(ev, Event):
            ev = events.from_obj(ev)
        v = ev.view
        meta = v.metadata
        uid = meta.uid
        rv = meta.resourceVersion
        if not uid or uid.__class__ is not str:
            raise ConversionError("event has no metadata.uid")
        if not rv or rv.__class__ is not str:
            raise ConversionError("event has no metadata.resourceVersion")
        if not (uid.isprintable() and rv.isprintable()):
            # the id goes into a header line; Kubernetes only ever sets UUIDs and digits
            raise ConversionError("metadata.uid or resourceVersion has control characters")
        namespace = meta.namespace if meta.namespace.__class__ is str else ""
        involved = v.involved
        kind = involved.kind if involved.kind.__class__ is str else ""
        name = involved.name if involved.name.__class__ is str else ""
        reason = v.reason if v.reason.__class__ is str else ""
        untrusted = _untrusted(namespace, kind, involved.namespace, name, v.related)
        if untrusted is not None and untrusted.startswith(tenancy.OBJECT):
            name = ""  # another namespace's object (or any Node): its name goes nowhere
        msg_id = f"{uid}/{rv}"
        key = (namespace, kind, reason)
        cached = self._cached.get(key)
        if cached is None:
            cached = self._cache(key)
        subject, source = cached
        if self._tokens is not None:
            subject = self._subject(namespace, kind, reason, v.type, enrichment)
        ce_type = self._types.get(v.type) if v.type.__class__ is str else None
        if ce_type is None:
            ce_type = event_type(v.type)
            if (
                v.type.__class__ is str
                and len(v.type) <= CACHED_KEY_MAX
                and len(self._types) < SUBJECT_CACHE_SIZE
            ):
                self._types[v.type] = ce_type
        attrs = _Envelope(
            specversion="1.0",
            id=msg_id,
            source=source,
            type=ce_type,
            subject=f"{kind}/{name}",
            time=occurrence_time(v),
            datacontenttype=DATA_CONTENT_TYPE,
            k8scluster=self.cluster,
            k8snamespace=namespace,
            k8skind=kind,
            k8sname=name,
            k8sreason=reason,
            k8scount=event_count(v),
            k8suntrusted=untrusted,
        )
        try:
            parts = ev.data_parts()
        except events.BadLine as exc:
            raise ConversionError(f"data {exc}") from None
        extra = enrichment.attributes() if enrichment is not None else None
        return self._message(subject, attrs, parts, msg_id, extra)

    def _subject(
        self,
        namespace: str,
        kind: str,
        reason: str,
        event_type: Any,
        enrichment: Enrichment | None,
    ) -> str:
        """The subject of ``nats.subject_template``: each value sanitised, a missing one ``_``."""
        assert self._tokens is not None
        fields = {
            "cluster": self.cluster,
            "namespace": namespace,
            "kind": kind,
            "reason": reason,
            "type": event_type if event_type.__class__ is str else "",
        }
        values = enrichment.values if enrichment is not None else {}
        key = tuple(
            fields[name] if name in fields else values.get(name, "")
            for placeholder, name in self._tokens
            if placeholder
        )
        subject = self._templated.get(key)
        if subject is None:
            it = iter(key)
            subject = ".".join(
                [
                    self.subject_prefix,
                    *(subjects.token(next(it)) if placeholder else name
                      for placeholder, name in self._tokens),
                ]
            )  # fmt: skip
            if sum(map(len, key)) <= CACHED_KEY_MAX:
                if len(self._templated) >= SUBJECT_CACHE_SIZE:
                    self._templated.clear()  # bounded whatever the cluster sends
                self._templated[key] = subject
        return subject

    def _cache(self, key: tuple[str, str, str]) -> tuple[str, str]:
        """Subject and source for (namespace, kind, reason): sanitised once each."""
        namespace, kind, reason = key
        subject = (
            f"{self._subject_prefix}{subjects.token(namespace)}."
            f"{subjects.token(kind)}.{subjects.token(reason)}"
        )
        value = (subject, self._source_prefix + (namespace or "_"))
        if len(namespace) + len(kind) + len(reason) <= CACHED_KEY_MAX:
            if len(self._cached) >= SUBJECT_CACHE_SIZE:
                self._cached.clear()  # bounded whatever the cluster sends
            self._cached[key] = value
        return value

    def status(self, what: str, msg_id: str, data: dict[str, Any], time: str) -> Message:
        """A status event of the bridge itself (gap, started, stopped, apiserver ...).

        Its id is ``<cluster>/<msg_id>``: unique per cluster, so that one stream (a hub that
        sources many clusters' streams) never drops one cluster's status event as a duplicate
        of another's."""
        msg_id = f"{self.cluster}/{msg_id}"
        attrs: dict[str, Any] = {
            "specversion": "1.0",
            "id": msg_id,
            "source": f"k8s://{self.cluster}/bridge",
            "type": f"io.k8s.bridge.{_TYPE_CHARS.sub('', what.lower())}",
            "subject": what,
            "time": time,
            "datacontenttype": DATA_CONTENT_TYPE,
            "k8scluster": self.cluster,
        }
        subject = subjects.status_subject(self.subject_prefix, self.cluster, what)
        return self._message(subject, attrs, [_encode(data)], msg_id)

    def _message(
        self,
        subject: str,
        attrs: _Envelope | dict[str, Any],
        data: list[bytes],
        msg_id: str,
        extra: dict[str, str] | None = None,
    ) -> Message:
        """The NATS message in the configured content mode (CloudEvents NATS binding).

        ``data`` is the JSON of the data in pieces: spliced in, never decoded again; ``extra``
        are extension attributes after the others."""
        if self.binary:
            if isinstance(attrs, _Envelope):
                attrs = attrs.as_dict()
            if extra:
                attrs = {**attrs, **extra}
            headers = {f"ce-{k}": quote(str(v), safe=_CE_SAFE) for k, v in attrs.items()}
            headers["Content-Type"] = DATA_CONTENT_TYPE
            headers[MSG_ID_HEADER] = msg_id
            return Message(subject, b"".join(data), headers, msg_id)
        envelope = _encode(attrs)  # {...}: the data goes in before the closing brace
        if extra:
            envelope = b"".join((envelope[:-1], b",", _encode(extra)[1:]))
        payload = b"".join((envelope[:-1], b',"data":', *data, b"}"))
        if msg_id.isprintable():
            # the header block's shape is fixed: only the id changes
            head = _STRUCTURED_HEAD + msg_id.encode() + b"\r\n\r\n"
            return Message(subject, payload, None, msg_id, head=head)
        headers = {MSG_ID_HEADER: msg_id, "Content-Type": STRUCTURED_CONTENT_TYPE}
        return Message(subject, payload, headers, msg_id)
