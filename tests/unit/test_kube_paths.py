"""Every path the bridge sends to the API server comes from ``k8s_event_common.kube.paths``:
a namespace or a name that is not a Kubernetes name never reaches the wire, a valid one goes
out byte for byte as before, a configured one is refused at load (no path is written by hand
anywhere in ``bridge/``: tests/unit/test_kube_paths_by_hand.py)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bridge import errors, settings
from bridge.app import Bridge
from bridge.core.enrichment import object_path
from bridge.core.resources import EVENTS, NAMESPACES
from bridge.errors import EXIT_CONFIG, ConfigError
from bridge.kube import client
from bridge.kube.client import KubeClient, lease_namespace
from bridge.settings import KubernetesSettings
from k8s_event_sim.kubeconfig import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]

# what a namespace, a watched namespace or a Lease's name might be made to hold
HOSTILE = ["..", "../kube-system", "../../secrets/x", "x%2Fy", "a/b", "%2e%2e", "Ops", "a?b=1"]


class Recorder:
    """An API server that answers anything with one harmless object and records each
    request's method and raw path (its query too) as it arrived."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _any(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.raw_path))
        doc = {"metadata": {"name": "x", "uid": "u", "resourceVersion": "7"}, "items": []}
        return web.json_response(doc, status=201 if request.method == "POST" else 200)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Recorder, KubeClient]]:
    server = Recorder()
    await server.start()
    config = write_kubeconfig(tmp_path / "kubeconfig", server.url, token="t")
    kube = KubeClient(KubernetesSettings(kubeconfig=str(config)))
    await kube.connect()
    try:
        yield server, kube
    finally:
        await kube.close()
        await server.stop()


def _lease(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7"}, "spec": {}}


async def _watch(kube: KubeClient, namespace: str | None) -> None:
    async with kube.watch(
        EVENTS, namespace, resource_version="7", timeout_seconds=1, skipped=lambda *a: None
    ) as batches:
        async for _ in batches:
            pass


def _calls(kube: KubeClient, bad: str) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    return [
        ("get_lease namespace", lambda: kube.get_lease(bad, "k8s-event-bridge")),
        ("get_lease name", lambda: kube.get_lease("ops", bad)),
        ("create_lease namespace", lambda: kube.create_lease(bad, _lease("k8s-event-bridge"))),
        ("replace_lease namespace", lambda: kube.replace_lease(bad, _lease("k8s-event-bridge"))),
        ("replace_lease name", lambda: kube.replace_lease("ops", _lease(bad))),
        ("list_page namespace", lambda: kube.list_page(EVENTS, bad, limit=5)),
        ("watch namespace", lambda: _watch(kube, bad)),
    ]


@pytest.mark.parametrize("bad", HOSTILE)
async def test_a_namespace_or_lease_name_that_is_not_a_kubernetes_name_never_reaches_the_wire(
    api: tuple[Recorder, KubeClient], bad: str
) -> None:
    server, kube = api
    for what, call in _calls(kube, bad):
        with pytest.raises(errors.Invalid):
            await call()
        assert server.seen == [], what


async def test_an_empty_lease_name_is_not_the_collection(api: tuple[Recorder, KubeClient]) -> None:
    """``object_path`` with no name is the collection's path: a Lease's read or write with an
    empty name would list or write the namespace's Leases."""
    server, kube = api
    with pytest.raises(errors.Invalid):
        await kube.get_lease("ops", "")
    with pytest.raises(errors.Invalid):
        await kube.replace_lease("ops", _lease(""))
    assert server.seen == []


async def test_valid_names_go_out_byte_for_byte_as_before(api: tuple[Recorder, KubeClient]) -> None:
    server, kube = api
    await kube.get_lease("ops", "k8s-event-bridge")
    await kube.create_lease("ops", _lease("k8s-event-bridge"))
    await kube.replace_lease("ops", _lease("k8s-event-bridge.v2"))
    assert await kube.cluster_uid() == "u"
    await kube.list_page(EVENTS, None, limit=5)
    await kube.list_page(EVENTS, "shop", limit=5, cont="c", resource_version="0")
    await kube.list_page(NAMESPACES, None, limit=1)
    await kube.list_page(NAMESPACES, "shop", limit=1)  # cluster-scoped: the namespace is moot
    await _watch(kube, "shop")
    await _watch(kube, None)
    await kube.get_object(object_path(("Pod", "shop", "web-1")))
    await kube.get_object(object_path(("Deployment", "shop", "web")))
    await kube.get_object(object_path(("Node", "", "n1.example")))
    lease = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"
    watch = "watch=True&allowWatchBookmarks=True&resourceVersion=7&timeoutSeconds=1"
    assert server.seen == [
        ("GET", f"{lease}/k8s-event-bridge"),
        ("POST", lease),
        ("PUT", f"{lease}/k8s-event-bridge.v2"),
        ("GET", "/api/v1/namespaces/kube-system"),
        ("GET", "/api/v1/events?limit=5"),
        ("GET", "/api/v1/namespaces/shop/events?limit=5&continue=c&resourceVersion=0"),
        ("GET", "/api/v1/namespaces?limit=1"),
        ("GET", "/api/v1/namespaces?limit=1"),
        ("GET", f"/api/v1/namespaces/shop/events?{watch}"),
        ("GET", f"/api/v1/events?{watch}"),
        ("GET", "/api/v1/namespaces/shop/pods/web-1"),
        ("GET", "/apis/apps/v1/namespaces/shop/deployments/web"),
        ("GET", "/api/v1/nodes/n1.example"),
    ]


# -- what is configured: refused at load, naming the key -----------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("kubernetes: {namespaces: [shop, '../kube-system']}\n", "kubernetes.namespaces"),
        ("kubernetes: {namespaces: ['sh%2Fop']}\n", "kubernetes.namespaces"),
        ("kubernetes: {namespaces: ['']}\n", "kubernetes.namespaces"),
        ("leader_election: {enabled: true, lease_name: '../x'}\n", "leader_election.lease_name"),
        ("leader_election: {lease_name: 'a%2Fb'}\n", "leader_election.lease_name"),
        ("leader_election: {lease_name: ''}\n", "leader_election.lease_name"),
        ("leader_election: {namespace: '..'}\n", "leader_election.namespace"),
        ("leader_election: {namespace: 'kube-system/x'}\n", "leader_election.namespace"),
    ],
)
def test_a_configured_namespace_or_lease_name_that_is_not_a_kubernetes_name_is_a_config_error(
    tmp_path: Path, yaml_text: str, key: str
) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=re.escape(key)):
        settings.load(str(path))


