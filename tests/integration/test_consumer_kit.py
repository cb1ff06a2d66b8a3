"""The consumer kit (k8s_event_consumer) against a real nats-server: the bridge's own messages
(its converter, both content modes) in a stream like the bridge's, read by the kit's durable
pull consumer: acks, holds, back-off and max_deliver, idempotency across a lost ack and a
restart, bad messages, the status callbacks, resuming and replaying."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from bridge.core.converting import Converter
from k8s_event_common.streams import ShapeMismatch
from k8s_event_consumer import (
    Consumer,
    ConsumerOptions,
    Delivery,
    Discard,
    Handlers,
    KubeEvent,
    KVSeen,
    Retry,
    Start,
    replay,
)
from k8s_event_consumer.durables import ConsumerConflict
from k8s_event_consumer.events import Gap, Status
from tests.streams import k8s_events
from tests.support import eventually

pytestmark = pytest.mark.integration
STREAM = "K8S_EVENTS"
CLUSTER = "kit"


def event(uid: str, rv: int, *, reason: str = "BackOff", count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"web-{uid}.1",
            "namespace": "shop",
            "uid": uid,
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": f"web-{uid}", "uid": "p"},
        "reason": reason,
        "message": "Back-off restarting failed container",
        "type": "Warning",
        "count": count,
        "firstTimestamp": "2026-11-30T10:00:00Z",
        "lastTimestamp": f"2026-11-30T10:00:{count:02d}Z",
        "source": {"component": "kubelet"},
    }


@pytest.fixture
async def nc(nats_server: Any) -> AsyncIterator[Any]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(k8s_events(stream=STREAM))
    yield client
    with contextlib.suppress(Exception):
        await client.close()


async def publish(nc: Any, obj: dict[str, Any], mode: str = "structured") -> None:
    msg = Converter(CLUSTER, "k8s.events", mode).convert(obj)
    await nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)


async def publish_status(nc: Any, what: str, data: dict[str, Any], mode: str = "binary") -> None:
    msg = Converter(CLUSTER, "k8s.events", mode).status(
        what, f"{what}/{json.dumps(data, sort_keys=True)}", data, "2026-11-30T10:00:00Z"
    )
    await nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[KubeEvent, Delivery]] = []
        self.statuses: list[tuple[str, Status]] = []

    async def on_event(self, ev: KubeEvent, d: Delivery) -> None:
        self.events.append((ev, d))

    def status(self, name: str) -> Any:
        async def record(s: Status, d: Delivery) -> None:
            self.statuses.append((name, s))

        return record

    async def until(self, predicate: Any, timeout: float = 15.0) -> None:
        await eventually(predicate, timeout, 0.02)


@contextlib.asynccontextmanager
async def running(consumer: Consumer, handlers: Handlers) -> AsyncIterator[Consumer]:
    task = asyncio.create_task(consumer.run(handlers))
    try:
        yield consumer
    finally:
        await consumer.stop()
        await asyncio.wait_for(task, 15)


FAST = ConsumerOptions(ack_wait=1.0, backoff=(0.2, 0.4), fetch_timeout=0.5)


@pytest.mark.parametrize("mode", ["structured", "binary"])
async def test_each_version_is_handled_once_and_a_reopened_durable_resumes(
    nc: Any, mode: str
) -> None:
    for rv, count in ((1, 1), (2, 2), (3, 3)):
        await publish(nc, event("a", rv, count=count), mode)
    rec = Recorder()
    c = await Consumer.open(nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST)
    async with running(c, Handlers(on_event=rec.on_event)):
        await rec.until(lambda: len(rec.events) == 3)
    assert [(e.id, e.count) for e, _ in rec.events] == [("a/1", 1), ("a/2", 2), ("a/3", 3)]
    assert rec.events[0][0].involved.name == "web-a"

    await publish(nc, event("a", 4, count=4), mode)
    c2 = await Consumer.open(
        nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST
    )
    async with running(c2, Handlers(on_event=rec.on_event)):
        await rec.until(lambda: len(rec.events) == 4)
        await asyncio.sleep(1.5)  # past ack_wait: nothing acked comes again
    assert [e.id for e, _ in rec.events] == ["a/1", "a/2", "a/3", "a/4"]
    assert c2.stats.handled == 1 and c2.stats.skipped_duplicates == 0


async def test_a_held_message_comes_again_after_its_delay_and_is_done_once(nc: Any) -> None:
    await publish(nc, event("h", 1))
    await publish(nc, event("k", 2))
    calls: list[tuple[str, int]] = []
    done = asyncio.Event()

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        calls.append((ev.id, d.num_delivered))
        if ev.id == "h/1" and d.num_delivered < 3:
            raise Retry(0.3, "the API server is down")
        if ev.id == "h/1":
            done.set()

    c = await Consumer.open(nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST)
    async with running(c, Handlers(on_event=on_event)):
        await asyncio.wait_for(done.wait(), 15)
        await asyncio.sleep(1.5)
    assert calls.count(("k/2", 1)) == 1  # a held message does not stop the next
    assert [n for i, n in calls if i == "h/1"] == [1, 2, 3]
    assert c.stats.retried == 2 and c.stats.handled == 2


async def test_a_discarded_message_is_acked_but_its_id_stays_free_for_a_genuine_one(
    nc: Any,
) -> None:
    """A forged message carrying a genuine message's id (without a Msg-Id: JetStream keeps
    both) is discarded; the genuine one after it is still handled, once."""
    forged = Converter(CLUSTER, "k8s.events", "structured").convert(event("g", 1, reason="X"))
    headers = {k: v for k, v in (forged.headers or {}).items() if k != "Nats-Msg-Id"}
    await nc.jetstream().publish(forged.subject, forged.payload, headers=headers)
    await publish(nc, event("g", 1))
    calls: list[tuple[str, str, int]] = []
    rec = Recorder()

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        calls.append((ev.id, ev.reason, d.num_delivered))
        if ev.reason == "X":
            raise Discard("the API server does not confirm it")
        await rec.on_event(ev, d)

    seen = KVSeen(await nc.jetstream().create_key_value(bucket="seen_discard"), "seen_discard")
    c = await Consumer.open(
        nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST, seen=seen
    )
    async with running(c, Handlers(on_event=on_event)):
        await rec.until(lambda: len(rec.events) == 1)
        await asyncio.sleep(1.5)  # past ack_wait: the discarded one was acked, not redelivered
    assert calls == [("g/1", "X", 1), ("g/1", "BackOff", 1)]
    assert c.stats.discarded == 1 and c.stats.handled == 1 and c.stats.skipped_duplicates == 0
    assert await seen.contains("g/1")


async def test_a_failing_handler_is_retried_with_backoff_until_max_deliver(nc: Any) -> None:
    await publish(nc, event("f", 1))
    seen: list[int] = []

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        seen.append(d.num_delivered)
        raise RuntimeError("boom")

    opts = ConsumerOptions(ack_wait=1.0, max_deliver=3, backoff=(0.2,), fetch_timeout=0.5)
    c = await Consumer.open(nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=opts)
    async with running(c, Handlers(on_event=on_event)):
        await eventually(lambda: len(seen) >= 3, 10, what="three deliveries")
        await asyncio.sleep(2)  # past ack_wait and the back-off: no fourth comes
    assert seen == [1, 2, 3]  # JetStream gives up after max_deliver
    assert c.stats.failed == 3 and c.stats.handled == 0


async def test_a_handled_message_whose_ack_was_lost_is_not_run_twice(
    nc: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ack of a handled message lost (a reconnect at the wrong moment): JetStream delivers
    it again after ack_wait, and the consumer acks it without calling the handler again."""
    await publish(nc, event("s", 1))
    calls: list[int] = []
    real_ack = Msg.ack
    lost: list[int] = []

    async def ack(self: Msg) -> None:
        if not lost:
            lost.append(self.metadata.num_delivered)  # the first ack never reaches the server
            return
        await real_ack(self)

    monkeypatch.setattr(Msg, "ack", ack)

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        calls.append(d.num_delivered)

    c = await Consumer.open(nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST)
    async with running(c, Handlers(on_event=on_event)):
        await eventually(lambda: c.stats.skipped_duplicates, 15, what="a duplicate skipped")
    assert calls == [1] and lost == [1]
    info = await nc.jetstream().consumer_info(STREAM, "d")
    assert info.num_ack_pending == 0


