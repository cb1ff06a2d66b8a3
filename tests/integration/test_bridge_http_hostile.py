"""The bridge's HTTP port against hostile clients, as a real process with the file limit a
container gets (tests/hostile_http.py, the kit every program's port is tested with)."""

from __future__ import annotations

import pytest

from tests.hostile_http import NOFILE, idle_flood, nofile_1024, nofile_limit, peak_fds, probe
from tests.integration.harness import Bridges, bridge_config, eventually

pytestmark = pytest.mark.integration

FLOOD = 1100  # more connections than the process may open files


async def test_1100_idle_half_heads_at_a_1024_file_limit_leave_the_probes_answering_and_are_closed(
    tmp_path, sim, nats_server, kubeconfig
):
    """Peers that send half a request head and wait, more of them than the bridge may hold
    files: a new client's /healthz and /readyz are answered while they are held, the bridge's
    open files stay under its limit, and it closes every one of them (evicted by the
    connection cap, or cut off by the head timeout)."""
    bridges = Bridges(tmp_path)
    bridge = bridges.start(
        bridge_config(tmp_path, nats_server.url, kubeconfig), preexec_fn=nofile_1024
    )
    try:
        await bridge.wait_ready()
        assert bridge.proc is not None
        pid = bridge.proc.pid
        assert nofile_limit(pid) == NOFILE
        async with peak_fds(pid) as peak:
            flood = await idle_flood("127.0.0.1", bridge.port, FLOOD)
            try:
                assert flood.opened == FLOOD, f"{flood.failed} connections not even opened"
                for path, body in (("/healthz", b"ok\n"), ("/readyz", b"ready\n")):
                    answer = await eventually(
                        lambda path=path: probe("127.0.0.1", bridge.port, path),
                        30,
                        retry_on=(TimeoutError, OSError),
                        what=f"{path} answered beside the flood",
                    )
                    assert answer == (200, body), path
                await eventually(
                    lambda: flood.closed() == flood.opened,
                    60,
                    what="every flood connection closed by the bridge",
                )
            finally:
                await flood.close()
        assert peak.value < NOFILE, f"the bridge reached {peak.value} open files"
        assert bridge.running(), bridge.logs()[-3000:]
        assert (await probe("127.0.0.1", bridge.port, "/readyz"))[0] == 200
    finally:
        bridges.kill_all()
