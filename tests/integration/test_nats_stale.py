"""A server that hangs with its socket open (SIGSTOP: the kernel still takes bytes until the
buffers are full, nothing answers), the connection holding unsent data to it: the shared
connection counts it stale after ``ping_interval * (max_outstanding_pings + 1)`` without a byte
read, aborts the socket (nats-py would wait for it to close, for ever: nats-io/nats.py#671) and
takes the next server. Fast and alone; tests/integration/test_nats_hung_node.py does it to a
3-node cluster under the bridge's load."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from k8s_event_common.connecting import Connection
from k8s_event_common.options import NatsOptions
from k8s_event_sim.natsserver import NatsServer
from tests.integration.harness import eventually

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("ping_interval", [1.0, 2.0])
async def test_a_hung_server_with_unsent_data_is_left_for_the_next_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, ping_interval: float
) -> None:
    hung = NatsServer(store_dir=str(tmp_path / "a"), jetstream=False).start()
    other = NatsServer(store_dir=str(tmp_path / "b"), jetstream=False).start()
    frozen = False
    try:
        opts = NatsOptions(
            servers=[hung.url, other.url],
            dont_randomize=True,
            ping_interval=ping_interval,
            max_outstanding_pings=2,
            connect_timeout=1,
        )
        conn = Connection(opts, logger="test.nats")
        nc = await conn.connect()
        assert nc.connected_url is not None and nc.connected_url.port == hung.port
        assert hung.proc is not None
        os.kill(hung.proc.pid, signal.SIGSTOP)
        frozen = True
        t0 = time.monotonic()
        # unsent data: more than the socket buffers take, to a peer that reads nothing
        chunk = b"x" * 60_000
        with caplog.at_level(logging.INFO, logger="test.nats"):
            for _ in range(200):
                await nc.publish("load", chunk)

            async def moved() -> bool:
                url: Any = nc.connected_url
                return bool(nc.is_connected and url is not None and url.port == other.port)

            await eventually(moved, timeout=10 * opts.stale_after)
        took = time.monotonic() - t0
        stale = [r for r in caplog.records if r.getMessage() == "nats_stale"]
        assert stale, [r.getMessage() for r in caplog.records]
        # stale once nothing was read for stale_after; then a reconnect (one connect_timeout
        # at most, if the hung server is tried first, and nats-py's reconnect_time_wait)
        assert (
            took <= opts.stale_after + 2 * opts.connect_timeout + 2 * opts.reconnect_time_wait + 2
        )
        await nc.flush(timeout=5)  # the connection works
        print(f"\nping {ping_interval}s: left the hung server after {took:.1f}s")
        await conn.close()
    finally:
        if frozen and hung.proc is not None:
            os.kill(hung.proc.pid, signal.SIGCONT)
        hung.cleanup()
        other.cleanup()
