"""``tail`` prints what messages hold, and messages are written by whoever may publish: hostile
strings in every part of a line (reason, message, namespace, names, count, time, a status
event's keys and values) come out with no terminal control left, each shown as its escape; the
JSON output holds the same document with JSON escapes only."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.jetstream.tailing import json_printable, line, printable
from tests import support

# what must never reach a terminal raw
CONTROLS = {
    *map(chr, range(0x00, 0x20)),
    "\x7f",
    *map(chr, range(0x80, 0xA0)),
    "\u061c",
    "\u200e",
    "\u200f",
    "\u2028",
    "\u2029",
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
}

HOSTILE = {
    "csi": "\x1b[2J\x1b[31mFAKE\x1b[0m",  # clear the screen, a forged colour
    "osc-title": "\x1b]0;owned\x07",  # set the window title
    "osc-link": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "c1-csi": "\x9b2J\x9d0;owned\x9c",  # C1 forms of CSI and OSC
    "cr": "safe\rEVIL",  # overwrite the line
    "backspace": "ok\x08\x08no",
    "del": "a\x7fb",
    "line-sep": "one\u2028two\u2029three",
    "bidi-override": "txt.\u202eexe",  # reads as "exe.txt"
    "bidi-isolate": "\u2066a\u2067b\u2068c\u2069",
    "marks": "\u200e\u200f\u061c",
    "nul": "a\x00b",
}


def raw_controls(text: str) -> set[str]:
    return set(text) & CONTROLS


def event_ce(value: str) -> dict[str, Any]:
    """A CloudEvent of a Kubernetes Event with ``value`` in every field tail prints."""
    ce = support.cloudevent(
        support.event(namespace="shop", message="Back-off", count=3, last="2026-11-30T12:00:00Z")
    )
    for key in ("time", "k8snamespace", "subject", "k8sreason", "k8scount"):
        ce[key] = f"{ce[key]}{value}"
    ce["data"]["message"] += value
    return ce


def status_ce(value: str) -> dict[str, Any]:
    return {
        "type": f"io.k8s.bridge.gap{value}",
        "time": "2026-11-30T12:00:00Z",
        "data": {
            f"scope{value}": f"*{value}",
            "why": value,
            "nested": {"k": value},
            "list": [value],
        },
    }


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("make", [event_ce, status_ce], ids=["event", "status"])
def test_no_terminal_control_of_a_message_reaches_the_line(value: str, make: Any) -> None:
    text = line(make(value))
    assert not raw_controls(text), repr(text)
    assert "\n" not in text  # one line per message


def test_each_control_is_shown_as_its_escape() -> None:
    assert printable("a\x1b[31mb") == "a\\x1b[31mb"
    assert printable("safe\rEVIL") == "safe\\x0dEVIL"
    assert printable("\x9b2J") == "\\x9b2J"
    assert printable("txt.\u202eexe") == "txt.\\u202eexe"
    assert printable("one\u2028two") == "one\\u2028two"
    assert printable("multi\nline\twith tab") == "multi line with tab"


@pytest.mark.parametrize(
    "text", ["BackOff", "Back-off restarting failed container", "café", "日本語", "emoji 🚀", ""]
)
def test_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert printable(text) == text
    assert json_printable(json.dumps(text, ensure_ascii=False)) == json.dumps(
        text, ensure_ascii=False
    )


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_json_output_is_the_same_document_without_a_raw_control(value: str) -> None:
    ce = event_ce(value)
    doc = json.dumps(ce, ensure_ascii=False)  # raw C1, DEL, U+2028 as msgspec writes them
    out = json_printable(doc)
    assert not raw_controls(out), repr(out)
    assert json.loads(out) == ce


@pytest.mark.parametrize("odd", [{}, [], {"a": 1}, None, 3.5, True])
def test_an_attribute_that_is_not_text_is_shown_not_a_crash(odd: Any) -> None:
    """Found in review: an extension attribute that is an object (``"k8scount": {}``) raised
    TypeError in the line's format spec and ended ``tail``."""
    ce = {
        "type": "io.k8s.event.warning",
        "time": "2026-11-30T12:00:00Z",
        "k8snamespace": odd,
        "subject": odd,
        "k8sreason": odd,
        "k8scount": odd,
        "data": {"message": "m"},
    }
    text = line(ce)
    assert text.startswith("2026-11-30 12:00:00") and text.endswith(" m")


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_an_enrichment_value_is_shown_with_its_controls_escaped(value: str) -> None:
    """Enrichment extensions come from labels and annotations, and a message's from anyone
    with publish rights: each is shown in the line, never a raw control."""
    ce = {
        **event_ce(""),
        "k8senriched": "partial",
        "k8senrichmissing": f"object:timeout{value}",
        "team": f"pay{value}ments",
        "ownername": value,
    }
    text = line(ce)
    assert not raw_controls(text), repr(text)
    assert "\n" not in text
    assert f" team={printable(f'pay{value}ments')}" in text


def test_an_extension_not_in_the_bridges_shape_is_not_shown() -> None:
    ce = {
        **event_ce(""),
        "team\x1b[2J": "x",  # not an extension name
        "owner": {"nested": "\x1b[2J"},  # not a string
        "big": "y" * 5000,  # longer than any value the bridge writes
    }
    text = line(ce)
    assert "team" not in text and "owner" not in text and "y" * 100 not in text
    assert not raw_controls(text)
