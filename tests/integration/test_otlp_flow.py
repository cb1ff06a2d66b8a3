"""``k8s-event-otlp`` as a real process against a real nats-server, sending to an OTLP endpoint
in the test (tests/otlp_endpoint.py) that gives the answers a real collector can not be made to
give on demand: a partial success, ``Retry-After``, a 401, an answer withheld while the
subscriber is SIGKILLed. What is acked is read from JetStream itself (the durable's
``num_ack_pending`` and ``num_pending``); what the endpoint took is compared with what was
published. tests/integration/test_otlp_collector.py runs the same subscriber against a real
OpenTelemetry Collector."""

from __future__ import annotations

import contextlib
import signal
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from bridge.core.converting import Converter
from k8s_event_consumer.otlp import shipping
from tests.integration.harness import ConsumerProcess, subscriber_config
from tests.otlp_endpoint import Endpoint
from tests.streams import k8s_events
from tests.support import eventually

pytestmark = pytest.mark.integration
CLUSTER = "otlp"
DURABLE = "k8s-event-otlp"


def event(
    uid: str, rv: int, message: str = "Back-off restarting failed container"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"web-{uid}.1",
            "namespace": "shop",
            "uid": uid,
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-12-04T10:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": f"web-{uid}", "uid": "p"},
        "reason": "BackOff",
        "message": message,
        "type": "Warning",
        "count": rv,
        "firstTimestamp": "2026-12-04T10:00:00Z",
        "lastTimestamp": "2026-12-04T10:00:05Z",
        "source": {"component": "kubelet", "host": "node-1"},
    }


@dataclass
class Otlp(ConsumerProcess):
    module: str = "k8s_event_consumer.otlp"
    what = "k8s-event-otlp"

    def start(self) -> Otlp:
        super().start()
        return self

    async def metric(self, name: str, labels: str = "") -> float:
        _, text = await self.get("/metrics")
        return sum(
            float(ln.rsplit(" ", 1)[1])
            for ln in text.splitlines()
            if ln.startswith(f"k8s_event_otlp_{name}") and labels in ln
        )


@pytest.fixture
async def nc(nats_server: Any) -> AsyncIterator[Any]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(k8s_events())
    yield client
    with contextlib.suppress(Exception):
        await client.close()


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    ep = await Endpoint().start()
    yield ep
    ep.hold.set()
    await ep.stop()


async def publish(nc: Any, n: int, start: int = 0, **kw: Any) -> list[str]:
    conv = Converter(CLUSTER, "k8s.events", "structured")
    ids = []
    for i in range(start, start + n):
        msg = conv.convert(event(f"u{i}", i + 1, **kw))  # type: ignore[arg-type]
        await nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)
        ids.append(f"u{i}/{i + 1}")
    return ids


def config(tmp_path: Path, nats_url: str, endpoint: Endpoint | str, **sections: Any) -> Path:
    """The subscriber's config for ``endpoint`` (an in-process one or a URL): test-sized
    back-off and batches; ``sections`` override per key."""
    otlp = {
        "endpoint": endpoint if isinstance(endpoint, str) else endpoint.url,
        "flush_interval": "0.2s",
        "backoff_initial": "0.2s",
        "backoff_max": "1s",
        "compression": "gzip",
        **sections.pop("otlp", {}),
    }
    nats_cfg = {"servers": [nats_url], "ack_wait": "3s", "batch": 64, **sections.pop("nats", {})}
    return subscriber_config(
        tmp_path, "k8s_event_consumer.otlp", nats_cfg, tmp_path, otlp=otlp, **sections
    )


async def start(tmp_path: Path, cfg: Path, name: str = "otlp") -> Otlp:
    proc = Otlp(cfg, tmp_path / f"{name}.log").start()
    await proc.wait_ready(30)
    return proc


async def acked_all(nc: Any) -> bool:
    info = await nc.jetstream().consumer_info("K8S_EVENTS", DURABLE)
    return info.num_ack_pending == 0 and info.num_pending == 0