async def test_a_restart_between_handling_and_ack_does_not_handle_again(
    nats_server: Any, nc: Any
) -> None:
    """The subscriber dies after its action and before its ack: JetStream delivers the message
    to the next process, whose KV-backed memory says it was done."""
    await publish(nc, event("r", 1))
    calls: list[str] = []
    first = await nats.connect(nats_server.url)
    seen = await KVSeen.open(first, "kit_seen")

    class DiesBeforeAck:
        async def contains(self, id_: str) -> bool:
            return await seen.contains(id_)

        async def add(self, id_: str) -> None:
            await seen.add(id_)
            await first.close()  # the process is gone before it acks
            raise asyncio.CancelledError

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        calls.append(ev.id)

    c = await Consumer.open(
        first, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST
    )
    c.seen = DiesBeforeAck()
    with pytest.raises(asyncio.CancelledError):
        await c.run(Handlers(on_event=on_event))
    assert calls == ["r/1"]

    second = await nats.connect(nats_server.url)
    c2 = await Consumer.open(
        second,
        stream=STREAM,
        durable="d",
        subjects=["k8s.events.>"],
        options=FAST,
        seen=await KVSeen.open(second, "kit_seen"),
    )
    async with running(c2, Handlers(on_event=on_event)):
        await eventually(lambda: c2.stats.skipped_duplicates, 10, what="a duplicate skipped")
    await second.close()
    assert calls == ["r/1"]


