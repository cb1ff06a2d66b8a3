"""The bridge against a real kube-apiserver + etcd, under the RBAC of deploy/.

What the real server does that the simulated one only imitates: the watch cache (bookmarks,
410 after a restart or compaction), RBAC, TokenRequest tokens, merge-patch count bumps,
field selectors. See controlplane.py for what was learnt about the watch cache.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from k8s_event_sim.tcpproxy import LatencyProxy
from tests.e2e.writer import ApiWriter
from tests.integration.harness import (
    BridgeProcess,
    Bridges,
    bridge_config,
    checkpoint,
    event_ids,
    eventually,
    logged,
    metric_at_least,
    outage_ended,
    readyz,
    status_events,
    stream_messages,
)
from tests.standins.controlplane import BRIDGE_NAMESPACE, ControlPlane

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SA_NAMESPACE = BRIDGE_NAMESPACE
_ns = itertools.count(1)


@pytest.fixture(scope="session")
def bridge_kubeconfig(control_plane: ControlPlane) -> Path:
    """deploy/ applied to the real API server; a token for its ServiceAccount."""
    return control_plane.deployed_bridge_kubeconfig()


@pytest.fixture
def namespace() -> str:
    return f"e2e-{next(_ns)}"


@pytest.fixture
async def writer(control_plane: ControlPlane, namespace: str):
    async with ApiWriter(control_plane.url, control_plane.ssl_context(), namespace) as w:
        await w.ensure_namespace()
        yield w


@pytest.fixture
def start_bridge(tmp_path, nats_server, bridge_kubeconfig, namespace):
    """Bridge processes under the deploy/ identity, publishing this test's namespace."""
    bridges = Bridges(tmp_path)

    def start(kubeconfig: Path | None = None, **sections: Any) -> BridgeProcess:
        sections.setdefault("filter", {})
        sections["filter"].setdefault("namespaces", [namespace])
        # the real watch cache sends a bookmark about once a minute: read past that
        sections.setdefault("kubernetes", {})
        sections["kubernetes"].setdefault("read_timeout", "90s")
        sections.setdefault("cluster", {"name": None})  # the cluster id from kube-system
        cfg = bridge_config(tmp_path, nats_server.url, kubeconfig or bridge_kubeconfig, **sections)
        return bridges.start(cfg)

    yield start
    bridges.kill_all()


