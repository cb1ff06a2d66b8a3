"""One NATS message of the bridge's stream read as a CloudEvent: the one decoder of the kit
(``k8s_event_consumer.events``, which adds the typed view) and of ``k8s-event-bridge tail``.

``decode(headers, body)`` takes either CloudEvents mode of the NATS binding: structured
(``Content-Type: application/cloudevents...``, the JSON CloudEvent as the body) or binary
(``ce-*`` headers, percent-encoded, the Event as the body). It returns an ``Envelope``: the
attributes as the message wrote them, the ``data`` (a JSON object) and the ``cloudevents``
SDK's ``CloudEvent``. Anything else raises ``BadMessage`` naming what is wrong:

- a body that is not JSON (UTF-8, RFC 8259: ``NaN`` and ``Infinity`` are not JSON; a number
  beyond a double reads as ``inf``, as Python's ``json`` reads it: docs/asyncapi.md), or not a
  JSON object where one is expected;
- ``data_base64`` (the bridge always sends JSON data), or no ``data`` object;
- no ``id``, ``source``, ``type`` or ``specversion``, or a specversion other than 1.0; an
  ``id`` over ``MAX_ID`` characters, or one UTF-8 can not carry (a lone surrogate);
- a ``time`` that is not RFC 3339, or attributes the SDK refuses;
- a type that is neither ``io.k8s.event.*`` (a Kubernetes Event), ``io.k8s.bridge.*`` (the
  bridge's status events) nor ``io.k8s.digest`` (a digest: ``k8s_event_common.digests``).

Every attribute other than the CloudEvents core ones is an extension, kept as written in both
modes (``Envelope.extensions``): the bridge's own (``k8scluster``, ``k8scount``...) and, with
enrichment, ``k8senriched`` (``complete`` or ``partial``), ``k8senrichmissing`` (``part:why``
items, comma-separated, when partial) and the configured extensions (``team``...).
``enrichment``, ``enriched`` and ``missing`` read those three, leaving out what is not in the
shape the bridge writes: a name that is no CloudEvents extension name (a-z 0-9, at most 20), a
value that is not a string or is over ``MAX_EXTENSION_VALUE`` characters, more than
``MAX_EXTENSIONS`` of them.

Messages are written by whoever may publish on the stream's subjects: nothing here trusts one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import unquote

from cloudevents.core.v1.event import CloudEvent

EVENT_TYPE_PREFIX: Final = "io.k8s.event."
STATUS_TYPE_PREFIX: Final = "io.k8s.bridge."
DIGEST_TYPE: Final = "io.k8s.digest"  # a digest of a series (k8s_event_common.digests)
STRUCTURED: Final = "application/cloudevents"
REQUIRED: Final = ("id", "source", "type", "specversion")
# the CloudEvents 1.0 context attributes (and the structured mode's data members)
CORE_ATTRIBUTES: Final = frozenset(
    {
        "specversion", "id", "source", "type", "subject", "time", "datacontenttype",
        "dataschema", "data", "data_base64",
    }
)  # fmt: skip
ENRICHED: Final = "k8senriched"  # "complete" or "partial": present when enrichment is on
ENRICH_MISSING: Final = "k8senrichmissing"  # "part:why,...": present when partial
ENRICHED_VALUES: Final = ("complete", "partial")
# the bridge's own extensions: never an enrichment's
BRIDGE_ATTRIBUTES: Final = frozenset(
    {
        "k8scluster", "k8snamespace", "k8skind", "k8sname", "k8sreason", "k8scount",
        "k8suntrusted", ENRICHED, ENRICH_MISSING,
    }
)  # fmt: skip
MAX_EXTENSIONS: Final = 32  # enrichment extensions read from one message, at most
MAX_EXTENSION_VALUE: Final = 1024  # the longest value the bridge writes (an annotation's)
MAX_MISSING: Final = 16  # part:why items read from one k8senrichmissing, at most
# the longest CloudEvent id read: the bridge's are "<uid>/<resourceVersion>" and
# "<cluster>/<status>/...", far shorter (a cluster name is a subject token: a subject is at
# most what fits nats-server's 4 KiB control line); a longer one is a publisher's word that every
# log line and annotation naming the message would carry
MAX_ID: Final = 8192
EXTENSION_NAME: Final = re.compile(r"[a-z0-9]{1,20}")
_MISSING_ITEM = re.compile(r"([a-z0-9]{1,20}):([a-z0-9]{1,20})")

__all__ = [
    "BRIDGE_ATTRIBUTES",
    "CORE_ATTRIBUTES",
    "ENRICHED",
    "ENRICHED_VALUES",
    "ENRICH_MISSING",
    "EVENT_TYPE_PREFIX",
    "EXTENSION_NAME",
    "MAX_EXTENSIONS",
    "MAX_EXTENSION_VALUE",
    "MAX_MISSING",
    "STATUS_TYPE_PREFIX",
    "BadMessage",
    "Envelope",
    "decode",
    "enriched",
    "enrichment",
    "missing",
    "parse_time",
]


class BadMessage(ValueError):
    """A message that is not a CloudEvent of the bridge; the text names what is wrong."""


@dataclass(frozen=True)
class Envelope:
    """One message's CloudEvent: ``attributes`` as written (strings; ``time`` unparsed),
    ``data`` (a JSON object), and the same as the SDK's ``CloudEvent``."""

    attributes: dict[str, Any]
    data: dict[str, Any] = field(repr=False)
    cloudevent: CloudEvent = field(repr=False, compare=False)

    @property
    def type(self) -> str:
        return str(self.attributes["type"])

    def document(self) -> dict[str, Any]:
        """The structured-mode JSON CloudEvent: the attributes and ``data``."""
        return {**self.attributes, "data": self.data}

    @property
    def extensions(self) -> dict[str, Any]:
        """Every attribute but the CloudEvents core ones, as written (the bridge's own
        ``k8s*`` included; in binary mode each a string)."""
        return {k: v for k, v in self.attributes.items() if k not in CORE_ATTRIBUTES}

    @property
    def enrichment(self) -> dict[str, str]:
        return enrichment(self.attributes)

    @property
    def enriched(self) -> str:
        return enriched(self.attributes)

    @property
    def missing(self) -> tuple[tuple[str, str], ...]:
        return missing(self.attributes)


