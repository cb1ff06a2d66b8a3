"""bridge.events: the typed views and the spliced data agree with a plain decode, whatever
the shape, the key order or the formatting of a line."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.core import events
from bridge.core.converting import Converter
from bridge.errors import ConversionError
from k8s_event_consumer.events import decode
from tests import support

MANAGED = [
    {
        "manager": "kubelet",
        "operation": "Update",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:count": {}, 'k:{"type":"Ready"}': {".": {}}, "f:message": {}},
    }
]


def without_managed_fields(obj):
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def data_of(ev: events.Event):
    return msgspec.json.decode(b"".join(ev.data_parts()))


def event(**over):
    return support.event(
        "web-1.17f0",
        123456,
        namespace="shop",
        uid="9a1c3d0e-1111-2222-3333-444455556666",
        meta={"managedFields": MANAGED},
        created="2026-11-29T10:00:00Z",
        message='quotes " and "managedFields": inside a string',
        count=3,
        **over,
    )


def line(obj, kind="ADDED", **dumps):
    if dumps:
        return json.dumps({"type": kind, "object": obj}, **dumps).encode()
    return support.watch_line(obj, kind)


def test_fast_path_slices_the_line_and_cuts_managed_fields():
    obj = event()
    kind, ev = events.from_line(line(obj))
    assert kind == "ADDED"
    assert ev.start > 0  # a slice of the line itself, nothing re-encoded
    assert ev.view.metadata.uid == obj["metadata"]["uid"]
    assert events.rv_of(ev.view) == 123456
    assert data_of(ev) == without_managed_fields(obj)


@pytest.mark.parametrize("position", ["first", "middle", "last", "only"])
def test_managed_fields_cut_wherever_the_key_is(position):
    mf = {"managedFields": MANAGED}
    base = {"uid": "u", "resourceVersion": "7", "name": "n"}
    meta = {
        "first": {**mf, **base},
        "middle": {"uid": "u", **mf, "resourceVersion": "7", "name": "n"},
        "last": {**base, **mf},
        "only": mf,
    }[position]
    obj = event(metadata=meta)
    _, ev = events.from_line(line(obj))
    assert data_of(ev) == without_managed_fields(obj)
    assert ev.cut is not None  # found exactly, not re-encoded


def test_ambiguous_or_spaced_lines_are_re_encoded_correctly():
    # another object with a managedFields key: the cut can not tell which one it is
    twice = event(involvedObject={"kind": "Pod", "name": "p", "managedFields": MANAGED})
    _, ev = events.from_line(line(twice))
    assert data_of(ev) == without_managed_fields(twice)
    assert ev.cut is None
    # spaces after colons and commas (not how the API server writes, but valid JSON)
    spaced = event()
    kind, ev = events.from_line(line(spaced, indent=1))
    assert kind == "ADDED" and data_of(ev) == without_managed_fields(spaced)
    # object first, type second
    doc = msgspec.json.encode({"object": spaced, "type": "MODIFIED"})
    kind, ev = events.from_line(doc)
    assert kind == "MODIFIED" and data_of(ev) == without_managed_fields(spaced)


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"<html>",
        b"[1,2]",
        b'{"type":"ADDED"}',
        b'{"object":{}}',
        b'{"type":"ADDED","object":[]}',
    ],
)
def test_lines_that_are_not_watch_events_raise_bad_line(bad):
    with pytest.raises(events.BadLine):
        events.from_line(bad)


def test_odd_shapes_take_the_slow_path_and_keep_their_data():
    obj = event(metadata=["not", "an", "object"], involvedObject="Pod/x", series=5)
    kind, ev = events.from_line(line(obj))
    assert kind == "ADDED"
    assert ev.view.metadata.uid is None and ev.view.involvedObject.kind is None
    assert data_of(ev) == obj


def test_list_items_get_kind_and_api_version_in_front():
    obj = event()
    del obj["apiVersion"], obj["kind"]
    ev = events.from_item(msgspec.json.encode(obj))
    assert data_of(ev) == {**without_managed_fields(obj), "apiVersion": "v1", "kind": "Event"}
    ev = events.from_item(obj)  # an already decoded item
    assert data_of(ev) == {**without_managed_fields(obj), "apiVersion": "v1", "kind": "Event"}
    half = {**obj, "kind": "Event"}  # only one of the two: re-encoded
    assert data_of(events.from_item(msgspec.json.encode(half)))["apiVersion"] == "v1"
    with pytest.raises(events.BadLine):
        events.from_item("x")  # type: ignore[arg-type]


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    meta_extra=st.dictionaries(st.text(max_size=10), json_value, max_size=4),
    top_extra=st.dictionaries(st.text(max_size=10), json_value, max_size=4),
    managed=st.one_of(st.none(), json_value),
    mf_first=st.booleans(),
    kind=st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]),
    list_item=st.booleans(),
)
def test_data_is_always_the_object_without_managed_fields(
    meta_extra, top_extra, managed, mf_first, kind, list_item
):
    meta = {"uid": "u-1", "resourceVersion": "42", **meta_extra}
    meta.pop("managedFields", None)
    if managed is not None:
        meta = (
            {"managedFields": managed, **meta} if mf_first else {**meta, "managedFields": managed}
        )
    obj = {**top_extra, "metadata": meta, "reason": "BackOff"}
    if list_item:
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        ev = events.from_item(msgspec.json.encode(obj))
        want = {**without_managed_fields(obj), "apiVersion": "v1", "kind": "Event"}
    else:
        got_kind, ev = events.from_line(line(obj, kind))
        assert got_kind == kind
        want = without_managed_fields(obj)
    assert data_of(ev) == want
    assert ev.view.reason == "BackOff"


def test_an_error_lines_status_is_read_only_when_asked():
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    kind, ev = events.from_line(line(status, "ERROR"))
    assert kind == "ERROR" and ev.status() == (410, "too old", "Expired")
    _, ev = events.from_line(line({"code": "410", "message": None}, "ERROR"))
    assert ev.status() == (500, "", "")  # a code that is not a number: a server error


# Found by the fuzzer (fuzz/decoders.py): each would have spliced bytes that are not JSON into
# a CloudEvent, or dropped an Event a converter should take.
@pytest.mark.parametrize(
    "line",
    [
        # a key after the object: the object is not the rest of the line
        b'{"type":"ERROR","object":{"kind":"Status","code":410},"code":1}',
        # the object twice (the last one counts, as for any JSON decoder)
        b'{"type":"ADDED","object":{"metadata":{"uid":"a","resourceVersion":"1"}},'
        b'"object":{"metadata":{"uid":"b","resourceVersion":"2"}}}',
        # the type twice, the same
        b'{"type":"ADDED","object":{"metadata":{"uid":"a","resourceVersion":"1"}},"type":"ADDED"}',
    ],
)
def test_a_line_that_is_not_exactly_type_and_object_gives_the_object_as_data(line):
    _, ev = events.from_line(line)
    data = msgspec.json.decode(b"".join(ev.data_parts()))
    assert data == msgspec.json.decode(line)["object"]


def test_bytes_that_are_not_utf8_are_a_bad_line():
    line = b'{"type":"BOOKMARK","object":{"kind":"Event","Api\x96\x8cn":"v1"}}'
    with pytest.raises(events.BadLine, match="UTF-8"):
        events.from_line(line)
    with pytest.raises(events.BadLine, match="UTF-8"):
        events.from_item(b'{"metadata":{"name":"\xff"}}')


def test_a_list_item_with_space_after_the_brace_gets_kind_and_api_version():
    ev = events.from_item(b'{  "metadata":{"uid":"a","resourceVersion":"1"}}')
    data = msgspec.json.decode(b"".join(ev.data_parts()))
    assert data["kind"] == "Event" and data["apiVersion"] == "v1"
    assert msgspec.json.decode(b"".join(events.from_item(b"{   }").data_parts())) == {
        "apiVersion": "v1",
        "kind": "Event",
    }


def test_white_space_before_the_managed_fields_value_is_cut_exactly():
    """Found by the fuzzer in CI: the value's length was counted from the colon, so white
    space before it moved the cut into the next key."""
    line = (
        # counted from the colon, the value [1,2] ends at its own comma
        b'{"type":"ADDED","object":{"metadata":{"managedFields":   [1,2],'
        b'"uid":"u","resourceVersion":"1"},"reason":"BackOff"}}'
    )
    _, ev = events.from_line(line)
    data = msgspec.json.decode(b"".join(ev.data_parts()))
    assert data == {"metadata": {"uid": "u", "resourceVersion": "1"}, "reason": "BackOff"}


@pytest.mark.parametrize("number", [b"4e444444", b"1E+309", b"-1e309", b"1" + b"0" * 310 + b".5"])
def test_a_number_beyond_a_double_is_relayed_as_the_api_server_wrote_it(number):
    """Found by the fuzzer in CI. The typed decode judges the grammar of the fields it skips,
    not the range of their numbers (RFC 8259 leaves that to each decoder). The bridge relays
    them byte for byte rather than judge them at a full decode's cost on every Event: a real
    API server writes none (Go can not encode one), and the subscribers' decoder takes it."""
    line = b'{"type":"ADDED","object":{"metadata":{"uid":"u","resourceVersion":"1"},"x":%s}}'
    _, ev = events.from_line(line % number)
    data = b"".join(ev.data_parts())
    assert data == (line % number)[25:-1]
    assert json.loads(data)["x"] == json.loads(number)  # inf, or a float that holds
    cloud = Converter("c", "k8s.events", "structured").convert(ev)
    got = decode(cloud.subject, cloud.headers, cloud.payload)
    assert got.event is not None and got.event.uid == "u"
    # NaN, Infinity and numbers outside the grammar are not JSON: refused
    for bad in (b"NaN", b"-Infinity", b"01", b"1.", b".5"):
        with pytest.raises(events.BadLine, match="not JSON"):
            events.from_line(line % bad)


def test_a_number_beyond_a_double_where_the_bytes_must_be_re_encoded_is_refused_clearly():
    """Where ``data`` can not be spliced (managedFields twice, white space before a list item),
    the Event is decoded and encoded again, and a decoded object can not hold such a number:
    a ``BadLine`` or ``ConversionError`` naming it, never msgspec's own error escaping."""
    twice = (
        b'{"type":"ADDED","object":{"metadata":{"uid":"u","resourceVersion":"1",'
        b'"managedFields":[]},"involvedObject":{"managedFields":[]},"x":1e400}}'
    )
    _, ev = events.from_line(twice)
    with pytest.raises(ConversionError, match="out of range"):
        Converter("c", "k8s.events", "structured").convert(ev)
    with pytest.raises(events.BadLine, match="out of range"):
        events.from_item(b' {"metadata":{"uid":"u","resourceVersion":"1"},"x":1e400}')
