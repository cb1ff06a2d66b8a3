"""The real OpenTelemetry Collector of tests/standins/otelcol.py, as the OTLP subscriber meets it:
what its OTLP/HTTP receiver answers (v0.139.0), what its file exporter keeps across a kill and a
restart, and what contrib's ``k8s_events`` receiver writes for the Events of an API server (the
simulated one here), kept apart from the OTLP records.

The answers asserted here are the ones docs/e2e.md lists for the sender: 200 with an empty
partial success; 400 with a ``google.rpc.Status`` (code 3, InvalidArgument) for a body over
``max_request_body_size`` or a malformed protobuf; no answer at all while the collector is
frozen (the client's timeout ends the request, and the collector still writes it once it
goes on); connection refused once it is down; 503 with code 14 (Unavailable) and no
Retry-After when its exporter fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from k8s_event_sim.apiserver import now_rfc3339_micro
from tests.standins.otelcol import Collector, K8sEvents
from tests.support import event, eventually

GO_TOOLS = ("otelcol",)  # tests/conftest.py builds it after collection

LIMIT = 4096  # max_request_body_size of the collector under test
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def export_request(*bodies: str, pad: int = 0, **attributes: str) -> bytes:
    """An ExportLogsServiceRequest: one resource (``service.name``), one scope, a record per
    body, each with ``attributes``, event name ``k8s.event`` and a time; ``pad`` characters
    added to the last body."""
    req = logs_service_pb2.ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(
        key="service.name", value=common_pb2.AnyValue(string_value="k8s-event-otlp")
    )
    sl = rl.scope_logs.add()
    sl.scope.name = "test_otelcol"
    for i, body in enumerate(bodies):
        lr = sl.log_records.add()
        lr.time_unix_nano = 1_764_842_400_000_000_000 + i
        lr.observed_time_unix_nano = 1_764_842_401_000_000_000 + i
        lr.severity_number = 13
        lr.severity_text = "Warning"
        lr.event_name = "k8s.event"
        lr.body.string_value = body + ("x" * pad if i == len(bodies) - 1 else "")
        for key, value in attributes.items():
            lr.attributes.add(key=key, value=common_pb2.AnyValue(string_value=value))
    return req.SerializeToString()


def request_of_size(size: int) -> bytes:
    """An export request of exactly ``size`` bytes (padding the body)."""
    pad = 0
    for _ in range(10):
        data = export_request("sized", pad=pad)
        if len(data) == size:
            return data
        pad += size - len(data)
    raise AssertionError(f"no request of {size} bytes")


def rpc_status(body: bytes) -> tuple[int, str]:
    """``google.rpc.Status``'s code (field 1) and message (field 2) from its protobuf bytes
    (the package that would decode it is not one the tests install)."""
    code, message, i = 0, "", 0

    def varint() -> int:
        nonlocal i
        value, shift = 0, 0
        while True:
            byte = body[i]
            i += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    while i < len(body):
        tag = varint()
        if tag == 0x08:
            code = varint()
        elif tag & 7 == 2:
            length = varint()
            if tag >> 3 == 2:
                message = body[i : i + length].decode()
            i += length
        else:
            raise AssertionError(f"unexpected tag {tag} in {body!r}")
    return code, message


async def post(collector: Collector, data: bytes, timeout: float = 10) -> tuple[int, str, bytes]:
    """POST ``data`` as protobuf to /v1/logs: status, Content-Type, body."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            collector.logs_url,
            data=data,
            headers=PROTOBUF,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as r,
    ):
        return r.status, r.headers.get("Content-Type", ""), await r.read()


def bodies(collector: Collector) -> list[Any]:
    return [r["body"] for r in collector.records()]


@pytest.fixture
async def collector(tmp_path: Path) -> AsyncIterator[Collector]:
    c = await Collector(tmp_path / "otelcol", max_request_body_size=LIMIT).start()
    yield c
    c.stop()


