import re
from datetime import datetime
from urllib.parse import unquote

import msgspec
import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary
from cloudevents.core.formats.json import JSONFormat
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bridge.core import subjects
from bridge.core.converting import Converter, occurrence_time
from bridge.errors import ConversionError

TOKEN = r"[A-Za-z0-9_-]+"


def core_event(**over):
    obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": "web-1.17f0a1b2c3d4e5f6",
            "namespace": "shop",
            "uid": "9a1c3d0e-1111-2222-3333-444455556666",
            "resourceVersion": "123456",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "managedFields": [{"manager": "kubelet", "operation": "Update"}],
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": "shop",
            "name": "web-1",
            "uid": "p-uid",
            "apiVersion": "v1",
        },
        "reason": "BackOff",
        "message": "Back-off restarting failed container web in pod web-1",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2026-11-29T10:00:00Z",
        "lastTimestamp": "2026-11-29T10:05:00Z",
        "count": 7,
        "type": "Warning",
        "eventTime": None,
    }
    obj.update(over)
    return obj


def sdk_structured(payload: bytes):
    return JSONFormat().read(None, payload)


def test_structured_mapping_matches_design():
    msg = Converter("prod-eu-1", "k8s.events", "structured").convert(core_event())
    ce = sdk_structured(msg.payload)
    assert ce.get_id() == "9a1c3d0e-1111-2222-3333-444455556666/123456" == msg.msg_id
    assert msg.headers["Nats-Msg-Id"] == msg.msg_id
    assert msg.headers["Content-Type"] == "application/cloudevents+json"
    assert ce.get_source() == "k8s://prod-eu-1/namespaces/shop"
    assert ce.get_type() == "io.k8s.event.warning"
    assert ce.get_subject() == "Pod/web-1"
    assert ce.get_time() == datetime.fromisoformat("2026-11-29T10:05:00+00:00")
    assert ce.get_datacontenttype() == "application/json"
    assert ce.get_extension("k8scluster") == "prod-eu-1"
    assert ce.get_extension("k8snamespace") == "shop"
    assert ce.get_extension("k8skind") == "Pod"
    assert ce.get_extension("k8sname") == "web-1"
    assert ce.get_extension("k8sreason") == "BackOff"
    assert ce.get_extension("k8scount") == 7
    data = ce.get_data()
    assert "managedFields" not in data["metadata"]
    assert data["message"].startswith("Back-off")
    assert msg.subject == "k8s.events.prod-eu-1.shop.Pod.BackOff"


def test_converter_does_not_change_the_input():
    obj = core_event()
    Converter("c", "p", "structured").convert(obj)
    assert "managedFields" in obj["metadata"]


def test_events_k8s_io_style_uses_series_and_event_time():
    obj = core_event(
        count=None,
        lastTimestamp=None,
        firstTimestamp=None,
        eventTime="2026-11-29T10:00:00.123456Z",
        series={"count": 12, "lastObservedTime": "2026-11-29T11:00:00.500000Z"},
    )
    del obj["count"]
    ce = sdk_structured(Converter("c", "p", "structured").convert(obj).payload)
    assert ce.get_extension("k8scount") == 12
    assert ce.get_time().isoformat() == "2026-11-29T11:00:00.500000+00:00"
    obj.pop("series")
    ce = sdk_structured(Converter("c", "p", "structured").convert(obj).payload)
    assert ce.get_extension("k8scount") == 1
    assert ce.get_time().isoformat() == "2026-11-29T10:00:00.123456+00:00"


def test_time_falls_back_to_creation_timestamp():
    obj = core_event(lastTimestamp=None, eventTime=None)
    assert occurrence_time(obj) == "2026-11-29T10:00:00Z"
    obj["metadata"]["creationTimestamp"] = "yesterday"
    assert occurrence_time(obj) is None  # the attribute is left out, never made up


def test_binary_mode_headers_parse_with_the_sdk():
    obj = core_event(message='100% "quoted" ünïcode')
    msg = Converter("prod eu", "k8s.events", "binary").convert(obj)
    assert msg.headers["ce-source"] == "k8s://prod%20eu/namespaces/shop"
    headers = {k: v for k, v in msg.headers.items() if k != "Nats-Msg-Id"}
    for v in headers.values():
        assert v.isascii()
    ce = from_binary(HTTPMessage(headers=headers, body=msg.payload), JSONFormat())
    assert ce.get_id() == msg.msg_id
    assert ce.get_source() == "k8s://prod eu/namespaces/shop"
    assert ce.get_data()["message"] == '100% "quoted" ünïcode'
    assert unquote(msg.headers["ce-k8scount"]) == "7"
    assert msg.subject == "k8s.events._prod_20eu.shop.Pod.BackOff"


@pytest.mark.parametrize("drop", ["uid", "resourceVersion"])
def test_event_without_identity_is_a_conversion_error(drop):
    obj = core_event()
    del obj["metadata"][drop]
    with pytest.raises(ConversionError, match=drop):
        Converter("c", "p", "structured").convert(obj)


def test_status_event_is_a_valid_cloudevent():
    msg = Converter("c1", "k8s.events", "structured").status(
        "gap", "gap/*/1-9", {"fromResourceVersion": "1"}, "2026-11-29T10:00:00.000000Z"
    )
    ce = sdk_structured(msg.payload)
    assert ce.get_type() == "io.k8s.bridge.gap"
    assert msg.subject == "k8s.events.c1._bridge.gap"
    assert ce.get_id() == msg.msg_id == "c1/gap/*/1-9"  # unique per cluster


