"""The OTLP subscriber without processes: the mapping of a message to a log record, the reading
of an endpoint's answers, a batch's settlement (split, dead letter, held), the settings."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from bridge.core.converting import Converter
from k8s_event_consumer.consuming import Delivery, Discard, Retry
from k8s_event_consumer.events import decode
from k8s_event_consumer.metrics import Metrics
from k8s_event_consumer.otlp import mapping, sender, settings, shipping
from k8s_event_consumer.otlp.__main__ import main
from k8s_event_consumer.otlp.running import COUNTERS, METRICS_PREFIX
from k8s_event_consumer.otlp.shipping import Backoff, DeadLetters, Shipper
from tests import support
from tests.virtualtime import LOOP, virtual_time

CLUSTER = "prod-eu-1"
T0 = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)
STORED = T0 + timedelta(seconds=3)


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def event_obj(
    uid: str = "u-1", rv: int = 100, kind: str = "Pod", message: str = "Back-off", **kw: Any
) -> dict[str, Any]:
    return support.event(
        f"web-1.{uid}",
        rv,
        namespace="shop",
        uid=uid,
        reason=kw.pop("reason", "BackOff"),
        type=kw.pop("type_", "Warning"),
        kind=kind,
        involved_object={
            "apiVersion": "v1",
            "namespace": "shop",
            "uid": "pod-uid-1",
            "fieldPath": "spec.containers{app}",
            "resourceVersion": "4242",
        },
        count=kw.pop("count", 3),
        first=T0 - timedelta(minutes=5),
        last=T0,
        created=T0 - timedelta(minutes=5),
        message=message,
        source={"component": "kubelet", "host": "node-1"},
        **kw,
    )


def delivery(obj: dict[str, Any] | None = None, seq: int = 7, mode: str = "structured") -> Delivery:
    msg = Converter(CLUSTER, "k8s.events", mode).convert(obj or event_obj())  # type: ignore[arg-type]
    decoded = decode(msg.subject, msg.headers, msg.payload)
    return Delivery(decoded, seq, 1, STORED, msg.headers, msg.payload)


def status_delivery(what: str, data: dict[str, Any], seq: int = 9) -> Delivery:
    msg = Converter(CLUSTER, "k8s.events", "structured").status(
        what, f"{what}/{_ts(T0)}", data, _ts(T0)
    )
    return Delivery(decode(msg.subject, msg.headers, msg.payload), seq, 1, STORED, msg.headers)


def attrs(kvs: Any) -> dict[str, Any]:
    out = {}
    for kv in kvs:
        v: AnyValue = kv.value
        which = v.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [x.string_value for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, which)
    return out


# --- the mapping ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_event_keeps_the_receivers_attributes_where_it_puts_them(mode: str) -> None:
    d = delivery(mode=mode)
    m = mapping.mapped(d)
    res = dict(m.resource)
    # the collector's k8sevents receiver: the involved object on the resource ...
    assert res["k8s.object.kind"] == "Pod"
    assert res["k8s.object.name"] == "web-1"
    assert res["k8s.object.uid"] == "pod-uid-1"
    assert res["k8s.object.fieldpath"] == "spec.containers{app}"
    assert res["k8s.object.api_version"] == "v1"
    assert res["k8s.object.resource_version"] == "4242"
    assert res["k8s.node.name"] == "node-1"
    # ... the event's own fields on the record
    a = attrs(m.record.attributes)
    assert a["k8s.event.reason"] == "BackOff"
    assert a["k8s.event.name"] == "web-1.u-1"
    assert a["k8s.event.uid"] == "u-1"
    assert a["k8s.namespace.name"] == "shop"
    assert a["k8s.event.count"] == 3
    assert a["k8s.event.start_time"] == "2026-12-04 09:55:00 +0000 UTC"
    # what we add: cluster, namespace and the semantic conventions' names on the resource
    assert res["k8s.cluster.name"] == CLUSTER
    assert res["k8s.namespace.name"] == "shop"
    assert res["k8s.pod.name"] == "web-1" and res["k8s.pod.uid"] == "pod-uid-1"
    assert res["k8s.container.name"] == "app"
    # the CloudEvent's id, the type, the stream's sequence
    assert a["cloudevents.event_id"] == d.id == "u-1/100"
    assert a["cloudevents.event_type"] == "io.k8s.event.warning"
    assert a["k8s.event.type"] == "Warning"
    assert a["k8s.event.resource_version"] == "100"
    assert a["k8s_event_bridge.stream_sequence"] == 7
    r = m.record
    assert r.body.string_value == "Back-off"
    assert r.severity_text == "Warning" and r.severity_number == 13  # WARN
    assert r.time_unix_nano == int(T0.timestamp()) * 10**9
    assert r.observed_time_unix_nano == int(STORED.timestamp()) * 10**9
    assert r.event_name == "io.k8s.event.warning"


def test_normal_is_info_and_a_node_is_named_as_one() -> None:
    obj = event_obj(kind="Node", type_="Normal", reason="NodeNotReady")
    obj["source"] = {}
    obj["involvedObject"].pop("namespace")
    obj["metadata"]["namespace"] = "default"  # where the kubelet writes a Node's Events
    m = mapping.mapped(delivery(obj))
    res = dict(m.resource)
    assert m.record.severity_number == 9 and m.record.severity_text == "Normal"  # INFO
    assert res["k8s.node.name"] == "web-1" and res["k8s.node.uid"] == "pod-uid-1"
    assert "k8s.pod.name" not in res


def test_a_series_takes_its_last_observed_time_and_count() -> None:
    obj = event_obj()
    obj.update(count=None, lastTimestamp=None, eventTime=_ts(T0 - timedelta(hours=1)))
    obj["series"] = {"count": 17, "lastObservedTime": _ts(T0 + timedelta(minutes=1))}
    m = mapping.mapped(delivery(obj))
    assert attrs(m.record.attributes)["k8s.event.count"] == 17
    assert m.record.time_unix_nano == int((T0 + timedelta(minutes=1)).timestamp()) * 10**9


def test_configured_resource_attributes_override() -> None:
    m = mapping.mapped(delivery(), (("k8s.cluster.name", "other"), ("k8s.cluster.uid", "c-1")))
    res = dict(m.resource)
    assert res["k8s.cluster.name"] == "other" and res["k8s.cluster.uid"] == "c-1"
    assert [k for k, _ in m.resource].count("k8s.cluster.name") == 1


@pytest.mark.parametrize(
    ("what", "data", "severity", "words"),
    [
        ("gap", {"scope": "all", "fromResourceVersion": "10", "toResourceVersion": "20",
                 "certainty": "likely", "why": "410 Gone"}, 13, "resourceVersion 10 and 20"),
        ("apiserver_unreachable", {"scope": "all", "detail": "refused"}, 13, "can not reach"),
        ("apiserver_reachable", {"scope": "all"}, 9, "answers the bridge again"),
        ("dropped", {"id": "u-9/1", "size": 2000000, "reason": "too large"}, 13, "u-9/1"),
        ("leader_changed", {"identity": "bridge-1", "transitions": 2}, 9, "bridge-1 leads"),
    ],
)  # fmt: skip
def test_status_events_are_records_recognisable_as_such(
    what: str, data: dict[str, Any], severity: int, words: str
) -> None:
    d = status_delivery(what, data)
    m = mapping.mapped(d)
    a = attrs(m.record.attributes)
    assert a["k8s_event_bridge.status"] == what
    assert a["cloudevents.event_id"] == d.id
    assert m.record.event_name.startswith("io.k8s.bridge.")
    assert m.record.severity_number == severity
    assert words in m.record.body.string_value
    assert dict(m.resource) == {"k8s.cluster.name": CLUSTER}
    for key, v in data.items():
        assert a[f"k8s_event_bridge.status.{key}"] == v


def test_request_groups_records_by_resource_in_order() -> None:
    items = [mapping.mapped(delivery(event_obj(uid=f"u-{i}", rv=i), seq=i)) for i in range(3)]
    other = mapping.mapped(status_delivery("apiserver_reachable", {"scope": "all"}))
    req = mapping.request([items[0], other, items[1], items[2]], "0.1.0")
    assert len(req.resource_logs) == 2
    first = req.resource_logs[0].scope_logs[0]
    ids = [attrs(r.attributes)["cloudevents.event_id"] for r in first.log_records]
    assert ids == ["u-0/0", "u-1/1", "u-2/2"]
    assert first.scope.name == "k8s_event_consumer.otlp" and first.scope.version == "0.1.0"
    again = ExportLogsServiceRequest()
    again.ParseFromString(req.SerializeToString())
    assert again == req


# --- the endpoint's answers ---------------------------------------------------------------


def test_answers() -> None:
    ok = ExportLogsServiceResponse()
    ok.partial_success.rejected_log_records = 2
    ok.partial_success.error_message = "too old"
    got = sender.answer(200, {"Content-Type": sender.PROTOBUF}, ok.SerializeToString())
    assert got == sender.Accepted(2, "too old")
    assert sender.answer(200, {"Content-Type": sender.PROTOBUF}, b"") == sender.Accepted()
    assert sender.answer(202, {"Content-Type": "application/json"}, b"{}") == sender.Accepted()
    # google.rpc.Status: code 3, message "bad record"
    status = b"\x08\x03\x12\x0abad record"
    got = sender.answer(400, {"Content-Type": sender.PROTOBUF}, status)
    assert got == sender.Refused(400, "HTTP 400: bad record")
    got = sender.answer(413, {"Content-Type": "text/plain"}, b"too\nlarge")
    assert got == sender.Refused(413, "HTTP 413: too large", too_large=True)
    got = sender.answer(
        503, {"Content-Type": "application/json", "Retry-After": "7"}, b'{"message":"busy"}'
    )
    assert got == sender.Unavailable("HTTP 503: busy", 7.0)
    for code in (429, 502, 504):
        assert isinstance(sender.answer(code, {}, b""), sender.Unavailable)
    for code in (401, 403, 404, 405, 415, 501):
        assert isinstance(sender.answer(code, {}, b""), sender.Blocked), code
    assert sender.answer(500, {}, b"x") == sender.Failed(500, "HTTP 500: x")


def test_retry_after() -> None:
    assert sender.retry_after("12") == 12.0
    assert sender.retry_after("99999") == sender.MAX_RETRY_AFTER
    assert sender.retry_after("Thu, 03 Dec 2026 10:00:30 GMT", now=datetime(
        2026, 12, 3, 10, 0, 0, tzinfo=UTC).timestamp()) == 30.0  # fmt: skip
    assert sender.retry_after("soon") is None
    assert sender.retry_after(None) is None


def test_garbage_answers_are_read_not_raised() -> None:
    """A collector's garbage is an answer, never an exception: "²" is a digit to isdigit and
    no number to float; JSON's 1e999 is inf, no int; a negative count of rejected records is
    none (as the JSON path already read it)."""
    assert sender.retry_after("²") is None
    got = sender.answer(503, {"Retry-After": "²"}, b"")
    assert isinstance(got, sender.Unavailable) and got.retry_after is None
    inf = b'{"partialSuccess": {"rejectedLogRecords": 1e999}}'
    got = sender.answer(200, {"Content-Type": "application/json"}, inf)
    assert isinstance(got, sender.Blocked)
    negative = ExportLogsServiceResponse()
    negative.partial_success.rejected_log_records = -1
    got = sender.answer(200, {"Content-Type": sender.PROTOBUF}, negative.SerializeToString())
    assert got == sender.Accepted(0, "")


def test_status_message_survives_garbage() -> None:
    assert sender.status_message(b"\x12\xff") == ""
    assert sender.status_message(b"\x0f") == ""


# --- a batch's settlement ---------------------------------------------------------------------


class FakeEndpoint:
    """Answers each request by a rule; records what it took."""

    url = "http://otlp.test/v1/logs"

    def __init__(self, bad: Sequence[str] = (), partial: bool = False, status: int = 400) -> None:
        self.bad = set(bad)
        self.partial = partial  # refuse the bad ones by partial success, not by status
        self.status = status  # 400, or 500 as a collector's permanent pipeline error
        self.failing = 0  # answer this many requests 500 first, whatever they hold
        self.down = 0  # answer this many requests Unavailable first
        self.blocked = 0
        self.taken: list[str] = []
        self.requests = 0

    async def send(self, body: bytes) -> sender.Answer:
        self.requests += 1
        if self.down:
            self.down -= 1
            return sender.Unavailable("HTTP 503", retry_after=0.0)
        if self.blocked:
            self.blocked -= 1
            return sender.Blocked(401, "HTTP 401: no token")
        if self.failing:
            self.failing -= 1
            return sender.Failed(500, "HTTP 500: exporter broken")
        req = ExportLogsServiceRequest()
        req.ParseFromString(body)
        ids = [
            attrs(r.attributes)["cloudevents.event_id"]
            for rl in req.resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
        ]
        bad = [i for i in ids if i in self.bad]
        if bad and not self.partial:
            if self.status == 500:
                return sender.Failed(500, "HTTP 500: the exporter refused a document")
            return sender.Refused(400, "HTTP 400: record refused")
        self.taken += [i for i in ids if i not in self.bad]
        return sender.Accepted(len(bad), "refused" if bad else "")


class FakeDeadLetters(DeadLetters):
    def __init__(self, fail: int = 0) -> None:
        self.subject = "k8s.dead.otlp"
        self.endpoint = FakeEndpoint.url
        self.stored: list[tuple[str, int, str]] = []
        self.fail = fail

    async def put(self, d: Delivery, status: int, reason: str) -> None:
        if self.fail:
            self.fail -= 1
            raise TimeoutError("no JetStream answer")
        self.stored.append((d.id, status, reason))


def shipper(
    endpoint: FakeEndpoint, dead: FakeDeadLetters | None = None, **kw: Any
) -> tuple[Shipper, asyncio.Event]:
    stopping = asyncio.Event()
    s = Shipper(
        endpoint,  # type: ignore[arg-type]
        dead or FakeDeadLetters(),
        Metrics(METRICS_PREFIX, COUNTERS),
        stopping,
        max_request_bytes=kw.pop("max_request_bytes", 1 << 22),
        backoff=Backoff(0.001, 0.002),
        **{"clock": LOOP, **kw},
    )
    return s, stopping


def batch(n: int) -> list[Delivery]:
    return [delivery(event_obj(uid=f"u-{i}", rv=i), seq=i + 1) for i in range(n)]


@virtual_time
async def test_a_batch_taken_whole_is_done() -> None:
    ep = FakeEndpoint()
    s, _ = shipper(ep)
    out = await s.ship(batch(8))
    assert out == [None] * 8 and ep.requests == 1 and len(ep.taken) == 8
    assert s.metrics.value("records_total", result="accepted") == 8


@pytest.mark.parametrize("partial", [False, True])
@virtual_time
async def test_one_refused_record_costs_the_others_nothing(partial: bool) -> None:
    ep = FakeEndpoint(bad=["u-5/5"], partial=partial)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    out = await s.ship(batch(16))
    assert out == [None] * 16  # every message settled: 15 taken, one a dead letter
    assert sorted(set(ep.taken)) == sorted(f"u-{i}/{i}" for i in range(16) if i != 5)
    assert [(i, st) for i, st, _ in dead.stored] == [("u-5/5", 200 if partial else 400)]
    assert s.metrics.value("records_total", result="dead_lettered") == 1
    if partial:
        # the taken ones are sent again with the refused one: at most once per halving
        counts = {i: ep.taken.count(i) for i in set(ep.taken)}
        assert max(counts.values()) <= 1 + 4  # log2(16)
        # counted: each taken one's copies, and the refused one sent again at each halving
        assert s.metrics.value("resent_records_total") == len(ep.taken) - 15 + 4
    else:
        assert len(ep.taken) == 15  # a whole refusal took nothing: nothing twice
        assert s.metrics.value("resent_records_total") == 0


@virtual_time
async def test_a_500_for_one_record_splits_to_it_once_the_endpoint_took_others() -> None:
    ep = FakeEndpoint(bad=["u-9/9"], status=500)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    out = await s.ship(batch(16))
    assert out == [None] * 16
    assert sorted(ep.taken) == sorted(f"u-{i}/{i}" for i in range(16) if i != 9)
    assert [(i, st) for i, st, _ in dead.stored] == [("u-9/9", 500)]
    assert s.metrics.value("splits_total", why="failed") == 4


@pytest.mark.parametrize("status", [400, 500])
@virtual_time
async def test_a_refusal_of_everything_dead_letters_nothing(status: int) -> None:
    """A proxy's 400 or a broken pipeline's 500 for every request: no record is proven
    refused, each is handed back (it comes again), none goes to the dead letters."""
    ep = FakeEndpoint(bad=[f"u-{i}/{i}" for i in range(8)], status=status)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    out = await s.ship(batch(8))
    assert all(isinstance(o, Retry) for o in out) and dead.stored == []
    assert s.metrics.value("records_total", result="handed_back") >= 1
    assert not s.endpoint_up


@virtual_time
async def test_a_lone_refused_record_is_a_dead_letter_once_the_endpoint_took_others() -> None:
    """On a quiet cluster the refused record comes alone: handed back with no proof, and a
    dead letter when it comes again after the endpoint took another batch."""
    ep = FakeEndpoint(bad=["u-0/0"], status=500)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    (first,) = await s.ship(batch(1))
    assert isinstance(first, Retry) and dead.stored == []
    assert await s.ship([delivery(event_obj(uid="other", rv=5))]) == [None]
    assert await s.ship(batch(1)) == [None]  # the same record again: now proven
    assert [i for i, _, _ in dead.stored] == ["u-0/0"]


@virtual_time
async def test_an_unmappable_message_is_discarded_alone() -> None:
    ep = FakeEndpoint()
    s, _ = shipper(ep)
    ds = batch(3)
    obj = event_obj(uid="bad", rv=9)
    obj["lastTimestamp"] = "9999-12-31T23:59:59Z"  # past what OTLP's times hold: time 0
    ds.append(delivery(obj))
    broken = delivery(event_obj(uid="worse", rv=10))
    object.__setattr__(broken.decoded, "event", None)  # neither an Event nor a status
    object.__setattr__(broken.decoded, "status", None)
    ds.append(broken)
    out = await s.ship(ds)
    assert out[:4] == [None] * 4 and isinstance(out[4], Discard)
    assert sorted(ep.taken) == sorted(["u-0/0", "u-1/1", "u-2/2", "bad/9"])
    assert s.metrics.value("records_total", result="unmappable") == 1


@virtual_time
async def test_a_dead_letter_not_stored_is_held() -> None:
    ep = FakeEndpoint(bad=["u-1/1"])
    s, _ = shipper(ep, FakeDeadLetters(fail=1))
    out = await s.ship(batch(2))
    assert out[0] is None
    assert isinstance(out[1], Retry)


@virtual_time
async def test_unavailable_then_taken_holds_the_batch() -> None:
    ep = FakeEndpoint()
    ep.down = 3
    ep.blocked = 2
    s, _ = shipper(ep)
    out = await s.ship(batch(4))
    assert out == [None] * 4 and ep.requests == 6 and len(ep.taken) == 4
    assert s.metrics.value("requests_total", result="unavailable") == 3
    assert s.metrics.value("requests_total", result="blocked") == 2
    assert s.endpoint_up


@virtual_time
async def test_stopping_while_unavailable_naks_the_batch() -> None:
    ep = FakeEndpoint()
    ep.down = 10**9
    s, stopping = shipper(ep)
    s.backoff = Backoff(10.0, 10.0)
    task = asyncio.create_task(s.ship(batch(3)))
    while ep.requests == 0:
        await asyncio.sleep(0.01)  # virtual time
    stopping.set()
    out = await task
    assert all(isinstance(o, Retry) for o in out) and not ep.taken
    assert not s.endpoint_up


@virtual_time
async def test_a_request_over_the_size_is_split_before_it_is_sent() -> None:
    ep = FakeEndpoint()
    s, _ = shipper(ep, max_request_bytes=2000)
    out = await s.ship(batch(16))
    assert out == [None] * 16 and len(ep.taken) == 16 and ep.requests > 1
    assert s.metrics.value("splits_total", why="size") >= 1


def test_backoff_doubles_and_honours_retry_after() -> None:
    b = Backoff(1.0, 8.0)
    assert 0.5 <= b.delay(0) <= 1.0
    assert 4.0 <= b.delay(3) <= 8.0
    assert 4.0 <= b.delay(30) <= 8.0
    assert b.delay(0, retry_after=42.0) == 42.0
    # Retry-After is a floor, never a way round the back-off: 0 (or 1 s) still backs off
    assert 2.0 <= b.delay(2, retry_after=0.0) <= 4.0
    assert 4.0 <= b.delay(3, retry_after=1.0) <= 8.0


# --- the settings -------------------------------------------------------------------------------


def test_settings_defaults_and_url(tmp_path: Path) -> None:
    cfg = settings.load(str(_write(tmp_path, "otlp:\n  endpoint: http://collector:4318/\n")))
    assert cfg.otlp.url == "http://collector:4318/v1/logs"
    assert cfg.nats.durable == "k8s-event-otlp" and cfg.nats.batch == 512
    cfg = settings.load(str(_write(tmp_path, "otlp:\n  endpoint: https://x/v1/logs\n")))
    assert cfg.otlp.url == "https://x/v1/logs"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("otlp:\n  endpoint: ftp://x\n", "otlp.endpoint"),
        ("otlp:\n  endpoint: http://u:p@x\n", "user name or password"),
        ("otlp:\n  headers: {'Content-Type': x}\n", "set by the subscriber"),
        ("otlp:\n  headers: {'bad name': x}\n", "not an HTTP header name"),
        ("dead_letter:\n  subject: k8s.>\n", "dead_letter.subject"),
        ("nats:\n  batch: 600\n  max_ack_pending: 100\n", "max_ack_pending"),
        ("otlp:\n  backoff_initial: 10s\n  backoff_max: 1s\n", "backoff_max"),
        ("otlp:\n  bogus: 1\n", "otlp.bogus"),
        ("otlp:\n  endpoint: https://x/v1/logs?api_key=k\n", "query"),
        ("otlp:\n  headers: {'X-Key': \"a\\u0000b\"}\n", "control character"),
        ("nats:\n  ack_wait: 0.5s\n", "ack_wait"),
        ("nats:\n  ack_wait: 3s\notlp:\n  flush_interval: 1s\n", "flush_interval"),
        ("dead_letter:\n  subject: k8s.events.dead\n", "dead_letter.subject"),
    ],
)
def test_bad_config_names_the_key_and_exits_2(
    tmp_path: Path, text: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(settings.ConfigError, match=words.replace(".", r"\.")):
        settings.load(str(path))
    assert main(["check-config", "--config", str(path)]) == 2
    assert "k8s-event-otlp:" in capsys.readouterr().err


def test_check_config_never_prints_a_header_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "otlp:\n  headers: {Authorization: Bearer s3cr3t-t0ken}\n")
    assert main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "s3cr3t" not in out and "Authorization" in out


def test_a_header_value_is_never_echoed_in_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "otlp:\n  headers: {Authorization: [Bearer, S3CR3T]}\n")
    assert main(["check-config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "otlp.headers" in err and "S3CR3T" not in err


def test_answers_that_do_not_say_taken_are_blocked() -> None:
    html = sender.answer(200, {"Content-Type": "text/html"}, b"<html>sign in</html>")
    assert isinstance(html, sender.Blocked)
    junk = sender.answer(200, {"Content-Type": sender.PROTOBUF}, b"\xff\xff\xff")
    assert isinstance(junk, sender.Blocked)
    moved = sender.answer(302, {"Location": "https://sso/?k=secret"}, b"")
    assert isinstance(moved, sender.Blocked) and "secret" not in moved.reason
    doc = b'{"partialSuccess": {"rejectedLogRecords": "2", "errorMessage": "old"}}'
    assert sender.answer(200, {"Content-Type": "application/json"}, doc) == sender.Accepted(
        2, "old"
    )


def test_a_dead_letter_carries_no_nats_header_of_the_message_and_fits_the_payload() -> None:
    d = delivery()
    d = Delivery(
        d.decoded, d.stream_sequence, 1, d.timestamp,
        {**(d.headers or {}), "Nats-Expected-Stream": "K8S_EVENTS", "Nats-Rollup": "all"},
        d.body,
    )  # fmt: skip
    dl = DeadLetters(None, "k8s.dead.otlp", "http://x/v1/logs", max_payload=1 << 20)
    body, headers = dl.message(d, 400, "too large")
    assert body == d.body
    assert not [k for k in headers if k.startswith("Nats-") and k != "Nats-Msg-Id"]
    assert headers["Nats-Msg-Id"].startswith(d.id + ":")
    small = DeadLetters(None, "k8s.dead.otlp", "http://x/v1/logs", max_payload=len(d.body))
    body, headers = small.message(d, 413, "too large")
    assert body == b"" and shipping.OMITTED_HEADER in headers
    assert headers[shipping.SEQUENCE_HEADER] == str(d.stream_sequence)


def test_hostile_values_make_a_record_not_an_error() -> None:
    msg = Converter(CLUSTER, "k8s.events", "structured").convert(event_obj(message="MARK"))  # type: ignore[arg-type]
    body = msg.payload.replace(b'"MARK"', b'"a \\ud800 lone surrogate"')  # JSON lets it through
    m = mapping.mapped(Delivery(decode(msg.subject, msg.headers, body), 1, 1, STORED))
    m.record.SerializeToString()  # protobuf takes it
    assert "\ud800" not in m.record.body.string_value
    data = {f"k{i}": i for i in range(1000)} | {"bad key!": 1}
    s = mapping.mapped(status_delivery("surprise", data))
    keys = [kv.key for kv in s.record.attributes if kv.key.startswith("k8s_event_bridge.status.")]
    assert len(keys) == mapping.MAX_STATUS_FIELDS
    assert mapping.nanos(datetime(9999, 1, 1, tzinfo=UTC)) == 0


def test_gzip_is_what_the_client_sends() -> None:
    c = sender.Client("http://x/v1/logs", timeout=1.0)
    assert c._headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(gzip.compress(b"x")) == b"x"
    c = sender.Client("http://x/v1/logs", timeout=1.0, compression="none")
    assert "Content-Encoding" not in c._headers


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "otlp.yaml"
    p.write_text(text)
    return p
