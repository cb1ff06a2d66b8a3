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
- no ``id``, ``source``, ``type`` or ``specversion``, or a specversion other than 1.0;
- a ``time`` that is not RFC 3339, or attributes the SDK refuses;
- a type that is neither ``io.k8s.event.*`` (a Kubernetes Event) nor ``io.k8s.bridge.*``
  (the bridge's status events).

Messages are written by whoever may publish on the stream's subjects: nothing here trusts one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import unquote

from cloudevents.core.v1.event import CloudEvent

EVENT_TYPE_PREFIX: Final = "io.k8s.event."
STATUS_TYPE_PREFIX: Final = "io.k8s.bridge."
STRUCTURED: Final = "application/cloudevents"
REQUIRED: Final = ("id", "source", "type", "specversion")

__all__ = [
    "EVENT_TYPE_PREFIX",
    "STATUS_TYPE_PREFIX",
    "BadMessage",
    "Envelope",
    "decode",
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


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time as Kubernetes writes it (``Z``, optional fraction) → aware datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise BadMessage(f"time {value!r} is not a string")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # in UTC: a time whose offset takes it past year 1 or 9999 is no time (OverflowError)
        return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise BadMessage(f"time {value!r} is not RFC 3339") from None


def decode(headers: dict[str, str] | None, body: bytes) -> Envelope:
    """One NATS message of the stream → its ``Envelope``. Raises ``BadMessage``."""
    attrs, data = _attributes_and_data(headers or {}, body)
    for name in REQUIRED:
        if not isinstance(attrs.get(name), str) or not attrs[name]:
            raise BadMessage(f"CloudEvent attribute {name!r} is missing")
    if attrs["specversion"] != "1.0":
        raise BadMessage(f"specversion {attrs['specversion']!r} is not 1.0")
    type_ = attrs["type"]
    if not isinstance(data, dict):
        raise BadMessage(f"{type_} {attrs['id']}: data is not a JSON object")
    ce_attrs = dict(attrs)
    if "time" in ce_attrs:
        ce_attrs["time"] = parse_time(ce_attrs["time"])
    try:
        ce = CloudEvent(ce_attrs, data)
    except Exception as exc:
        raise BadMessage(f"{type_} {attrs['id']}: not a valid CloudEvent: {exc}") from exc
    if not type_.startswith((EVENT_TYPE_PREFIX, STATUS_TYPE_PREFIX)):
        raise BadMessage(
            f"type {type_!r} is neither {EVENT_TYPE_PREFIX}* nor {STATUS_TYPE_PREFIX}*"
        )
    return Envelope(attrs, data, ce)


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
