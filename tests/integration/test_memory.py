"""What a running bridge holds in memory: none of kubernetes_asyncio's generated client.

Its model and API packages are ~35 MB, more than the rest of the bridge;
``k8s_event_common.kube.lean`` keeps them from being imported and ``bridge.kube.client`` calls
its six paths without them.
This checks the running process, not an import: after a start, a list, a watch, a Lease taken
and renewed, a 410 and its relist, and a clean stop, the modules it had loaded are read back.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.integration.harness import count_at_least
from tests.support import Workload, eventually, write_kubeconfig

# Run in the bridge's process before its CLI: at its exit, what it had loaded.
PRELUDE = """
import atexit, json, os, sys

def _loaded():
    def ran(name, marker):  # a lazy package's __init__ ran if the name it defines is there
        module = sys.modules.get(name)
        return module is not None and marker in vars(module)

    with open(os.environ["LOADED_OUT"], "w") as out:
        json.dump({
            "modules": sorted(m for m in sys.modules if m.startswith(
                ("kubernetes_asyncio", "urllib3", "dateutil", "multiprocessing", "aiohttp.web"))),
            "models_init_ran": ran("kubernetes_asyncio.client.models", "V1Pod"),
            "api_init_ran": ran("kubernetes_asyncio.client.api", "CoreV1Api"),
            "client_init_ran": ran("kubernetes_asyncio.client", "V1Pod"),
        }, out)

atexit.register(_loaded)
"""


@pytest.mark.integration
async def test_a_running_bridge_loads_none_of_the_generated_client(
    tmp_path, leasing_sim, nats_server
):
    from tests.integration.harness import Bridges, bridge_config

    sim = leasing_sim
    work = Workload(sim, seed=3)
    for _ in range(50):
        work.create(reason="BackOff", type="Warning")
    config = bridge_config(
        tmp_path,
        nats_server.url,
        write_kubeconfig(tmp_path / "kubeconfig", sim.url),
        leader_election={
            "enabled": True,
            "identity": "a",
            "namespace": "bridge",
            "lease_duration": "2s",
            "renew_deadline": "1500ms",
            "retry_period": "200ms",
        },
    )
    out = tmp_path / "loaded.json"
    bridges = Bridges(tmp_path)
    try:
        bridge = bridges.start(config, env={"LOADED_OUT": str(out)}, prelude=PRELUDE)
        await bridge.wait_ready()
        await eventually(lambda: count_at_least(nats_server.url, 50), 30, what="the list")
        for _ in range(50):
            work.create(reason="BackOff", type="Warning")
        await eventually(lambda: count_at_least(nats_server.url, 100), 30, what="the watch")
        renewed = sim.lease_rv
        await eventually(lambda: sim.lease_rv >= renewed + 2, 30, what="Lease renewals")
        # a 410: the watch ends, the history it would resume from is compacted
        sim.close_watches()
        for _ in range(20):
            work.create(reason="BackOff", type="Warning")
        sim.compact()
        await eventually(
            lambda: any(e.get("relist") for e in bridge.log_events("listed")),
            30,
            what="a relist after a 410",
        )
        bridge.signal(signal.SIGTERM)
        assert await bridge.wait_exit() == 0
    finally:
        bridges.kill_all()
    loaded = json.loads(out.read_text())
    generated = [
        m
        for m in loaded["modules"]
        if m.startswith(("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api."))
    ]
    assert generated == []
    assert not loaded["models_init_ran"]
    assert not loaded["api_init_ran"]
    assert not loaded["client_init_ran"]
    # what kubernetes_asyncio imports but the bridge never uses, and aiohttp's server
    unused = ("urllib3", "dateutil", "multiprocessing", "aiohttp.web")
    assert [m for m in loaded["modules"] if m.startswith(unused)] == []


@pytest.mark.integration
async def test_a_silent_jetstream_with_large_events_stays_within_the_bound():
    """The worst case, proven (bench/silence.py, shorter): the nats-server hangs (SIGSTOP)
    while Events of ~48 KB keep coming; once the bridge's window is held and its queue full,
    10 s more of silence and writes. Its RSS stays under the bound computed from its
    configuration (bench/budget.py), and after the thaw every Event is in the stream once."""
    import argparse

    from bench import silence

    result = await silence.run(argparse.Namespace(seconds=10.0, event_kb=48, rate=100.0))
    assert result["missing"] == 0 and result["duplicates"] == 0, result["written"]
    assert result["max_queue_bytes"] > 0
    assert result["max_rss_mb"] <= result["bound_mb"], result["budget"]