async def test_protobuf_request_comes_back_as_a_record(collector: Collector) -> None:
    status, content_type, body = await post(
        collector, export_request("Back-off restarting failed container", reason="BackOff")
    )

    assert (status, content_type) == (200, "application/x-protobuf")
    response = logs_service_pb2.ExportLogsServiceResponse.FromString(body)
    assert response.partial_success.rejected_log_records == 0
    records = await eventually(collector.records, what="the record in the file exporter's output")
    assert records == [
        {
            "resource": {"service.name": "k8s-event-otlp"},
            "scope": {"name": "test_otelcol", "version": "", "attributes": {}},
            "attributes": {"reason": "BackOff"},
            "body": "Back-off restarting failed container",
            "severity_number": 13,
            "severity_text": "Warning",
            "time_unix_nano": 1_764_842_400_000_000_000,
            "observed_time_unix_nano": 1_764_842_401_000_000_000,
            "event_name": "k8s.event",
            "trace_id": "",
            "span_id": "",
            "flags": 0,
            "dropped_attributes_count": 0,
        }
    ]


async def test_kill_and_restart_keep_earlier_records(collector: Collector) -> None:
    assert (await post(collector, export_request("before the kill")))[0] == 200
    await eventually(lambda: bodies(collector) == ["before the kill"], what="the first record")
    port = collector.port

    collector.kill()
    await collector.restart()
    assert (await post(collector, export_request("after the restart")))[0] == 200

    await eventually(
        lambda: bodies(collector) == ["before the kill", "after the restart"],
        what="both records, in order",
    )
    assert collector.port == port
    assert collector.read().torn == 0


async def test_clean_stop_writes_what_was_acknowledged(tmp_path: Path) -> None:
    # a flush interval no test outlives: only the stop can write the record
    c = await Collector(tmp_path / "otelcol", flush_interval="1h").start()
    try:
        assert (await post(c, export_request("acknowledged")))[0] == 200
        assert c.stop() == 0
        assert bodies(c) == ["acknowledged"]
    finally:
        c.stop()


async def test_kill_loses_what_was_acknowledged_but_not_flushed(tmp_path: Path) -> None:
    c = await Collector(tmp_path / "otelcol", flush_interval="1h").start()
    try:
        assert (await post(c, export_request("acknowledged")))[0] == 200
        c.kill()
        assert c.records() == []
    finally:
        c.stop()


async def test_kill_mid_line_tears_it_and_restart_appends_after_it(tmp_path: Path) -> None:
    # the exporter's 4 KiB buffer, never flushed by time here: the long second line fills it,
    # it is written (the first line and the second's start), the rest waits in the buffer
    c = await Collector(tmp_path / "otelcol", flush_interval="1h").start()
    try:
        assert (await post(c, export_request("first")))[0] == 200
        assert (await post(c, export_request("torn", pad=5000)))[0] == 200
        c.kill()
        assert (bodies(c), c.read().torn) == (["first"], 1)

        await c.start()
        assert (await post(c, export_request("after the restart")))[0] == 200
        assert c.stop() == 0  # the clean stop flushes

        assert (bodies(c), c.read().torn) == (["first", "after the restart"], 1)
    finally:
        c.stop()


async def test_body_over_max_request_body_size_is_refused_with_400(collector: Collector) -> None:
    at_limit, over = request_of_size(LIMIT), request_of_size(LIMIT + 1)

    assert (await post(collector, at_limit))[0] == 200
    status, content_type, body = await post(collector, over)

    assert (status, content_type) == (400, "application/x-protobuf")
    assert rpc_status(body) == (3, "http: request body too large")
    # nothing of it was consumed: the next record follows the one at the limit
    assert (await post(collector, export_request("next")))[0] == 200
    written = await eventually(lambda: len(bodies(collector)) == 2 and bodies(collector))
    assert written[0].startswith("sized") and written[1] == "next"


async def test_malformed_protobuf_is_refused_with_400(collector: Collector) -> None:
    status, content_type, body = await post(collector, b"\xff\xff\xff\xff")

    assert (status, content_type) == (400, "application/x-protobuf")
    assert rpc_status(body) == (3, "unexpected EOF")