async def test_every_message_becomes_a_record_and_is_acked_once_taken(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    ids = await publish(nc, 300)
    conv = Converter(CLUSTER, "k8s.events", "binary")
    gap = conv.status(
        "gap", "gap/1", {"scope": "all", "certainty": "likely"}, "2026-12-04T10:00:00Z"
    )
    await nc.jetstream().publish(gap.subject, gap.payload, headers=gap.headers)
    proc = await start(tmp_path, config(tmp_path, nats_server.url, endpoint))
    try:
        await eventually(lambda: len(endpoint.accepted) >= 301, 60)
        await eventually(lambda: acked_all(nc), 30)
        assert sorted(endpoint.accepted) == sorted([*ids, "otlp/gap/1"])
        assert endpoint.requests < 301  # in batches
        assert set(endpoint.encodings) == {"gzip"}
        gaps = [
            r
            for b in endpoint.bodies
            for rl in b.resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
            if r.event_name == "io.k8s.bridge.gap"
        ]
        assert len(gaps) == 1 and gaps[0].severity_text == "Warning"
        assert await proc.metric("records_total", 'result="accepted"') == 301
        proc.signal(signal.SIGTERM)
        assert await proc.wait_exit(30) == 0
    finally:
        proc.kill()


@pytest.mark.parametrize(
    ("partial", "status"),
    [(False, 400), (True, 200), (False, 500)],
    ids=["refused-400", "partial-success", "failed-500"],
)
async def test_a_refused_record_goes_to_the_dead_letters_and_costs_the_rest_nothing(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint, partial: bool, status: int
) -> None:
    ids = await publish(nc, 40)
    bad = ids[17]
    endpoint.refuse = {bad}
    endpoint.partial = partial
    endpoint.refuse_status = status
    proc = await start(tmp_path, config(tmp_path, nats_server.url, endpoint))
    try:
        await eventually(lambda: acked_all(nc), 60)
        assert set(endpoint.accepted) == set(ids) - {bad}
        if not partial:
            assert len(endpoint.accepted) == 39  # a whole refusal took nothing: no copies
        counts = Counter(endpoint.accepted)
        assert max(counts.values()) <= 1 + 6  # at most once more per halving of 64
        js = nc.jetstream()
        dead = await js.get_last_msg("K8S_EVENTS_DEAD", "k8s.dead.otlp")
        assert dead.headers is not None
        assert dead.headers[shipping.STATUS_HEADER] == str(status)
        assert f"record {bad} refused" in dead.headers[shipping.REASON_HEADER]
        assert dead.headers["Nats-Msg-Id"].startswith(f"{bad}:")  # the id and its body's hash
        assert f'"id":"{bad}"'.encode() in dead.data.replace(b" ", b"")  # the message itself
        info = await js.stream_info("K8S_EVENTS_DEAD")
        assert info.state.messages == 1
        assert await proc.metric("records_total", 'result="dead_lettered"') == 1
        assert [e["id"] for e in proc.log_events("record_refused")] == [bad]
    finally:
        proc.kill()


@pytest.mark.parametrize("status", [503, 429, 401])
async def test_an_unavailable_endpoint_holds_everything_unacked_until_it_takes_it(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint, status: int
) -> None:
    endpoint.answer = status
    endpoint.retry_after = "1" if status == 429 else None
    ids = await publish(nc, 100)
    proc = await start(tmp_path, config(tmp_path, nats_server.url, endpoint))
    try:
        await eventually(lambda: endpoint.requests >= 3, 30)
        info = await nc.jetstream().consumer_info("K8S_EVENTS", DURABLE)
        # one batch in hand, kept from redelivery; nothing acked, nothing more fetched
        assert info.num_ack_pending == 64 and info.num_redelivered == 0
        assert await proc.metric("endpoint_up") == 0
        assert await proc.metric("held_records") == 64
        endpoint.answer = None
        await eventually(lambda: acked_all(nc), 60)
        assert sorted(endpoint.accepted) == sorted(ids)
        assert await proc.metric("endpoint_up") == 1
    finally:
        proc.kill()


async def test_sigkill_with_an_answer_outstanding_loses_nothing_and_repeats_one_batch(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    ids = await publish(nc, 200)
    cfg = config(tmp_path, nats_server.url, endpoint)
    proc = await start(tmp_path, cfg)
    # the worst moment: the endpoint has the batch and answers only after the kill
    await eventually(lambda: len(endpoint.accepted) >= 64, 30)
    endpoint.hold.clear()
    await eventually(lambda: endpoint.requests >= 3, 30)
    proc.kill()
    endpoint.hold.set()  # the withheld request is taken (its answer reaches no one)
    proc = await start(tmp_path, cfg, "otlp-2")
    try:
        await eventually(lambda: acked_all(nc), 60)
        counts = Counter(endpoint.accepted)
        assert set(counts) == set(ids)  # nothing lost
        assert sum(counts.values()) - len(ids) <= 64  # at most the batch in flight, again
    finally:
        proc.kill()


async def test_sigterm_while_the_endpoint_is_away_exits_0_and_the_next_start_sends(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    endpoint.answer = 503
    ids = await publish(nc, 30)
    cfg = config(tmp_path, nats_server.url, endpoint)
    proc = await start(tmp_path, cfg)
    await eventually(lambda: endpoint.requests >= 2, 30)
    proc.signal(signal.SIGTERM)
    assert await proc.wait_exit(30) == 0
    stopped = proc.log_events("stopped")
    assert stopped and stopped[0]["retried"] == 30  # handed back (nak'd), not left to ack_wait
    endpoint.answer = None
    proc = await start(tmp_path, cfg, "otlp-2")
    try:
        await eventually(lambda: acked_all(nc), 60)
        assert sorted(endpoint.accepted) == sorted(ids)
    finally:
        proc.kill()


async def test_two_replicas_share_the_durable_and_send_each_record_once(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    cfg = config(tmp_path, nats_server.url, endpoint)
    a = await start(tmp_path, cfg, "otlp-a")
    b = await start(tmp_path, config(tmp_path, nats_server.url, endpoint), "otlp-b")
    try:
        ids = await publish(nc, 400)
        await eventually(lambda: acked_all(nc), 60)
        await eventually(lambda: len(endpoint.accepted) >= 400, 30)
        assert sorted(endpoint.accepted) == sorted(ids)  # each once, whichever sent it
    finally:
        a.kill()
        b.kill()
