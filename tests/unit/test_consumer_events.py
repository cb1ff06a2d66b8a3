"""The consumer kit's decoder (k8s_event_consumer.events) on what the bridge really sends: the
real Events recorded from Kubernetes 1.32 and 1.37 through the bridge's converter in both
content modes, its status events, and messages that are not the bridge's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bridge.core.converting import Converter
from bridge.core.enrichment import Enrichment
from k8s_event_consumer import events
from k8s_event_consumer.configuring import NatsSettings
from k8s_event_consumer.events import BadMessage, decode
from tests.cloudevent_expected import CLUSTER

CORPUS = Path(__file__).resolve().parents[1] / "data" / "real-events"
OBJECTS = [
    json.loads(line)["object"]
    for path in sorted(CORPUS.glob("*.jsonl"))
    for line in path.read_bytes().splitlines()
]
MODES = ["structured", "binary"]


def _sent(obj: dict[str, Any], mode: str) -> tuple[str, dict[str, str], bytes]:
    msg = Converter(CLUSTER, "k8s.events", mode).convert(obj)
    return msg.subject, msg.headers, msg.payload


def _t(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: f"{o['reason']}-{o['metadata']['uid'][:8]}")
def test_a_real_event_decodes_to_its_typed_view(obj: dict[str, Any], mode: str) -> None:
    subject, headers, body = _sent(obj, mode)
    d = decode(subject, headers, body)
    ev = d.event
    assert ev is not None and d.status is None
    meta = obj["metadata"]
    assert d.id == ev.id == f"{meta['uid']}/{meta['resourceVersion']}"
    assert (ev.uid, ev.resource_version) == (meta["uid"], meta["resourceVersion"])
    assert (ev.namespace, ev.name, ev.reason, ev.type) == (
        meta["namespace"],
        meta["name"],
        obj["reason"],
        obj["type"],
    )
    assert ev.cluster == CLUSTER
    series = obj.get("series") or {}
    assert ev.count == (series.get("count") or obj.get("count") or 1)
    assert ev.count == int(d.cloudevent.get_extension("k8scount"))
    last = (
        series.get("lastObservedTime")
        or obj.get("lastTimestamp")
        or obj.get("eventTime")
        or meta["creationTimestamp"]
    )
    assert ev.last_seen == _t(last)
    assert ev.last_seen == d.cloudevent.get_time()  # the CloudEvent's time, typed
    first = obj.get("firstTimestamp") or obj.get("eventTime") or meta["creationTimestamp"]
    assert ev.first_seen == _t(first)
    io = obj["involvedObject"]
    assert (ev.involved.kind, ev.involved.name, ev.involved.uid) == (
        io["kind"],
        io["name"],
        io.get("uid", ""),
    )
    assert ev.reporting_component == (
        obj.get("reportingComponent") or obj.get("source", {}).get("component", "")
    )
    assert ev.warning is (obj["type"] == "Warning")
    assert d.cloudevent.get_extension("k8sreason") == obj["reason"]
    assert "managedFields" not in ev.data["metadata"]


def test_both_modes_decode_to_the_same_view() -> None:
    for obj in OBJECTS:
        a = decode(*_sent(obj, "structured"))
        b = decode(*_sent(obj, "binary"))
        assert a.event == b.event
        assert a.event is not None and b.event is not None
        assert a.event.data == b.event.data


def _status(what: str, data: dict[str, Any], mode: str = "structured") -> events.Decoded:
    msg = Converter(CLUSTER, "k8s.events", mode).status(
        what, f"{what}/x", data, "2026-11-30T10:00:00Z"
    )
    return decode(msg.subject, msg.headers, msg.payload)


@pytest.mark.parametrize("mode", MODES)
def test_status_events_decode_to_their_types(mode: str) -> None:
    gap = _status(
        "gap",
        {
            "scope": "shop",
            "fromResourceVersion": "10",
            "toResourceVersion": "99",
            "detectedAt": "2026-11-30T10:00:00Z",
            "certainty": "likely",
            "why": "newer Events listed",
        },
        mode,
    ).status
    assert isinstance(gap, events.Gap)
    assert (gap.scope, gap.from_resource_version, gap.to_resource_version) == ("shop", "10", "99")
    assert (gap.certainty, gap.cluster, gap.what) == ("likely", CLUSTER, "gap")
    assert gap.detected_at == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert gap.id == f"{CLUSTER}/gap/x"

    down = _status(
        "apiserver_unreachable",
        {"scope": "", "detail": "refused", "at": "2026-11-30T10:00:01Z"},
        mode,
    )
    assert isinstance(down.status, events.ApiserverUnreachable)
    assert down.status.detail == "refused"
    up = _status("apiserver_reachable", {"scope": "", "detail": "", "at": None}, mode)
    assert isinstance(up.status, events.ApiserverReachable)
    dropped = _status(
        "dropped",
        {"id": "u/1", "subject": "k8s.events.c.n.Pod.R", "size": 9, "reason": "too_big"},
        mode,
    ).status
    assert isinstance(dropped, events.Dropped)
    assert (dropped.dropped_id, dropped.size, dropped.reason) == ("u/1", 9, "too_big")
    leader = _status(
        "leader_changed",
        {"identity": "b", "previousHolder": "a", "lease": "l", "transitions": 3},
        mode,
    ).status
    assert isinstance(leader, events.LeaderChanged)
    assert (leader.identity, leader.previous_holder, leader.transitions) == ("b", "a", 3)
    degraded = _status("apiserver_degraded", {"scope": "", "reason": "latency"}, mode).status
    assert isinstance(degraded, events.ApiserverDegraded) and degraded.reason == "latency"
    started = _status("started", {"host": "h", "pid": 7}, mode).status
    assert isinstance(started, events.Started) and started.pid == 7
    future = _status("something_new", {"a": 1}, mode).status
    assert type(future) is events.Status and future.what == "something_new"


def test_the_down_status_event_has_a_time_that_is_not_rfc3339_refused() -> None:
    # "at" is the bridge's RFC 3339; anything else names the field
    with pytest.raises(BadMessage, match="not RFC 3339"):
        _status("apiserver_unreachable", {"scope": "", "detail": "", "at": "yesterday"})


@pytest.mark.parametrize(
    ("headers", "body", "says"),
    [
        ({"Content-Type": "application/cloudevents+json"}, b"{nope", "not JSON"),
        ({"Content-Type": "application/cloudevents+json"}, b"[1]", "not a JSON object"),
        ({"Content-Type": "text/plain"}, b"hello", "no ce-\\* headers"),
        ({}, b"{}", "no ce-\\* headers"),
        (
            {"Content-Type": "application/cloudevents+json"},
            json.dumps({"specversion": "1.0", "source": "s", "type": "io.k8s.event.warning"}),
            "'id' is missing",
        ),
        (
            {"Content-Type": "application/cloudevents+json"},
            json.dumps(
                {"specversion": "0.3", "id": "i", "source": "s", "type": "io.k8s.event.warning"}
            ),
            "specversion",
        ),
        (
            {"Content-Type": "application/cloudevents+json"},
            json.dumps(
                {"specversion": "1.0", "id": "i", "source": "s", "type": "com.other", "data": {}}
            ),
            "neither io.k8s.event",
        ),
        (
            {"Content-Type": "application/cloudevents+json"},
            json.dumps(
                {
                    "specversion": "1.0",
                    "id": "i",
                    "source": "s",
                    "type": "io.k8s.event.warning",
                    "data": {"reason": "x"},
                }
            ),
            "metadata.uid missing",
        ),
        (
            {"ce-specversion": "1.0", "ce-id": "i", "ce-source": "s", "ce-type": "io.k8s.event.x"},
            b"not json",
            "binary-mode body is not JSON",
        ),
    ],
)
def test_a_message_that_is_not_the_bridges_is_refused_naming_why(
    headers: dict[str, str], body: bytes | str, says: str
) -> None:
    raw = body.encode() if isinstance(body, str) else body
    with pytest.raises(BadMessage, match=says):
        decode("k8s.events.x", headers, raw)


@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_the_kit_imports_without_the_bridge_or_its_runtime_dependencies() -> None:
    """A subscriber installs k8s-event-bridge-consumer alone: nats-py and cloudevents (nats-py
    itself imports aiohttp when it is installed, for websockets: not checked)."""
    import subprocess
    import sys

    code = (
        "import sys, k8s_event_consumer, k8s_event_consumer.consuming;"
        "bad = [m for m in ('bridge', 'kubernetes_asyncio', 'pydantic', 'pydantic_settings',"
        " 'msgspec', 'prometheus_client') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- with the bridge's enrichment and a subject template ---------------------------------------

TEAM = "{cluster}.{team}.{namespace}.{kind}.{reason}"


def _takes(subject_filter: str, subject: str) -> bool:
    """Whether a NATS subject filter of literals and ``*`` takes a subject."""
    f, s = subject_filter.split("."), subject.split(".")
    return len(f) == len(s) and all(a in ("*", b) for a, b in zip(f, s, strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_an_enriched_event_decodes_with_its_extensions_and_a_teams_slice_takes_it(
    mode: str,
) -> None:
    enrichment = Enrichment(values={"team": "payments", "ownerkind": "Deployment"})
    enrichment.miss("object", "timeout")
    obj = OBJECTS[0]
    msg = Converter(CLUSTER, "k8s.events", mode, TEAM).convert(obj, enrichment)  # type: ignore[arg-type]
    d = decode(msg.subject, msg.headers, msg.payload)
    ev = d.event
    assert ev is not None
    assert ev.extensions == {"ownerkind": "Deployment", "team": "payments"}
    assert (ev.enriched, ev.missing, ev.partial) == ("partial", (("object", "timeout"),), True)
    # the kit's match builds the filter the bridge's subject meets
    [mine, _status] = NatsSettings(subject_template=TEAM, match={"team": "payments"}).filters
    assert _takes(mine, msg.subject), (mine, msg.subject)
    theirs = NatsSettings(subject_template=TEAM, match={"team": "shop"}).filters[0]
    assert not _takes(theirs, msg.subject)
    namespace = obj["metadata"]["namespace"]
    both = NatsSettings(subject_template=TEAM, match={"team": "payments", "namespace": namespace})
    assert _takes(both.filters[0], msg.subject)


@pytest.mark.parametrize("mode", MODES)
def test_an_event_without_the_teams_value_is_under_the_empty_token(mode: str) -> None:
    msg = Converter(CLUSTER, "k8s.events", mode, TEAM).convert(OBJECTS[0], Enrichment())  # type: ignore[arg-type]
    ev = decode(msg.subject, msg.headers, msg.payload).event
    assert ev is not None and (ev.extensions, ev.enriched, ev.missing) == ({}, "complete", ())
    assert _takes(NatsSettings(subject_template=TEAM, match={"team": ""}).filters[0], msg.subject)


STRUCTURED = {"Content-Type": "application/cloudevents+json"}


def _ce(**attrs: Any) -> dict[str, Any]:
    """A structured CloudEvent of a Warning Event with no data to speak of, ``attrs`` over it."""
    return {
        "specversion": "1.0",
        "id": "i",
        "source": "s",
        "type": "io.k8s.event.warning",
        "data": {},
        **attrs,
    }


def _decode(body: dict[str, Any]) -> events.Decoded:
    return decode("k8s.events.x", STRUCTURED, json.dumps(body).encode())


def _forged_status(what: str) -> events.Decoded:
    return _decode(_ce(id="forged", type="io.k8s.bridge.whatever", subject=what))


@pytest.mark.parametrize("what", ["event", "status", "outcome", "pick", "x" * 10_000])
async def test_a_status_events_own_name_never_picks_a_handler_outside_the_table(
    what: str,
) -> None:
    """A status event's kind is its publisher's word: one naming itself ``event`` (or a name
    of Handlers' own) is no Kubernetes Event and goes where a kind this version does not know
    goes, ``on_status``, or nowhere; its kind is ``other`` wherever it is counted."""
    from k8s_event_consumer.consuming import Delivery, Handlers, Stats

    got: list[tuple[str, Any]] = []

    async def on_event(payload: Any, d: Any) -> None:
        got.append(("event", payload))

    async def on_status(payload: Any, d: Any) -> None:
        got.append(("status", payload))

    d = Delivery(_forged_status(what), 1, 1, None)
    assert d.kind == "other"
    assert await Handlers(on_event=on_event, on_status=on_status).outcome(d) is None
    assert [k for k, _ in got] == ["status"]
    assert isinstance(got[0][1], events.Status)
    # without on_status it is skipped, never an error nor the Event handler's
    assert await Handlers(on_event=on_event).outcome(d) is None
    assert len(got) == 1
    stats = Stats()
    stats.by_kind[d.kind] = 1
    assert set(stats.by_kind) <= {"event", *events.STATUS_KINDS, "other"}


def test_a_known_status_kind_keeps_its_own_handler_else_on_status() -> None:
    from k8s_event_consumer.consuming import Handlers

    async def on_gap(payload: Any, d: Any) -> None:
        return None

    async def on_status(payload: Any, d: Any) -> None:
        return None

    d = _status("gap", {"scope": "", "fromResourceVersion": "1", "toResourceVersion": "2"})
    assert d.kind == "gap"
    handler, payload = Handlers(on_gap=on_gap, on_status=on_status).pick(d)
    assert handler is on_gap and isinstance(payload, events.Gap)
    # a known kind without a handler of its own (Handlers has no on_started)
    started = _status("started", {"host": "h", "pid": 1})
    assert started.kind == "started"
    assert Handlers(on_gap=on_gap, on_status=on_status).pick(started)[0] is on_status
    assert Handlers(on_gap=on_gap).pick(started)[0] is None


@pytest.mark.parametrize("field", ["id", "type", "specversion", "time"])
def test_an_error_text_quotes_a_huge_value_cut(field: str) -> None:
    """A message's values are its publisher's word: a bad_message line quotes at most
    ``cloudevents.SHOWN`` characters of one, and says how long it was."""
    body = _ce(data=[])
    # an id is refused past cloudevents.MAX_ID (8,192) on its own: one just under it
    size = 8_000 if field == "id" else 500_000
    body[field] = ("2026-" if field == "time" else "") + "x" * size
    if field == "time":
        body["data"] = {}  # its data good: the time is what is wrong
    with pytest.raises(BadMessage) as raised:
        _decode(body)
    text = str(raised.value)
    assert len(text) < 1_000, text[:200]
    assert f"[cut: {len(body[field])} characters]" in text


@pytest.mark.parametrize("count", ["1e999", "-1e999", "1e308"])
def test_a_count_no_int_holds_is_a_bad_message_not_an_error(count: str) -> None:
    """JSON's 1e999 is a float inf: ``int`` raises OverflowError, which once escaped the
    decoder, ended the consuming task and came back with every redelivery (a crash loop of
    every subscriber from one message)."""
    # json.dumps writes inf as Infinity (no JSON): the number written as a publisher may
    data = {"metadata": {"uid": "u", "resourceVersion": "1"}, "count": "COUNT"}
    body = json.dumps(_ce(data=data)).replace('"COUNT"', count).encode()
    if count == "1e308":
        assert decode("k8s.events.x", STRUCTURED, body).event is not None
        return
    with pytest.raises(BadMessage, match="count"):
        decode("k8s.events.x", STRUCTURED, body)


def test_any_error_of_decoding_is_a_bad_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(attrs: Any, data: Any) -> Any:
        raise OverflowError("a value no check foresaw")

    monkeypatch.setattr(events, "_kube_event", broken)
    with pytest.raises(BadMessage, match="undecodable: OverflowError"):
        _decode(_ce())


def test_an_id_longer_than_any_of_the_bridges_is_a_bad_message() -> None:
    """Every log line and annotation naming a message carries its id: one over
    ``cloudevents.MAX_ID`` characters is no id of the bridge's, refused with its length."""
    from k8s_event_common import cloudevents

    for n, bad in ((cloudevents.MAX_ID, False), (cloudevents.MAX_ID + 1, True)):
        body = _ce(id="x" * n, type="io.k8s.bridge.zz")
        if bad:
            with pytest.raises(BadMessage, match=f"id of {n} characters") as raised:
                _decode(body)
            assert len(str(raised.value)) < 200
        else:
            assert _decode(body).id == "x" * n


def test_an_id_utf8_can_not_carry_is_a_bad_message() -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``), which no UTF-8 carries: no id of the
    bridge's, and one that the bucket of handled ids' key (its UTF-8's SHA-256) and every log
    line naming the message would have to carry. Refused, quoted escaped."""
    with pytest.raises(BadMessage, match=r"id '\\ud800x' is not UTF-8"):
        _decode(_ce(id="\ud800x"))
    assert _decode(_ce(id="pod-ü/1", type="io.k8s.bridge.zz")).id == "pod-ü/1"