def through(proxy: LatencyProxy, kubeconfig: Path, tmp_path: Path) -> Path:
    """A copy of ``kubeconfig`` that reaches the API server through ``proxy``."""
    import yaml

    doc = yaml.safe_load(kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = proxy.url
    proxied = tmp_path / "proxied.kubeconfig"
    proxied.write_text(yaml.safe_dump(doc))
    return proxied


async def stream_has(url: str, ids: list[str]) -> bool:
    return set(ids) <= set(await event_ids(url))


async def assert_stream_is(url: str, ids: list[str], timeout: float = 60) -> None:
    try:
        await eventually(lambda: stream_has(url, ids), timeout=timeout)
    except AssertionError:
        missing = sorted(set(ids) - set(await event_ids(url)), key=lambda i: int(i.split("/")[1]))
        raise AssertionError(f"{len(missing)} of {len(ids)} versions missing: {missing}") from None
    got = await event_ids(url)
    assert len(got) == len(set(got)), "duplicates in the stream"
    assert sorted(got) == sorted(ids)


async def test_events_and_count_bumps_reach_the_stream_once_per_version(
    control_plane, writer, start_bridge, nats_server, namespace
):
    await writer.write(10, bump_ratio=0.0)  # exist before the bridge: the first list
    bridge = start_bridge()
    await bridge.wait_ready(timeout=60)
    await writer.write(40, bump_ratio=0.5)
    await assert_stream_is(nats_server.url, writer.ids)
    kube_system = msgspec.json.decode(
        control_plane.kubectl("get", "namespace", "kube-system", "-o", "json").stdout
    )["metadata"]["uid"]
    for subject, headers, body in await stream_messages(nats_server.url):
        ce = msgspec.json.decode(body)
        assert ce["id"] == headers["Nats-Msg-Id"]
        assert ce["k8scluster"] == kube_system  # cluster.name unset: kube-system's uid
        if "._bridge." in subject:
            continue
        data = ce["data"]
        assert ce["id"] == f"{data['metadata']['uid']}/{data['metadata']['resourceVersion']}"
        assert ce["source"] == f"k8s://{kube_system}/namespaces/{namespace}"
        assert ce["subject"] == f"Pod/{data['involvedObject']['name']}"
        assert ce["k8scount"] == data["count"]
        assert ce["time"] == data["lastTimestamp"]
        assert ce["type"] == f"io.k8s.event.{data['type'].lower()}"
        assert "managedFields" not in data["metadata"]
        assert subject == f"k8s.events.{kube_system}.{namespace}.Pod.{data['reason']}"
    bumped = [n for n, c in writer.counts.items() if c > 1]
    assert bumped, "the workload bumped no count"


async def test_apiserver_outage_while_a_second_apiserver_writes_loses_nothing(
    control_plane, writer, start_bridge, nats_server
):
    """The degradation this project exists for: the bridge's apiserver dies, the cluster goes
    on writing Events and bumping counts through another apiserver on the same etcd, the
    apiserver comes back. Event watches are served from etcd (no watch cache for Events by
    default), so the resume gets every version written meanwhile: nothing lost, no gap."""
    second = control_plane.add_apiserver()
    try:
        bridge = start_bridge()
        await bridge.wait_ready(timeout=60)
        await writer.write(20)
        await eventually(lambda: stream_has(nats_server.url, writer.ids), timeout=60)
        before = list(writer.ids)
        control_plane.stop_apiserver()
        writer.retarget(second.url)
        await writer.write(30, bump_ratio=0.4)
        # subscribers keep reading what was published while the control plane is away
        assert set(before) <= set(await event_ids(nats_server.url))
        await eventually(lambda: metric_at_least(bridge, "watch_restarts", 1), timeout=30)
        await eventually(lambda: readyz(bridge, 503, "watch"), timeout=30)
        control_plane.start_apiserver()
        writer.retarget(control_plane.url)
        await writer.write(10, bump_ratio=0.4)
        await assert_stream_is(nats_server.url, writer.ids, timeout=90)
        assert await status_events(nats_server.url, "gap") == []
        await eventually(lambda: outage_ended(nats_server.url), timeout=30)
    finally:
        second.stop()
        control_plane.extra_apiservers.remove(second)


async def test_outage_with_an_events_watch_cache_relists_and_reports_the_gap(
    control_plane_factory, tmp_path, nats_server
):
    """With a watch cache for Events, a restarted apiserver's cache starts at etcd's current
    revision and answers 410 to the bridge's older resourceVersion although etcd still has the
    history. The relist brings the newest version of every Event; count bumps that only lived
    during the outage are no longer served by the API, and one gap event says so."""
    cp = control_plane_factory(events_watch_cache=True)
    kubeconfig = cp.deployed_bridge_kubeconfig()
    second = cp.add_apiserver()
    async with ApiWriter(cp.url, cp.ssl_context(), "outage") as w:
        await w.ensure_namespace()
        cfg = bridge_config(
            tmp_path, nats_server.url, kubeconfig, kubernetes={"read_timeout": "90s"}
        )
        bridge = BridgeProcess(cfg, tmp_path / "bridge.log").start()
        try:
            await bridge.wait_ready(timeout=60)
            await w.write(20)
            await eventually(lambda: stream_has(nats_server.url, w.ids), timeout=60)
            before = list(w.ids)
            cp.stop_apiserver()
            w.retarget(second.url)
            await w.write(30, bump_ratio=0.5)
            cp.start_apiserver()
            newest = list(w.latest.values())
            await eventually(lambda: stream_has(nats_server.url, before + newest), timeout=90)
            got = await event_ids(nats_server.url)
            assert len(got) == len(set(got)), "duplicates after the relist"
            gaps = await status_events(nats_server.url, "gap")
            assert len(gaps) == 1
            assert await logged(bridge, "resource_version_expired")
        finally:
            bridge.kill()


async def test_compaction_while_stopped_gives_410_relist_and_one_gap(
    control_plane, writer, start_bridge, nats_server
):
    bridge = start_bridge()
    await bridge.wait_ready(timeout=60)
    await writer.write(20, bump_ratio=0.0)
    await eventually(lambda: stream_has(nats_server.url, writer.ids), timeout=60)
    before = set(await event_ids(nats_server.url))
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit() == 0
    cp_rv = await checkpoint(nats_server.url, _key(control_plane))
    assert cp_rv is not None
    await writer.write(30, bump_ratio=0.6)
    control_plane.make_too_old(cp_rv)
    again = start_bridge()
    await again.wait_ready(timeout=90)
    newest = set(writer.latest.values())
    await eventually(lambda: stream_has(nats_server.url, list(newest)), timeout=60)
    got = await event_ids(nats_server.url)
    assert len(got) == len(set(got)), "duplicates after the relist"
    assert before <= set(got)
    gaps = await status_events(nats_server.url, "gap")
    assert len(gaps) == 1 and gaps[0]["data"]["fromResourceVersion"] == str(cp_rv)
    assert await logged(again, "resource_version_expired")


def _key(cp: ControlPlane) -> str:
    uid = msgspec.json.decode(cp.kubectl("get", "namespace", "kube-system", "-o", "json").stdout)
    return f"{uid['metadata']['uid']}.all"


async def test_type_warning_field_selector_is_accepted_by_the_real_server(
    control_plane, writer, start_bridge, nats_server
):
    bridge = start_bridge(filter={"types": ["Warning"]})
    await bridge.wait_ready(timeout=60)
    await writer.write(30, bump_ratio=0.2)
    warnings = [
        i
        for i, name in zip(writer.ids, _names_of(writer), strict=True)
        if writer.types[name] == "Warning"
    ]
    await assert_stream_is(nats_server.url, warnings)
    watch_lines = [e for e in bridge.log_events() if e.get("event") == "scope_started"]
    assert watch_lines and "type=Warning" in watch_lines[0]["field_selector"]


def _names_of(writer: ApiWriter) -> list[str]:
    """The Event name of each recorded version, in order: the first version of each uid is
    its create, and creates are recorded in ``writer.names`` order."""
    order = iter(writer.names)
    uid_name: dict[str, str] = {}
    names = []
    for mid in writer.ids:
        uid = mid.split("/")[0]
        if uid not in uid_name:
            uid_name[uid] = next(order)
        names.append(uid_name[uid])
    return names


async def test_bookmarks_from_the_watch_cache_advance_the_checkpoint(
    control_plane_factory, tmp_path, nats_server
):
    """With an events watch cache (``--watch-cache-sizes=events#N``; off by default, when
    Event watches go to etcd and carry no bookmarks) the cache's bookmarks move the checkpoint
    though nothing matches the filter: a restart needs no relist."""
    cp = control_plane_factory(events_watch_cache=True)
    kubeconfig = cp.deployed_bridge_kubeconfig()
    # short watches: the cache sends a bookmark 2 s before each deadline (and about once a
    # minute), once it has seen an Event newer than the watch's start
    cfg = bridge_config(
        tmp_path,
        nats_server.url,
        kubeconfig,
        filter={"reasons": ["NeverHappens"]},
        kubernetes={"watch_timeout_min": "5s", "watch_timeout_max": "6s", "read_timeout": "90s"},
    )
    bridge = BridgeProcess(cfg, tmp_path / "bridge.log").start()
    try:
        await bridge.wait_ready(timeout=60)
        async with ApiWriter(cp.url, cp.ssl_context(), "bookmarks") as w:
            await w.ensure_namespace()
            await w.write(15, bump_ratio=0.3)
        top = int(w.ids[-1].split("/")[1])

        async def advanced() -> bool:
            rv = await checkpoint(nats_server.url)
            return rv is not None and rv >= top

        await eventually(advanced, timeout=40)
        assert await event_ids(nats_server.url) == []
        assert await bridge.metric("relists") == 0
    finally:
        bridge.kill()


async def test_missing_permission_is_one_clear_log_line_and_a_metric_not_a_crash(
    control_plane, tmp_path, start_bridge, nats_server
):
    control_plane.kubectl("create", "serviceaccount", "no-rbac", "-n", SA_NAMESPACE, check=False)
    kubeconfig = control_plane.service_account_kubeconfig(SA_NAMESPACE, "no-rbac")
    bridge = start_bridge(kubeconfig=kubeconfig, cluster={"name": "e2e"})
    await eventually(lambda: metric_at_least(bridge, "kube_auth_failures", 2), timeout=30)
    assert bridge.proc is not None and bridge.proc.poll() is None  # backing off, not exiting
    denied = [e for e in bridge.log_events() if e.get("event") == "kube_permission_denied"]
    assert len(denied) == 1, "one line, not one per retry"
    assert denied[0]["status"] == 403 and "list and watch on events" in denied[0]["needs"]
    status, _ = await bridge.get("/readyz")
    assert status == 503


async def test_restarted_many_times_under_a_steady_rate_stream_equals_truth(
    control_plane, writer, start_bridge, nats_server
):
    stop = asyncio.Event()

    async def steady() -> None:
        while not stop.is_set():
            await writer.write(5, rate=40, bump_ratio=0.4)

    load: asyncio.Task[None] | None = None
    try:
        for i in range(6):
            bridge = start_bridge()
            await bridge.wait_ready(timeout=60)
            if load is None:  # after the first list: every version from here on counts
                load = asyncio.create_task(steady())
            await asyncio.sleep(1.0)
            if i % 2:
                bridge.kill()  # SIGKILL
            else:
                bridge.signal(signal.SIGTERM)
                assert await bridge.wait_exit() == 0
    finally:
        stop.set()
        if load is not None:
            await load
    last = start_bridge()
    await last.wait_ready(timeout=60)
    await assert_stream_is(nats_server.url, writer.ids, timeout=90)
    assert await status_events(nats_server.url, "gap") == []


async def test_a_quiet_watch_without_bookmarks_is_not_an_outage(
    control_plane, writer, start_bridge, nats_server
):
    """The real server sends nothing at all on a quiet Event watch (served from etcd: no
    bookmarks). Several read timeouts go by as normal closes: no warning, no
    apiserver_unreachable, still ready; what is written afterwards arrives once."""
    await writer.write(3, bump_ratio=0.0)
    bridge = start_bridge(kubernetes={"read_timeout": "2s"})
    await bridge.wait_ready(timeout=60)
    await assert_stream_is(nats_server.url, writer.ids)

    async def quiet_restarts() -> bool:
        return await bridge.metric("watch_restarts", 'cause="quiet"') >= 3

    await eventually(quiet_restarts, timeout=30)
    assert await bridge.metric("watch_restarts", 'cause="error"') == 0
    assert await status_events(nats_server.url, "apiserver_unreachable") == []
    watching = [e for e in bridge.log_events() if e.get("logger") == "bridge.watching"]
    assert [e for e in watching if e.get("level") in ("warning", "error")] == []
    assert await readyz(bridge, 200)
    await writer.write(10, bump_ratio=0.5)
    await assert_stream_is(nats_server.url, writer.ids)


async def test_a_quiet_scope_compacted_while_watched_relists_without_a_gap(
    control_plane, writer, start_bridge, nats_server
):
    """The default apiserver serves Event watches from etcd: no bookmarks, so a filter that
    matches nothing leaves the resourceVersion behind, and etcd's compaction makes the next
    watch a 410. The bridge watched all along (a watch shows deletions too), and the relist
    shows nothing newer that matches: nothing was missed, no gap event."""
    narrow = {"reasons": ["NeverHappens"]}
    bridge = start_bridge(filter=dict(narrow), kubernetes={"read_timeout": "2s"})
    await bridge.wait_ready(timeout=60)
    await writer.write(10, bump_ratio=0.3)  # none of it matches
    control_plane.compact()  # the bridge's resourceVersion is now history

    await eventually(lambda: logged(bridge, "relisted_nothing_missed"), timeout=30)
    assert await status_events(nats_server.url, "gap") == []
    assert await event_ids(nats_server.url) == []
    assert await readyz(bridge, 200)


async def test_events_deleted_while_the_bridge_was_away_make_a_possible_gap(
    control_plane, writer, start_bridge, nats_server
):
    """Events written and deleted while the bridge was stopped (a namespace deleted, a
    person's kubectl delete), then compaction: the relist lists nothing newer, which proves
    nothing, since a list never shows what was deleted. A gap event says so ("possible")
    rather than the bridge claiming nothing was missed."""
    bridge = start_bridge()
    await bridge.wait_ready(timeout=60)
    await writer.write(3, bump_ratio=0.0)
    await assert_stream_is(nats_server.url, writer.ids)
    kept = list(writer.ids)
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit() == 0
    cp_rv = await checkpoint(nats_server.url, _key(control_plane))
    assert cp_rv is not None
    gone = [(await writer.create())["metadata"]["name"] for _ in range(5)]
    for name in gone:
        await writer.delete(name)
    control_plane.make_too_old(cp_rv)
    again = start_bridge()
    await again.wait_ready(timeout=90)

    async def gap_events() -> list[dict[str, Any]]:
        return await status_events(nats_server.url, "gap")

    await eventually(gap_events, timeout=30)
    (gap,) = await gap_events()
    assert gap["data"]["certainty"] == "possible", gap["data"]
    assert "not watching" in gap["data"]["why"]
    assert int(gap["data"]["fromResourceVersion"]) == cp_rv
    assert await event_ids(nats_server.url) == kept  # the deleted ones are nowhere to be had
    assert not await logged(again, "relisted_nothing_missed")


async def test_a_slow_api_server_opens_the_breaker_and_holds_relists_until_it_recovers(
    control_plane, writer, start_bridge, nats_server, bridge_kubeconfig, tmp_path
):
    """The real kube-apiserver behind a TCP proxy that adds 2 s to everything it sends
    (sim/k8s_event_sim/tcpproxy.py). Watch opens get slow; the breaker opens on latency
    (`apiserver_degraded`). The history is then compacted away: the 410 comes, but no relist
    while the breaker is open, only cheap probes. The latency goes; a probe is answered in
    time (`apiserver_recovered`), the relist follows and what was written meanwhile arrives."""
    proxy = await LatencyProxy("127.0.0.1", control_plane.apiserver.port).start()
    try:
        proxied = through(proxy, bridge_kubeconfig, tmp_path)
        bridge = start_bridge(
            kubeconfig=proxied,
            kubernetes={
                "read_timeout": "10s",
                # the default: a new connection's TLS handshake takes the proxy's 2 s as well;
                # the harness's 2 s made a probe on a new connection time out, never answered
                "connect_timeout": "10s",
                # the server ends each watch after 1-2 s: a request, and a sample, each time
                "watch_timeout_min": "1s",
                "watch_timeout_max": "2s",
                "breaker": {"latency_p95": "1s", "latency_samples": 3},
            },
        )
        await bridge.wait_ready(timeout=60)
        await writer.write(3, bump_ratio=0.0)
        await assert_stream_is(nats_server.url, writer.ids)
        assert await bridge.metric("apiserver_breaker_state") == 0

        proxy.delay = 2.0
        degraded = await eventually(
            lambda: status_events(nats_server.url, "apiserver_degraded"), timeout=60
        )
        assert degraded[0]["data"]["reason"] == "latency", degraded[0]["data"]
        assert "p95" in degraded[0]["data"]["detail"]
        _, body = await bridge.get("/status")
        (scope,) = msgspec.json.decode(body)["scopes"].values()
        assert scope["breaker"]["state"] in ("open", "half_open")

        # the history after the bridge's resourceVersion goes; the next watch gets 410
        control_plane.bump_revision()
        control_plane.bump_revision()
        control_plane.compact()
        await eventually(lambda: logged(bridge, "resource_version_expired"), timeout=60)
        await writer.write(4, bump_ratio=0.0)  # only a relist can bring these now
        await asyncio.sleep(8)  # a few probe steps
        assert await bridge.metric("relists") == 0, "a relist while the breaker was open"
        assert await logged(bridge, "apiserver_probed")
        assert await bridge.metric("apiserver_breaker_state") >= 1

        proxy.delay = 0.0
        recovered = await eventually(
            lambda: status_events(nats_server.url, "apiserver_recovered"), timeout=90
        )
        assert recovered[0]["data"]["degradedForSeconds"] > 0
        await assert_stream_is(nats_server.url, writer.ids, timeout=90)
        assert await bridge.metric("relists", 'cause="expired"') == 1
        assert await bridge.metric("apiserver_breaker_state") == 0
        (gap,) = await status_events(nats_server.url, "gap")
        assert gap["data"]["certainty"] == "likely"  # the four were listed as new
    finally:
        await proxy.stop()


# -- two replicas, one Lease -------------------------------------------------------------------

ELECTION = {"enabled": True, "namespace": SA_NAMESPACE}  # client-go's 15 s / 10 s / 2 s


async def _role(bridge: BridgeProcess) -> str:
    _, body = await bridge.get("/status")
    return str(msgspec.json.decode(body)["role"])


def _logged_at(bridge: BridgeProcess, event: str) -> float | None:
    """When the bridge first logged ``event`` (epoch seconds), or None."""
    from datetime import datetime

    for e in bridge.log_events():
        if e.get("event") == event:
            return datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() + 0.0
    return None


async def _pair(start_bridge, **sections: Any) -> tuple[BridgeProcess, BridgeProcess]:
    """Two replicas under deploy/'s identity; returns (leader, standby), both ready."""
    a = start_bridge(leader_election={**ELECTION, "identity": "bridge-a"}, **sections)
    await a.wait_ready(timeout=60)
    await eventually(lambda: logged(a, "leading"), timeout=60)
    b = start_bridge(leader_election={**ELECTION, "identity": "bridge-b"}, **sections)
    await b.wait_ready(timeout=60)  # a warm standby is ready
    assert (await _role(a), await _role(b)) == ("leader", "standby")
    # what K8sEventBridgeNoLeader sums (deploy/monitoring/)
    assert (await a.metric("leader"), await b.metric("leader")) == (1, 0)
    return a, b


async def _leader_changed(url: str, identity: str) -> dict[str, Any]:
    """The one ``leader_changed`` status event ``identity`` published."""
    (changed,) = [
        e for e in await status_events(url, "leader_changed") if e["data"]["identity"] == identity
    ]
    return changed


async def _under_load(writer, during) -> None:
    """Steady writes (20/s, a third of them count bumps) around ``during``."""
    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            await writer.write(5, rate=20, bump_ratio=0.3)

    task = asyncio.create_task(load())
    try:
        await asyncio.sleep(2)
        await during()
        await asyncio.sleep(2)
    finally:
        stop.set()
        await task


async def test_sigkill_of_the_leader_the_standby_takes_over_after_the_lease_expires(
    control_plane, writer, start_bridge, nats_server
):
    """The leader dies without a word: the standby waits out the Lease (15 s unrenewed, as it
    saw it), resumes from the checkpoint and the stream is the truth: every version once."""
    leader, standby = await _pair(start_bridge)
    killed_at = 0.0

    async def kill() -> None:
        nonlocal killed_at
        leader.proc.kill()  # type: ignore[union-attr]
        killed_at = time.time()
        await eventually(lambda: logged(standby, "leading"), timeout=60)

    await _under_load(writer, kill)
    await assert_stream_is(nats_server.url, writer.ids, timeout=90)
    took = _logged_at(standby, "leading")
    assert took is not None
    print(f"takeover after SIGKILL: {took - killed_at:.1f}s")
    assert took - killed_at > 10  # it waited for the Lease, not for nothing
    changed = await _leader_changed(nats_server.url, "bridge-b")
    assert changed["data"]["previousHolder"] == "bridge-a"
    assert await _role(standby) == "leader"
    assert await standby.metric("leader") == 1


async def test_sigterm_of_the_leader_hands_the_lease_over_at_once(
    control_plane, writer, start_bridge, nats_server
):
    """A clean stop drains, saves and releases the Lease: the standby takes it at its next
    attempt (a retry period, not a lease duration); nothing lost or duplicated."""
    leader, standby = await _pair(start_bridge)
    stopped_at = 0.0

    async def stop() -> None:
        nonlocal stopped_at
        leader.signal(signal.SIGTERM)
        assert await leader.wait_exit() == 0
        stopped_at = time.time()
        assert await logged(leader, "lease_released")
        await eventually(lambda: logged(standby, "leading"), timeout=30)

    await _under_load(writer, stop)
    await assert_stream_is(nats_server.url, writer.ids, timeout=90)
    took = _logged_at(standby, "leading")
    assert took is not None
    print(f"takeover after SIGTERM (from the old leader's exit): {took - stopped_at:.1f}s")
    changed = await _leader_changed(nats_server.url, "bridge-b")
    assert changed["data"]["previousHolder"] == ""  # released, not expired


async def test_a_leader_cut_off_from_the_api_server_steps_down_before_its_lease_passes(
    control_plane, writer, start_bridge, nats_server, bridge_kubeconfig, tmp_path
):
    """The leader reaches the API server through a proxy that stops forwarding (a
    partition: no reset, no answer). Its renewals hang; after renew_deadline it stops at once
    (exit 1, nothing more published, no checkpoint written) — before the standby may take
    the Lease; the standby takes over, and the stream is the truth."""
    proxy = await LatencyProxy("127.0.0.1", control_plane.apiserver.port).start()
    try:
        proxied = through(proxy, bridge_kubeconfig, tmp_path)
        leader = start_bridge(
            kubeconfig=proxied, leader_election={**ELECTION, "identity": "bridge-a"}
        )
        await leader.wait_ready(timeout=60)
        await eventually(lambda: logged(leader, "leading"), timeout=60)
        standby = start_bridge(leader_election={**ELECTION, "identity": "bridge-b"})
        await standby.wait_ready(timeout=60)

        async def partition() -> None:
            proxy.cut()
            assert await leader.wait_exit(timeout=40) == 1
            await eventually(lambda: logged(standby, "leading"), timeout=60)

        await _under_load(writer, partition)
        await assert_stream_is(nats_server.url, writer.ids, timeout=90)
        lost, fenced = _logged_at(leader, "leadership_lost"), _logged_at(leader, "stopped_fenced")
        took = _logged_at(standby, "leading")
        assert lost is not None and fenced is not None and took is not None
        print(f"cut off: stepped down {took - lost:.1f}s before the standby took over")
        assert fenced < took  # the old leader had stopped before the new one started
        assert not await logged(leader, "stopped")  # no drain, no final checkpoint
    finally:
        proxy.heal()
        await proxy.stop()


async def test_an_outage_that_fences_the_leader_ends_with_the_next_leaders_first_answer(
    control_plane, writer, start_bridge, nats_server
):
    """The API server stops for longer than renew_deadline: the leader tells
    ``apiserver_unreachable`` and is fenced (exit 1) before it is back. The standby, which never
    saw the outage, takes the Lease once the API server is back; its first answer is the
    ``apiserver_reachable`` that ends the outage in the stream, and nothing is lost."""
    leader, standby = await _pair(start_bridge)
    await writer.write(10)
    await assert_stream_is(nats_server.url, writer.ids, timeout=60)
    control_plane.stop_apiserver()
    try:
        await eventually(lambda: _told(nats_server.url, "apiserver_unreachable"), timeout=30)
        assert await leader.wait_exit(timeout=40) == 1
        assert await logged(leader, "stopped_fenced")
    finally:
        control_plane.start_apiserver()
    await eventually(lambda: logged(standby, "leading"), timeout=60)
    await writer.write(10)
    await assert_stream_is(nats_server.url, writer.ids, timeout=90)
    await eventually(lambda: outage_ended(nats_server.url), timeout=30)
    assert await standby.metric("apiserver_reachable") == 1


async def _told(url: str, what: str) -> bool:
    return bool(await status_events(url, what))
