"""The bridge process against a 3-node JetStream cluster on loopback (``NatsCluster``): the
stream and the checkpoint bucket R3 (``nats.num_replicas: 3``), the bridge given all three
URLs. A node fails under a steady load of Events: the stream leader, a follower, two nodes
at once (no quorum), each node in turn (a rolling restart). Every scenario ends with the
stream read from a node that stayed up equal to the truth (every version written, once) and
the checkpoint at the newest resourceVersion.

The cluster is asked through its monitoring endpoints, which block: every call goes through
``asyncio.to_thread`` so the simulated API server and the writer keep running meanwhile.
Figures measured here are in docs/nats-cluster.md.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats as nats_client
import pytest

from k8s_event_sim.natsserver import NatsCluster
from tests.integration.harness import (
    BridgeProcess,
    Bridges,
    Writer,
    all_of,
    bridge_config,
    checkpoint,
    logged,
    readyz,
)
from tests.support import eventually, rss_kib

pytestmark = pytest.mark.integration

STREAM = "K8S_EVENTS"
BUCKET_STREAM = "KV_k8s_event_bridge"
MAX_EVENTS = 200  # queue.max_events
MAX_INFLIGHT = 100  # nats.max_inflight
RATE = 200.0  # Events written a second while a node fails


@pytest.fixture
def cluster(tmp_path):
    nodes = NatsCluster(3, base_dir=str(tmp_path / "nats")).start()
    yield nodes
    nodes.cleanup()


@pytest.fixture
def bridge_on(tmp_path, kubeconfig):
    """Start the bridge on a cluster's three URLs, R3; killed at the end."""
    bridges = Bridges(tmp_path)

    def start(cluster: NatsCluster, **sections: Any) -> BridgeProcess:
        sections.setdefault("queue", {"max_events": MAX_EVENTS})
        nats = {
            "servers": cluster.servers,
            "num_replicas": 3,
            "ack_timeout": "500ms",
            "max_inflight": MAX_INFLIGHT,
            **sections.pop("nats", {}),
        }
        cfg = bridge_config(tmp_path, cluster.url(0), kubeconfig, nats=nats, **sections)
        return bridges.start(cfg)

    yield start
    bridges.kill_all()


async def cluster_ready(cluster: NatsCluster) -> None:
    """Every running node healthy, the stream and the bucket with a leader and current
    followers on every running node."""
    replicas = len(cluster.alive())
    await asyncio.to_thread(cluster.wait_ready, 30.0)
    await asyncio.to_thread(cluster.wait_stream_current, STREAM, replicas, 30.0)
    await asyncio.to_thread(cluster.wait_stream_current, BUCKET_STREAM, replicas, 30.0)


async def ask(call: Any, *args: Any) -> Any:
    """A blocking call of the cluster (its processes, its monitoring endpoints) off the loop."""
    return await asyncio.to_thread(call, *args)


@dataclass
class Sample:
    t: float  # seconds since the sampler started
    published: float
    ready: int
    rss_kib: int
    internals: dict[str, int]
    oldest_wait: float  # seconds the oldest unacked publish has waited


@dataclass
class Sampler:
    """Every 0.2 s: events published, /readyz, RSS and /status internals of the bridge."""

    bridge: BridgeProcess
    samples: list[Sample] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def run(self) -> None:
        assert self.bridge.proc is not None
        while True:
            try:
                published = await self.bridge.metric("events_published")
                ready, _ = await self.bridge.get("/readyz")
                _, body = await self.bridge.get("/status")
                status = msgspec.json.decode(body)
            except Exception:  # a slow answer: the next tick
                await asyncio.sleep(0.2)
                continue
            rss = rss_kib(self.bridge.proc.pid)
            self.samples.append(
                Sample(
                    self.now(),
                    published,
                    ready,
                    rss,
                    status.get("internals", {}),
                    status.get("nats", {}).get("oldest_ack_wait_seconds", 0.0),
                )
            )
            await asyncio.sleep(0.2)

    def between(self, a: float, b: float) -> list[Sample]:
        return [s for s in self.samples if a <= s.t <= b]

    def ready_again(self, after: float) -> float:
        """Seconds from ``after`` to the last time /readyz turned 200 again (0: never 503)."""
        last, was_unready = 0.0, False
        for s in self.samples:
            if s.t < after:
                continue
            if s.ready != 200:
                was_unready = True
            elif was_unready:
                last, was_unready = s.t - after, False
        assert not was_unready, "still not ready at the end"
        return last

    def longest_stall(self, after: float) -> float:
        """The longest time after ``after`` during which nothing more was published."""
        best, since, last = 0.0, after, None
        for s in self.samples:
            if s.t < after:
                last = s.published
                continue
            if last is not None and s.published > last:
                best = max(best, s.t - since)
                since = s.t
            last = s.published
        return best

    def first_progress(self, after: float) -> float:
        """Seconds from ``after`` to the first sample with more published than at ``after``."""
        base = next(s.published for s in reversed(self.samples) if s.t <= after)
        for s in self.samples:
            if s.t > after and s.published > base:
                return s.t - after
        raise AssertionError(f"nothing published after {after:.1f}s")


