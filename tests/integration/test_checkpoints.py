"""The checkpoint store on a real nats-server: compare-and-set, never backwards."""

from __future__ import annotations

import msgspec
import nats

from bridge.jetstream.checkpoints import KvCheckpointStore


async def stores(url: str, n: int = 2):
    ncs = [await nats.connect(url) for _ in range(n)]
    out = [await KvCheckpointStore.open(nc, "cp_test") for nc in ncs]
    return ncs, out


async def stored(url: str, key: str) -> int:
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value("cp_test")
        return int(msgspec.json.decode((await kv.get(key)).value)["resourceVersion"])
    finally:
        await nc.close()


async def test_a_deposed_writer_can_not_move_the_checkpoint_back(nats_server):
    """Two replicas write the same key (a leader and a deposed one still running): whatever
    the order, the checkpoint only moves forward."""
    ncs, (old, new) = await stores(nats_server.url)
    try:
        assert await old.load("c.all") is None
        await old.save("c.all", 100)
        assert (await new.load("c.all")).resource_version == 100
        await new.save("c.all", 200)
        await old.save("c.all", 150)  # the deposed one, behind: refused without a word
        assert await stored(nats_server.url, "c.all") == 200
        await old.save("c.all", 300)  # ahead (what it saved was acked): on top of 200
        assert await stored(nats_server.url, "c.all") == 300
        await new.save("c.all", 250)
        assert await stored(nats_server.url, "c.all") == 300
        await new.save("c.all", 400)
        assert await stored(nats_server.url, "c.all") == 400
    finally:
        for nc in ncs:
            await nc.close()


async def test_two_writers_racing_on_a_new_key_keep_the_larger(nats_server):
    ncs, (a, b) = await stores(nats_server.url)
    try:
        await a.save("c.ns", 10)  # created by a
        await b.save("c.ns", 5)  # b never read it: create fails, it reads, 10 stays
        assert await stored(nats_server.url, "c.ns") == 10
        await b.save("c.ns", 20)
        assert await stored(nats_server.url, "c.ns") == 20
    finally:
        for nc in ncs:
            await nc.close()
