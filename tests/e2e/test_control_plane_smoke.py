"""The e2e control plane itself works: real Events, lists, watches, bookmarks, 410, deploy/ RBAC
(the Lease included)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config

from bridge import errors
from bridge.core.leases import claimed, lease_object
from bridge.kube.client import KubeClient
from bridge.runtime.leading import Elector
from bridge.settings import KubernetesSettings, LeaderElectionSettings
from tests.standins.controlplane import ControlPlane
from tests.support import eventually, eventually_sync

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NS = "e2e-smoke"
BRIDGE_SA = "system:serviceaccount:k8s-event-bridge:k8s-event-bridge"


def event_manifest(name: str, namespace: str = NS, reason: str = "Smoke") -> str:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "web-0",
                "namespace": namespace,
            },
            "reason": reason,
            "message": f"{name} from the e2e smoke test",
            "type": "Warning",
            "source": {"component": "e2e-smoke"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
    )


def ensure_namespace(cp: ControlPlane, name: str = NS) -> None:
    cp.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )


def create_event(cp: ControlPlane, name: str, namespace: str = NS) -> dict[str, Any]:
    out = cp.kubectl("create", "-o", "json", "-f", "-", input=event_manifest(name, namespace))
    return json.loads(out.stdout)  # type: ignore[no-any-return]


async def watch_lines(
    cp: ControlPlane, path: str, *, stop_after: float, until: str | None = None
) -> tuple[int, list[dict[str, Any]], float | None]:
    """Open a watch; collect its lines until the server ends it, ``stop_after`` seconds pass
    or a line of type ``until`` arrives. Returns (status, lines, seconds to the ``until`` line)."""
    lines: list[dict[str, Any]] = []
    seen_at = None
    t0 = time.monotonic()
    connector = aiohttp.TCPConnector(ssl=cp.ssl_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"{cp.url}{path}") as resp:
            status = resp.status
            if status != 200:
                return status, [json.loads(await resp.read())], None
            try:
                async with asyncio.timeout(stop_after):
                    async for raw in resp.content:
                        if not raw.strip():
                            continue
                        ev = json.loads(raw)
                        lines.append(ev)
                        if until and ev.get("type") == until:
                            seen_at = time.monotonic() - t0
                            break
            except TimeoutError:
                pass
            resp.close()
    # Let the SSL transports finish closing before the test's event loop goes away (aiohttp's
    # graceful-shutdown advice); otherwise an unclosed-transport warning can fail a teardown.
    await asyncio.sleep(0.1)
    return status, lines, seen_at


async def test_event_created_through_the_api_is_listed(control_plane: ControlPlane) -> None:
    ensure_namespace(control_plane)
    created = create_event(control_plane, "smoke-create")
    assert created["metadata"]["resourceVersion"]

    cfg = client.Configuration()
    await config.load_kube_config(
        config_file=str(control_plane.kubeconfig), client_configuration=cfg
    )
    async with client.ApiClient(configuration=cfg) as api_client:
        events = await client.CoreV1Api(api_client).list_namespaced_event(NS)
    by_name = {e.metadata.name: e for e in events.items}
    assert "smoke-create" in by_name
    ev = by_name["smoke-create"]
    assert ev.reason == "Smoke"
    assert ev.type == "Warning"
    assert ev.involved_object.name == "web-0"
    assert int(events.metadata.resource_version) >= int(created["metadata"]["resourceVersion"])


@pytest.fixture(scope="module")
def cached_events_plane(control_plane_factory: Any) -> ControlPlane:
    """A second control plane whose apiserver has a watch cache for events."""
    cp: ControlPlane = control_plane_factory(events_watch_cache=True)
    ensure_namespace(cp)
    return cp


def watch_path(rv: int | str, timeout: int, bookmarks: bool = True) -> str:
    return (
        f"/api/v1/namespaces/{NS}/events?watch=1&resourceVersion={rv}&timeoutSeconds={timeout}"
        + ("&allowWatchBookmarks=true" if bookmarks else "")
    )


async def test_default_events_watch_gets_no_periodic_bookmark(control_plane: ControlPlane) -> None:
    # kube-apiserver has no watch cache for events by default: watches go to etcd, which sends
    # no bookmarks; not even the one 2 s before the deadline that the watch cache would send.
    ensure_namespace(control_plane)
    rv = create_event(control_plane, "smoke-nobookmark")["metadata"]["resourceVersion"]
    status, lines, after = await watch_lines(
        control_plane, watch_path(rv, 4), stop_after=10, until="BOOKMARK"
    )
    assert status == 200
    assert after is None and lines == [], lines
    # Only the initial-events-end bookmark after the initial state of a resourceVersion=0 watch.
    status, lines, after = await watch_lines(
        control_plane, watch_path(0, 4), stop_after=10, until="BOOKMARK"
    )
    assert after is not None, lines
    annotations = lines[-1]["object"]["metadata"].get("annotations", {})
    assert annotations.get("k8s.io/initial-events-end") == "true"


async def test_events_watch_cache_sends_a_bookmark_before_the_deadline(
    cached_events_plane: ControlPlane,
) -> None:
    # The watch cache sends bookmarks about every minute and 2 s before the watch deadline. As
    # observed here, only once the cache has seen an event newer than the watch's start RV: a
    # watch from the newest RV on a quiet namespace got none within its 6 s.
    cp = cached_events_plane
    rv = create_event(cp, "cached-bookmark")["metadata"]["resourceVersion"]
    watch = asyncio.create_task(watch_lines(cp, watch_path(rv, 5), stop_after=15, until="BOOKMARK"))
    await asyncio.sleep(0.5)
    newer = await asyncio.to_thread(create_event, cp, "cached-bookmark-2")
    status, lines, after = await watch
    assert status == 200
    assert after is not None, f"no BOOKMARK in {lines}"
    assert after < 5
    bookmark = lines[-1]
    assert bookmark["object"]["kind"] == "Event"
    assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(
        newer["metadata"]["resourceVersion"]
    )


def assert_single_410(lines: list[dict[str, Any]]) -> None:
    assert len(lines) == 1, lines
    assert lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["kind"] == "Status"
    assert lines[0]["object"]["code"] == 410
    assert lines[0]["object"]["reason"] == "Expired"


async def test_default_compaction_gives_410_at_once(control_plane: ControlPlane) -> None:
    ensure_namespace(control_plane)
    old_rv = int(create_event(control_plane, "smoke-old")["metadata"]["resourceVersion"])
    create_event(control_plane, "smoke-newer")
    # Before compaction the watch from old_rv replays what came after it.
    status, lines, _ = await watch_lines(control_plane, watch_path(old_rv, 1), stop_after=10)
    assert [ln["object"]["metadata"]["name"] for ln in lines if ln["type"] == "ADDED"] == [
        "smoke-newer"
    ]
    # A watch from old_rv starts at old_rv + 1, which etcd keeps if compacted exactly there.
    control_plane.bump_revision()
    control_plane.compact()
    status, lines, _ = await watch_lines(control_plane, watch_path(old_rv, 5), stop_after=10)
    assert status == 200  # the 410 is a line inside an HTTP 200 watch stream
    assert_single_410(lines)
    status, body = control_plane.request(
        "GET", f"/api/v1/namespaces/{NS}/events?resourceVersion={old_rv}&resourceVersionMatch=Exact"
    )
    assert status == 410, body
    # A relist works and still has the events.
    status, body = control_plane.request("GET", f"/api/v1/namespaces/{NS}/events")
    names = {i["metadata"]["name"] for i in json.loads(body)["items"]}
    assert {"smoke-old", "smoke-newer"} <= names


async def test_make_too_old_on_the_default_plane(control_plane: ControlPlane) -> None:
    ensure_namespace(control_plane)
    rv = int(create_event(control_plane, "smoke-too-old")["metadata"]["resourceVersion"])
    control_plane.make_too_old(rv)
    status, lines, _ = await watch_lines(control_plane, watch_path(rv, 5), stop_after=10)
    assert status == 200
    assert_single_410(lines)


async def test_watch_cache_hides_compaction_until_make_too_old(
    cached_events_plane: ControlPlane,
) -> None:
    cp = cached_events_plane
    old_rv = int(create_event(cp, "cached-old")["metadata"]["resourceVersion"])
    create_event(cp, "cached-newer")
    cp.compact()
    # etcd has compacted old_rv, but the watch cache still replays it from memory.
    status, lines, _ = await watch_lines(cp, watch_path(old_rv, 2, bookmarks=False), stop_after=10)
    assert status == 200
    assert [ln["object"]["metadata"]["name"] for ln in lines if ln["type"] == "ADDED"] == [
        "cached-newer"
    ]
    cp.make_too_old(old_rv)
    status, lines, _ = await watch_lines(cp, watch_path(old_rv, 5), stop_after=10)
    assert status == 200
    assert_single_410(lines)


def test_apiserver_and_etcd_restart_keep_the_data(control_plane: ControlPlane) -> None:
    ensure_namespace(control_plane)
    create_event(control_plane, "smoke-restart")
    control_plane.stop_apiserver()
    assert control_plane.kubectl("get", "ns", check=False, timeout=20).returncode != 0
    control_plane.stop_etcd()
    control_plane.start_etcd()
    seconds = control_plane.start_apiserver()
    assert seconds < 60
    out = control_plane.kubectl("get", "events", "-n", NS, "smoke-restart", "-o", "name")
    assert out.stdout.strip() == "event/smoke-restart"


def test_short_event_ttl_on_a_second_apiserver(control_plane: ControlPlane) -> None:
    ensure_namespace(control_plane)
    short = control_plane.add_apiserver(event_ttl="3s")
    try:
        short.kubectl("create", "-f", "-", input=event_manifest("smoke-ttl"))
        assert (
            control_plane.kubectl("get", "event", "-n", NS, "smoke-ttl", check=False).returncode
            == 0
        )
        eventually_sync(
            lambda: (
                control_plane.kubectl("get", "event", "-n", NS, "smoke-ttl", check=False).returncode
            ),
            30,
            0.5,
            what="an Event written with --event-ttl=3s gone",
            retry_on=(),
        )
    finally:
        short.stop()


def can_i(cp: ControlPlane, *args: str) -> bool:
    """``kubectl auth can-i`` as the bridge's ServiceAccount."""
    p = cp.kubectl("auth", "can-i", f"--as={BRIDGE_SA}", *args, check=False)
    assert p.stdout.strip() in ("yes", "no"), p
    return p.stdout.strip() == "yes"