async def test_a_bad_message_is_terminated_and_the_rest_flows(nc: Any) -> None:
    js = nc.jetstream()
    await js.publish("k8s.events.kit.shop.Pod.X", b"{not json", headers={"ce-id": "x"})
    await publish(nc, event("g", 2))
    rec = Recorder()
    c = await Consumer.open(nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST)
    async with running(c, Handlers(on_event=rec.on_event)):
        await rec.until(lambda: len(rec.events) == 1)
        await asyncio.sleep(2)  # past ack_wait: a terminated message does not come again
    assert c.stats.bad == 1
    info = await js.consumer_info(STREAM, "d")
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


async def test_status_events_reach_their_callbacks(nc: Any) -> None:
    await publish_status(
        nc,
        "gap",
        {
            "scope": "",
            "fromResourceVersion": "1",
            "toResourceVersion": "9",
            "detectedAt": "2026-11-30T10:00:00Z",
            "certainty": "possible",
            "why": "w",
        },
    )
    await publish_status(nc, "apiserver_unreachable", {"scope": "", "detail": "refused"})
    await publish_status(nc, "apiserver_reachable", {"scope": "", "detail": ""})
    await publish_status(nc, "dropped", {"id": "u/1", "subject": "s", "size": 5, "reason": "big"})
    await publish_status(nc, "leader_changed", {"identity": "b", "previousHolder": "a"})
    await publish_status(nc, "started", {"host": "h", "pid": 1}, mode="structured")
    await publish(nc, event("e", 3))
    rec = Recorder()
    h = Handlers(
        on_event=rec.on_event,
        on_gap=rec.status("gap"),
        on_apiserver_unreachable=rec.status("down"),
        on_apiserver_reachable=rec.status("up"),
        on_dropped=rec.status("dropped"),
        on_leader_changed=rec.status("leader"),
        on_status=rec.status("other"),
    )
    c = await Consumer.open(nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST)
    async with running(c, h):
        await rec.until(lambda: len(rec.statuses) == 6 and len(rec.events) == 1)
    assert [n for n, _ in rec.statuses] == ["gap", "down", "up", "dropped", "leader", "other"]
    gap = rec.statuses[0][1]
    assert isinstance(gap, Gap) and gap.certainty == "possible" and gap.to_resource_version == "9"
    assert rec.statuses[5][1].what == "started"


