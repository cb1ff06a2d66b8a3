"""``python -m bridge tail --digests`` as a person runs it, against a real nats-server whose
K8S_DIGESTS stream holds digests as ``k8s-event-digests`` writes them (``digests.encode``,
``digests.headers``, on ``digests.subject``) and messages no digest is, published by someone
with publish rights there. Then the drill-down a digest names: ``tail --from-seq N --to-seq M``
on the versions stream prints that series' versions in the range and ends by itself."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest

from bridge.core.converting import Converter
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings
from k8s_event_common import digests, streams

pytestmark = pytest.mark.integration

PREFIX = "k8s.digests"
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\rEVIL\u2028\u202etxt.exe"
RAW = [b"\x1b", b"\x07", b"\r", "\x9b".encode(), "\u2028".encode(), "\u202e".encode()]


def digest(name: str, reason: str, occurrences: int, type_: str = "Warning") -> digests.Digest:
    series = digests.Series(
        cluster="test",
        namespace="shop",
        kind="Pod",
        name=name,
        uid=f"uid-{name}",
        reason=reason,
        type=type_,
        reporting_component="kubelet",
    )
    return digests.Digest(
        series=series,
        start=START,
        end=START + timedelta(minutes=5),
        occurrences=occurrences,
        versions=3,
        first_seen=START + timedelta(seconds=1),
        last_seen=START + timedelta(seconds=200),
        count_from=1,
        count_to=1 + occurrences,
        uids=(f"ev-{name}",),
        uids_omitted=0,
        first_message=f"first of {name}",
        last_message=f"last of {name}",
        sampled=occurrences > 3,
        combined=False,
        stream="K8S_EVENTS",
        first_seq=1,
        last_seq=5,
    )


DIGESTS = [
    digest("web-1", "BackOff", 57),
    digest("web-2", "BackOff", 2),
    digest("web-3", "Scheduled", 1, type_="Normal"),
]


async def publish_digests(url: str, extra: list[tuple[str, dict[str, str], bytes]]) -> None:
    nc = await nats.connect(url)
    try:
        await streams.provision(nc, streams.digest_stream("K8S_DIGESTS", PREFIX, max_age=0))
        js = nc.jetstream()
        for d in DIGESTS[:2]:
            await js.publish(
                digests.subject(PREFIX, d.series), digests.encode(d), headers=digests.headers(d)
            )
        for subject, headers, body in extra:
            await js.publish(subject, body, headers=headers)
        d = DIGESTS[2]
        await js.publish(
            digests.subject(PREFIX, d.series), digests.encode(d), headers=digests.headers(d)
        )
    finally:
        await nc.close()


def hostile() -> list[tuple[str, dict[str, str], bytes]]:
    """What someone with publish rights on k8s.digests.> may write: no JSON, a CloudEvent of
    another type, a digest whose id is not its series' and window's, a digest with a hostile
    series (a valid digest: shown, its controls escaped)."""
    wrong_id = digests.document(DIGESTS[0])
    wrong_id["id"] = "digest/" + "0" * 32
    evil = digest(f"web{EVIL}", f"BackOff{EVIL}", 9)
    evil = replace(evil, last_message=f"Back-off{EVIL}")
    event = {**digests.document(DIGESTS[0]), "type": "io.k8s.event.warning"}
    structured = dict(digests.HEADERS)
    return [
        (f"{PREFIX}.test.shop.Pod.Junk", {}, EVIL.encode()),
        (f"{PREFIX}.test.shop.Pod.Event", structured, json.dumps(event).encode()),
        (f"{PREFIX}.test.shop.Pod.Forged", structured, json.dumps(wrong_id).encode()),
        (digests.subject(PREFIX, evil.series), digests.headers(evil), digests.encode(evil)),
    ]


async def run_tail(url: str, *args: str) -> tuple[int | None, bytes, bytes]:
    """``python -m bridge tail ARGS``: (exit code, stdout, stderr); the process must end by
    itself (a --count or a bounded read)."""
    env = {"BRIDGE_NATS__SERVERS": f'["{url}"]', "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "tail",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out, err


async def test_tail_digests_prints_one_line_per_digest_and_reports_what_is_none(
    nats_server: Any,
) -> None:
    await publish_digests(nats_server.url, hostile())
    code, out, err = await run_tail(nats_server.url, "--digests", "--all", "--count", "7")
    assert code == 0, err
    for raw in RAW:
        assert raw not in out, (raw, out)
    lines = out.decode().splitlines()
    assert len(lines) == 7, out  # one line each: a CR or U+2028 split none
    assert "BackOff Pod shop/web-1: 57 times in 3 versions, count 1->58, seq 1-5" in lines[0]
    assert "[sampled]: last of web-1" in lines[0]
    assert "BackOff Pod shop/web-2: 2 times" in lines[1]
    assert lines[2].startswith("(not a digest: k8s.digests.test.shop.Pod.Junk: ")
    assert "neither a structured CloudEvent" in lines[2]
    assert lines[3].startswith("(not a digest: k8s.digests.test.shop.Pod.Event: ")
    assert "'io.k8s.event.warning' is not io.k8s.digest" in lines[3]
    assert "digest id 'digest/0000" in lines[4] and "is not its series'" in lines[4]
    assert "BackOff\\x1b]0;owned\\x07" in lines[5] and "Back-off\\x1b]0;owned" in lines[5]
    assert "Scheduled Pod shop/web-3: 1 times" in lines[6]


async def test_tail_digests_json_is_each_digests_cloudevent(nats_server: Any) -> None:
    await publish_digests(nats_server.url, hostile())
    code, out, err = await run_tail(
        nats_server.url, "--digests", "--all", "--json", "--type", "warning", "--to-seq", "7"
    )
    assert code == 0, err  # a bounded read: it ended by itself at the stream's end
    for raw in RAW:
        assert raw not in out, (raw, out)
    docs = [json.loads(ln) for ln in out.splitlines()]
    # the Warning digests; the Normal one and what is no digest left out (a filter is set)
    assert [d["id"] for d in docs[:2]] == [DIGESTS[0].id, DIGESTS[1].id]
    assert docs[:2] == [digests.document(d) for d in DIGESTS[:2]]
    assert len(docs) == 3 and docs[2]["k8sreason"] == f"BackOff{EVIL}"  # escaped, the same value


async def test_tail_digests_at_least_n_of_a_reason_and_a_range_of_digests(nats_server: Any) -> None:
    await publish_digests(nats_server.url, [])
    code, out, err = await run_tail(
        nats_server.url,
        "--digests",
        "--all",
        "--at-least",
        "10",
        "--reason",
        "BackOff",
        "--count",
        "1",
    )
    assert code == 0, err
    (only,) = out.decode().splitlines()
    assert "web-1: 57 times" in only
    code, out, err = await run_tail(
        nats_server.url, "--digests", "--from-seq", "2", "--to-seq", "3"
    )
    assert code == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 2 and "web-2" in lines[0] and "web-3" in lines[1]


async def test_tail_digests_without_the_stream_says_so(nats_server: Any) -> None:
    code, _, err = await run_tail(nats_server.url, "--digests", "--count", "1")
    assert code == 1 and b"no stream K8S_DIGESTS" in err


# -- the drill-down: a digest's sequence range on the versions stream ---------------------------


def event(name: str, reason: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{name}.{reason}",
            "namespace": "shop",
            "uid": f"ev-{name}-{reason}",
            "resourceVersion": str(100 + count),
            "creationTimestamp": "2026-11-30T12:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "name": name, "namespace": "shop", "uid": f"uid-{name}"},
        "reason": reason,
        "message": f"{reason} of {name} #{count}",
        "type": "Warning",
        "count": count,
        "firstTimestamp": "2026-11-30T12:00:00Z",
        "lastTimestamp": "2026-11-30T12:00:00Z",
    }


async def test_a_digests_range_drills_down_to_its_versions_and_ends(nats_server: Any) -> None:
    """Versions 1..12 interleave three series; a digest of web-1's BackOff folded 2..8. ``tail
    --from-seq 2 --to-seq 8`` with the series' filters prints exactly its versions in the
    range, and the process ends (no --count) though more versions follow in the stream."""
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_stream(nc, NatsSettings(servers=[nats_server.url]))
        converter = Converter("test", "k8s.events", "structured")
        seqs: dict[str, list[int]] = {}
        for n in range(1, 13):
            name, reason = [("web-1", "BackOff"), ("web-2", "BackOff"), ("web-1", "Pulled")][n % 3]
            m = converter.convert(event(name, reason, n))  # type: ignore[arg-type]
            ack = await js.publish(m.subject, m.payload, headers=m.headers)
            seqs.setdefault(f"{name}/{reason}", []).append(ack.seq)
    finally:
        await nc.close()
    want = [s for s in seqs["web-1/BackOff"] if 2 <= s <= 8]
    assert want == [3, 6]
    code, out, err = await run_tail(
        nats_server.url,
        "--from-seq",
        "2",
        "--to-seq",
        "8",
        "--namespace",
        "shop",
        "--kind",
        "Pod",
        "--reason",
        "BackOff",
        "--where",
        "namespace=shop",
    )
    assert code == 0, err
    lines = [ln for ln in out.decode().splitlines() if "Pod/web-1" in ln]
    assert [ln.rsplit("#", 1)[1] for ln in lines] == ["3", "6"]
    assert len(out.decode().splitlines()) == 4  # web-2's BackOff at 4 and 7 too: no name filter
    # a range past the stream's end ends there; one before it prints nothing and ends
    code, out, err = await run_tail(nats_server.url, "--from-seq", "11", "--to-seq", "999")
    assert code == 0 and len(out.splitlines()) == 2, (out, err)
    code, out, err = await run_tail(nats_server.url, "--from-seq", "50", "--to-seq", "60")
    assert code == 0 and out == b"", err