def test_deploy_manifests_pass_server_side_dry_run(control_plane: ControlPlane) -> None:
    # Namespaced objects need their namespace to exist for the server to admit them.
    control_plane.kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"))
    out = control_plane.kubectl("apply", "--dry-run=server", "-k", str(DEPLOY))
    # "poddisruptionbudget.policy/k8s-event-bridge created (server dry run)": kind/name
    admitted = set()
    for line in out.stdout.splitlines():
        kind, name = line.split()[0].split("/", 1)
        admitted.add(f"{kind.split('.')[0]}/{name}")
    assert admitted == {
        "namespace/k8s-event-bridge",
        "serviceaccount/k8s-event-bridge",
        "clusterrole/k8s-event-bridge",
        "clusterrolebinding/k8s-event-bridge",
        "role/k8s-event-bridge-leader-election",
        "rolebinding/k8s-event-bridge-leader-election",
        "configmap/k8s-event-bridge",
        "deployment/k8s-event-bridge",
        "poddisruptionbudget/k8s-event-bridge",
        "service/k8s-event-bridge",
    }, out.stdout
    for manifest in sorted(DEPLOY.glob("*.yaml")):
        if manifest.name == "kustomization.yaml":
            continue
        control_plane.kubectl("apply", "--dry-run=server", "-f", str(manifest))