async def test_failing_exporter_is_answered_503_unavailable(collector: Collector) -> None:
    collector.disk_full = True
    await collector.restart()

    async def unavailable() -> tuple[int, dict[str, str], bytes] | None:
        async with (
            aiohttp.ClientSession() as s,
            s.post(collector.logs_url, data=export_request("no room"), headers=PROTOBUF) as r,
        ):
            answer = r.status, dict(r.headers), await r.read()
        return answer if answer[0] != 200 else None

    # the first small request may be buffered (200, lost); once a write failed, every one is 503
    status, headers, body = await eventually(unavailable, what="a request answered 503")

    assert status == 503
    assert headers["Content-Type"] == "application/x-protobuf"
    assert "Retry-After" not in headers
    code, message = rpc_status(body)
    assert code == 14 and message.endswith("no space left on device")
    collector.disk_full = False
    await collector.restart()
    assert (await post(collector, export_request("room again")))[0] == 200
    await eventually(lambda: bodies(collector) == ["room again"], what="the record written")


async def test_paused_collector_accepts_but_never_answers(collector: Collector) -> None:
    collector.pause()

    with pytest.raises(TimeoutError):
        await post(collector, export_request("sent while paused"), timeout=1)

    # the request was whole in the socket: once resumed the collector writes it, though the
    # sender saw a timeout (a retry of it would be a duplicate)
    collector.resume()
    await eventually(
        lambda: bodies(collector) == ["sent while paused"], what="the timed-out request written"
    )


async def test_stopped_collector_refuses_the_connection(collector: Collector) -> None:
    collector.stop()

    with pytest.raises(aiohttp.ClientConnectorError) as refused:
        await post(collector, export_request("nobody listens"))

    assert isinstance(refused.value.os_error, ConnectionRefusedError)


async def test_grpc_listens_beside_http_when_asked(tmp_path: Path) -> None:
    c = await Collector(tmp_path / "otelcol", grpc=True).start()
    try:
        assert c.grpc_port is not None
        _, writer = await asyncio.open_connection("127.0.0.1", c.grpc_port)
        writer.close()
        assert (await post(c, export_request("over HTTP")))[0] == 200
    finally:
        c.stop()


async def test_k8s_events_receiver_writes_its_own_file(
    tmp_path: Path, sim: Any, kubeconfig: Path
) -> None:
    # written before the collector starts, with an old timestamp: the receiver skips it
    sim.create_event(event("old.1", last="2020-01-01T00:00:00Z", message="old"))
    c = await Collector(tmp_path / "otelcol", k8s_events=K8sEvents(kubeconfig)).start()
    try:
        sim.create_event(
            event(
                "web-1.2",
                event_time=now_rfc3339_micro(),  # microseconds: surely not before the start
                message="Back-off restarting failed container",
                count=1,
                involved_object={"namespace": "default", "uid": "pod-uid", "apiVersion": "v1"},
                source={"host": "node-1"},
            )
        )

        # whole seconds, as Kubernetes writes lastTimestamp: surely not before the start
        sim.create_event(event("on-time.1", last=c.k8s_events_from, reason="Pulled"))

        records = await eventually(
            lambda: len(c.k8s_event_records()) == 2 and c.k8s_event_records(),
            what="the receiver's records of the two Events written after its start",
        )
        record, on_time = records
        assert on_time["attributes"]["k8s.event.name"] == "on-time.1"
        assert on_time["time_unix_nano"] == int(c.k8s_events_from.timestamp()) * 10**9
        assert record["body"] == "Back-off restarting failed container"
        assert record["resource"] == {
            "k8s.node.name": "node-1",
            "k8s.object.kind": "Pod",
            "k8s.object.name": "web-1",
            "k8s.object.uid": "pod-uid",
            "k8s.object.fieldpath": "",
            "k8s.object.api_version": "v1",
            "k8s.object.resource_version": "",
        }
        assert record["attributes"]["k8s.event.name"] == "web-1.2"
        assert record["attributes"]["k8s.event.count"] == 1
        assert record["attributes"]["k8s.namespace.name"] == "default"
        assert (record["severity_number"], record["severity_text"]) == (13, "Warning")
        assert record["observed_time_unix_nano"] == 0
        assert record["event_name"] is None

        # an update of it (a repeat) is sent again, as a record of its own
        sim.bump_count("default", "web-1.2")
        again = await eventually(lambda: c.k8s_event_records()[2:], what="the update's record")
        assert again[0]["attributes"]["k8s.event.name"] == "web-1.2"
        assert again[0]["attributes"]["k8s.event.count"] == 2
        assert c.records() == []  # none of it in the OTLP pipeline's file
    finally:
        c.stop()