async def test_replay_reads_from_a_sequence_or_a_time_and_a_durable_can_start_over(
    nc: Any,
) -> None:
    for rv in range(1, 6):
        await publish(nc, event("p", rv, count=rv))
    got = [d.id async for d in replay(nc, stream=STREAM, start=Start.at_sequence(3))]
    assert got == ["p/3", "p/4", "p/5"]
    future = datetime.now(UTC) + timedelta(minutes=5)
    assert [d.id async for d in replay(nc, stream=STREAM, start=Start.at_time(future))] == []
    past = datetime.now(UTC) - timedelta(minutes=5)
    assert len([d async for d in replay(nc, stream=STREAM, start=Start.at_time(past))]) == 5

    rec = Recorder()
    c = await Consumer.open(
        nc,
        stream=STREAM,
        durable="d",
        subjects=["k8s.events.>"],
        options=FAST,
        start=Start.at_sequence(4),
    )
    async with running(c, Handlers(on_event=rec.on_event)):
        await rec.until(lambda: len(rec.events) == 2)
    assert [e.id for e, _ in rec.events] == ["p/4", "p/5"]
    # the durable keeps its place when opened again; replay=True starts it over
    c2 = await Consumer.open(
        nc,
        stream=STREAM,
        durable="d",
        subjects=["k8s.events.>"],
        options=FAST,
        start=Start.all(),
        replay=True,
    )
    async with running(c2, Handlers(on_event=rec.on_event)):
        await rec.until(lambda: len(rec.events) == 7)
    assert [e.id for e, _ in rec.events][2:] == ["p/1", "p/2", "p/3", "p/4", "p/5"]


async def test_nats_failing_while_a_message_is_settled_does_not_stop_the_consumer(
    nc: Any,
) -> None:
    """The Seen bucket (or the ack) unreachable for a moment: the message is not acked, comes
    again after ack_wait, and is handled then; the consumer keeps running."""
    await publish(nc, event("n", 1))
    rec = Recorder()
    failures = [nats.errors.ConnectionClosedError()]

    class Flaky:
        def __init__(self) -> None:
            self.ids: set[str] = set()

        async def contains(self, id_: str) -> bool:
            if failures:
                raise failures.pop()
            return id_ in self.ids

        async def add(self, id_: str) -> None:
            self.ids.add(id_)

    c = await Consumer.open(
        nc, stream=STREAM, durable="d", subjects=["k8s.events.>"], options=FAST, seen=Flaky()
    )
    async with running(c, Handlers(on_event=rec.on_event)):
        await rec.until(lambda: len(rec.events) == 1)
    assert [d.num_delivered for _, d in rec.events] == [2]
    assert c.stats.failed == 1 and c.stats.handled == 1


async def test_nats_frozen_mid_stream_the_consumer_survives_and_handles_everything(
    nats_server: Any, nc: Any
) -> None:
    """A nats-server that keeps its connections but answers nothing (SIGSTOP) for longer than
    ack_wait while messages are being handled: fetches, Seen lookups and acks time out, the
    consumer keeps running, and once NATS answers again every message is handled. (A handler
    whose ``Seen.add`` timed out may run again for that message: the kit is at-least-once,
    deduplicated when only the ack is lost.)"""
    for i in range(1, 41):
        await publish(nc, event(f"z{i}", i))
    client = await nats.connect(nats_server.url, max_reconnect_attempts=-1)
    calls: list[str] = []
    frozen = asyncio.Event()

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        calls.append(ev.id)
        if ev.id == "z5/5" and not frozen.is_set():
            # frozen mid-stream, while this message is in hand: its settling meets the freeze
            os.kill(nats_server.proc.pid, signal.SIGSTOP)
            frozen.set()
        await asyncio.sleep(0.02)

    c = await Consumer.open(
        client,
        stream=STREAM,
        durable="d",
        subjects=["k8s.events.>"],
        options=ConsumerOptions(ack_wait=2.0, fetch_timeout=0.5, batch=8),
        seen=await KVSeen.open(client, "kit_frozen"),
    )
    async with running(c, Handlers(on_event=on_event)):
        try:
            await asyncio.wait_for(frozen.wait(), 30)
            await asyncio.sleep(8)
        finally:
            os.kill(nats_server.proc.pid, signal.SIGCONT)
        for i in range(41, 61):
            await publish(nc, event(f"z{i}", i))
        await eventually(lambda: len(set(calls)) >= 60, 60, 0.2, what="all 60 handled")
    await client.close()
    assert set(calls) == {f"z{i}/{i}" for i in range(1, 61)}
    assert c.stats.failed >= 1  # the freeze was felt, and survived


