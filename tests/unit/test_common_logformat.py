"""One log line format (``k8s_event_common.logformat``): the bridge and the subscribers write
the same keys, and a value from a message can not forge a line in either format."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from bridge import logs as bridge_logs
from k8s_event_common import logformat
from k8s_event_consumer import logs as consumer_logs


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root, bridge = logging.getLogger(), logging.getLogger("bridge")
    saved = (root.handlers[:], root.level, bridge.handlers[:], bridge.level, bridge.propagate)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    bridge.handlers[:], bridge.level, bridge.propagate = saved[2], saved[3], saved[4]


def record(event: str, exc: bool = False, **fields: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            exc_info = sys.exc_info()
    rec = logging.LogRecord("bridge.watching", logging.WARNING, __file__, 1, event, (), exc_info)
    rec.created, rec.msecs = 1796040000.5, 500.0
    rec.fields = fields
    return rec


def test_a_json_line_holds_ts_level_logger_event_the_fields_and_exc() -> None:
    line = logformat.JsonFormatter().format(record("watch_closed", exc=True, rv="42", n=3))
    doc = json.loads(line)
    assert list(doc) == ["ts", "level", "logger", "event", "rv", "n", "exc"]
    assert doc["ts"] == "2026-11-30T12:00:00.500Z"
    assert (doc["level"], doc["logger"], doc["event"]) == (
        "warning",
        "bridge.watching",
        "watch_closed",
    )
    assert (doc["rv"], doc["n"]) == ("42", 3)
    assert "RuntimeError: boom" in doc["exc"]
    assert "\n" not in line


@pytest.mark.parametrize("program", ["bridge", "consumer"])
def test_both_programs_write_the_one_format(
    program: str, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    if program == "bridge":
        bridge_logs.setup("info", "json")
        bridge_logs.get("watching").info("watch_closed", cause="timeout")
    else:
        consumer_logs.setup("info", "json")
        consumer_logs.get("alerting").info("stopped", held=0)
    (line,) = capsys.readouterr().err.splitlines()
    doc = json.loads(line)
    assert list(doc)[:4] == ["ts", "level", "logger", "event"]
    assert "time" not in doc and doc["level"] == "info"


@pytest.mark.parametrize(
    "value", ["a b", "forged\ninfo bridge: ok", "\x1b]0;owned\x07", 'say "hi"', "café", ""]
)
def test_a_text_value_stays_one_token(value: str) -> None:
    line = logformat.TextFormatter().format(record("input_skipped", sample=value))
    assert line.startswith("warning bridge.watching: input_skipped sample=")
    shown = line.split("sample=", 1)[1]
    assert json.loads(shown) == value  # quoted and escaped, JSON-style
    assert "\n" not in line and "\x1b" not in line


def test_a_plain_text_value_is_left_as_it_is() -> None:
    line = logformat.TextFormatter().format(record("watch_closed", cause="timeout", rv=42))
    assert line == "warning bridge.watching: watch_closed cause=timeout rv=42"


def test_a_sampled_warning_is_written_once_per_interval(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    bridge_logs.setup("info", "json")
    log = bridge_logs.get("watching")
    for n in range(3):
        log.warn_sampled("bad_line", "input_skipped", interval=3600.0, n=n)
    log.warn_sampled("other", "input_skipped", interval=3600.0, n=9)
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert [d["n"] for d in lines] == [0, 9]
    assert [d["level"] for d in lines] == ["warning", "warning"] and "suppressed" not in lines[1]


def test_a_sampled_line_at_any_level_says_how_many_it_stands_for(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer_logs.setup("info", "json")
    now = [0.0]
    log = consumer_logs.get("otlp").timed(lambda: now[0])
    written = []
    for n in range(25):  # 25 refusals, one every 0.5 s of the clock given
        written.append(log.sampled("error", "refused", "record_refused_unproven", 5.0, n=n))
        now[0] += 0.5
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert [(d["level"], d["n"], d.get("suppressed")) for d in lines] == [
        ("error", 0, None),
        ("error", 10, 9),
        ("error", 20, 9),
    ]
    assert written.count(True) == 3 and log.name == "k8s_event_consumer.otlp"


def _strict(line: str) -> dict[str, object]:
    """What a strict log pipeline (jq, Loki's json stage) reads: no NaN, no Infinity."""

    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    doc = json.loads(line, parse_constant=refuse)
    assert isinstance(doc, dict)
    return doc


def test_a_json_line_is_strict_json_whatever_the_fields_hold() -> None:
    """Found in review: json.dumps wrote a Retry-After of inf as ``Infinity`` (msgspec, the
    bridge's encoder before the shared format, wrote null), and bytes, sets and dataclasses
    as their repr."""
    import dataclasses

    @dataclasses.dataclass
    class Pair:
        a: int
        b: float

    line = logformat.JsonFormatter().format(
        record(
            "backing_off",
            seconds=float("inf"),
            nested={"x": [float("nan"), -float("inf"), 1.5]},
            raw=b"ab\xff",
            reasons={"b", "a"},
            pair=Pair(1, float("inf")),
        )
    )
    doc = _strict(line)
    assert doc["seconds"] is None
    assert doc["nested"] == {"x": [None, None, 1.5]}
    assert doc["raw"] == "ab\ufffd"
    assert doc["reasons"] == ["a", "b"]
    assert doc["pair"] == {"a": 1, "b": None}
