"""A node of the 3-node JetStream cluster hangs (``SIGSTOP``: its sockets stay open, it reads
and answers nothing) for two minutes while the bridge and a subscriber are connected to it, and
it leads the stream and the subscriber's durable. The stream is R3 and the two other nodes keep
it writable, so each client must notice the silence and go over to them: nats-py's own pings
are far too rare for that (nats-io/nats.py issue 671), and its reconnect waits for the old
socket to close, which a socket with unsent data to a peer that reads nothing never does. Each
client runs with its defaults (the bridge's, the consumer kit's): no ping option is set.

Within ``RESUME_BOUND`` of the freeze the bridge publishes through another node and the
subscriber's handler gets new Events; after the thaw the stream is the truth (every version
written, once) and the subscriber handled every Event of it, none twice. One freeze for both
clients (the leader's case, the harshest: the stream and the durable elect a new leader too):
the two minutes are the most of this test's time. The cluster pieces are those of
test_nats_cluster.py; figures measured here are in docs/nats-cluster.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats as nats_client
import nats.errors
import nats.js.errors
import pytest
import yaml

from k8s_event_sim.natsserver import NatsCluster
from tests.integration.harness import ChildProcess, eventually
from tests.integration.test_nats_cluster import (
    RATE,
    STREAM,
    ask,
    assert_stream_is_truth,
    bridge_on,
    cluster,
    cluster_ready,
    connected_node,
    move_stream_leader,
    start_under_load,
)

pytestmark = pytest.mark.integration

__all__ = ["bridge_on", "cluster"]  # fixtures of test_nats_cluster, used here by name

FREEZE = 120.0  # seconds the node stays hung
RESUME_BOUND = 30.0  # seconds a client may take to go over to another node
SETTLE = 1.0  # seconds after a freeze by which what the node sent before it has been read


@contextlib.asynccontextmanager
async def frozen(cluster: NatsCluster, i: int) -> Any:
    """Node ``i`` hung for the body; thawed on the way out, whatever happens."""
    await ask(cluster.freeze, i)
    try:
        yield
    finally:
        await ask(cluster.thaw, i)


def where(node: int | None) -> str:
    return "no node that answers" if node is None else f"n{node}"


SUBSCRIBER = '''
"""A subscriber of the consumer kit, its defaults but the connection's name: it appends
"<time> <CloudEvent id>" to the file ``ids`` for each Event its handler is called with."""
import asyncio, logging, sys, time

import yaml

from k8s_event_consumer import Consumer, ConsumerOptions, Handlers, NatsOptions
from k8s_event_consumer.connecting import connect_until


async def main(cfg):
    opts = NatsOptions(servers=cfg["servers"], name=cfg["name"],
                       dont_randomize=cfg.get("dont_randomize", False))
    nc = await connect_until(opts, asyncio.Event())
    # the connection's defaults; a short ack_wait only brings back sooner, after the thaw,
    # what was delivered on the old connection and never acked (the test waits for it)
    consumer = await Consumer.open(nc, stream=cfg["stream"], durable=cfg["durable"],
                                   subjects=["k8s.events.>"],
                                   options=ConsumerOptions(ack_wait=cfg.get("ack_wait", 30.0)))
    with open(cfg["ids"], "a", buffering=1) as out:
        async def on_event(ev, d):
            out.write(f"{time.time():.3f} {d.id}\\n")

        await consumer.run(Handlers(on_event=on_event))


logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
with open(sys.argv[1]) as f:
    asyncio.run(main(yaml.safe_load(f)))
'''


@dataclass
class KitSubscriber(ChildProcess):
    """``SUBSCRIBER`` as a real child process; its config is YAML: servers, name, stream,
    durable, ids, dont_randomize (the first server first: to put it on a given node)."""

    what = "kit subscriber"

    def command(self) -> list[str]:
        return [sys.executable, "-c", SUBSCRIBER, str(self.config)]

    def start(self) -> KitSubscriber:
        super().start()
        return self

    @property
    def settings(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(self.config.read_text())
        return doc

    def handled(self) -> list[tuple[float, str]]:
        """(when, id) of each call of its handler, in order."""
        path = Path(self.settings["ids"])
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            t, _, id_ = line.partition(" ")
            if id_:  # a line being written has no id yet
                out.append((float(t), id_))
        return out


async def subscriber_node(cluster: NatsCluster, name: str) -> int | None:
    """The node that has a client connection named ``name`` (of those that answer)."""
    for i in await ask(cluster.alive):
        conns = (await ask(cluster.connz, i) or {}).get("connections") or []
        if any(c.get("name") == name for c in conns):
            return int(i)
    return None


async def move_consumer_leader(cluster: NatsCluster, durable: str, to: int) -> None:
    """Ask the durable's leader to step down in favour of node ``to``; wait until it has."""
    nc = await nats_client.connect(cluster.url(to))
    try:
        js = nc.jetstream()
        name = cluster.nodes[to].name
        info = await js.consumer_info(STREAM, durable)
        if info.cluster is None or info.cluster.leader != name:
            body = msgspec.json.encode({"placement": {"preferred": name}})
            reply = await nc.request(
                f"$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.{durable}", body, timeout=5
            )
            assert msgspec.json.decode(reply.data).get("success"), reply.data

        async def moved() -> bool:
            try:
                info = await js.consumer_info(STREAM, durable)
            except (nats.errors.Error, nats.js.errors.Error):
                return False
            return info.cluster is not None and info.cluster.leader == name

        await eventually(moved, timeout=20)
    finally:
        await nc.close()


