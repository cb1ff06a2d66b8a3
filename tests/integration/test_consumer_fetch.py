"""The kit's fetch bounded in bytes against a real nats-server: messages near the server's
max_payload come no more than ``max_batch_bytes`` at a time (``run``) or a batch at a time
(``run_batches``), small ones a whole batch at a time, and one larger than the budget still
comes (the budget is raised to the largest message)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

from bridge.core.converting import Converter
from k8s_event_consumer import (
    Consumer,
    ConsumerOptions,
    Delivery,
    Handlers,
    KubeEvent,
    Start,
    fetching,
    replay,
)
from tests.streams import k8s_events
from tests.support import eventually

pytestmark = pytest.mark.integration
STREAM = "K8S_EVENTS"
MIB = 1 << 20


def event(i: int, message_bytes: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"web-{i}.1",
            "namespace": "shop",
            "uid": f"u{i}",
            "resourceVersion": str(100 + i),
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": f"web-{i}"},
        "reason": "BackOff",
        "message": "m" * message_bytes,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": "2026-11-30T10:00:00Z",
        "lastTimestamp": "2026-11-30T10:00:00Z",
    }


@pytest.fixture
async def nc(nats_server: Any) -> AsyncIterator[Any]:
    async with await nats.connect(nats_server.url) as client:
        await client.jetstream().add_stream(k8s_events(stream=STREAM))
        yield client


async def publish(nc: Any, sizes: list[int]) -> None:
    conv = Converter("kit", "k8s.events", "structured")
    for i, size in enumerate(sizes):
        msg = conv.convert(event(i, size))
        await nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)


async def opened(nc: Any, durable: str, **options: Any) -> tuple[Consumer, list[list[int]]]:
    """A consumer whose every fetch's sizes are recorded."""
    consumer = await Consumer.open(
        nc,
        stream=STREAM,
        durable=durable,
        subjects=["k8s.events.>"],
        options=ConsumerOptions(ack_wait=30, fetch_timeout=0.5, **options),
        start=Start.all(),
    )
    fetches: list[list[int]] = []
    fetch = consumer._sub.fetch

    async def recorded(batch: int, max_bytes: int, timeout: float) -> Any:
        got = await fetch(batch, max_bytes, timeout)
        fetches.append([fetching.size(m) for m in got])
        return got

    consumer._sub.fetch = recorded
    return consumer, fetches


async def run(consumer: Consumer, n: int) -> list[int]:
    """``consumer.run`` until ``n`` Events were handled: their messages' lengths."""
    handled: list[int] = []

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        handled.append(len(ev.message))

    task = asyncio.create_task(consumer.run(Handlers(on_event=on_event)))
    try:
        await eventually(lambda: len(handled) == n, timeout=30)
    finally:
        await consumer.stop()
        await asyncio.wait_for(task, 15)
    return handled


async def test_large_messages_come_no_more_than_max_batch_bytes_at_a_time(nc: Any) -> None:
    large = [900_000] * 12
    await publish(nc, large + [200] * 150)
    consumer, fetches = await opened(nc, "large", max_batch_bytes=2 * MIB)
    handled = await run(consumer, 162)
    assert handled == large + [200] * 150  # every one, in the stream's order
    assert max(sum(f) for f in fetches) <= 2 * MIB
    assert max(len(f) for f in fetches) == 64  # small ones a whole batch at a time


async def test_a_batch_holds_at_most_max_bytes_or_one_message(nc: Any) -> None:
    sizes = [300_000, 700_000, 900_000, 100, 100, 900_000, 500_000] * 3
    await publish(nc, sizes)
    consumer, _ = await opened(nc, "batches", batch=512)
    batches: list[list[int]] = []

    async def on_batch(ds: list[Delivery]) -> list[None]:
        batches.append([len(d.body) for d in ds])
        return [None] * len(ds)

    task = asyncio.create_task(consumer.run_batches(on_batch, linger=0.3, max_bytes=MIB))
    try:
        await eventually(lambda: sum(map(len, batches)) == len(sizes), timeout=30)
    finally:
        await consumer.stop()
        await asyncio.wait_for(task, 15)
    assert all(sum(b) <= MIB or len(b) == 1 for b in batches), batches
    assert any(len(b) > 1 for b in batches)  # smaller ones gathered together


async def test_a_message_larger_than_the_budget_still_comes(nc: Any) -> None:
    await publish(nc, [nc.max_payload - 4096, 100])
    consumer, _ = await opened(nc, "raised", max_batch_bytes=64 * 1024)
    assert consumer.max_batch_bytes == fetching.floor(nc.max_payload)
    assert await run(consumer, 2) == [nc.max_payload - 4096, 100]


async def test_a_named_replay_fetches_bounded_too_and_reads_everything(nc: Any) -> None:
    sizes = [900_000] * 6 + [100] * 300
    await publish(nc, sizes)
    got = [
        len(d.decoded.event.message) if d.decoded.event else -1
        async for d in replay(nc, stream=STREAM, start=Start.all(), name="reader")
    ]
    assert got == sizes
    assert (await nc.jetstream().stream_info(STREAM)).state.consumer_count == 0