async def connected_node(bridge: BridgeProcess, cluster: NatsCluster) -> int | None:
    """The node the bridge's NATS connection is on now (its last connected log line)."""
    servers = [
        e["server"]
        for e in bridge.log_events()
        if e.get("event") in ("nats_connected", "nats_reconnected") and e.get("server")
    ]
    for i, node in enumerate(cluster.nodes):
        if servers and servers[-1].endswith(f":{node.port}"):
            return i
    return None


async def move_stream_leader(cluster: NatsCluster, to: int) -> None:
    """Ask the stream's leader to step down in favour of node ``to``; wait until it has and
    the followers are current."""
    if await ask(cluster.stream_leader, STREAM) == to:
        return
    nc = await nats_client.connect(cluster.url(to))
    try:
        body = msgspec.json.encode({"placement": {"preferred": cluster.nodes[to].name}})
        reply = await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}", body, timeout=5)
        assert msgspec.json.decode(reply.data).get("success"), reply.data
    finally:
        await nc.close()

    async def moved() -> bool:
        return await ask(cluster.stream_leader, STREAM) == to and await ask(
            cluster.stream_current, STREAM, len(cluster)
        )

    await eventually(moved, timeout=20)


async def assert_stream_is_truth(
    cluster: NatsCluster, node: int, w: Writer, sim: Any, timeout: float = 60
) -> None:
    """Read from ``node``: every version written, exactly once; both R3; the checkpoint
    reaches the newest resourceVersion and goes no further."""
    url = cluster.url(node)
    ids = await all_of(url, w.ids, timeout=timeout)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicates"
    assert sorted(ids) == sorted(w.ids), (
        f"missing {len(set(w.ids) - set(ids))}, extra {len(set(ids) - set(w.ids))}"
    )
    top = sim.resource_version

    async def saved() -> bool:
        cp = await checkpoint(url)
        return cp is not None and cp >= top

    await eventually(saved, timeout=20)
    assert await checkpoint(url) == top
    nc = await nats_client.connect(url)
    try:
        js = nc.jetstream()
        for name in (STREAM, BUCKET_STREAM):
            assert (await js.stream_info(name)).config.num_replicas == 3, name
    finally:
        await nc.close()


@dataclass
class Load:
    """The bridge, the writer writing at ``RATE`` and the sampler beside them."""

    bridge: BridgeProcess
    writer: Writer
    writing: asyncio.Task[None]
    sampler: Sampler
    sampling: asyncio.Task[None]

    async def written(self) -> None:
        await self.writing

    async def stop_writing(self) -> None:
        self.writing.cancel()
        await asyncio.gather(self.writing, return_exceptions=True)

    def stop_sampling(self) -> None:
        self.sampling.cancel()


async def start_under_load(
    cluster: NatsCluster, bridge_on: Any, sim: Any, n: int, **sections: Any
) -> Load:
    """A ready cluster, the bridge ready on it, then ``n`` versions written at ``RATE``."""
    await ask(cluster.wait_ready, 30.0)
    bridge = bridge_on(cluster, **sections)
    await bridge.wait_ready(timeout=30)
    await cluster_ready(cluster)  # the stream and the bucket exist once the bridge is ready
    w = Writer(sim)
    sampler = Sampler(bridge)
    return Load(
        bridge,
        w,
        asyncio.create_task(w.write(n, rate=RATE, bump_ratio=0.3)),
        sampler,
        asyncio.create_task(sampler.run()),
    )


async def test_killing_the_stream_leader_the_bridge_is_on_loses_and_duplicates_nothing(
    sim, cluster, bridge_on
):
    """The harshest single failure: the node that leads the stream is the one the bridge's
    connection is on. The client fails over while the stream elects a new leader."""
    load = await start_under_load(cluster, bridge_on, sim, n=3000)
    w, sampler = load.writer, load.sampler
    on = await connected_node(load.bridge, cluster)
    assert on is not None
    await move_stream_leader(cluster, on)
    await asyncio.sleep(3)
    await ask(cluster.kill, on)
    killed_at = sampler.now()
    await ask(cluster.wait_stream_current, STREAM, 2, 30.0)
    elected = sampler.now() - killed_at
    new_leader = await ask(cluster.stream_leader, STREAM)
    assert new_leader not in (None, on)
    await load.written()
    await assert_stream_is_truth(cluster, new_leader, w, sim)
    await eventually(lambda: readyz(load.bridge, 200, "ready"), timeout=10)
    load.stop_sampling()
    stall = sampler.longest_stall(killed_at)
    oldest = max(s.oldest_wait for s in sampler.samples)
    no_responders = await load.bridge.metric("publish_failures", 'reason="no_responders"')
    print(
        f"\nleader n{on} (the bridge's node) killed: new leader n{new_leader} in "
        f"{elected:.1f}s, longest publish stall {stall:.1f}s, oldest ack wait {oldest:.1f}s, "
        f"/readyz 200 again {sampler.ready_again(killed_at):.1f}s after the kill, "
        f"{no_responders:.0f} no-responders answers, {len(w.ids)} versions"
    )
    assert all(s.ready == 200 for s in sampler.samples if s.t < killed_at)