def test_the_lease_namespace_found_in_the_pod_is_checked_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "pod_namespace", lambda: "ops-sa")
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert lease_namespace("ops") == "ops"  # configured (checked at load) wins
    assert lease_namespace(None) == "ops-sa"
    monkeypatch.setenv("POD_NAMESPACE", "ops-env")
    assert lease_namespace(None) == "ops-env"
    monkeypatch.setenv("POD_NAMESPACE", "../kube-system")
    with pytest.raises(ConfigError, match=r"leader_election\.namespace.*\$POD_NAMESPACE"):
        lease_namespace(None)
    monkeypatch.delenv("POD_NAMESPACE")
    monkeypatch.setattr(client, "pod_namespace", lambda: "a%2Fb")
    with pytest.raises(ConfigError, match=r"leader_election\.namespace.*service account"):
        lease_namespace(None)
    monkeypatch.setattr(client, "pod_namespace", lambda: None)
    assert lease_namespace(None) == "default"


async def test_a_bad_lease_namespace_from_the_pod_exits_2_before_anything_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Lease's namespace is known before NATS is dialled: a bad one is exit code 2 at
    once, not a standby that asks the API server for it every retry period."""
    server = Recorder()
    await server.start()
    monkeypatch.setenv("POD_NAMESPACE", "..")
    config = write_kubeconfig(tmp_path / "kubeconfig", server.url, token="t")
    s = settings.Settings.model_validate(
        {
            "kubernetes": {"kubeconfig": str(config)},
            "nats": {"servers": ["nats://127.0.0.1:1"]},  # never reached
            "http": {"host": "127.0.0.1", "port": 0},
            "leader_election": {"enabled": True},
        }
    )
    try:
        # at once: were it read only when standing by, NATS (never there) would come first
        assert await asyncio.wait_for(Bridge(s).run(), 10) == EXIT_CONFIG
    finally:
        await server.stop()
    assert server.seen == []
