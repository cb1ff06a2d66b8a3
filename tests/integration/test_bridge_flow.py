"""The whole bridge process between the simulated API server and a real nats-server."""

import asyncio
import signal
from datetime import UTC, datetime

import msgspec
import pytest
from cloudevents.core.formats.json import JSONFormat

from tests.integration.harness import (
    Writer,
    all_of,
    checkpoint,
    count_at_least,
    event_ids,
    eventually,
    logged,
    readyz,
    status_events,
    stream_messages,
    watch_requests,
)
from tests.streams import k8s_events

pytestmark = pytest.mark.integration


async def test_events_reach_the_stream_once_per_version_as_cloudevents(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    await w.write(40, bump_ratio=0.0)  # exist before the bridge starts: published by the list
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(160, bump_ratio=0.4)

    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)
    for subject, headers, body in await stream_messages(nats_server.url):
        ce = JSONFormat().read(None, body)
        assert headers["Nats-Msg-Id"] == ce.get_id()
        if "._bridge." in subject:
            continue
        data = ce.get_data()
        assert ce.get_id() == f"{data['metadata']['uid']}/{data['metadata']['resourceVersion']}"
        ns, kind, reason = subject.split(".")[3:6]
        assert (ns, kind, reason) == (
            data["metadata"]["namespace"],
            data["involvedObject"]["kind"],
            data["reason"],
        )
        assert "managedFields" not in data["metadata"]
    started = await status_events(nats_server.url, "started")
    assert len(started) == 1
    assert await bridge.metric("events_published") >= len(w.ids)


