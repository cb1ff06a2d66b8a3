"""``python -m bridge tail`` as a person runs it, against a real nats-server whose stream holds
messages written by someone with publish rights: an Event in each CloudEvents mode, a status
event and a message that is no CloudEvent, each carrying terminal controls (ESC sequences, C1,
CR, U+2028, a bidi override). What tail writes to the terminal holds none of them raw, in the
readable lines, in colour, and in JSON."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from urllib.parse import quote

import nats
import pytest

from bridge.core.converting import Converter
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings

pytestmark = pytest.mark.integration

EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\rEVIL\u2028\u202etxt.exe"
# the bytes of every raw control a terminal would act on (UTF-8 of C1, U+2028, U+202E too)
RAW = [
    b"\x1b",
    b"\x07",
    b"\r",
    "\x9b".encode(),
    "\u2028".encode(),
    "\u202e".encode(),
]
# the colours tail itself paints with --color always: the only ESC allowed
PAINT = [b"\x1b[33m", b"\x1b[36m", b"\x1b[0m"]


def hostile_event(uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"web-1.{uid}",
            "namespace": "shop",
            "uid": uid,
            "resourceVersion": "7",
            "creationTimestamp": "2026-11-30T12:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "name": f"web-1{EVIL}", "namespace": "shop"},
        "reason": f"BackOff{EVIL}",
        "message": f"Back-off{EVIL}",
        "type": "Warning",
        "count": 3,
        "firstTimestamp": "2026-11-30T12:00:00Z",
        "lastTimestamp": "2026-11-30T12:00:00Z",
    }


@pytest.fixture
async def stream(nats_server: Any) -> str:
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_stream(nc, NatsSettings(servers=[nats_server.url]))
        for mode, uid in (("structured", "u-1"), ("binary", "u-2")):
            msg = Converter("test", "k8s.events", mode).convert(hostile_event(uid))  # type: ignore[arg-type]
            await js.publish(msg.subject, msg.payload, headers=msg.headers)
        status = Converter("test", "k8s.events", "structured").status(
            "apiserver_unreachable",
            "apiserver_unreachable/x",
            {"scope": "*", "detail": EVIL, f"key{EVIL}": EVIL},
            "2026-11-30T12:00:00Z",
        )
        await js.publish(status.subject, status.payload, headers=status.headers)
        await js.publish("k8s.events.test.shop.Pod.Junk", EVIL.encode())
    finally:
        await nc.close()
    return str(nats_server.url)


async def run_tail(
    nats_url: str, *args: str, count: int = 4, env: dict[str, str] | None = None
) -> tuple[int | None, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "tail",
        "--all",
        "--count",
        str(count),
        *args,
        env={"BRIDGE_NATS__SERVERS": f'["{nats_url}"]', "PATH": "/usr/bin:/bin", **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out, err


@pytest.mark.parametrize("args", [(), ("--color", "always")], ids=["plain", "colour"])
async def test_tail_prints_no_terminal_control_from_a_message(
    stream: str, args: tuple[str, ...]
) -> None:
    code, out, err = await run_tail(stream, *args)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 4, out  # one line each: a CR or U+2028 split none
    text = out
    for paint in PAINT if args else []:
        text = text.replace(paint, b"")
    for raw in RAW:
        assert raw not in text, (raw, out)
    shown = out.decode()
    assert "BackOff\\x1b]0;owned\\x07" in shown  # the reason, its controls as escapes
    assert "Back-off\\x1b]0;owned" in shown  # the message
    assert "\\u202etxt.exe" in shown
    assert "not a CloudEvent" in shown


async def test_tail_json_keeps_the_document_and_escapes_every_control(stream: str) -> None:
    code, out, err = await run_tail(stream, "--json")
    assert code == 0, err
    for raw in RAW:
        assert raw not in out, (raw, out)
    docs = [json.loads(ln) for ln in out.splitlines() if ln.startswith(b"{")]
    assert len(docs) == 3
    assert docs[0]["data"]["message"] == f"Back-off{EVIL}"  # the same value, escaped
    assert docs[1]["k8sreason"] == f"BackOff{EVIL}"  # binary mode: from the ce- headers


# -- enrichment: a team's slice by the configured template, hostile extension values ----------

TEAM_ENV = {
    "BRIDGE_NATS__SUBJECT_TEMPLATE": "{cluster}.{team}.{namespace}.{kind}.{reason}",
    "BRIDGE_ENRICH__NAMESPACE__LABELS": '{"example.com/team": "team"}',
    "BRIDGE_ENRICH__OBJECT__OWNER_NAME": "ownername",
}


def enriched(uid: str, team: str) -> dict[str, Any]:
    """A structured CloudEvent as an enriching bridge writes it, ``EVIL`` in the owner's name
    and in what is missing (hand-made: anyone with publish rights can write one)."""
    return {
        "specversion": "1.0",
        "id": f"{uid}/7",
        "source": "k8s://test/namespaces/shop",
        "type": "io.k8s.event.warning",
        "subject": "Pod/web-1",
        "time": "2026-11-30T12:00:00Z",
        "datacontenttype": "application/json",
        "k8scluster": "test",
        "k8snamespace": "shop",
        "k8skind": "Pod",
        "k8sname": "web-1",
        "k8sreason": "BackOff",
        "k8scount": 3,
        "k8senriched": "partial",
        "k8senrichmissing": "namespace:timeout",
        "team": team,
        "ownername": f"shop{EVIL}",
        "data": hostile_event(uid),
    }


@pytest.fixture
async def team_stream(nats_server: Any) -> str:
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_stream(nc, NatsSettings(servers=[nats_server.url]))
        structured = {"Content-Type": "application/cloudevents+json"}
        # on the other team's subject, though it says payments: the subject filter leaves it
        off = {**enriched("u-0", "payments"), "subject": "Pod/off-slice"}
        await js.publish(
            "k8s.events.test.shop.shop.Pod.BackOff", json.dumps(off).encode(), headers=structured
        )
        for uid, team in (("u-1", "shop"), ("u-2", "payments")):
            doc = enriched(uid, team)
            subject = f"k8s.events.test.{team}.shop.Pod.BackOff"
            await js.publish(subject, json.dumps(doc).encode(), headers=structured)
        # the same in binary mode: each attribute a ce- header, percent-encoded
        doc = enriched("u-3", "payments")
        body = json.dumps(doc.pop("data")).encode()
        headers = {"Content-Type": "application/json"}
        headers.update({f"ce-{k}": quote(str(v), safe="/:,") for k, v in doc.items()})
        await js.publish("k8s.events.test.payments.shop.Pod.BackOff", body, headers=headers)
    finally:
        await nc.close()
    return str(nats_server.url)


async def test_tail_takes_a_teams_slice_and_escapes_its_extensions(team_stream: str) -> None:
    code, out, err = await run_tail(team_stream, "--where", "team=payments", count=2, env=TEAM_ENV)
    assert code == 0, err
    for raw in RAW:
        assert raw not in out, (raw, out)
    lines = out.decode().splitlines()
    assert len(lines) == 2, out  # u-2 and u-3: the other team's Events are not read
    assert b"off-slice" not in out  # JetStream filtered by the template, not tail alone
    for ln in lines:
        assert " team=payments " in ln and " ownername=shop\\x1b]0;owned\\x07" in ln
        assert "[partial: namespace:timeout]" in ln


async def test_tail_names_a_where_the_template_and_enrich_do_not_know(team_stream: str) -> None:
    code, out, err = await run_tail(team_stream, "--where", "teem=payments", env=TEAM_ENV)
    assert code == 2 and out == b""
    assert b"--where teem" in err
