"""bench/goref, the benchmark's Go reference pipeline (docs/performance.md), for real: built by
e2e/build-go-tool.sh (tests/standins/gotools.py), run as bench/run.py runs it against the simulated
API server and a real nats-server. What it publishes is what the bridge would publish for the same
watch lines (bridge.core.converting, structured mode): every version once, its id as the
``Nats-Msg-Id``, the same CloudEvent bytes; its JSON line is what bench/run.py reads."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from bench.run import GOREF_STREAM, REFERENCES, reference_figures
from bridge.core.converting import Converter
from bridge.core.events import from_line
from tests.standins import gotools
from tests.support import Workload

pytestmark = pytest.mark.integration
GO_TOOLS = ("goref",)

N = 2000
CLUSTER = "bench"
PREFIX = "goref.events"  # goref's default: the stream's subjects are goref.>
# the fields bench/run.py (reference_figures) reads from a reference's JSON line
FIELDS = {"count", "errors", "started", "first_ack", "last_ack", "cpu_s", "peak_rss_kb", "window"}


def goref_binary() -> Path:
    try:
        return gotools.ensure("goref")
    except gotools.ToolError:
        if gotools.go_missing():
            pytest.skip("go is not installed: bench/goref can not be built")
        raise


async def watch_lines(url: str, rv: int, n: int) -> list[bytes]:
    """The first ``n`` watch lines from ``rv``, as the API server wrote them."""
    lines: list[bytes] = []
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{url}/api/v1/events?watch=true&resourceVersion={rv}") as resp,
    ):
        while len(lines) < n:
            line = await resp.content.readline()
            assert line, f"the watch ended after {len(lines)} lines"
            lines.append(line.rstrip(b"\n"))
    return lines


async def read_stream(js: Any, stream: str, n: int) -> list[Any]:
    psub = await js.pull_subscribe(
        "goref.>",
        stream=stream,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE),
    )
    msgs: list[Any] = []
    while len(msgs) < n:
        msgs += await psub.fetch(batch=min(500, n - len(msgs)), timeout=5)
    await psub.unsubscribe()
    return msgs


async def test_goref_publishes_every_version_once_as_the_bridge_would(
    sim: Any, nats_server: Any
) -> None:
    binary = goref_binary()
    start_rv = sim.resource_version
    feed = Workload(sim, 11, bump_ratio=0.3)
    while len(feed.ids) < N:
        feed.step()
    assert feed.stats.bumped > 0  # MODIFIED versions too, not only ADDED
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        stream, subjects = REFERENCES["go"]
        assert stream == GOREF_STREAM
        await js.add_stream(
            StreamConfig(
                name=stream, subjects=[subjects], storage=StorageType.FILE, duplicate_window=7200
            )
        )
        before = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            str(binary),
            "--api",
            sim.url,
            "--nats",
            nats_server.url,
            "--rv",
            str(start_rv),
            "--count",
            str(N),
            "--window",
            "256",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        after = time.monotonic()
        assert proc.returncode == 0, err.decode()

        # its JSON line: what bench/run.py reads, its ack times on this process's clock
        result = json.loads(out.strip().splitlines()[-1])
        assert set(result) >= FIELDS
        assert result["count"] == N and result["errors"] == 0 and result["window"] == 256
        assert before <= result["started"] <= result["first_ack"] <= result["last_ack"] <= after
        assert result["cpu_s"] >= 0 and result["peak_rss_kb"] > 0
        figures = reference_figures(result, N)
        assert figures["complete"] and figures["ack_errors"] == 0

        info = await js.stream_info(stream)
        assert info.state.messages == N
        msgs = await read_stream(js, stream, N)
        assert [m.headers["Nats-Msg-Id"] for m in msgs] == feed.ids

        # the same message the bridge makes from the same line, subject prefix aside
        lines = await watch_lines(sim.url, start_rv, N)
        converter = Converter(CLUSTER, PREFIX, "structured")
        for line, m in zip(lines, msgs, strict=True):
            _, event = from_line(line)
            want = converter.convert(event)
            assert m.headers["Nats-Msg-Id"] == want.msg_id
            assert m.headers["Content-Type"] == "application/cloudevents+json"
            assert m.subject == want.subject
            assert m.data == want.payload
            # and independently of the bridge: an envelope around the Event's bytes, the
            # Event as written without metadata.managedFields
            envelope = json.loads(m.data)
            obj = json.loads(line)["object"]
            assert "managedFields" in obj["metadata"]
            del obj["metadata"]["managedFields"]
            assert envelope["data"] == obj
            assert (
                envelope["id"] == f"{obj['metadata']['uid']}/{obj['metadata']['resourceVersion']}"
            )
            assert envelope["specversion"] == "1.0" and envelope["k8scluster"] == CLUSTER
            # spliced as written: the simulator writes with msgspec, so these are its bytes
            assert m.data.endswith(b',"data":' + msgspec.json.encode(obj) + b"}")
    finally:
        await nc.close()
