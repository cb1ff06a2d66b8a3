"""Helpers for running the real bridge process against the simulated API server and a real
nats-server, and for reading back what reached the stream.

The programs as child processes (``ChildProcess``, ``BridgeProcess``, ``ConsumerProcess``,
``Bridges``: k8s_event_sim.programs), their configs (``bridge_config``, ``subscriber_config``,
``deep_merge``: k8s_event_sim.configs) and the stream read back (``stream_messages``,
``event_ids``: k8s_event_sim.readback) are the simulator's, one copy each for the tests, the
benchmark and the soak; the small helpers every tier shares (``eventually``, ``free_port``,
``write_kubeconfig``, the Event ``Workload``) are in tests/support.py. Both are re-exported here
for the tests that import them from here."""

from __future__ import annotations

from typing import Any

import msgspec
import nats
from nats.js.errors import ServiceUnavailableError

from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.configs import SUBSCRIBERS, bridge_config, deep_merge, subscriber_config
from k8s_event_sim.programs import BridgeProcess, Bridges, ChildProcess, ConsumerProcess
from k8s_event_sim.readback import event_ids, stream_messages
from k8s_event_sim.waiting import RETRIABLE
from tests.support import Workload, eventually, free_port, write_kubeconfig

__all__ = [  # what the tests import from here (some of it from k8s_event_sim, tests/support.py)
    "SUBSCRIBERS",
    "BridgeProcess",
    "Bridges",
    "ChildProcess",
    "ConsumerProcess",
    "Writer",
    "all_of",
    "bridge_config",
    "checkpoint",
    "count_at_least",
    "deep_merge",
    "event_ids",
    "eventually",
    "free_port",
    "logged",
    "metric_at_least",
    "readyz",
    "status_events",
    "stream_messages",
    "subscriber_config",
    "watch_requests",
    "write_kubeconfig",
]


class Writer(Workload):
    """The workload (k8s_event_sim.workload) as the integration tests write it: to the
    simulated API server, seed 1 and 500 operations a second unless told otherwise."""

    def __init__(self, sim: SimApiServer, seed: int = 1, rate: float | None = 500.0) -> None:
        super().__init__(sim, seed, rate=rate)


async def status_events(nats_url: str, what: str) -> list[dict[str, Any]]:
    return [
        msgspec.json.decode(b)
        for s, _, b in await stream_messages(nats_url)
        if s.endswith(f"._bridge.{what}")
    ]


async def outage_ended(nats_url: str) -> bool:
    """The bridge told the API server unreachable, and its last word on reachability (in stream
    order) is ``apiserver_reachable``: the scope's first answer in a process is told too, so
    ``apiserver_reachable`` alone proves no outage ended."""
    told = [
        s.rsplit(".", 1)[1]
        for s, _, _ in await stream_messages(nats_url, headers_only=True)
        if s.endswith(("._bridge.apiserver_unreachable", "._bridge.apiserver_reachable"))
    ]
    return "apiserver_unreachable" in told and told[-1] == "apiserver_reachable"


async def checkpoint(
    nats_url: str, key: str = "test.all", bucket: str = "k8s_event_bridge"
) -> int | None:
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().key_value(bucket)
        try:
            e = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return int(msgspec.json.decode(e.value)["resourceVersion"])
    finally:
        await nc.close()


def watch_requests(sim: SimApiServer) -> list[Any]:
    """The watch requests the simulated API server saw (kubernetes_asyncio sends ``True``)."""
    return [r for r in sim.requests if r.query.get("watch", "").lower() in ("true", "1")]


async def all_of(url: str, ids: list[str], timeout: float = 40) -> list[str]:
    """Wait until the stream holds at least as many Event messages as ``ids``; return them.
    JetStream's 503 (a cluster whose meta leader is still being elected, as after a quorum
    lost and regained: the stream may be current before it) is "not yet" too."""

    async def check() -> list[str] | None:
        have = await event_ids(url)
        return have if len(have) >= len(ids) else None

    result: list[str] = await eventually(
        check, timeout=timeout, retry_on=(*RETRIABLE, ServiceUnavailableError)
    )
    return result


async def count_at_least(url: str, n: int) -> bool:
    return len(await event_ids(url)) >= n


async def logged(bridge: BridgeProcess, event: str) -> bool:
    return any(e.get("event") == event for e in bridge.log_events())


async def metric_at_least(bridge: BridgeProcess, name: str, n: float) -> bool:
    return await bridge.metric(name) >= n


async def readyz(bridge: BridgeProcess, code: int, word: str = "") -> bool:
    status, text = await bridge.get("/readyz")
    return status == code and word in text
