"""``k8s-event-otlp`` against a real OpenTelemetry Collector (otelcol v0.139.0, its OTLP receiver
and file exporter: tests/standins/otelcol.py), fed by the real bridge from the simulated API server
through a real nats-server. What the collector wrote is compared with every Event version the
API server accepted (the workload's ids), across SIGKILLs of the bridge and of the subscriber
while Events flow and requests are in flight, a collector stopped and started (an outage) and
frozen (a slow endpoint: the subscriber's request times out while the collector holds it), and
a collector SIGKILLed holding a request it has not answered, and a record the collector refuses
(a body over its ``max_request_body_size``)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from k8s_event_consumer.otlp import shipping
from tests.integration.harness import all_of
from tests.integration.test_otlp_flow import Otlp, acked_all
from tests.integration.test_otlp_flow import config as otlp_config
from tests.standins.otelcol import Collector
from tests.support import Workload, eventually

pytestmark = pytest.mark.integration
GO_TOOLS = ("otelcol",)
BATCH = 64


async def sub_holds(sub: Otlp) -> bool:
    return await sub.metric("held_records") > 0


async def endpoint_up(sub: Otlp) -> bool:
    return await sub.metric("endpoint_up") == 1


async def more(sub: Otlp, name: str, labels: str, than: float) -> bool:
    return await sub.metric(name, labels) > than


def ids_in(collector: Collector) -> Counter[str]:
    return Counter(str(r["attributes"].get("cloudevents.event_id")) for r in collector.records())


@pytest.fixture
async def collector(tmp_path: Path) -> AsyncIterator[Collector]:
    c = Collector(tmp_path / "otelcol")
    await c.start()
    yield c
    c.resume()
    c.stop()


@pytest.fixture
async def nc(nats_server: Any) -> AsyncIterator[Any]:
    client = await nats.connect(nats_server.url)
    yield client
    with contextlib.suppress(Exception):
        await client.close()


def subscriber_config(tmp_path: Path, nats_url: str, collector: Collector, **otlp: Any) -> Path:
    return otlp_config(
        tmp_path, nats_url, collector.url, otlp={"timeout": "2s", **otlp}, nats={"batch": BATCH}
    )


async def test_every_version_reaches_the_collector_across_kills_an_outage_and_a_freeze(
    tmp_path: Path, sim: Any, nats_server: Any, run_bridge: Any, nc: Any, collector: Collector
) -> None:
    workload = Workload(sim, seed=33, bump_ratio=0.4)
    bridge = run_bridge()
    await bridge.wait_ready(30)
    cfg = subscriber_config(tmp_path, nats_server.url, collector)
    sub = Otlp(cfg, tmp_path / "otlp-1.log").start()
    await sub.wait_ready(30)
    subscriber_kills = timeouts = 0
    try:
        # Events flow the whole time, a few hundred a second
        writing = asyncio.create_task(workload.write(2400, rate=200))

        # 1. the bridge SIGKILLed mid-flow, started again (it resumes from its checkpoint)
        await eventually(lambda: len(ids_in(collector)) >= 200, 60)
        bridge.kill()
        bridge = run_bridge()
        await bridge.wait_ready(30)

        # 2. the subscriber SIGKILLed with a request in flight, started again
        before = len(collector.records())
        await eventually(lambda: len(collector.records()) > before + BATCH, 60)
        sub.kill()
        subscriber_kills += 1
        sub = Otlp(cfg, tmp_path / "otlp-2.log").start()
        await sub.wait_ready(30)

        # 3. the collector stopped (an outage) while Events keep coming, then started again
        collector.stop()
        await workload.write(BATCH)  # more Events, should the steady ones be done already
        await eventually(lambda: sub.log_events("endpoint_unavailable"), 30)
        await collector.start()

        # 4. the collector frozen past the subscriber's timeout: the request it holds times
        #    out here, is sent again later, and the frozen one is taken too when it thaws (the
        #    metrics say so at once; the log's endpoint_* lines are sampled, one per 10 s)
        await eventually(lambda: endpoint_up(sub), 30)
        unavailable = await sub.metric("requests_total", 'result="unavailable"')
        collector.pause()
        await workload.write(BATCH)
        await eventually(
            lambda: more(sub, "requests_total", 'result="unavailable"', unavailable), 30
        )
        timeouts += 1
        collector.resume()

        # 5. the collector SIGKILLed holding a request it has not answered (what it took
        #    before is flushed first: a collector's own unflushed buffer is its loss, not the
        #    stream's, docs/consumers.md), then started again
        await writing
        await eventually(lambda: acked_all(nc), 120)
        await eventually(lambda: set(ids_in(collector)) >= set(workload.ids), 30)
        collector.pause()
        await workload.write(BATCH)
        await eventually(lambda: sub_holds(sub), 30)
        collector.kill()
        await collector.start()

        truth = workload.ids
        await all_of(nats_server.url, truth, timeout=120)  # the stream has every version ...
        await eventually(lambda: acked_all(nc), 120)  # ... and the subscriber settled each
        # the file exporter flushes every 100 ms: what was taken is in the file soon after
        await eventually(lambda: set(ids_in(collector)) >= set(truth), 30)
        got = ids_in(collector)
        assert set(got) - {"None"} >= set(truth)  # nothing lost
        events = {k: v for k, v in got.items() if k in set(truth)}
        extra = sum(events.values()) - len(truth)
        # each copy carries the same id; copies only from the killed subscriber's batch in
        # flight and from the request the frozen collector took after it had timed out here
        assert extra <= BATCH * (subscriber_kills + timeouts), Counter(events.values())
        assert collector.read().torn == 0
    finally:
        sub.kill()
        bridge.kill()


async def test_a_record_the_collector_refuses_goes_to_the_dead_letters_and_the_rest_arrives(
    tmp_path: Path, sim: Any, nats_server: Any, run_bridge: Any, nc: Any
) -> None:
    # the collector refuses a body over 64 KiB: one Event's message of 96 KiB that does not
    # compress makes the request it is in too large, however small the rest is
    collector = Collector(tmp_path / "otelcol-small", max_request_body_size=64 * 1024)
    await collector.start()
    workload = Workload(sim, seed=34, bump_ratio=0.0)
    bridge = run_bridge()
    await bridge.wait_ready(30)
    sub = Otlp(
        subscriber_config(tmp_path, nats_server.url, collector, flush_interval="0.5s"),
        tmp_path / "otlp.log",
    ).start()
    try:
        await sub.wait_ready(30)
        await workload.write(20)
        big = workload.create(message=secrets.token_urlsafe(96 * 1024))
        await workload.write(20)
        bad = f"{big['metadata']['uid']}/{big['metadata']['resourceVersion']}"
        truth = workload.ids
        await all_of(nats_server.url, truth, timeout=60)
        await eventually(lambda: acked_all(nc), 60)
        await eventually(lambda: set(ids_in(collector)) >= set(truth) - {bad}, 30)
        assert bad not in ids_in(collector)
        dead = await nc.jetstream().get_last_msg("K8S_EVENTS_DEAD", "k8s.dead.otlp")
        assert dead.headers["Nats-Msg-Id"].startswith(f"{bad}:")  # the id and its body's hash
        assert dead.headers[shipping.STATUS_HEADER] == "400"
        assert "too large" in dead.headers[shipping.REASON_HEADER]
        assert (await nc.jetstream().stream_info("K8S_EVENTS_DEAD")).state.messages == 1
        assert await sub.metric("records_total", 'result="dead_lettered"') == 1
        # the request refused as too large was split (and the limit lowered): the others of
        # its batch were sent without it
        assert await sub.metric("splits_total", 'why="size"') >= 1
        assert await sub.metric("request_limit_changes_total", 'direction="lowered"') >= 1
        sub.signal(signal.SIGTERM)
        assert await sub.wait_exit(30) == 0
    finally:
        sub.kill()
        bridge.kill()
        collector.stop()
