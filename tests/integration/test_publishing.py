"""The publisher against a real nats-server: acks, dedup, timeouts, outages."""

import asyncio

import msgspec
import nats
import pytest

from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.errors import StreamConfigMismatch
from bridge.jetstream import streams
from bridge.jetstream.publishing import Publisher
from bridge.metrics import Metrics
from bridge.settings import NatsSettings
from k8s_event_common.clock import Clock
from tests.support import eventually

pytestmark = pytest.mark.integration


def msg(i, subject="k8s.events.c.ns.Pod.BackOff"):
    mid = f"uid-{i}/{i}"
    return Message(subject, b'{"i":%d}' % i, {"Nats-Msg-Id": mid}, mid)


async def stream_ids(nc, stream="K8S_EVENTS"):
    js = nc.jetstream()
    info = await js.stream_info(stream)
    ids = []
    if info.state.messages:
        sub = await js.subscribe("k8s.events.>", stream=stream, ordered_consumer=True)
        for _ in range(info.state.messages):
            m = await sub.next_msg(timeout=5)
            ids.append(m.headers["Nats-Msg-Id"])
        await sub.unsubscribe()
    return ids


async def start(nats_url, fast_path=True, **kw):
    state = {}

    async def disconnected():
        state["pub"].set_connected(False)

    async def reconnected():
        state["pub"].set_connected(True)
        await state["pub"].resend_all()

    nc = await nats.connect(
        nats_url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
    )
    await streams.ensure_stream(nc, NatsSettings(servers=[nats_url]))
    pub = state["pub"] = Publisher(nc, Metrics(), stream="K8S_EVENTS", fast_path=fast_path, **kw)
    await pub.start()
    return nc, pub


@pytest.fixture(params=["fast", "public_api"])
def path(request):
    """Both ways of talking to nats-py: HPUB batches + the ack tap (bridge.jetstream.fastpath),
    or its public API only (what the publisher does on a nats-py without those private parts)."""
    return request.param


async def test_every_message_acked_and_checkpoint_follows(nats_server, path):
    nc, pub = await start(nats_server.url, fast_path=path == "fast", max_inflight=8)
    assert pub.fast_writer == pub.tapped == (path == "fast")
    q: BoundedQueue[Outgoing] = BoundedQueue(100, 1 << 20)
    progress = Progress(0)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap())]
    for i in range(1, 201):
        await q.put(Outgoing(msg(i), progress.pending(i)), 10)
    await eventually(lambda: progress.safe_rv == 200, 10, 0.05, what="checkpoint at 200")
    assert sorted(await stream_ids(nc)) == sorted(f"uid-{i}/{i}" for i in range(1, 201))
    for t in tasks:
        t.cancel()
    await nc.close()


async def test_same_msg_id_twice_is_stored_once(nats_server):
    nc, pub = await start(nats_server.url)
    q: BoundedQueue[Outgoing] = BoundedQueue(100, 1 << 20)
    p = Progress(0)
    task = asyncio.create_task(pub.run(q))
    for _ in range(3):
        await q.put(Outgoing(msg(1), p.pending(1)), 10)
    await eventually(lambda: p.safe_rv == 1 and not pub.in_flight, 10, 0.02, what="all acked")
    assert await stream_ids(nc) == ["uid-1/1"]
    assert pub._m.duplicates._value.get() == 2
    task.cancel()
    await nc.close()


async def test_timed_out_publish_is_sent_again_with_same_msg_id(nats_server):
    """No stream takes the subject at first: no ack comes; once it exists the retry lands."""
    nc = await nats.connect(nats_server.url)
    pub = Publisher(nc, Metrics(), stream="K8S_EVENTS", ack_timeout=0.3)
    await pub.start()
    q: BoundedQueue[Outgoing] = BoundedQueue(10, 1 << 20)
    p = Progress(0)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.05))]
    await q.put(Outgoing(msg(7), p.pending(7)), 10)
    await asyncio.sleep(1.0)
    assert p.safe_rv == 0, "checkpoint moved without an ack"
    await streams.ensure_stream(nc, NatsSettings(servers=[nats_server.url]))
    await eventually(lambda: p.safe_rv == 7, 10, 0.05, what="checkpoint at 7")
    assert pub._m.retries._value.get() >= 1
    assert await stream_ids(nc) == ["uid-7/7"]
    for t in tasks:
        t.cancel()
    await nc.close()