def enrichment(attributes: Mapping[str, Any]) -> dict[str, str]:
    """The enrichment extensions of a message (``team``, ``owner``...), by name: every
    attribute but the core and the bridge's own whose name is a CloudEvents extension name and
    whose value is a string of at most ``MAX_EXTENSION_VALUE`` characters; the first
    ``MAX_EXTENSIONS`` of them by name. Anything else is left out, never an error."""
    names = sorted(
        k
        for k, v in attributes.items()
        if isinstance(k, str)
        and isinstance(v, str)
        and k not in CORE_ATTRIBUTES
        and k not in BRIDGE_ATTRIBUTES
        and len(v) <= MAX_EXTENSION_VALUE
        and EXTENSION_NAME.fullmatch(k)
    )
    return {k: attributes[k] for k in names[:MAX_EXTENSIONS]}


def enriched(attributes: Mapping[str, Any]) -> str:
    """``k8senriched``: ``complete``, ``partial``, or ``""`` (no enrichment, or a value the
    bridge does not write)."""
    value = attributes.get(ENRICHED)
    return value if value in ENRICHED_VALUES else ""


def missing(attributes: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What a partial enrichment lacks, ``(part, why)`` in order, from ``k8senrichmissing``
    (``object:timeout,namespace:unknown``); ``()`` unless ``k8senriched`` is ``partial``.
    Items not in the ``part:why`` shape are left out, and any beyond ``MAX_MISSING``."""
    value = attributes.get(ENRICH_MISSING)
    if enriched(attributes) != "partial" or not isinstance(value, str):
        return ()
    out: list[tuple[str, str]] = []
    for item in value[: MAX_MISSING * 42].split(","):
        m = _MISSING_ITEM.fullmatch(item)
        if m and (m.group(1), m.group(2)) not in out:
            out.append((m.group(1), m.group(2)))
            if len(out) == MAX_MISSING:
                break
    return tuple(out)


SHOWN: Final = 128  # the most characters of a message's value an error text quotes


def cut(text: str) -> str:
    """A message's value as an error text quotes it: at most ``SHOWN`` characters, and how
    many it had (its length is its publisher's word; a log line is not the place for it)."""
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}...[cut: {len(text)} characters]"


def quoted(value: Any) -> str:
    """``cut`` of a value's repr; a long string cut before its repr is made (a megabyte of
    characters past Latin-1 would make a repr of four times its length first)."""
    if isinstance(value, str) and len(value) > SHOWN:
        return f"{value[:SHOWN]!r}...[cut: {len(value)} characters]"
    return cut(repr(value))


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time as Kubernetes writes it (``Z``, optional fraction) → aware datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise BadMessage(f"time {quoted(value)} is not a string")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # in UTC: a time whose offset takes it past year 1 or 9999 is no time (OverflowError)
        return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise BadMessage(f"time {quoted(value)} is not RFC 3339") from None


def decode(headers: dict[str, str] | None, body: bytes) -> Envelope:
    """One NATS message of the stream → its ``Envelope``. Raises ``BadMessage``."""
    attrs, data = _attributes_and_data(headers or {}, body)
    for name in REQUIRED:
        if not isinstance(attrs.get(name), str) or not attrs[name]:
            raise BadMessage(f"CloudEvent attribute {name!r} is missing")
    if len(attrs["id"]) > MAX_ID:
        raise BadMessage(f"CloudEvent id of {len(attrs['id'])} characters, over {MAX_ID}")
    if not _utf8(attrs["id"]):  # a JSON escape of a lone surrogate: no id of the bridge's
        raise BadMessage(f"CloudEvent id {quoted(attrs['id'])} is not UTF-8")
    if attrs["specversion"] != "1.0":
        raise BadMessage(f"specversion {quoted(attrs['specversion'])} is not 1.0")
    type_ = attrs["type"]
    if not isinstance(data, dict):
        raise BadMessage(f"{cut(type_)} {cut(attrs['id'])}: data is not a JSON object")
    ce_attrs = dict(attrs)
    if "time" in ce_attrs:
        ce_attrs["time"] = parse_time(ce_attrs["time"])
    try:
        ce = CloudEvent(ce_attrs, data)
    except Exception as exc:
        raise BadMessage(
            f"{cut(type_)} {cut(attrs['id'])}: not a valid CloudEvent: {cut(str(exc))}"
        ) from exc
    if not type_.startswith((EVENT_TYPE_PREFIX, STATUS_TYPE_PREFIX)) and type_ != DIGEST_TYPE:
        raise BadMessage(
            f"type {quoted(type_)} is neither {EVENT_TYPE_PREFIX}*, {STATUS_TYPE_PREFIX}* "
            f"nor {DIGEST_TYPE}"
        )
    return Envelope(attrs, data, ce)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json(body: bytes) -> Any:
    """JSON as RFC 8259 has it exchanged: UTF-8 (no BOM, no UTF-16), no ``NaN``. Raises
    ``ValueError``, also for nesting too deep to read (not a ``RecursionError``)."""
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_not_json)
    except RecursionError:
        raise ValueError("nested too deep") from None


def _attributes_and_data(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], Any]:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if content_type.startswith(STRUCTURED):
        try:
            doc = _json(body)
        except ValueError as exc:
            raise BadMessage(f"structured CloudEvent body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise BadMessage("structured CloudEvent body is not a JSON object")
        data = doc.pop("data", None)
        if data is None and "data_base64" in doc:
            raise BadMessage("data_base64: the bridge always sends JSON data")
        return doc, data
    attrs = {k[3:].lower(): unquote(v) for k, v in headers.items() if k.lower().startswith("ce-")}
    if not attrs:
        raise BadMessage(
            f"neither a structured CloudEvent (Content-Type {content_type!r}) "
            "nor binary mode (no ce-* headers)"
        )
    try:
        data = _json(body) if body else None
    except ValueError as exc:
        raise BadMessage(f"binary-mode body is not JSON: {exc}") from None
    return attrs, data
