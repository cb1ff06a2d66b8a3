"""nats-py's private parts (bridge.jetstream.fastpath) against a real nats-server: checked before
use, and any surprise turns the fast path off without losing an ack or the connection."""

from __future__ import annotations

import asyncio
import logging

import nats
import pytest

from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.jetstream import fastpath, publishing, streams
from bridge.jetstream.publishing import Publisher
from bridge.metrics import Metrics
from bridge.settings import NatsSettings
from tests.support import eventually

pytestmark = pytest.mark.integration


def msg(i: int) -> Message:
    mid = f"uid-{i}/{i}"
    return Message("k8s.events.c.ns.Pod.BackOff", b'{"i":%d}' % i, {"Nats-Msg-Id": mid}, mid)


async def connect(url: str):
    nc = await nats.connect(url)
    await streams.ensure_stream(nc, NatsSettings(servers=[url]))
    return nc


async def publish_all(pub: Publisher, n: int) -> Progress:
    """Publish n messages through the publisher and wait until all are acked; the progress
    they settle."""
    q: BoundedQueue[Outgoing] = BoundedQueue(100, 1 << 20)
    progress = Progress(0)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.05))]
    try:
        for i in range(1, n + 1):
            await q.put(Outgoing(msg(i), progress.pending(i)), 10)
        await eventually(lambda: progress.safe_rv == n, 20, 0.05, what=f"all {n} acked")
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return progress


def fast_path_off(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.getMessage() == "publish_fast_path_off"]


async def test_the_fast_path_is_used_on_the_tested_nats_py(nats_server, caplog):
    nc = await connect(nats_server.url)
    assert fastpath.problems(fastpath.RAW_WRITER_USES, nc) == []
    pub = Publisher(nc, Metrics(), stream="K8S_EVENTS")
    await pub.start()
    assert pub.fast_writer and pub.tapped
    assert (await publish_all(pub, 50)).safe_rv == 50
    assert fast_path_off(caplog) == []
    await nc.close()


async def test_an_exception_inside_the_ack_tap_never_reaches_nats_py_and_acks_go_on(
    nats_server, caplog, monkeypatch
):
    """nats-py's read loop stops for good on an exception: without the guard no ack, no PONG,
    nothing would be read again on this connection."""
    nc = await connect(nats_server.url)
    pub = Publisher(nc, Metrics(), stream="K8S_EVENTS", ack_timeout=1.0)
    await pub.start()
    assert pub.tapped
    decode = publishing._decode_ack
    calls = 0

    def broken_once(data: bytes):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("a surprise in the tap")
        return decode(data)

    monkeypatch.setattr(publishing, "_decode_ack", broken_once)
    progress = await publish_all(pub, 100)
    assert progress.safe_rv == 100
    assert not pub.tapped  # the subscription's callback took over
    assert pub.fast_writer  # the writer is another part: it stays
    off = fast_path_off(caplog)
    assert len(off) == 1 and off[0]["part"] == "ack_tap"
    assert "a surprise in the tap" in off[0]["reason"]
    await nc.flush(timeout=5)  # the read loop still reads (the PONG)
    assert nc.is_connected
    await nc.close()


async def test_a_private_method_with_another_signature_is_not_used(nats_server, caplog):
    nc = await connect(nats_server.url)
    send_command = nc._send_command

    async def changed(cmd):  # a nats-py whose _send_command lost its priority argument
        await send_command(cmd)

    nc._send_command = changed
    pub = Publisher(nc, Metrics(), stream="K8S_EVENTS")
    await pub.start()
    assert not pub.fast_writer and pub.tapped
    off = fast_path_off(caplog)
    assert len(off) == 1 and off[0]["part"] == "raw_writer"
    assert "Client._send_command(cmd) is not (cmd, priority)" in off[0]["reason"]
    assert (await publish_all(pub, 50)).safe_rv == 50
    await nc.close()


async def test_a_parser_hook_that_changed_leaves_acks_to_the_subscription(nats_server, caplog):
    nc = await connect(nats_server.url)
    process_msg = nc._process_msg

    async def changed(sid, subject, reply, data, headers, extra=None):
        await process_msg(sid, subject, reply, data, headers)

    nc._process_msg = changed
    pub = Publisher(nc, Metrics(), stream="K8S_EVENTS")
    await pub.start()
    assert pub.fast_writer and not pub.tapped
    assert [o["part"] for o in fast_path_off(caplog)] == ["ack_tap"]
    assert (await publish_all(pub, 50)).safe_rv == 50
    await nc.close()


async def test_a_surprise_from_the_raw_writer_switches_to_the_public_api(
    nats_server, caplog, monkeypatch
):
    nc = await connect(nats_server.url)
    pub = Publisher(nc, Metrics(), stream="K8S_EVENTS")
    await pub.start()

    async def broken(self, batch):
        raise AttributeError("'Client' object has no attribute '_pending'")

    monkeypatch.setattr(fastpath.RawWriter, "write", broken)
    assert (await publish_all(pub, 50)).safe_rv == 50
    assert not pub.fast_writer
    assert [o["part"] for o in fast_path_off(caplog)] == ["raw_writer"]
    await nc.close()


async def test_two_publishers_on_one_connection_both_tap_their_acks(nats_server, caplog):
    nc = await connect(nats_server.url)
    first, second = (
        Publisher(nc, Metrics(), stream="K8S_EVENTS"),
        Publisher(nc, Metrics(), stream="K8S_EVENTS"),
    )
    await first.start()
    await second.start()  # the first tap checks out as the client's own _process_msg
    assert first.tapped and second.tapped
    assert (await publish_all(first, 30)).safe_rv == 30
    assert (await publish_all(second, 30)).safe_rv == 30
    assert fast_path_off(caplog) == []
    await nc.close()


def test_problems_name_each_missing_or_changed_part():
    class Client:
        _pending_data_size = "0"
        _max_pending_size = 0
        _flush_queue = None
        stats: dict = {}

        async def _send_command(self, cmd, priority=False): ...

        def _flush_pending(self, force_flush=False): ...

    class Sub:
        pass

    assert fastpath.problems(fastpath.RAW_WRITER_USES, Client()) == [
        "Client._flush_pending is not a coroutine function",
        "Client._pending_data_size is a str",
    ]
    assert fastpath.problems(fastpath.ACK_TAP_USES, Client(), Sub()) == [
        "Client._process_msg is missing",
        "Subscription._id is missing",
    ]


@pytest.fixture(autouse=True)
def _warnings(caplog):
    caplog.set_level(logging.WARNING, logger="bridge")