async def test_nats_killed_and_restarted_loses_and_duplicates_nothing(nats_server, path):
    nc, pub = await start(
        nats_server.url, fast_path=path == "fast", ack_timeout=0.5, max_inflight=64
    )
    q: BoundedQueue[Outgoing] = BoundedQueue(50, 1 << 20)
    p = Progress(0)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.05))]

    async def produce():
        for i in range(1, 1001):
            await q.put(Outgoing(msg(i), p.pending(i)), 10)
            if i % 50 == 0:
                await asyncio.sleep(0.01)

    producer = asyncio.create_task(produce())
    await eventually(lambda: p.safe_rv >= 200, 30, 0.01, what="checkpoint past 200")
    nats_server.kill()
    await asyncio.sleep(1.0)
    assert len(q) <= 50  # the queue bound holds; the producer waits
    nats_server.start()
    await asyncio.wait_for(producer, 60)
    await eventually(lambda: p.safe_rv == 1000, 30, 0.05, what="checkpoint at 1000")
    ids = await stream_ids(nc)
    assert len(ids) == len(set(ids)) == 1000
    for t in tasks:
        t.cancel()
    await nc.close()


async def test_existing_stream_with_other_subjects_is_refused_not_changed(nats_server):
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name="K8S_EVENTS", subjects=["other.>"])
    with pytest.raises(StreamConfigMismatch, match="other"):
        await streams.ensure_stream(nc, NatsSettings(servers=[nats_server.url]))
    info = await js.stream_info("K8S_EVENTS")
    assert info.config.subjects == ["other.>"]
    await nc.close()


async def test_stream_created_with_the_configured_shape_and_other_limits_refused(
    nats_server, caplog
):
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    s = NatsSettings(servers=[nats_server.url], duplicate_window=3600, max_age=7200)
    await streams.ensure_stream(nc, s)
    info = await js.stream_info("K8S_EVENTS")
    assert info.config.duplicate_window == 3600
    assert info.config.subjects == ["k8s.events.>"]
    assert info.config.storage == "file"
    assert info.config.deny_delete and info.config.deny_purge
    assert not info.config.allow_rollup_hdrs
    caplog.clear()
    await streams.ensure_stream(nc, s)  # same settings: nothing to report
    assert [r for r in caplog.records if r.getMessage() == "stream_config_differs"] == []
    # a second start with other limits is refused, and changes nothing
    with pytest.raises(StreamConfigMismatch, match="max_age"):
        await streams.ensure_stream(
            nc, NatsSettings(servers=[nats_server.url], max_age=7000, duplicate_window=3600)
        )
    assert (await js.stream_info("K8S_EVENTS")).config.max_age == 7200
    diffs = [r.fields for r in caplog.records if r.getMessage() == "stream_config_differs"]
    assert [d["key"] for d in diffs] == ["max_age"]
    await nc.close()


async def test_message_over_max_payload_with_headers_is_skipped_without_a_disconnect(tmp_path):
    from k8s_event_sim.natsserver import NatsServer

    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 2048\n")
    server = NatsServer(store_dir=str(tmp_path / "n"), args=["-c", str(conf)]).start()
    try:
        nc, pub = await start(server.url, ack_timeout=1.0)
        q: BoundedQueue[Outgoing] = BoundedQueue(10, 1 << 20)
        p = Progress(0)
        tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.05))]
        mid = "uid-big/1"
        # the payload alone fits, payload plus headers does not: the server would cut us off
        big = Message(
            "k8s.events.c.ns.Pod.BackOff",
            b"x" * 2000,
            {"Nats-Msg-Id": mid, "Content-Type": "application/cloudevents+json"},
            mid,
        )
        await q.put(Outgoing(big, p.pending(1)), 2000)
        await q.put(Outgoing(msg(2), p.pending(2)), 10)
        await eventually(lambda: p.safe_rv == 2, 5, 0.05, what="checkpoint at 2")
        assert nc.is_connected and pub._m.failed.labels("too_large")._value.get() == 1
        assert pub._m.dropped.labels("too_large")._value.get() == 1
        assert await stream_ids(nc) == ["uid-2/2"]
        for t in tasks:
            t.cancel()
        await nc.close()
    finally:
        server.cleanup()


