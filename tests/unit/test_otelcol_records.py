"""Reading the collector's file exporter back (tests/standins/otelcol.py), with no process.

tests/data/otelcol/file-exporter-v0.139.0.jsonl is one line the real file exporter (otelcol
v0.139.0, ``format: json``) wrote for one protobuf ExportLogsServiceRequest that holds every
kind of AnyValue, two resources, a record with every field and records with none; the
expected values below are what that request said.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.standins import otelcol

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "otelcol" / "file-exporter-v0.139.0.jsonl"
LINE = SAMPLE.read_text().strip()


def test_file_exporter_line_reads_as_flat_records() -> None:
    parsed = otelcol.parse(LINE + "\n")

    assert (parsed.requests, parsed.torn) == (1, 0)
    assert len(parsed.records) == 3
    first = parsed.records[0]
    nan = first["attributes"].pop("nan")
    assert math.isnan(nan)
    assert first == {
        "resource": {"service.name": "k8s-event-otlp", "k8s.cluster.name": "test", "unset": None},
        "scope": {
            "name": "k8s-event-bridge",
            "version": "1.2.3",
            "attributes": {"scope.attr": True},
        },
        "attributes": {
            "str": 'hé "quoted" \n line',
            "int": 9007199254740993,
            "neg": -5,
            "bool": False,
            "double": 1.5,
            "whole.double": 2.0,
            "bytes": b"\x00\xffk8s",
            "empty": None,
            "array": ["a", 7, {"k": True}],
            "kvlist": {"inner": {"deep": "x"}, "list": []},
        },
        "body": {"message": "Back-off restarting failed container", "count": 3},
        "severity_number": 13,
        "severity_text": "Warning",
        "time_unix_nano": 1764842400123456789,
        "observed_time_unix_nano": 1764842401000000000,
        "event_name": "k8s.event",
        "trace_id": "0102030405060708090a0b0c0d0e0f10",
        "span_id": "0102030405060708",
        "flags": 1,
        "dropped_attributes_count": 2,
    }


def test_unset_fields_read_as_otlp_defaults() -> None:
    _, plain, other = otelcol.parse(LINE).records

    assert plain["body"] == "plain"
    assert plain["resource"] == {
        "service.name": "k8s-event-otlp",
        "k8s.cluster.name": "test",
        "unset": None,
    }
    assert (plain["time_unix_nano"], plain["observed_time_unix_nano"]) == (0, 0)
    assert (plain["severity_number"], plain["severity_text"]) == (0, "")
    assert plain["event_name"] is None
    assert plain["attributes"] == {}
    assert other["resource"] == {"service.name": "other"}
    assert other["scope"] == {"name": "", "version": "", "attributes": {}}
    assert other["body"] is None
    assert (other["severity_number"], other["severity_text"]) == (9, "Normal")


@pytest.mark.parametrize(
    ("wire", "value"),
    [
        ({"stringValue": ""}, ""),
        ({"stringValue": "x"}, "x"),
        ({"intValue": "-9223372036854775808"}, -(2**63)),
        ({"intValue": 3}, 3),  # protojson also accepts a number
        ({"boolValue": True}, True),
        ({"doubleValue": 2}, 2.0),
        ({"doubleValue": "-Infinity"}, -math.inf),
        ({"bytesValue": ""}, b""),
        ({"arrayValue": {}}, []),
        ({"arrayValue": {"values": [{}, {"boolValue": False}]}}, [None, False]),
        ({"kvlistValue": {}}, {}),
        ({"kvlistValue": {"values": [{"key": "k"}]}}, {"k": None}),
        ({}, None),
    ],
)
def test_any_value_decodes_to_python(wire: dict[str, Any], value: Any) -> None:
    decoded = otelcol.any_value(wire)

    assert decoded == value
    assert type(decoded) is type(value)


def test_unknown_any_value_kind_is_an_error() -> None:
    with pytest.raises(otelcol.CollectorError, match="unknownValue"):
        otelcol.any_value({"unknownValue": 1})


def test_records_keep_the_order_written() -> None:
    second = LINE.replace('"plain"', '"plain again"')

    parsed = otelcol.parse(f"{LINE}\n\n{second}\n")

    assert parsed.requests == 2
    assert [r["body"] for r in parsed.records if isinstance(r["body"], str)] == [
        "plain",
        "plain again",
    ]


def test_torn_last_line_is_counted_not_raised() -> None:
    parsed = otelcol.parse(LINE + "\n" + LINE[: len(LINE) // 2])

    assert (parsed.requests, parsed.torn, len(parsed.records)) == (1, 1, 3)


@given(cut=st.integers(min_value=1, max_value=len(LINE) - 1))
def test_request_appended_after_a_torn_line_is_still_read(cut: int) -> None:
    # a SIGKILL left LINE[:cut] with no newline; the restarted collector appended a whole line
    parsed = otelcol.parse(LINE + "\n" + LINE[:cut] + LINE + "\n")

    assert (parsed.requests, parsed.torn, len(parsed.records)) == (2, 1, 6)


def test_whole_request_that_lost_its_newline_is_read() -> None:
    # a SIGKILL after the exporter wrote a long line but not its newline (buffered apart)
    parsed = otelcol.parse(LINE + LINE + "\n")

    assert (parsed.requests, parsed.torn, len(parsed.records)) == (2, 0, 6)


def test_no_file_yet_reads_as_nothing(tmp_path: Path) -> None:
    parsed = otelcol.read(tmp_path / "otlp.jsonl")

    assert (parsed.records, parsed.requests, parsed.torn) == ([], 0, 0)


def test_config_keeps_the_k8s_events_records_apart(tmp_path: Path) -> None:
    cfg = otelcol.config(
        port=4318,
        output=tmp_path / "otlp.jsonl",
        k8s_events=otelcol.K8sEvents(tmp_path / "kubeconfig", ("default", "kube-system")),
        k8s_events_output=tmp_path / "k8s_events.jsonl",
    )

    pipelines = cfg["service"]["pipelines"]
    assert pipelines["logs/otlp"]["receivers"] == ["otlp"]
    assert pipelines["logs/k8s_events"]["receivers"] == ["k8s_events"]
    assert "file/otlp" in pipelines["logs/otlp"]["exporters"]
    assert "file/k8s_events" not in pipelines["logs/otlp"]["exporters"]
    assert cfg["exporters"]["file/k8s_events"]["path"] == str(tmp_path / "k8s_events.jsonl")
    assert cfg["receivers"]["k8s_events"] == {
        "auth_type": "kubeConfig",
        "namespaces": ["default", "kube-system"],
    }


def test_config_sets_the_body_limit_and_grpc_only_when_asked(tmp_path: Path) -> None:
    plain = otelcol.config(port=4318, output=tmp_path / "o")
    limited = otelcol.config(
        port=4318, output=tmp_path / "o", max_request_body_size=1000, grpc_port=4317
    )

    assert plain["receivers"]["otlp"]["protocols"] == {"http": {"endpoint": "127.0.0.1:4318"}}
    assert limited["receivers"]["otlp"]["protocols"] == {
        "http": {"endpoint": "127.0.0.1:4318", "max_request_body_size": 1000},
        "grpc": {"endpoint": "127.0.0.1:4317"},
    }
    # no telemetry port of its own: collectors side by side must not share 8888
    assert plain["service"]["telemetry"]["metrics"] == {"level": "none"}
    assert plain["exporters"]["file/otlp"]["append"] is True