text = st.text(max_size=30)
maybe_time = st.one_of(
    st.none(),
    st.just("garbage"),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")
    ),
)
event_strategy = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {
                "uid": st.uuids().map(str),
                "resourceVersion": st.integers(1, 10**12).map(str),
                "namespace": text,
                "name": text,
                "creationTimestamp": maybe_time,
            },
            optional={
                "managedFields": st.lists(
                    st.fixed_dictionaries(
                        {"manager": text, "fieldsV1": st.dictionaries(text, st.just({}))}
                    ),
                    max_size=3,
                )
            },
        ),
        "involvedObject": st.fixed_dictionaries({"kind": text, "name": text}),
        "reason": text,
        "message": st.text(max_size=200),
        "type": st.sampled_from(["Warning", "Normal", "", "Wëird"]),
        "lastTimestamp": maybe_time,
        "eventTime": maybe_time,
    },
    optional={
        "count": st.integers(-5, 10**6),
        "series": st.fixed_dictionaries(
            {"count": st.integers(0, 10**6), "lastObservedTime": maybe_time}
        ),
    },
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    obj=event_strategy,
    cluster=st.from_regex(TOKEN, fullmatch=True),
    mode=st.sampled_from(["structured", "binary"]),
)
def test_any_event_gives_a_valid_cloudevent_and_subject(obj, cluster, mode):
    msg = Converter(cluster, "k8s.events", mode).convert(obj)
    if mode == "structured":
        ce = sdk_structured(msg.payload)
        data = msgspec.json.decode(msg.payload)["data"]
        assert data["message"] == obj["message"]
        assert "managedFields" not in data["metadata"]
        assert data["metadata"]["uid"] == obj["metadata"]["uid"]
    else:
        headers = {k: v for k, v in msg.headers.items() if k != "Nats-Msg-Id"}
        ce = from_binary(HTTPMessage(headers=headers, body=msg.payload), JSONFormat())
    assert ce.get_id() == f"{obj['metadata']['uid']}/{obj['metadata']['resourceVersion']}"
    assert ce.get_type().startswith("io.k8s.event.")
    toks = msg.subject.split(".")
    assert len(toks) == 6 and toks[:2] == ["k8s", "events"]
    # each a safe token that reads back to the Event's value (or is a long value's cut)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,128}", t) for t in toks)
    ns, kind, reason = toks[3:]
    assert ns == subjects.token(obj["metadata"]["namespace"])
    assert kind == subjects.token(obj["involvedObject"]["kind"])
    assert reason == subjects.token(obj["reason"])


@given(st.text())
def test_token_is_always_a_single_safe_subject_token(value):
    t = subjects.token(value)
    assert t and all(c.isascii() and (c.isalnum() or c in "_-") for c in t)


def test_subject_cache_stays_bounded_and_correct():
    conv = Converter("c", "k8s.events", "structured")
    for i in range(5000):
        msg = conv.convert(core_event(reason=f"Reason{i}"))
        assert msg.subject == f"k8s.events.c.shop.Pod.Reason{i}"
    assert len(conv._cached) <= 4096


def test_long_keys_are_converted_but_not_cached():
    """The caches are bounded in bytes: a principal that may create Events can write 100 KB
    into a reason, a type or the fraction of a timestamp; such keys are converted every time,
    never kept."""
    from bridge.core import converting

    conv = Converter("c", "k8s.events", "structured")
    long = "R" * 100_000
    for i in range(3):
        ev = core_event(reason=f"{long}{i}", type=f"{long}{i}")
        ev["lastTimestamp"] = "2026-11-29T18:29:26." + "1" * 100_000 + f"{i}Z"
        msg = conv.convert(ev)
        # cut to a token of its own (a 100 KB subject would cut the NATS connection)
        assert msg.subject.endswith("." + subjects.token(f"{long}{i}"))
        assert len(msg.subject) < 300
    assert sum(len(k[2]) for k in conv._cached) < 1000
    assert sum(len(k) for k in conv._types) < 1000
    assert sum(len(t) for t in converting._valid_times) < 4096 * 300


rfc3339_like = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")
    ),
    st.datetimes().map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
    st.from_regex(
        r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d)?(\.\d{1,9})?([Zz]|[+-]\d\d:?\d\d)?", fullmatch=True
    ),
    st.text(alphabet="0123456789-:.TZ+ ", min_size=18, max_size=30),
)


@settings(max_examples=1000)
@given(rfc3339_like)
@example("2026-11-29T18:29:26Z")
@example("2026-11-29T18:29:26.123456Z")
@example("2026-11-29 18:29:26Z")  # the fast path's shapes, with a space: fromisoformat takes it
@example("2026-11-29t18:29:26Z")
@example("2026-11-29T18:29:26.123456z")
@example("2026-11-29T18:29:26+01:00")
@example("2026-11-29T18:29:26,123456Z")
@example("2026-11-29T18:29:26.1234567Z")
def test_fast_time_check_agrees_with_the_rfc3339_pattern(t):
    from bridge.core.converting import _RFC3339, is_rfc3339

    assert is_rfc3339(t) == (_RFC3339.match(t) is not None)


def test_an_event_whose_type_is_not_a_string_converts_as_unknown():
    """Found by the fuzzer: a dict as the Event's type went into the type cache as a key and
    raised, so the Event was skipped instead of published."""
    obj = {
        "metadata": {"uid": "u", "resourceVersion": "5", "namespace": "ns"},
        "type": {"odd": True},
        "reason": "BackOff",
        "involvedObject": {"kind": "Pod", "name": "p"},
    }
    msg = Converter("c", "k8s.events", "structured").convert(obj)
    assert msgspec.json.decode(msg.payload)["type"] == "io.k8s.event.unknown"