async def test_a_message_no_server_can_take_is_replaced_by_a_durable_dropped_event(tmp_path):
    """Subscribers learn exactly what they will not get: a `dropped` status event (id, size,
    reason) takes the message's place in the ledger, so the checkpoint passes the message only
    once the notice is stored."""
    from bridge.core.converting import Converter
    from k8s_event_sim.natsserver import NatsServer

    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 2048\n")
    server = NatsServer(store_dir=str(tmp_path / "n"), args=["-c", str(conf)]).start()
    try:
        nc, pub = await start(server.url, ack_timeout=1.0)
        converter = Converter("c", "k8s.events", "structured")
        made = []

        def dropped(m, reason, detail):
            made.append(m.msg_id)
            data = {"id": m.msg_id, "size": m.wire_size, "reason": reason}
            return converter.status("dropped", f"dropped/{m.msg_id}", data, "2026-11-30T00:00:00Z")

        pub.on_dropped = dropped
        q: BoundedQueue[Outgoing] = BoundedQueue(10, 1 << 20)
        p = Progress(0)
        reaper = asyncio.create_task(pub.reap(3600))  # the notice waits for the reaper's tick
        runner = asyncio.create_task(pub.run(q))
        big = Message(
            "k8s.events.c.ns.Pod.BackOff", b"x" * 3000, {"Nats-Msg-Id": "uid-big/1"}, "uid-big/1"
        )
        await q.put(Outgoing(big, p.pending(1)), 3000)
        await q.put(Outgoing(msg(2), p.pending(2)), 10)
        await eventually(lambda: made, 2, 0.05, what="the dropped notice made")
        await asyncio.sleep(2.0)  # and the checkpoint stays: the notice is not stored yet
        assert made == ["uid-big/1"] and p.safe_rv == 0
        reaper.cancel()
        reaper = asyncio.create_task(pub.reap(0.05))
        await eventually(lambda: p.safe_rv == 2, 5, 0.05, what="checkpoint at 2")
        js = nc.jetstream()
        sub = await js.subscribe(
            "k8s.events.c._bridge.dropped", stream="K8S_EVENTS", ordered_consumer=True
        )
        notice = msgspec.json.decode((await sub.next_msg(timeout=5)).data)
        assert notice["id"] == "c/dropped/uid-big/1" and notice["type"] == "io.k8s.bridge.dropped"
        assert notice["data"] == {"id": "uid-big/1", "size": big.wire_size, "reason": "too_large"}
        assert sorted(await stream_ids(nc)) == ["c/dropped/uid-big/1", "uid-2/2"]
        for t in (reaper, runner):
            t.cancel()
        await nc.close()
    finally:
        server.cleanup()


def test_wire_size_counts_headers():

    m = Message("s", b"12345", {"A": "bc"}, "id")
    assert m.wire_size == 5 + len("NATS/1.0\r\nA: bc\r\n\r\n")


async def ignore(msg):
    pass


def silent_msg(i, size=10):
    mid = f"uid-{i}/{i}"
    return Message("quiet.c.ns.Pod.BackOff", b"x" * size, {"Nats-Msg-Id": mid}, mid)


