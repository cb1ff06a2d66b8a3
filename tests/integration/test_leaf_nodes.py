"""Many clusters, one backbone, the NATS-native way: each cluster's bridge publishes into its
own leaf node, which has its own JetStream domain; a hub stream sources every leaf's stream.

    cluster a: sim API server -> bridge (nats.domain: leafa) -> leafa  --link-->  hub
    cluster b: sim API server -> bridge (nats.domain: leafb) -> leafb  --link-->  hub
    hub: HUB_EVENTS sources K8S_EVENTS from $JS.leafa.API and $JS.leafb.API

Each link goes through a TCP proxy, so it can break while everything else runs. The configs
are the ones docs/deploy.md shows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.natsserver import NatsServer, free_port
from k8s_event_sim.tcpproxy import LatencyProxy
from tests.integration.harness import (
    BridgeProcess,
    Writer,
    bridge_config,
    eventually,
    write_kubeconfig,
)

pytestmark = pytest.mark.integration

HUB_STREAM = "HUB_EVENTS"


def hub_conf(path: Path, leaf_port: int) -> Path:
    path.write_text(
        f"""
server_name: hub
jetstream {{ domain: hub }}
leafnodes {{
  listen: 127.0.0.1:{leaf_port}
  # leaves must not learn this address and go around the link they were given
  no_advertise: true
}}
"""
    )
    return path


def leaf_conf(path: Path, name: str, hub_url: str) -> Path:
    path.write_text(
        f"""
server_name: {name}
jetstream {{ domain: {name} }}
leafnodes {{
  remotes: [
    {{
      url: "{hub_url}"
      # Events and checkpoints stay in their own cluster's JetStream: without these, a
      # stream or bucket of the same name on another leaf would take them too (interest
      # crosses leaf links). Only the hub's sourcing crosses.
      deny_imports: ["k8s.events.>", "$KV.>"]
      deny_exports: ["k8s.events.>", "$KV.>"]
    }}
  ]
}}
"""
    )
    return path


async def hub_stream_ids(url: str) -> list[str]:
    """Every Nats-Msg-Id in the hub's stream (Events and status events of both clusters)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(domain="hub")
        info = await js.stream_info(HUB_STREAM)
        n = info.state.messages
        if not n:
            return []
        sub = await js.subscribe(">", stream=HUB_STREAM, ordered_consumer=True)
        out = []
        for _ in range(n):
            msg = await sub.next_msg(timeout=5)
            out.append((msg.headers or {}).get("Nats-Msg-Id", ""))
        await sub.unsubscribe()
        return out
    finally:
        await nc.close()