async def test_a_subscriber_started_before_nats_connects_once_it_answers(tmp_path: Any) -> None:
    """connect_until: nothing listens yet, it keeps trying; NATS starts, it connects; stopped
    while NATS is away, it gives up without a client. (nats-py with unlimited reconnects
    retries a first connect too; connect_until's own loop covers a client that gives up:
    each alone passes this test, neither fails it.)"""
    from k8s_event_consumer.connecting import NatsOptions, connect_until
    from k8s_event_sim.natsserver import NatsServer, free_port

    port = free_port()
    opts = NatsOptions(servers=[f"nats://127.0.0.1:{port}"], connect_timeout=0.5)
    stopping = asyncio.Event()
    attempt = asyncio.create_task(connect_until(opts, stopping, every=0.2))
    await asyncio.sleep(1.5)
    assert not attempt.done()  # still trying
    server = NatsServer(store_dir=str(tmp_path / "late"), port=port).start()
    try:
        client = await asyncio.wait_for(attempt, 15)
        assert client is not None and client.is_connected
        await client.close()
    finally:
        server.stop()

    stopping.set()
    assert await asyncio.wait_for(connect_until(opts, stopping), 5) is None


async def test_a_durable_that_is_a_push_consumer_is_refused_naming_it(nc: Any) -> None:
    """Someone made the durable deliver into an inbox (another program's): the kit does not
    bind to it, whatever its credentials may do, and says why."""
    await nc.jetstream().add_consumer(
        STREAM,
        ConsumerConfig(
            durable_name="pushed",
            deliver_subject="_INBOX_k8s_event_remediation.stolen",
            ack_policy=AckPolicy.EXPLICIT,
            filter_subject="k8s.events.>",
        ),
    )
    with pytest.raises(ConsumerConflict, match="deliver_subject"):
        await Consumer.open(
            nc, stream=STREAM, durable="pushed", subjects=["k8s.events.>"], options=FAST
        )


async def test_a_stream_with_rollups_or_sources_is_refused_naming_each_key(
    nats_server: Any,
) -> None:
    client = await nats.connect(nats_server.url)
    try:
        config = k8s_events(stream="ROLLED").evolve(
            subjects=["rolled.>"], allow_rollup_hdrs=True, deny_purge=False
        )
        await client.jetstream().add_stream(config)
        with pytest.raises(ShapeMismatch, match="allow_rollup_hdrs") as caught:
            await Consumer.open(
                client, stream="ROLLED", durable="d", subjects=["rolled.>"], options=FAST
            )
        assert [d.key for d in caught.value.differences] == ["allow_rollup_hdrs", "deny_purge"]
        assert (await client.jetstream().stream_info("ROLLED")).state.consumer_count == 0
    finally:
        await client.close()