async def test_sigterm_drains_saves_checkpoint_and_exits_0(sim, nats_server, run_bridge):
    w = Writer(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(300, rate=3000)
    bridge.signal(signal.SIGTERM)  # while events are still being read and published
    assert await bridge.wait_exit() == 0
    stopped = [e for e in bridge.log_events() if e.get("event") == "stopped"]
    assert stopped and stopped[0]["drained"] is True
    cp = await checkpoint(nats_server.url)
    assert cp is not None
    ids = set(await event_ids(nats_server.url))
    read = [i for i in w.ids if _rv(i) <= cp]
    assert read and set(read) <= ids, "SIGTERM lost events that were read"
    assert len(await status_events(nats_server.url, "stopped")) == 1
    # the restart resumes exactly at the checkpoint: only newer versions are read again
    again = run_bridge()
    await again.wait_ready()
    await eventually(lambda: count_at_least(nats_server.url, len(w.ids)))
    assert await again.metric("events_received") == len([i for i in w.ids if _rv(i) > cp])
    final = await event_ids(nats_server.url)
    assert sorted(final) == sorted(w.ids)


def _rv(msg_id):
    return int(msg_id.rsplit("/", 1)[1])


async def test_sigkill_while_events_flow_then_restart_loses_and_duplicates_nothing(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(200, rate=1000)
    await eventually(lambda: count_at_least(nats_server.url, 50))
    bridge.kill()  # SIGKILL mid-flow: nothing drained, nothing saved at the end
    await w.write(300, rate=2000, bump_ratio=0.5)  # written while the bridge is down
    again = run_bridge()
    await again.wait_ready()
    await w.write(100, rate=1000)

    ids = await all_of(nats_server.url, w.ids)
    assert len(ids) == len(set(ids)), "duplicates in the stream"
    assert sorted(ids) == sorted(w.ids)
    assert any(
        e.get("event") == "scope_started" and e.get("resource_version") for e in again.log_events()
    ), "restart did not resume from the checkpoint"


async def test_second_signal_exits_at_once(sim, nats_server, run_bridge):
    bridge = run_bridge(shutdown={"drain_timeout": "60s"})
    await bridge.wait_ready()
    nats_server.kill()  # nothing can be acked: the drain would wait 60 s
    Writer(sim).create()
    bridge.signal(signal.SIGTERM)
    await eventually(lambda: logged(bridge, "stop_requested"), timeout=5)
    bridge.signal(signal.SIGINT)
    code = await bridge.wait_exit(timeout=10)  # far less than the 60 s drain
    assert code == 128 + signal.SIGINT


async def test_readyz_and_metrics(sim, nats_server, run_bridge):
    bridge = run_bridge()
    await bridge.wait_ready()
    status, text = await bridge.get("/healthz")
    assert status == 200
    _, metrics = await bridge.get("/metrics")
    for name in (
        "events_received",
        "events_filtered",
        "events_published",
        "publish_failures",
        "messages_dropped",
        "queue_max_messages",
        "publish_oldest_wait_seconds",
        "leader",
        "scope_synced",
        "watch_failing_seconds",
        "build_info",
        "publish_latency_seconds",
        "watch_restarts",
        "relists",
        "queue_depth",
        "checkpoint_age_seconds",
        "nats_connected",
        "apiserver_reachable",
    ):
        assert f"k8s_event_bridge_{name}" in metrics
    assert "process_resident_memory_bytes" in metrics
    assert await bridge.metric("leader") == 1  # no leader election: it runs alone
    assert await bridge.metric("scope_synced", 'scope="*"') == 1
    nats_server.kill()
    await eventually(lambda: readyz(bridge, 503), timeout=15)
    _, text = await bridge.get("/readyz")
    assert "NATS" in text
    nats_server.start()
    await eventually(lambda: readyz(bridge, 200), timeout=15)


def _ce(body):
    return msgspec.json.decode(body)


async def test_tail_prints_one_readable_line_per_event(sim, nats_server, run_bridge, tmp_path):

    w = Writer(sim)
    w.create(reason="OOMKilling", message="Memory cgroup out of memory: Killed process 42")
    await w.write(9, bump_ratio=0.0)
    bridge = run_bridge()
    await bridge.wait_ready()
    await eventually(lambda: count_at_least(nats_server.url, 10))
    code, out, err = await run_tail(
        nats_server.url, "--all", "--count", "11", "--subject", "k8s.events.>"
    )
    assert code == 0, err.decode()
    lines = out.decode().splitlines()
    assert len(lines) == 11  # 10 events and the "started" status event
    oom = [ln for ln in lines if "Killed process 42" in ln]
    assert len(oom) == 1 and "OOMKilling" in oom[0] and " x1 " in oom[0]
    assert any("STARTED" in ln for ln in lines)


async def test_event_ttl_expiry_is_published_as_deleted_when_asked(
    tmp_path, nats_server, run_bridge
):
    from k8s_event_sim.apiserver import SimApiServer
    from tests.integration.harness import bridge_config, write_kubeconfig

    sim = SimApiServer(event_ttl=0.5)
    await sim.start()
    try:
        kc = write_kubeconfig(tmp_path / "kc-ttl", sim.url)
        cfg = bridge_config(tmp_path, nats_server.url, kc, filter={"include_deleted": True})
        bridge = run_bridge(config=cfg)
        await bridge.wait_ready()
        obj = Writer(sim).create()
        uid = obj["metadata"]["uid"]

        async def created_and_deleted():
            ids = [i for i in await event_ids(nats_server.url) if i.startswith(uid)]
            return len(ids) == 2

        await eventually(created_and_deleted, timeout=15)
        assert sim.get_event(obj["metadata"]["namespace"], obj["metadata"]["name"]) is None
    finally:
        await sim.stop()


async def test_bridge_started_before_nats_waits_and_then_flows(sim, nats_server, run_bridge):
    nats_server.kill()
    w = Writer(sim)
    await w.write(20, bump_ratio=0.0)
    bridge = run_bridge()
    await eventually(lambda: logged(bridge, "http_listening"), timeout=10)
    status, _ = await bridge.get("/readyz")
    assert status == 503
    nats_server.start()
    await bridge.wait_ready(timeout=30)
    await eventually(lambda: count_at_least(nats_server.url, 20))
    assert sorted(await event_ids(nats_server.url)) == sorted(w.ids)


async def test_namespaced_scopes_watch_each_namespace_with_its_own_checkpoint(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    bridge = run_bridge(kubernetes={"namespaces": ["shop", "payments"]})
    await bridge.wait_ready()
    wanted = []
    for i in range(60):
        ns = ("shop", "payments", "default")[i % 3]
        obj = w.create(namespace=ns)
        if ns != "default":
            wanted.append(f"{obj['metadata']['uid']}/{obj['metadata']['resourceVersion']}")
    await eventually(lambda: count_at_least(nats_server.url, len(wanted)))
    top = sim.resource_version

    async def both_saved():
        a = await checkpoint(nats_server.url, "test.ns.shop")
        b = await checkpoint(nats_server.url, "test.ns.payments")
        return a is not None and b is not None and a >= top - 3 and b >= top - 3

    await eventually(both_saved)
    assert sorted(await event_ids(nats_server.url)) == sorted(wanted)
    paths = {r.path for r in watch_requests(sim)}
    assert paths == {"/api/v1/namespaces/shop/events", "/api/v1/namespaces/payments/events"}


async def test_a_scope_without_permission_keeps_the_bridge_not_ready_by_name(
    sim, nats_server, run_bridge
):
    """Two namespaces, RBAC for one: the allowed scope publishes, but the bridge is not ready
    (one scope never synced), /readyz and /status say which and why; once the permission is
    granted the scope syncs and the bridge is ready."""
    sim.faults.forbidden_namespaces = {"payments"}
    w = Writer(sim)
    bridge = run_bridge(kubernetes={"namespaces": ["shop", "payments"]})
    await eventually(lambda: logged(bridge, "kube_permission_denied"), timeout=20)
    wanted = [w.create(namespace="shop") for _ in range(10)]
    ids = [f"{o['metadata']['uid']}/{o['metadata']['resourceVersion']}" for o in wanted]
    await all_of(nats_server.url, ids)
    status, text = await bridge.get("/readyz")
    assert status == 503 and "scope payments" in text and "forbidden" in text
    assert "scope shop" not in text
    _, body = await bridge.get("/status")
    doc = msgspec.json.decode(body)
    assert doc["ready"] is False
    shop, payments = doc["scopes"]["shop"], doc["scopes"]["payments"]
    assert shop["synced"] and shop["state"] == "watching" and shop["last_error"] == ""
    assert not payments["synced"] and "Forbidden" in payments["last_error"]
    assert doc["nats"]["connected"] is True
    sim.faults.forbidden_namespaces.clear()  # the Role is granted
    await bridge.wait_ready(timeout=30)
    _, body = await bridge.get("/status")
    doc = msgspec.json.decode(body)
    assert doc["ready"] is True and doc["scopes"]["payments"]["synced"]
    inner = doc["internals"]  # what a soak run samples
    assert inner["asyncio_tasks"] > 0 and inner["publisher_pending"] >= 0
    assert {"progress_entries:shop", "progress_entries:payments", "subject_cache"} <= set(inner)


async def test_a_stream_of_other_replicas_exits_1_with_the_reason(sim, nats_server, run_bridge):
    """A stream the bridge can not use at start-up (here: made by someone else as R1, the
    bridge configured for R3) ends the bridge with a message naming the key, rather than
    retrying for ever or running on it."""
    import nats as nats_client

    nc = await nats_client.connect(nats_server.url)
    await nc.jetstream().add_stream(k8s_events())
    await nc.close()
    bridge = run_bridge(nats={"num_replicas": 3})
    assert await bridge.wait_exit(timeout=30) == 1
    unusable = [e for e in bridge.log_events() if e.get("event") == "stream_unusable"]
    assert len(unusable) == 1, bridge.logs()[-2000:]
    assert "num_replicas=1 (wanted 3)" in unusable[0]["error"]
    differs = [e["key"] for e in bridge.log_events() if e.get("event") == "stream_config_differs"]
    assert differs == ["num_replicas"]


async def test_binary_mode_messages_parse_with_the_sdk(sim, nats_server, run_bridge):
    from cloudevents.core.bindings.http import HTTPMessage, from_binary

    w = Writer(sim)
    bridge = run_bridge(cloudevents={"mode": "binary"})
    await bridge.wait_ready()
    await w.write(30)
    await eventually(lambda: count_at_least(nats_server.url, len(w.ids)))
    seen = 0
    for subject, headers, body in await stream_messages(nats_server.url):
        assert "ce-specversion" in headers and headers["Content-Type"] == "application/json"
        ce = from_binary(
            HTTPMessage({k: v for k, v in headers.items() if k != "Nats-Msg-Id"}, body),
            JSONFormat(),
        )
        assert ce.get_id() == headers["Nats-Msg-Id"]
        if "._bridge." not in subject:
            seen += 1
            data = ce.get_data()
            assert ce.get_extension("k8sreason") == data["reason"]
    assert seen == len(w.ids)


async def test_tail_filters_by_namespace_reason_kind_type_and_time_in_json_and_colour(
    sim, nats_server, run_bridge
):
    w = Writer(sim)
    w.create(namespace="shop", reason="OOMKilling", kind="Pod", type="Warning")
    w.create(namespace="shop", reason="Pulled", type="Normal")
    w.create(namespace="pay", reason="OOMKilling", kind="Pod", type="Warning")
    bridge = run_bridge()
    await bridge.wait_ready()
    await eventually(lambda: count_at_least(nats_server.url, 3))

    async def first_ones(n, *args):
        start = () if "--since" in args else ("--all",)
        code, out, err = await run_tail(nats_server.url, *start, "--count", str(n), *args)
        assert code == 0, err.decode()
        return [msgspec.json.decode(ln) for ln in out.decode().splitlines()]

    got = await first_ones(1, "--json", "--namespace", "pay")
    assert [(c["k8snamespace"], c["k8sreason"]) for c in got] == [("pay", "OOMKilling")]
    assert got[0]["data"]["reason"] == "OOMKilling" and got[0]["specversion"] == "1.0"
    got = await first_ones(2, "--json", "--reason", "OOMKilling")
    assert sorted(c["k8snamespace"] for c in got) == ["pay", "shop"]
    got = await first_ones(1, "--json", "--type", "Normal")
    assert [c["k8sreason"] for c in got] == ["Pulled"]
    got = await first_ones(
        2,
        "--json",
        "--namespace",
        "shop",
        "--namespace",
        "pay",
        "--type",
        "warning",
        "--kind",
        "Pod",
    )
    assert sorted(c["k8snamespace"] for c in got) == ["pay", "shop"]
    # colour: Warning lines yellow, the bridge's own status events ("started", the scope's first
    # answer "apiserver_reachable") cyan, Normal plain
    code, out, _ = await run_tail(nats_server.url, "--all", "--count", "5", "--color", "always")
    lines = out.decode().splitlines()
    assert sum(ln.startswith("\033[33m") for ln in lines) == 2
    assert sum(ln.startswith("\033[36m") and "STARTED" in ln for ln in lines) == 1
    assert sum(ln.startswith("\033[36m") and "APISERVERREACHABLE" in ln for ln in lines) == 1
    assert sum("Pulled" in ln and "\033" not in ln for ln in lines) == 1
    code, out, _ = await run_tail(nats_server.url, "--all", "--count", "5")
    assert b"\033" not in out  # auto: not a terminal
    # --since: only what the stream received from then on
    await asyncio.sleep(1.5)
    since = datetime.now(UTC).isoformat()
    w.create(namespace="web", reason="BackOff", type="Warning")
    got = await first_ones(1, "--json", "--since", since)
    assert [(c["k8snamespace"], c["k8sreason"]) for c in got] == [("web", "BackOff")]
    got = await first_ones(5, "--json", "--since", "1h")
    assert len(got) == 5  # 4 Events and "started"
    code, _, err = await run_tail(nats_server.url, "--since", "yesterday")
    assert code == 2 and b"--since 'yesterday'" in err


async def test_tail_without_a_stream_says_so(nats_server):

    code, _, err = await run_tail(nats_server.url, "--count", "1")
    assert code == 1 and b"no stream K8S_EVENTS" in err


async def run_tail(nats_url, *args):
    """``k8s-event-bridge tail ARGS`` against ``nats_url``: (exit code, stdout, stderr)."""
    import asyncio
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "tail",
        *args,
        env={"BRIDGE_NATS__SERVERS": f'["{nats_url}"]', "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode, out, err