async def test_two_clusters_through_leaf_nodes_into_one_hub_stream_through_a_link_outage(
    tmp_path,
):
    hub_leaf_port = free_port()
    hub = NatsServer(
        store_dir=str(tmp_path / "hub"),
        args=["-c", str(hub_conf(tmp_path / "hub.conf", hub_leaf_port))],
    ).start()
    proxies = {}
    leaves = {}
    sims = {}
    bridges = {}
    try:
        for name in ("leafa", "leafb"):
            proxies[name] = await LatencyProxy("127.0.0.1", hub_leaf_port).start()
            conf = leaf_conf(
                tmp_path / f"{name}.conf", name, f"nats-leaf://127.0.0.1:{proxies[name].port}"
            )
            leaves[name] = NatsServer(
                store_dir=str(tmp_path / name), args=["-c", str(conf)]
            ).start()
        hc = await nats.connect(hub.url)

        async def linked() -> bool:  # the hub reaches both leaves' JetStream over the links
            for name in leaves:
                try:
                    await hc.jetstream(domain=name).account_info()
                except Exception:
                    return False
            return True

        await eventually(linked, timeout=30)

        # one bridge per cluster, each into its own leaf's JetStream
        writers = {}
        for cluster, name in (("a", "leafa"), ("b", "leafb")):
            sims[cluster] = SimApiServer()
            await sims[cluster].start()
            kc = write_kubeconfig(tmp_path / f"kc-{cluster}", sims[cluster].url)
            cfg = bridge_config(
                tmp_path,
                leaves[name].url,
                kc,
                cluster={"name": cluster},
                nats={"domain": name},
            )
            bridges[cluster] = BridgeProcess(cfg, tmp_path / f"bridge-{cluster}.log").start()
            writers[cluster] = Writer(sims[cluster], seed=ord(cluster))
        for b in bridges.values():
            await b.wait_ready(timeout=30)

        # the hub sources both (created by the platform team, not by the bridges)
        await hc.jetstream(domain="hub").add_stream(
            StreamConfig(
                name=HUB_STREAM,
                sources=[
                    StreamSource(name="K8S_EVENTS", external=ExternalStream(api=f"$JS.{n}.API"))
                    for n in leaves
                ],
            )
        )

        for w in writers.values():
            await w.write(100, bump_ratio=0.3)

        # leaf a's link breaks; both clusters keep writing, a publishes into its leaf alone
        await proxies["leafa"].stop()
        for _ in range(3):
            for w in writers.values():
                await w.write(50, bump_ratio=0.3)
            await asyncio.sleep(1)

        async def leaf_a_has_its_own() -> bool:
            lc = await nats.connect(leaves["leafa"].url)
            try:
                info = await lc.jetstream(domain="leafa").stream_info("K8S_EVENTS")
                return info.state.messages >= len(writers["a"].ids)
            finally:
                await lc.close()

        await eventually(leaf_a_has_its_own, timeout=30)
        await proxies["leafa"].start()  # the link is back

        want = {i for w in writers.values() for i in w.ids}

        async def hub_has_all() -> list[str] | None:
            ids = await hub_stream_ids(hub.url)
            return ids if want <= set(ids) else None

        ids = await eventually(hub_has_all, timeout=120, interval=1.0)
        events = [i for i in ids if "/" in i and not i.startswith(("a/", "b/"))]
        assert len(events) == len(set(events)), "an Event twice in the hub"
        assert set(events) == want, "the hub holds an Event nobody wrote"
        status = [i for i in ids if i.startswith(("a/", "b/"))]
        assert {i.split("/")[0] for i in status} == {"a", "b"}  # both clusters' `started`
        assert len(status) == len(set(status))

        # each leaf kept only its own cluster's Events and checkpoints
        for cluster, name in (("a", "leafa"), ("b", "leafb")):
            lc = await nats.connect(leaves[name].url)
            try:
                kv = await lc.jetstream(domain=name).key_value("k8s_event_bridge")
                assert {k.split(".")[0] for k in await kv.keys()} == {cluster}
            finally:
                await lc.close()
        await hc.close()
    finally:
        for b in bridges.values():
            b.kill()
        for s in sims.values():
            await s.stop()
        for p in proxies.values():
            await p.stop()
        for leaf in leaves.values():
            leaf.stop()
        hub.stop()


async def test_nats_domain_is_the_jetstream_the_bridge_uses(tmp_path, sim, kubeconfig):
    """A server whose JetStream is domain "east": with `nats.domain: east` the bridge makes
    its stream and bucket there and is ready; with a domain nobody serves it gets no answer
    from that JetStream and waits, not ready, saying so (it never falls back to another)."""
    conf = tmp_path / "east.conf"
    conf.write_text("jetstream { domain: east }\n")
    server = NatsServer(store_dir=str(tmp_path / "east"), args=["-c", str(conf)]).start()
    started = []
    try:
        for domain in ("west", "east"):
            cfg = bridge_config(tmp_path, server.url, kubeconfig, nats={"domain": domain})
            started.append(BridgeProcess(cfg, tmp_path / f"bridge-{domain}.log").start())
        wrong, right = started
        await right.wait_ready(timeout=30)
        nc = await nats.connect(server.url)
        try:
            info = await nc.jetstream(domain="east").stream_info("K8S_EVENTS")
            assert info.config.name == "K8S_EVENTS"
        finally:
            await nc.close()

        async def waiting() -> bool:
            return any(e.get("event") == "ensure_stream_failed" for e in wrong.log_events())

        await eventually(waiting, timeout=30)
        status, _ = await wrong.get("/readyz")
        assert status == 503
    finally:
        for b in started:
            b.kill()
        server.stop()