async def test_jetstream_that_never_answers_costs_nothing_per_attempt(nats_server):
    """NATS connected, JetStream silent (as an R3 stream without quorum: nothing answers, no
    503 either): each message goes again every ack_timeout for as long as it lasts, and what
    the publisher holds does not grow with the attempts. Once a stream answers, every message
    is stored once."""
    import tracemalloc

    nc = await nats.connect(nats_server.url)
    silent = await nc.subscribe("quiet.>", cb=ignore)  # takes the publishes, answers none
    pub = Publisher(nc, Metrics(), stream="QUIET", ack_timeout=0.02, max_inflight=64)
    await pub.start()
    q: BoundedQueue[Outgoing] = BoundedQueue(200, 1 << 20)
    p = Progress(0)
    for i in range(1, 101):
        await q.put(Outgoing(silent_msg(i), p.pending(i)), 10)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.005))]
    await asyncio.sleep(0.5)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sizes = []
        for _ in range(25):
            await asyncio.sleep(0.1)
            sizes.append(pub.sizes())
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    retries = pub._m.retries._value.get()
    assert retries > 64 * 20, retries  # every message in the window was sent again, often
    assert {s["pending"] for s in sizes} == {64}  # the window, not the attempts
    assert {s["pending_bytes"] for s in sizes} == {
        sum(silent_msg(i).wire_size for i in range(1, 65))
    }
    # ~16 KB here; a token kept per attempt (as before) held ~600 KB more after as many
    assert grown < 128 * 1024, f"{grown} bytes more after {retries} attempts"
    assert p.safe_rv == 0 and len(q) == 100 - 64 - 1  # and one taken, waiting for room
    await silent.unsubscribe()
    js = nc.jetstream()
    await js.add_stream(name="QUIET", subjects=["quiet.>"])  # JetStream answers again
    await eventually(lambda: p.safe_rv == 100, 10, 0.05, what="checkpoint at 100")
    assert pub.sizes() == {"pending": 0, "pending_bytes": 0}
    assert (await js.stream_info("QUIET")).state.messages == 100
    for t in tasks:
        t.cancel()
    await nc.close()


async def test_the_window_is_bounded_in_bytes_too(nats_server):
    nc = await nats.connect(nats_server.url)
    silent = await nc.subscribe("quiet.>", cb=ignore)
    pub = Publisher(
        nc,
        Metrics(),
        stream="K8S_EVENTS",
        ack_timeout=0.05,
        max_inflight=1000,
        max_inflight_bytes=65536,
    )
    await pub.start()
    q: BoundedQueue[Outgoing] = BoundedQueue(200, 1 << 22)
    p = Progress(0)
    for i in range(1, 51):
        await q.put(Outgoing(silent_msg(i, size=10_000), p.pending(i)), 10_000)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.01))]
    await asyncio.sleep(0.5)
    one = silent_msg(1, size=10_000).wire_size
    held = pub.sizes()
    # as many as fit in 64 KiB, plus the one that crossed the bound
    assert held["pending"] == 65536 // one + 1 and held["pending_bytes"] < 65536 + one
    assert len(q) == 50 - held["pending"] - 1  # and one taken, waiting for room
    for t in tasks:
        t.cancel()
    await silent.unsubscribe()
    await nc.close()


async def test_a_publish_nobody_takes_is_tried_again_within_an_ack_timeout(nats_server):
    """No stream takes the subject (a clustered stream electing its leader answers exactly
    so: no responders, at once). The next attempt comes within nats.ack_timeout, not after a
    back-off of its own (1, 2, 4 ... 10 s), so publishing resumes when the leader is back."""
    nc = await nats.connect(nats_server.url)
    now = [1000.0]
    pub = Publisher(
        nc,
        Metrics(),
        stream="K8S_EVENTS",
        ack_timeout=0.3,
        max_inflight=4,
        clock=Clock(monotonic=lambda: now[0]),
    )
    await pub.start()
    q: BoundedQueue[Outgoing] = BoundedQueue(10, 1 << 20)
    p = Progress(0)
    await q.put(Outgoing(silent_msg(1), p.pending(1)), 10)
    task = asyncio.create_task(pub.run(q))
    try:
        await eventually(  # the no-responders answer comes at once
            lambda: pub._m.failed.labels("no_responders")._value.get() >= 1,
            5,
            0.01,
            what="a no_responders failure",
        )
        (out,) = pub._pending.values()
        assert 0 < out.deadline - now[0] <= 0.3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await nc.close()