async def consumer_replicas(url: str, durable: str) -> int:
    """How many replicas the durable has: its leader and its followers."""
    nc = await nats_client.connect(url)
    try:
        info = await nc.jetstream().consumer_info(STREAM, durable)
        assert info.cluster is not None
        return 1 + len(info.cluster.replicas or [])
    finally:
        await nc.close()


@pytest.mark.timeout(FREEZE + 240)
async def test_a_hung_node_costs_the_bridge_and_a_subscriber_at_most_30s(
    tmp_path: Path, sim: Any, cluster: NatsCluster, bridge_on: Any
) -> None:
    load = await start_under_load(cluster, bridge_on, sim, n=int(RATE * (FREEZE + 20)))
    w, sampler = load.writer, load.sampler
    on = await connected_node(load.bridge, cluster)
    assert on is not None
    other = (on + 1) % 3
    # a kit subscriber on the same node: that node first in its list, tried in order
    name, durable = "hung-node-subscriber", "hung-node"
    config = tmp_path / "subscriber.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "servers": [
                    cluster.url(on),
                    *(u for i, u in enumerate(cluster.servers) if i != on),
                ],
                "dont_randomize": True,
                "ack_wait": 5.0,
                "name": name,
                "stream": STREAM,
                "durable": durable,
                "ids": str(tmp_path / "handled.txt"),
            }
        )
    )
    sub = KitSubscriber(config, tmp_path / "subscriber.log").start()
    try:

        async def consuming() -> bool:
            return "consumer_created" in sub.logs() and len(sub.handled()) > 0

        await eventually(consuming, timeout=30)
        assert await subscriber_node(cluster, name) == on
        assert await consumer_replicas(cluster.url(other), durable) == 3  # follows the stream
        # the hung node leads the stream and the durable: both must elect anew meanwhile
        await move_stream_leader(cluster, on)
        await move_consumer_leader(cluster, durable, on)
        before = await load.bridge.metric("events_published")

        async def flowing() -> bool:
            return await load.bridge.metric("events_published") > before + RATE

        await eventually(flowing, timeout=20)
        async with frozen(cluster, on):
            frozen_at, frozen_wall = sampler.now(), time.time()
            await asyncio.sleep(FREEZE)  # the hang itself
            bridge_on_at_thaw = await connected_node(load.bridge, cluster)
            sub_on_at_thaw = await subscriber_node(cluster, name)
        thawed_wall = time.time()
        disconnects = len(load.bridge.log_events("nats_disconnected"))
        stale = len(load.bridge.log_events("nats_stale"))
        await load.written()
        await cluster_ready(cluster)
        await assert_stream_is_truth(cluster, other, w, sim)
        load.stop_sampling()

        async def all_handled() -> bool:
            return {id_ for _, id_ in sub.handled()} >= set(w.ids)

        await eventually(all_handled, timeout=60)  # ack_wait brings back the lost ones
        handled = sub.handled()
        ids = [id_ for _, id_ in handled]
        twice = len(ids) - len(set(ids))
        # the acks (and messages) the node sent just before it froze are still read after:
        # progress from SETTLE on is through another node (or through this one, thawed)
        resumed = SETTLE + sampler.first_progress(frozen_at + SETTLE)
        stall = sampler.longest_stall(frozen_at)
        after = [t for t, _ in handled if t > frozen_wall + SETTLE]
        consumed = after[0] - frozen_wall if after else float("inf")
        times = [frozen_wall, *(t for t in after if t < thawed_wall), thawed_wall]
        gap = max(b - a for a, b in itertools.pairwise(times))
        print(
            f"\nn{on} (the bridge's and the subscriber's node, leading the stream and the "
            f"durable) frozen {thawed_wall - frozen_wall:.0f}s: publishing resumed "
            f"{resumed:.1f}s after the freeze (longest stall {stall:.1f}s, {disconnects} "
            f"disconnects, {stale} nats_stale, on {where(bridge_on_at_thaw)} at the thaw), "
            f"consumption resumed {consumed:.1f}s after it (longest gap {gap:.1f}s, on "
            f"{where(sub_on_at_thaw)} at the thaw); {len(w.ids)} versions none lost none twice, "
            f"{len(set(ids))} handled, {twice} twice"
        )
        assert resumed <= RESUME_BOUND, f"publishing resumed only {resumed:.1f}s after the freeze"
        assert stall <= RESUME_BOUND, f"publishing stalled {stall:.1f}s after the freeze"
        assert bridge_on_at_thaw not in (None, on), "the bridge still on the frozen node"
        assert consumed <= RESUME_BOUND, f"consumption resumed only {consumed:.1f}s after"
        assert gap <= RESUME_BOUND, f"nothing handled for {gap:.1f}s during the freeze"
        assert sub_on_at_thaw not in (None, on), "the subscriber still on the frozen node"
        assert twice == 0, f"{twice} Events handled twice"
        assert set(ids) == set(w.ids)
    finally:
        sub.kill()