async def test_replay_by_message_gets_reads_as_a_consumer_does(nc: Any) -> None:
    """``gets=True``: no consumer made; from a sequence, from a time, nothing from the
    future."""
    for rv in range(1, 6):
        await publish(nc, event("g", rv, count=rv))
    at_seq = [d.id async for d in replay(nc, stream=STREAM, start=Start.at_sequence(3), gets=True)]
    assert at_seq == ["g/3", "g/4", "g/5"]
    future = datetime.now(UTC) + timedelta(minutes=5)
    assert [
        d async for d in replay(nc, stream=STREAM, start=Start.at_time(future), gets=True)
    ] == []
    past = datetime.now(UTC) - timedelta(minutes=5)
    got = [d async for d in replay(nc, stream=STREAM, start=Start.at_time(past), gets=True)]
    assert [d.id for d in got] == [f"g/{i}" for i in range(1, 6)]
    assert [d.stream_sequence for d in got] == [1, 2, 3, 4, 5]
    assert (await nc.jetstream().stream_info(STREAM)).state.consumer_count == 0


# --- run_batches: many messages to one handler ------------------------------------------------


async def test_a_batch_handler_is_kept_from_redelivery_and_settles_each_by_its_outcome(
    nc: Any,
) -> None:
    """A handler that works past ack_wait three times over gets no redelivery (the kit marks
    the batch in progress); its outcomes settle each message: done, held, discarded."""
    for i in range(10):
        await publish(nc, event(f"b{i}", i + 1))
    await nc.jetstream().publish("k8s.events.kit.x", b'{"not": "an event"}')  # terminated
    opts = ConsumerOptions(ack_wait=1.0, backoff=(0.2,), fetch_timeout=0.5, batch=32)
    c = await Consumer.open(nc, stream=STREAM, durable="batches", subjects=["k8s.events.>"],
                            options=opts)  # fmt: skip
    batches: list[list[str]] = []

    async def on_batch(ds: list[Delivery]) -> list[Any]:
        batches.append([d.id for d in ds])
        if len(batches) == 1:
            await asyncio.sleep(3.5)  # past ack_wait, three times
            return [Retry(0.2) if d.id == "b3/4" else Discard() if d.id == "b4/5" else None
                    for d in ds]  # fmt: skip
        return [None] * len(ds)

    task = asyncio.create_task(c.run_batches(on_batch, linger=0.3))
    try:
        await eventually(lambda: len(batches) >= 2, 20, 0.05)
        await eventually(lambda: c.stats.handled == 9, 20, 0.05)  # all but the discarded
    finally:
        await c.stop()
        await asyncio.wait_for(task, 15)
    assert sorted(batches[0]) == sorted(f"b{i}/{i + 1}" for i in range(10))
    assert batches[1:] == [["b3/4"]]  # only the held one came again, alone
    assert (c.stats.retried, c.stats.discarded, c.stats.bad) == (1, 1, 1)
    info = await nc.jetstream().consumer_info(STREAM, "batches")
    assert info.num_ack_pending == 0 and info.num_pending == 0
    # a discarded id is not remembered, the others are
    assert not await c.seen.contains("b4/5") and await c.seen.contains("b0/1")


async def test_a_batch_handler_that_raises_naks_the_batch_and_it_comes_again(nc: Any) -> None:
    for i in range(3):
        await publish(nc, event(f"r{i}", i + 1))
    opts = ConsumerOptions(ack_wait=5.0, backoff=(0.2,), fetch_timeout=0.5)
    c = await Consumer.open(nc, stream=STREAM, durable="raises", subjects=["k8s.events.>"],
                            options=opts)  # fmt: skip
    calls: list[list[str]] = []

    async def on_batch(ds: list[Delivery]) -> list[Any]:
        calls.append([d.id for d in ds])
        if len(calls) == 1:
            raise RuntimeError("the endpoint's client broke")
        return [None] * len(ds)

    task = asyncio.create_task(c.run_batches(on_batch, linger=0.3))
    try:
        await eventually(lambda: c.stats.handled == 3, 20, 0.05)
    finally:
        await c.stop()
        await asyncio.wait_for(task, 15)
    assert sorted(calls[0]) == sorted(i for later in calls[1:] for i in later)
    assert c.stats.failed == 3
