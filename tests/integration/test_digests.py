"""``k8s-event-digests`` as a real process on a real nats-server (issue 41): the digests it
stores are exactly the projection of the versions stream (``fold.Projection`` over the stream
read back by an independent client), once each, in order, through SIGKILLs at random points,
two replicas at once, and a rebuild after a purge that gives the same bytes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bridge.core.converting import Converter
from k8s_event_common import cloudevents, digests, streams
from k8s_event_consumer import events
from k8s_event_consumer.digests import reading
from k8s_event_consumer.digests.fold import Projection
from tests.integration.harness import ConsumerProcess, subscriber_config
from tests.streams import k8s_events
from tests.support import eventually

pytestmark = pytest.mark.integration
STREAM, DIGESTS, PREFIX = "K8S_EVENTS", "K8S_DIGESTS", "k8s.digests"
MODULE = "k8s_event_consumer.digests"
NAMES = ("k8s-event-digests-0", "k8s-event-digests-1")
CONVERT = Converter("c1", "k8s.events", "structured")


def bump(
    pod: int,
    count: int,
    *,
    uid: str | None = None,
    rv: int = 0,
    reason: str = "BackOff",
    at: datetime | None = None,
) -> Any:
    """The bridge's CloudEvent of a Pod's BackOff Event at ``count`` (the old recorder's
    shape: ``count`` and ``lastTimestamp``), first seen now."""
    now = at or datetime.now(UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    uid = uid or f"ev-{pod}"
    return CONVERT.convert(
        {
            "metadata": {
                "name": f"web-{pod}.{uid}",
                "namespace": "shop",
                "uid": uid,
                "resourceVersion": str(rv or count),
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": "shop",
                "name": f"web-{pod}",
                "uid": f"pod-{pod}",
            },
            "reason": reason,
            "message": f"Back-off restarting failed container web in pod web-{pod}",
            "type": "Warning",
            "count": count,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": "kubelet"},
        }
    )


@pytest.fixture
async def nc(nats_server: Any) -> AsyncIterator[Any]:
    c = await nats.connect(nats_server.url)
    await c.jetstream().add_stream(k8s_events(stream=STREAM))
    await streams.provision(c, streams.digest_stream(DIGESTS, PREFIX, max_age=30 * 86400.0))
    for name in NAMES:  # what k8s-event-digests provision makes, one consumer per replica
        await reading.provision(c, STREAM, name)
    yield c
    with contextlib.suppress(Exception):
        await c.close()


def digester(tmp_path: Path, nats_server: Any, n: int = 0, **digest: Any) -> ConsumerProcess:
    cfg = subscriber_config(
        tmp_path,
        MODULE,
        {"servers": [nats_server.url], "durable": NAMES[n]},
        tmp_path / "none",
        name=f"digests-{n}.yaml",
        digests={"window": "2s", "grace": "300ms", **digest},
    )
    return ConsumerProcess(cfg, tmp_path / f"digests-{n}.log", module=MODULE)


async def publish(nc: Any, msgs: list[Any]) -> None:
    js = nc.jetstream()
    acks = [js.publish(m.subject, m.payload, headers=m.headers) for m in msgs]
    for i in range(0, len(acks), 500):
        await asyncio.gather(*acks[i : i + 500])


async def versions(nc: Any) -> list[tuple[int, datetime, Any]]:
    """The versions stream read back by an independent ordered consumer, as the program reads
    it: (sequence, stored time, the Event or None)."""
    js = nc.jetstream()
    info = await js.stream_info(STREAM)
    out: list[tuple[int, datetime, Any]] = []
    if info.state.last_seq == 0:
        return out
    sub = await js.subscribe(
        "k8s.events.>",
        stream=STREAM,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE),
    )
    try:
        while not out or out[-1][0] < info.state.last_seq:
            m = await sub.next_msg(timeout=10)
            ev = events.decode(m.subject, m.headers, m.data).event
            out.append((m.metadata.sequence.stream, m.metadata.timestamp, ev))
    finally:
        await sub.unsubscribe()
    return out


def projected(read: list[tuple[int, datetime, Any]], window: float = 2.0) -> list[bytes]:
    """Every digest of the versions read, each window closed: what the program must store."""
    p = Projection(window=window, idle=7200, max_series=20000, stream=STREAM)
    out: list[digests.Digest] = []
    for seq, t, ev in read:
        out.extend(p.add(seq, t, ev))
    out.extend(p.close(datetime(9999, 1, 1, tzinfo=UTC), 0))
    return [digests.encode(d) for d in out]


async def stored(nc: Any) -> list[bytes]:
    js = nc.jetstream()
    info = await js.stream_info(DIGESTS)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        if info.state.messages == 0:
            break
        out.append((await js.get_msg(DIGESTS, seq=seq)).data)
    return out


async def settled(nc: Any, want: int, timeout: float = 60) -> list[bytes]:
    """The digests stored once ``want`` of them are there (the last window closed by time)."""
    got: list[bytes] = []

    async def enough() -> bool:
        nonlocal got
        got = await stored(nc)
        return len(got) >= want

    await eventually(enough, timeout=timeout, interval=0.2)
    return got


def decoded(body: bytes) -> digests.Digest:
    return digests.from_envelope(
        cloudevents.decode({"Content-Type": "application/cloudevents+json"}, body)
    )


async def test_a_storm_of_ten_thousand_bumps_over_a_hundred_pods_is_one_digest_per_pod_and_window(
    nc: Any, nats_server: Any, tmp_path: Path
) -> None:
    """10,000 BackOff bumps (counts 1..100 of 100 Pods) through a real nats-server: one digest
    per Pod and window, whose occurrences add up to the bumps, each the projection's bytes."""
    d = digester(tmp_path, nats_server, window="30s").start()
    try:
        await d.wait_ready()
        msgs = [bump(pod, c) for c in range(1, 101) for pod in range(100)]
        await publish(nc, msgs)
        read = await versions(nc)
        assert len(read) == 10_000
        want = projected(read, window=30)
        windows = {t.timestamp() // 30 for _, t, _ in read}
        assert len(want) == 100 * len(windows)  # 100 when the storm fell in one window
        got = await settled(nc, len(want), timeout=90)
        assert got == want
        ds = [decoded(b) for b in got]
        assert sum(x.occurrences for x in ds) == 10_000
        per_pod: dict[str, int] = {}
        for x in ds:
            per_pod[x.series.name] = per_pod.get(x.series.name, 0) + x.occurrences
        assert per_pod == {f"web-{p}": 100 for p in range(100)}
        assert len({x.id for x in ds}) == len(ds)
    finally:
        await d.stop()


async def test_sigkill_at_random_points_loses_and_duplicates_no_digest(
    nc: Any, nats_server: Any, tmp_path: Path
) -> None:
    """24 SIGKILLs at random points while Events keep coming: the digests stored are exactly
    the projection's, in order, none twice (ids unique), none missing."""
    rng = random.Random(41)
    stop = asyncio.Event()
    count = {p: 0 for p in range(20)}

    async def writer() -> None:
        while not stop.is_set():
            pod = rng.randrange(20)
            count[pod] += rng.choice([1, 1, 1, 2, 5])  # a spam filter's jumps too
            await publish(nc, [bump(pod, count[pod])])
            await asyncio.sleep(rng.uniform(0.0, 0.02))

    task = asyncio.create_task(writer())
    d = digester(tmp_path, nats_server)
    trials = 24
    try:
        for _ in range(trials):
            d.start()
            await asyncio.sleep(rng.uniform(0.3, 2.5))
            d.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            d.proc.wait()  # type: ignore[union-attr]
        stop.set()
        await task
        d.start()
        read = await versions(nc)
        want = projected(read)
        got = await settled(nc, len(want), timeout=90)
        assert len(got) == len(want)
        assert got == want
        assert len({decoded(b).id for b in got}) == len(got)
        assert sum(decoded(b).occurrences for b in got) == sum(count.values())
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await task
        await d.stop()


async def test_two_replicas_at_once_and_one_killed_store_each_digest_once(
    nc: Any, nats_server: Any, tmp_path: Path
) -> None:
    a, b = digester(tmp_path, nats_server, 0), digester(tmp_path, nats_server, 1)
    a.start()
    b.start()
    try:
        await a.wait_ready()
        await b.wait_ready()
        for round_ in range(6):
            await publish(nc, [bump(p, round_ + 1) for p in range(10)])
            await asyncio.sleep(0.7)
            if round_ == 3:
                a.kill()  # one replica gone mid-way: the other goes on alone
        read = await versions(nc)
        want = projected(read)
        got = await settled(nc, len(want), timeout=60)
        assert got == want
        written = [await p.metrics() for p in (b,)]
        assert written[0].get('digests_total{result="written"}', 0) >= 1
    finally:
        a.kill()
        await b.stop()


async def test_the_digests_rebuilt_after_a_purge_are_the_same_bytes(
    nc: Any, nats_server: Any, tmp_path: Path
) -> None:
    """The digests are a projection: purged and written again from the versions stream,
    twice, they are byte-identical (and so are their ids: a reader's dedup holds)."""
    t0 = datetime.now(UTC) - timedelta(minutes=10)
    # new Events, first seen long before they reach the stream: they count from where they
    # stood (the bridge's first list), then their bumps count
    await publish(nc, [bump(p, 7, at=t0) for p in range(5)])
    for c in range(8, 12):
        await publish(nc, [bump(p, c) for p in range(5)])
        await asyncio.sleep(0.5)
    read = await versions(nc)
    want = projected(read)
    runs = []
    for n in range(2):
        await nc.jetstream().purge_stream(DIGESTS)
        d = digester(tmp_path, nats_server, n).start()
        try:
            runs.append(await settled(nc, len(want)))
        finally:
            await d.stop()
    assert runs[0] == runs[1] == want
    assert sum(decoded(b).occurrences for b in runs[0]) == 5 * 4  # 7 stood; 8..11 counted


async def test_a_window_with_nothing_after_it_closes_by_the_servers_clock(
    nc: Any, nats_server: Any, tmp_path: Path
) -> None:
    d = digester(tmp_path, nats_server).start()
    try:
        await d.wait_ready()
        await publish(nc, [bump(1, 1), bump(1, 2), bump(1, 3)])
        got = await settled(nc, 1, timeout=30)  # nothing else is published
        x = decoded(got[0])
        assert (x.occurrences, x.versions, x.count_from, x.count_to) == (3, 3, 0, 3)
        assert x.series.name == "web-1" and x.series.reason == "BackOff"
        assert json.loads(got[0])["type"] == "io.k8s.digest"
    finally:
        await d.stop()


async def test_a_purge_under_a_running_replica_stops_it_and_its_restart_rebuilds_whole(
    nc: Any, nats_server: Any, tmp_path: Path
) -> None:
    """The stream purged while the program runs: at its next window it finds the last digest
    it knows gone, exits 1 (``Rewound``) rather than add the newest window after the purge,
    and its restart writes every digest again, in order."""
    d = digester(tmp_path, nats_server).start()
    try:
        await d.wait_ready()
        await publish(nc, [bump(p, 1) for p in range(3)])
        first = await settled(nc, 3)
        await nc.jetstream().purge_stream(DIGESTS)
        await publish(nc, [bump(p, 2) for p in range(3)])
        assert await d.wait_exit(60) == 1
        assert "purged" in d.logs()
        d.start()
        read = await versions(nc)
        want = projected(read)
        got = await settled(nc, len(want))
        assert got == want and got[:3] == first
    finally:
        await d.stop()
