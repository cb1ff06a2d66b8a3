"""One decoder of the stream's messages (``k8s_event_common.cloudevents``): the subscribers'
kit and ``k8s-event-bridge tail`` read every message alike, the bridge's own in both
CloudEvents modes and what anyone else may publish; a message one refuses, the other refuses."""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import quote

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
    assert issubclass(cloudevents.BadMessage, ValueError)  # k8s_event_sim.demo catches ValueError


# -- extensions: the bridge's enrichment, in both modes ----------------------------------------

ENRICHED_ATTRS = {
    "k8scluster": "test",
    "k8snamespace": "shop",
    "k8skind": "Pod",
    "k8sname": "web-1",
    "k8sreason": "BackOff",
    "k8senriched": "partial",
    "k8senrichmissing": "object:timeout,namespace:unknown",
    "team": "payments",
    "ownerkind": "Deployment",
    "ownername": "shop web/1 100%",  # a space, a slash and a percent sign: percent-encoded
}


def structured(**attrs: Any) -> tuple[dict[str, str], bytes]:
    return STRUCTURED, envelope(data=kube_event(), **attrs)


def binary(**attrs: Any) -> tuple[dict[str, str], bytes]:
    """Binary mode as the NATS binding writes it: each attribute a ce- header, percent-encoded
    (what is not printable ASCII, and space, '"' and '%')."""
    base = {
        "specversion": "1.0",
        "id": "u-1/7",
        "source": "k8s://test/namespaces/shop",
        "type": "io.k8s.event.warning",
        **attrs,
    }
    headers = {"Content-Type": "application/json"}
    headers.update({f"ce-{k}": quote(str(v), safe="/:,;=") for k, v in base.items()})
    return headers, json.dumps(kube_event()).encode()


MODES = {"structured": structured, "binary": binary}


@pytest.mark.parametrize("mode", MODES)
def test_enrichment_extensions_are_kept_and_read_alike_in_both_modes(mode: str) -> None:
    headers, body = MODES[mode](**ENRICHED_ATTRS)
    env = cloudevents.decode(headers, body)
    assert env.enrichment == {
        "ownerkind": "Deployment",
        "ownername": "shop web/1 100%",  # percent-decoded in binary mode
        "team": "payments",
    }
    assert env.enriched == "partial"
    assert env.missing == (("object", "timeout"), ("namespace", "unknown"))
    # every attribute but the core ones is an extension, the bridge's own included
    assert {"k8scluster", "k8senriched", "k8senrichmissing", "team"} <= set(env.extensions)
    assert not set(env.extensions) & cloudevents.CORE_ATTRIBUTES
    assert env.cloudevent.get_extension("team") == "payments"
    ev = events.decode("k8s.events.test.payments.shop.Pod.BackOff", headers, body).event
    assert ev is not None
    assert ev.extensions == env.enrichment
    assert (ev.enriched, ev.partial, ev.missing) == ("partial", True, env.missing)
    shown = tailing.decode(headers, body)
    assert shown["team"] == "payments" and shown["k8senriched"] == "partial"


@pytest.mark.parametrize("mode", MODES)
def test_a_complete_enrichment_misses_nothing_and_none_is_empty(mode: str) -> None:
    env = cloudevents.decode(*MODES[mode](k8senriched="complete", team="payments"))
    assert (env.enriched, env.missing, env.enrichment) == ("complete", (), {"team": "payments"})
    plain = cloudevents.decode(*MODES[mode](k8scluster="test", k8scount="3"))
    assert (plain.enriched, plain.missing, plain.enrichment) == ("", (), {})
    ev = events.decode("s", *MODES[mode](k8scluster="test")).event
    assert ev is not None and (ev.extensions, ev.enriched, ev.missing) == ({}, "", ())
    assert not ev.partial


HOSTILE_EXTENSIONS: dict[str, Any] = {
    "an object": {"team": {"a": 1}},
    "a list": {"team": ["payments"]},
    "a number": {"team": 7},
    "null": {"team": None},
    "too long": {"team": "x" * (cloudevents.MAX_EXTENSION_VALUE + 1)},
    "a name over 20": {"a" * 21: "x"},
    "a name ending in a newline": {"team\n": "x"},  # the SDK's ^[a-z0-9]+$ lets it through
}


@pytest.mark.parametrize("attrs", HOSTILE_EXTENSIONS.values(), ids=HOSTILE_EXTENSIONS.keys())
def test_an_extension_not_in_the_bridges_shape_is_left_out_not_an_error(
    attrs: dict[str, Any],
) -> None:
    env = cloudevents.decode(*structured(k8senriched="complete", ok="1", **attrs))
    assert env.enrichment == {"ok": "1"}
    ev = events.decode("s", *structured(k8senriched="complete", ok="1", **attrs)).event
    assert ev is not None and ev.extensions == {"ok": "1"}


def test_the_bridges_own_attributes_are_never_enrichment() -> None:
    env = cloudevents.decode(*structured(**ENRICHED_ATTRS, k8scount=3))
    assert not set(env.enrichment) & cloudevents.BRIDGE_ATTRIBUTES


def test_a_message_with_thousands_of_extensions_gives_a_bounded_few() -> None:
    many = {f"x{i}": "v" for i in range(5000)}
    env = cloudevents.decode(*binary(**many))
    assert len(env.enrichment) == cloudevents.MAX_EXTENSIONS
    assert list(env.enrichment) == sorted(env.enrichment)  # by name: the same few each time


@pytest.mark.parametrize(
    ("enriched", "missing", "read"),
    [
        ("partial", "object:timeout", ("partial", (("object", "timeout"),))),
        ("partial", "object:timeout,object:timeout", ("partial", (("object", "timeout"),))),
        ("partial", "object:timeout, junk,a:b:c,OBJECT:x", ("partial", (("object", "timeout"),))),
        ("partial", 7, ("partial", ())),
        ("complete", "object:timeout", ("complete", ())),  # only a partial one misses something
        ("done", "object:timeout", ("", ())),  # not a value the bridge writes
        (["partial"], "object:timeout", ("", ())),
        ("partial", ",".join(f"p{i}:w" for i in range(500)), ("partial", None)),
    ],
)
def test_enriched_and_missing_take_only_the_bridges_values(
    enriched: Any, missing: Any, read: tuple[str, Any]
) -> None:
    env = cloudevents.decode(*structured(k8senriched=enriched, k8senrichmissing=missing))
    assert env.enriched == read[0]
    if read[1] is None:
        assert len(env.missing) == cloudevents.MAX_MISSING
    else:
        assert env.missing == read[1]