async def test_deploy_rbac_allows_exactly_what_the_bridge_needs(
    control_plane: ControlPlane,
) -> None:
    control_plane.kubectl("apply", "-k", str(DEPLOY))

    def can(*args: str) -> bool:
        return can_i(control_plane, *args)

    assert can("list", "events", "--all-namespaces")
    assert can("watch", "events", "--all-namespaces")
    assert can("get", "namespace/kube-system")
    assert not can("get", "namespace/default")
    assert not can("list", "secrets", "--all-namespaces")
    assert not can("list", "secrets", "-n", "k8s-event-bridge")
    assert not can("create", "events", "-n", "default")

    # The same identity for real, with a TokenRequest token.
    kubeconfig = control_plane.service_account_kubeconfig("k8s-event-bridge", "k8s-event-bridge")
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(configuration=cfg) as api_client:
        v1 = client.CoreV1Api(api_client)
        events = await v1.list_event_for_all_namespaces(limit=5)
        assert events.metadata.resource_version
        ns = await v1.read_namespace("kube-system")
        assert ns.metadata.uid
        with pytest.raises(client.ApiException) as denied:
            await v1.list_secret_for_all_namespaces()
        assert denied.value.status == 403


async def test_deploy_rbac_allows_the_lease_only_in_its_own_namespace(
    control_plane: ControlPlane,
) -> None:
    control_plane.kubectl("apply", "-k", str(DEPLOY))

    def can(*args: str) -> bool:
        return can_i(control_plane, *args)

    own = ("-n", "k8s-event-bridge")
    assert can("get", "leases.coordination.k8s.io/k8s-event-bridge", *own)
    assert can("update", "leases.coordination.k8s.io/k8s-event-bridge", *own)
    assert can("create", "leases.coordination.k8s.io", *own)
    # not another Lease by name, not another namespace, nothing the election does not use
    assert not can("get", "leases.coordination.k8s.io/kube-controller-manager", *own)
    assert not can("update", "leases.coordination.k8s.io/kube-controller-manager", *own)
    assert not can("delete", "leases.coordination.k8s.io/k8s-event-bridge", *own)
    assert not can("patch", "leases.coordination.k8s.io/k8s-event-bridge", *own)
    assert not can("list", "leases.coordination.k8s.io", *own)
    assert not can("watch", "leases.coordination.k8s.io", *own)
    for other in ("default", "kube-system"):
        assert not can("create", "leases.coordination.k8s.io", "-n", other)
        assert not can("get", "leases.coordination.k8s.io/k8s-event-bridge", "-n", other)
        assert not can("update", "leases.coordination.k8s.io/k8s-event-bridge", "-n", other)

    # The bridge's own elector, for real, with a TokenRequest token of that ServiceAccount:
    # it creates the Lease, renews it (get + update) and releases it (get + update).
    kubeconfig = control_plane.service_account_kubeconfig("k8s-event-bridge", "k8s-event-bridge")
    kube = KubeClient(KubernetesSettings(kubeconfig=str(kubeconfig)))
    await kube.connect()
    try:
        settings = LeaderElectionSettings(enabled=True)
        elector = Elector(kube, settings, identity="e2e-rbac", namespace="k8s-event-bridge")
        async with asyncio.timeout(30):
            await elector.acquire()
            taken_at = elector.renewed_at
            hold = asyncio.create_task(elector.hold())
            await eventually(lambda: elector.renewed_at != taken_at or hold.done(), 30)
            hold.cancel()
            await asyncio.gather(hold, return_exceptions=True)
            assert elector.leading and elector.renewed_at != taken_at  # renewed
            await elector.release()
        lease = json.loads(
            control_plane.kubectl(
                "get", "lease", "k8s-event-bridge", "-n", "k8s-event-bridge", "-o", "json"
            ).stdout
        )
        assert lease["spec"].get("holderIdentity", "") == ""  # released
        with pytest.raises(errors.Forbidden):
            record = claimed(None, "e2e-rbac", 15, time.time())
            await kube.create_lease(
                "default", lease_object("k8s-event-bridge", "default", record, None)
            )
    finally:
        await kube.close()
        control_plane.kubectl(
            "delete", "lease", "k8s-event-bridge", "-n", "k8s-event-bridge", "--ignore-not-found"
        )