async def test_killing_a_follower_the_bridge_is_on_loses_and_duplicates_nothing(
    sim, cluster, bridge_on
):
    """The bridge's node dies, the stream keeps its leader and a quorum: the client fails
    over, no election, and the node catches up when it comes back."""
    load = await start_under_load(cluster, bridge_on, sim, n=2400)
    w, sampler = load.writer, load.sampler
    on = await connected_node(load.bridge, cluster)
    assert on is not None
    leader = (on + 1) % 3
    await move_stream_leader(cluster, leader)
    await asyncio.sleep(3)
    await ask(cluster.kill, on)
    killed_at = sampler.now()
    await load.written()
    await assert_stream_is_truth(cluster, leader, w, sim)
    load.stop_sampling()
    assert await ask(cluster.stream_leader, STREAM) == leader  # a follower's loss elects nobody
    stall = sampler.longest_stall(killed_at)
    reconnected = await connected_node(load.bridge, cluster)
    assert reconnected not in (None, on)
    await ask(cluster.start, on)
    t = time.monotonic()
    await cluster_ready(cluster)
    print(
        f"\nfollower n{on} (the bridge's node) killed: reconnected to n{reconnected}, "
        f"longest publish stall {stall:.1f}s, {len(w.ids)} versions; n{on} back and current "
        f"in {time.monotonic() - t:.1f}s"
    )
    assert all(s.ready == 200 for s in sampler.samples)
    # the stream kept its leader and a quorum: at most a reconnect's worth of waiting
    assert stall < 5.0, stall


async def test_two_nodes_down_stalls_bounded_and_unready_then_flows_when_one_returns(
    sim, cluster, bridge_on
):
    load = await start_under_load(cluster, bridge_on, sim, n=6000, http={"unready_after": "2s"})
    bridge, w, sampler = load.bridge, load.writer, load.sampler
    await asyncio.sleep(4)
    assert bridge.proc is not None
    rss_healthy = rss_kib(bridge.proc.pid)
    leader = await ask(cluster.stream_leader, STREAM)
    assert leader is not None
    down = [leader, (leader + 1) % 3]
    survivor = (leader + 2) % 3
    for i in down:
        await ask(cluster.kill, i)
    killed_at = sampler.now()
    await eventually(lambda: readyz(bridge, 503, "JetStream ack"), timeout=15)
    unready_in = sampler.now() - killed_at
    await asyncio.sleep(15)  # no quorum for a while; Events keep coming
    outage = sampler.between(killed_at + 3, sampler.now())
    stored_before = await bridge.metric("events_published")
    assert outage, "no samples during the outage"
    # publishes stall: nothing is acked without a quorum
    assert outage[-1].published == outage[0].published, (outage[0], outage[-1])
    assert all(s.ready == 503 for s in outage)
    # held: at most the queue and the window (one more message may sit in either's hand)
    for s in outage:
        assert s.internals["queue"] <= MAX_EVENTS, s.internals
        assert s.internals["publisher_pending"] <= MAX_INFLIGHT + 1, s.internals
    # memory: what the queue and the window may hold (16 KiB an Event covers the raw line,
    # the decoded dict and the CloudEvent) plus 8 MiB for the allocator; and flat once full
    bound_kib = rss_healthy + (MAX_EVENTS + MAX_INFLIGHT) * 16 + 8 * 1024
    peak = max(s.rss_kib for s in outage)
    assert peak < bound_kib, (rss_healthy, peak, bound_kib)
    full = [s.rss_kib for s in outage if s.t > killed_at + 6]
    assert max(full) - min(full) < 3 * 1024, full
    await ask(cluster.start, down[0])
    back_at = sampler.now()
    await ask(cluster.wait_stream_current, STREAM, 2, 30.0)
    elected_in = sampler.now() - back_at
    await eventually(lambda: readyz(bridge, 200, "ready"), timeout=120)
    ready_in = sampler.now() - back_at
    await load.written()
    await assert_stream_is_truth(cluster, survivor, w, sim)
    # read once everything is stored (a loaded machine samples the first publish late)
    flowing_in = sampler.first_progress(back_at)
    load.stop_sampling()
    print(
        f"\nn{down[0]} and n{down[1]} killed: /readyz 503 after {unready_in:.1f}s, "
        f"RSS healthy {rss_healthy} KiB, outage {min(s.rss_kib for s in outage)}.."
        f"{peak} KiB (bound {bound_kib}), queue max "
        f"{max(s.internals['queue'] for s in outage)}, publisher_pending max "
        f"{max(s.internals['publisher_pending'] for s in outage)}; "
        f"n{down[0]} back: stream leader in {elected_in:.1f}s, publishing in {flowing_in:.1f}s, "
        f"/readyz 200 in {ready_in:.1f}s; "
        f"published before {stored_before:.0f}, {len(w.ids)} versions"
    )


