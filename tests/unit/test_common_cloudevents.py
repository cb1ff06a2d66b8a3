"""One decoder of the stream's messages (``k8s_event_common.cloudevents``): the subscribers'
kit and ``k8s-event-bridge tail`` read every message alike, the bridge's own in both
CloudEvents modes and what anyone else may publish; a message one refuses, the other refuses."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bridge.core.converting import Converter
from bridge.jetstream import tailing
from k8s_event_common import cloudevents
from k8s_event_consumer import events

STRUCTURED = {"Content-Type": "application/cloudevents+json"}


def kube_event(**extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web-1.17",
            "namespace": "shop",
            "uid": "u-1",
            "resourceVersion": "7",
            "creationTimestamp": "2026-11-30T12:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "shop"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container",
        "type": "Warning",
        "count": 3,
        "lastTimestamp": "2026-11-30T12:00:00Z",
        **extra,
    }


def envelope(**attrs: Any) -> bytes:
    doc = {
        "specversion": "1.0",
        "id": "u-1/7",
        "source": "k8s://test/namespaces/shop",
        "type": "io.k8s.event.warning",
        **attrs,
    }
    return json.dumps(doc).encode()


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_the_kit_and_tail_read_the_bridges_message_alike(mode: str) -> None:
    msg = Converter("test", "k8s.events", mode).convert(kube_event())  # type: ignore[arg-type]
    kit = events.decode(msg.subject, msg.headers, msg.payload)
    shown = tailing.decode(msg.headers, msg.payload)
    assert kit.event is not None and kit.event.reason == "BackOff"
    assert shown["id"] == kit.id == "u-1/7"
    assert shown["k8sreason"] == "BackOff" and shown["k8snamespace"] == "shop"
    assert shown["data"] == kit.event.data
    assert shown["type"] == kit.cloudevent.get_type() == "io.k8s.event.warning"


BAD = {
    "not-json": (STRUCTURED, b"{nope", "not JSON"),
    "a-list": (STRUCTURED, b"[1]", "not a JSON object"),
    "no-mode": ({}, b'{"id": "x"}', "no ce-\\* headers"),
    "no-id": (STRUCTURED, envelope(id=""), "'id' is missing"),
    "no-data": (STRUCTURED, envelope(), "data is not a JSON object"),
    "data-a-string": (STRUCTURED, envelope(data="text"), "data is not a JSON object"),
    "data-base64": (STRUCTURED, envelope(data_base64="eA=="), "data_base64"),
    "other-type": (STRUCTURED, envelope(type="com.other", data={}), "neither io.k8s.event"),
    "bad-time": (STRUCTURED, envelope(time="yesterday", data={}), "not RFC 3339"),
    # stricter than either decoder was alone: tail's refused these, the kit's read them
    "nan": (STRUCTURED, b'{"specversion": "1.0", "data": {"x": NaN}}', "NaN is not JSON"),
    "infinity": (STRUCTURED, b'{"data": -Infinity}', "Infinity is not JSON"),
    "utf-16": (STRUCTURED, envelope(data={}).decode().encode("utf-16"), "not JSON"),
    "utf-8-bom": (STRUCTURED, b"\xef\xbb\xbf" + envelope(data={}), "not JSON"),
    "nested-too-deep": (STRUCTURED, b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    "binary-nan": (
        {"ce-specversion": "1.0", "ce-id": "i", "ce-source": "s", "ce-type": "io.k8s.event.x"},
        b'{"count": NaN}',
        "binary-mode body is not JSON",
    ),
}


@pytest.mark.parametrize(("headers", "body", "says"), BAD.values(), ids=BAD.keys())
def test_a_message_one_refuses_the_other_refuses_too(
    headers: dict[str, str], body: bytes, says: str
) -> None:
    with pytest.raises(cloudevents.BadMessage, match=says):
        cloudevents.decode(headers, body)
    with pytest.raises(events.BadMessage, match=says):
        events.decode("k8s.events.x", headers, body)
    with pytest.raises(ValueError, match=says):  # tail prints "(not a CloudEvent: ...)"
        tailing.decode(headers, body)


def test_a_number_beyond_a_double_reads_as_python_reads_it() -> None:
    """The bridge relays an Event's bytes (docs/asyncapi.md): such a number reads as inf in
    both, as it did in the kit (tail refused the whole message)."""
    body = envelope(data=kube_event()).replace(b'"count": 3', b'"count": 3, "big": 1e400')
    assert math.isinf(cloudevents.decode(STRUCTURED, body).data["big"])
    assert math.isinf(tailing.decode(STRUCTURED, body)["data"]["big"])


def test_the_kits_names_are_the_shared_decoders() -> None:
    assert events.BadMessage is cloudevents.BadMessage
    assert events.parse_time is cloudevents.parse_time
    assert issubclass(cloudevents.BadMessage, ValueError)  # bridge.demo catches ValueError
