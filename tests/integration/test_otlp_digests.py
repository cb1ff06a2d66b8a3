"""``k8s-event-otlp`` shipping digests, as a real process against a real nats-server and the
OTLP endpoint of tests/otlp_endpoint.py: ``nats.reads: digests`` (instead of every version)
sends one record per digest, its occurrences as ``k8s.event.count``; beside a second program
reading the versions, the same storm costs the digests' program one record per series and
window where the versions' sends one per version; a digest the endpoint refuses is a dead
letter like any record.

The digests are built here as ``k8s-event-digests`` writes them (``k8s_event_common.digests``:
the body ``encode`` makes, its headers, its subject), folded from the versions the storm stored
in K8S_EVENTS (their stream times and sequences): the program that writes them is tested on
its own; this file tests what the OTLP subscriber makes of them."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest

from bridge.core.converting import Converter
from k8s_event_common import digests, streams
from k8s_event_consumer.otlp import shipping
from tests.integration.test_otlp_flow import Otlp, config
from tests.otlp_endpoint import Endpoint, record_id
from tests.streams import k8s_events
from tests.support import eventually

pytestmark = pytest.mark.integration
CLUSTER = "otlp"
WINDOW = 300.0  # seconds, the digests' default
EVENTS_DURABLE = "k8s-event-otlp"
DIGESTS_DURABLE = "k8s-event-otlp-digests"


def version(pod: int, count: int) -> dict[str, Any]:
    """The ``count``-th BackOff bump of Pod ``web-<pod>``: one Event the kubelet PATCHes."""
    return {
        "metadata": {
            "name": f"web-{pod}.17a",
            "namespace": "shop",
            "uid": f"ev-{pod}",
            "resourceVersion": str(pod * 100_000 + count),
            "creationTimestamp": "2026-12-04T10:00:00Z",
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": "shop",
            "name": f"web-{pod}",
            "uid": f"pod-{pod}",
            "apiVersion": "v1",
        },
        "reason": "BackOff",
        "message": f"Back-off restarting failed container app in pod web-{pod}",
        "type": "Warning",
        "count": count,
        "firstTimestamp": "2026-12-04T10:00:00Z",
        "lastTimestamp": f"2026-12-04T10:{count // 60 % 60:02d}:{count % 60:02d}Z",
        "source": {"component": "kubelet", "host": "node-1"},
    }


async def storm(nc: Any, pods: int, bumps: int) -> int:
    """``bumps`` versions of each of ``pods`` Pods' BackOff Events, interleaved as a node's
    kubelet writes them, published as the bridge does; the versions published."""
    conv = Converter(CLUSTER, "k8s.events", "structured")
    js = nc.jetstream()
    for count in range(1, bumps + 1):
        acks = []
        for pod in range(pods):
            msg = conv.convert(version(pod, count))
            acks.append(js.publish(msg.subject, msg.payload, headers=msg.headers))
        for ack in acks:
            await ack
    return pods * bumps


async def fold(nc: Any) -> list[digests.Digest]:
    """The digests of every version in K8S_EVENTS, per series and ``WINDOW`` of the stream's own
    time, as ``k8s-event-digests`` makes them: occurrences what the counts advanced (a new
    series from 0), the sequences and stream times read back from JetStream."""
    js = nc.jetstream()
    last = (await js.stream_info("K8S_EVENTS")).state.last_seq
    sub = await js.pull_subscribe("k8s.events.>", stream="K8S_EVENTS")
    versions: list[tuple[int, datetime, dict[str, Any]]] = []
    while not versions or versions[-1][0] < last:  # every version stored: not "quiet for 1 s"
        with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
            for m in await sub.fetch(500, timeout=5):
                ev = json.loads(m.data)["data"]
                versions.append((m.metadata.sequence.stream, m.metadata.timestamp, ev))
                await m.ack()
    await sub.unsubscribe()
    groups: dict[tuple[str, float], list[tuple[int, datetime, dict[str, Any]]]] = defaultdict(list)
    for seq, stored, ev in sorted(versions, key=lambda v: v[0]):
        start = stored.timestamp() // WINDOW * WINDOW
        groups[(ev["involvedObject"]["uid"], start)].append((seq, stored, ev))
    out: list[digests.Digest] = []
    last_count: dict[str, int] = defaultdict(int)
    for (pod_uid, start), vs in sorted(groups.items(), key=lambda g: g[1][0][0]):
        first, last = vs[0][2], vs[-1][2]
        obj = first["involvedObject"]
        count_from = last_count[pod_uid]
        last_count[pod_uid] = last["count"]
        counts = [count_from] + [v[2]["count"] for v in vs]
        s = digests.Series(CLUSTER, "shop", obj["kind"], obj["name"], obj["uid"], "BackOff",
                           "Warning", "kubelet")  # fmt: skip
        out.append(
            digests.Digest(
                series=s,
                start=datetime.fromtimestamp(start, UTC),
                end=datetime.fromtimestamp(start + WINDOW, UTC),
                occurrences=last["count"] - count_from,
                versions=len(vs),
                first_seen=datetime.fromisoformat(first["lastTimestamp"]),
                last_seen=datetime.fromisoformat(last["lastTimestamp"]),
                count_from=count_from,
                count_to=last["count"],
                uids=tuple(sorted({v[2]["metadata"]["uid"] for v in vs})),
                uids_omitted=0,
                first_message=digests.bounded(first["message"]),
                last_message=digests.bounded(last["message"]),
                sampled=any(b - a > 1 for a, b in itertools.pairwise(counts)),
                combined=False,
                stream="K8S_EVENTS",
                first_seq=vs[0][0],
                last_seq=vs[-1][0],
            )
        )
    return out


async def publish_digests(nc: Any, ds: list[digests.Digest]) -> dict[str, int]:
    """Each digest as its writer publishes it; its id → its sequence in K8S_DIGESTS."""
    js = nc.jetstream()
    seqs = {}
    for d in ds:
        ack = await js.publish(
            digests.subject("k8s.digests", d.series), digests.encode(d), headers=digests.headers(d)
        )
        seqs[d.id] = ack.seq
    return seqs


@pytest.fixture
async def nc(nats_server: Any) -> AsyncIterator[Any]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(k8s_events())
    await streams.provision(client, streams.digest_stream("K8S_DIGESTS", "k8s.digests",
                                                          max_age=86400.0))  # fmt: skip
    yield client
    with contextlib.suppress(Exception):
        await client.close()


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    ep = await Endpoint().start()
    yield ep
    ep.hold.set()
    await ep.stop()


def records(ep: Endpoint, event_type: str | None = None) -> list[Any]:
    """Every record the endpoint took (of ``event_type``, the CloudEvent's: its event_name)."""
    return [
        r
        for b in ep.bodies
        for rl in b.resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
        if event_type is None or r.event_name == event_type
    ]


def count_of(record: Any) -> int:
    return next(int(kv.value.int_value) for kv in record.attributes if kv.key == "k8s.event.count")


async def acked_all(nc: Any, stream: str, durable: str) -> bool:
    info = await nc.jetstream().consumer_info(stream, durable)
    return bool(info.num_ack_pending == 0 and info.num_pending == 0)


def digests_config(tmp_path: Path, nats_url: str, ep: Endpoint) -> Path:
    return config(tmp_path, nats_url, ep, nats={"reads": "digests", "durable": DIGESTS_DURABLE})


async def start(tmp_path: Path, cfg: Path, name: str) -> Otlp:
    proc = Otlp(cfg, tmp_path / f"{name}.log").start()
    await proc.wait_ready(30)
    return proc


async def test_instead_of_every_version_one_record_per_digest_with_its_count(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    bumps = await storm(nc, pods=10, bumps=20)
    ds = await fold(nc)
    untrusted = digests.Digest(
        series=digests.Series(CLUSTER, "shop", "Node", "", "", "NodeNotReady", untrusted=True),
        start=ds[0].start,
        end=ds[0].end,
        occurrences=3,
        versions=2,
        first_seen=None,
        last_seen=None,
        count_from=1,
        count_to=4,
        uids=("ev-node",),
        uids_omitted=0,
        first_message="node is not ready",
        last_message="node is not ready",
        sampled=True,
        combined=False,
        stream="K8S_EVENTS",
        first_seq=9000,
        last_seq=9001,
    )
    ds.append(untrusted)
    await publish_digests(nc, ds)
    await publish_digests(nc, ds)  # a writer that wrote them again (a restart): stored once
    proc = await start(tmp_path, digests_config(tmp_path, nats_server.url, endpoint), "digests")
    try:
        await eventually(lambda: acked_all(nc, "K8S_DIGESTS", DIGESTS_DURABLE), 60)
        got = records(endpoint)
        # exactly one record per digest, nothing else: no version of the storm
        assert Counter(endpoint.accepted) == Counter(d.id for d in ds)
        assert {r.event_name for r in got} == {"io.k8s.digest"}
        by_id = {record_id(r): r for r in got}
        assert {i: count_of(r) for i, r in by_id.items()} == {d.id: d.occurrences for d in ds}
        assert sum(count_of(r) for r in got) == bumps + 3  # the storm's bumps, and the Node's
        node = by_id[untrusted.id]
        assert node.severity_text == "Normal"
        assert b"ev-node" in node.SerializeToString()
        assert await proc.metric("records_total", 'result="accepted"') == len(ds)
        assert await proc.metric("records_total", 'result="unmappable"') == 0
    finally:
        proc.kill()


async def test_beside_the_versions_the_same_storm_costs_one_record_per_series_and_window(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    pods, bumps = 100, 100
    versions = await storm(nc, pods, bumps)  # 10,000 BackOff bumps over 100 Pods
    ds = await fold(nc)
    await publish_digests(nc, ds)
    events = await start(tmp_path, config(tmp_path, nats_server.url, endpoint), "events")
    dig = await start(tmp_path, digests_config(tmp_path, nats_server.url, endpoint), "digests")
    try:
        await eventually(lambda: acked_all(nc, "K8S_EVENTS", EVENTS_DURABLE), 120)
        await eventually(lambda: acked_all(nc, "K8S_DIGESTS", DIGESTS_DURABLE), 60)
        ev_records = records(endpoint, "io.k8s.event.warning")
        dg_records = records(endpoint, digests.TYPE)
        # before: a record per version; after: a record per series and window (a window
        # boundary inside the storm makes a series two digests, never more)
        assert len(ev_records) == versions == 10_000
        assert len(dg_records) == len(ds) and pods <= len(ds) <= 2 * pods
        assert Counter(record_id(r) for r in dg_records) == Counter(d.id for d in ds)
        assert sum(count_of(r) for r in dg_records) == versions  # every bump counted once
        assert await events.metric("records_total", 'result="accepted"') == versions
        assert await dig.metric("records_total", 'result="accepted"') == len(ds)
        print(f"storm of {versions} versions: {len(ev_records)} records reading events, "
              f"{len(dg_records)} reading digests")  # fmt: skip
    finally:
        events.kill()
        dig.kill()


async def test_a_refused_digest_is_a_dead_letter_and_the_rest_are_taken(
    tmp_path: Path, nats_server: Any, nc: Any, endpoint: Endpoint
) -> None:
    await storm(nc, pods=8, bumps=3)
    ds = await fold(nc)
    seqs = await publish_digests(nc, ds)
    bad = ds[5]
    endpoint.refuse = {bad.id}
    endpoint.partial = True  # the endpoint takes the others: proof it works
    proc = await start(tmp_path, digests_config(tmp_path, nats_server.url, endpoint), "digests")
    try:
        await eventually(lambda: acked_all(nc, "K8S_DIGESTS", DIGESTS_DURABLE), 60)
        assert set(endpoint.accepted) == {d.id for d in ds} - {bad.id}
        dead = await nc.jetstream().get_last_msg("K8S_EVENTS_DEAD", "k8s.dead.otlp")
        assert dead.data == digests.encode(bad)  # the digest itself, as it was stored
        assert dead.headers is not None
        assert dead.headers[shipping.STATUS_HEADER] == "200"
        assert dead.headers["Nats-Msg-Id"].startswith(f"{bad.id}:")
        # the sequence the dead letter names is the digests stream's
        assert dead.headers[shipping.SEQUENCE_HEADER] == str(seqs[bad.id])
        stored = await nc.jetstream().get_msg("K8S_DIGESTS", seqs[bad.id])
        assert stored.data == dead.data
        assert await proc.metric("records_total", 'result="dead_lettered"') == 1
    finally:
        proc.kill()