async def test_rolling_restart_of_all_three_under_load(sim, cluster, bridge_on):
    """Each node in turn: SIGTERM, start again on its store, wait until it is healthy and
    the stream and the bucket are current on all three, a little more load, the next."""
    load = await start_under_load(cluster, bridge_on, sim, n=12000)
    w, sampler = load.writer, load.sampler
    await asyncio.sleep(2)
    steps = []
    for i in range(len(cluster)):
        leader = await ask(cluster.stream_leader, STREAM)
        await ask(cluster.stop, i)
        await asyncio.sleep(1)
        await ask(cluster.start, i)
        t = sampler.now()
        await cluster_ready(cluster)
        steps.append(f"n{i} (leader n{leader}) current in {sampler.now() - t:.1f}s")
        await asyncio.sleep(2)
    await load.stop_writing()  # the restart is over: what was written is the truth
    await assert_stream_is_truth(cluster, 0, w, sim)
    load.stop_sampling()
    stall = sampler.longest_stall(0.0)
    print(
        f"\nrolling restart: {'; '.join(steps)}; longest publish stall {stall:.1f}s, "
        f"oldest ack wait {max(s.oldest_wait for s in sampler.samples):.1f}s; "
        f"{len(w.ids)} versions"
    )
    assert all(s.ready == 200 for s in sampler.samples)


async def test_a_bridge_started_before_a_fresh_cluster_creates_the_r3_stream_and_bucket(
    tmp_path, sim, bridge_on
):
    """A fresh deployment: the bridge starts first, then the three nodes, which elect a meta
    leader only after a few seconds. The start-up steps (connect, create the R3 stream and
    the R3 bucket) wait through all of that and do not give up."""
    fresh = NatsCluster(3, base_dir=str(tmp_path / "fresh"))
    try:
        w = Writer(sim)
        await w.write(50, rate=1000, bump_ratio=0.0)  # a first list sees newest versions only
        t = time.monotonic()
        bridge = bridge_on(fresh)
        await eventually(lambda: logged(bridge, "nats_error"), timeout=20)  # refused
        await ask(fresh.start)
        # the cluster forms, then the stream's placement is retried every 10 s until three
        # peers are current: a bound for a loaded machine, not a measure
        await bridge.wait_ready(timeout=120)
        ready_in = time.monotonic() - t
        await w.write(50, rate=1000)
        await cluster_ready(fresh)
        await assert_stream_is_truth(fresh, 0, w, sim)
        events = [e.get("event", "") for e in bridge.log_events()]
        retried = {e: events.count(e) for e in events if e.endswith("_failed")}
        print(f"\nfresh cluster: bridge ready in {ready_in:.1f}s, retries {retried}")
    finally:
        await ask(fresh.cleanup)


async def test_a_bridge_started_while_a_node_of_a_fresh_cluster_is_down_waits_for_it(
    tmp_path, sim, bridge_on
):
    """Two of three nodes are up (the meta layer has a quorum), the stream does not exist
    yet: JetStream can not place an R3 stream until the third node joins. The bridge waits
    for it, as for any JetStream that is not there yet, and is ready once it came."""
    fresh = NatsCluster(3, base_dir=str(tmp_path / "fresh"))
    try:
        await ask(fresh.start, 0)
        await ask(fresh.start, 1)
        await ask(fresh.wait_ready, 30.0)
        w = Writer(sim)
        await w.write(20, rate=1000, bump_ratio=0.0)
        bridge = bridge_on(fresh)
        await eventually(lambda: logged(bridge, "nats_connected"), timeout=20)
        await asyncio.sleep(3)  # the stream can not be placed meanwhile
        assert bridge.proc is not None
        assert bridge.proc.poll() is None, f"the bridge gave up:\n{bridge.logs()[-2000:]}"
        await ask(fresh.start, 2)
        await bridge.wait_ready(timeout=40)
        await cluster_ready(fresh)
        await assert_stream_is_truth(fresh, 0, w, sim)
    finally:
        await ask(fresh.cleanup)
