"""The Kubernetes boundary without a server: credential reloads and the connection pool."""

import asyncio
import socket

import msgspec
import pytest
import yaml
from aiohttp import web

from bridge import errors
from bridge.core.resources import EVENTS, NAMESPACES
from bridge.kube import client
from bridge.kube.client import READ_BUFSIZE, KubeClient, keep_alive
from bridge.settings import KubernetesSettings


def kubeconfig(tmp_path, server="http://127.0.0.1:1"):
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return str(path)


async def serve_events(handler) -> tuple[web.AppRunner, int]:
    """An aiohttp server on a free loopback port answering /api/v1/events with ``handler``."""
    app = web.Application()
    app.router.add_get("/api/v1/events", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def test_reloads_by_several_scopes_at_once_build_one_client(tmp_path):
    kube = KubeClient(KubernetesSettings(kubeconfig=kubeconfig(tmp_path)))
    await kube.connect()
    first = kube.connection.client
    await kube.reload_credentials()  # right after a (re)load: another scope just did it
    assert kube.connection.client is first
    kube.connection.loaded_at -= 2.0
    await kube.reload_credentials()
    assert kube.connection.client is not first
    assert kube.connection.retired[0][1] is first  # not closed under the other scopes' watches
    await kube.close()
    assert first.rest_client.pool_manager.closed


@pytest.mark.parametrize("scopes", [0, 3])
async def test_retired_clients_are_at_most_one_per_scope(tmp_path, scopes):
    """A credential refused again and again reloads every back-off: the clients it retires
    are closed beyond one per scope, not held for RETIRE_AFTER."""
    namespaces = [f"ns{i}" for i in range(scopes)]
    kube = KubeClient(KubernetesSettings(kubeconfig=kubeconfig(tmp_path), namespaces=namespaces))
    await kube.connect()
    built = [kube.connection.client]
    for _ in range(10):
        kube.connection.loaded_at -= 2.0
        await kube.reload_credentials()
        built.append(kube.connection.client)
    keep = max(1, scopes)
    assert [c for _, c in kube.connection.retired] == built[-1 - keep : -1]
    assert all(c.rest_client.pool_manager.closed for c in built[: -1 - keep])
    await kube.close()


async def test_pool_has_a_connection_for_every_scope(tmp_path):
    namespaces = [f"ns{i}" for i in range(150)]
    kube = KubeClient(KubernetesSettings(kubeconfig=kubeconfig(tmp_path), namespaces=namespaces))
    await kube.connect()
    assert kube.connection.client.configuration.connection_pool_maxsize >= 150
    await kube.close()


async def test_a_fast_watch_is_handed_over_in_bounded_chunks(tmp_path):
    """kubernetes_asyncio's 2 MiB read buffer would let aiohttp hold 4 MiB of a watch and hand
    it over at once (~3,500 Events decoded together); the client keeps it near 128 KiB."""
    line = b'{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"},"pad":"' + b"x" * 1000
    line += b'"}}\n'

    async def watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(8):
            await resp.write(line * 1000)  # 8 x ~1 MB, as fast as the socket takes it
        return resp

    runner, port = await serve_events(watch)
    kube = KubeClient(
        KubernetesSettings(kubeconfig=kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    )
    await kube.connect()
    sizes, skipped = [], []
    try:
        async with kube.watch(
            EVENTS,
            None,
            resource_version="0",
            timeout_seconds=5,
            skipped=lambda *a: skipped.append(a),
        ) as stream:
            await asyncio.sleep(0.5)  # a busy bridge: the server has sent all it could
            async for entries in stream:  # each Event's bytes are its line's
                sizes.append(sum(len(ev.buf) for _, ev, _ in entries))
    finally:
        await kube.close()
        await runner.cleanup()
    assert skipped == []
    assert sum(sizes) == 8000 * (len(line) - 1)
    assert max(sizes) <= 4 * READ_BUFSIZE + 2**18, max(sizes)


async def test_a_quiet_watch_ends_as_quiet_on_a_socket_with_keepalive(tmp_path, monkeypatch):
    """A watch that sends nothing for read_timeout is QuietWatch (a normal close for the
    watcher), not KubeUnavailable; its socket probes the peer with TCP keepalive, so a dead
    connection is found as a failure within half the read timeout."""
    opened, done = asyncio.Event(), asyncio.Event()

    async def quiet_watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        opened.set()
        await done.wait()  # open and silent, as an Event watch with nothing new
        return resp

    runner, port = await serve_events(quiet_watch)
    settings = KubernetesSettings(
        kubeconfig=kubeconfig(tmp_path, f"http://127.0.0.1:{port}"), read_timeout="1.2s"
    )
    kube = KubeClient(settings)
    await kube.connect()
    options = {}

    def keep_alive_and_read_back(resp, read_timeout):
        keep_alive(resp, read_timeout)  # the real one, on the real socket
        sock = resp.connection.transport.get_extra_info("socket")
        for name in ("SO_KEEPALIVE", "TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT"):
            level = socket.SOL_SOCKET if name.startswith("SO_") else socket.IPPROTO_TCP
            options[name] = sock.getsockopt(level, getattr(socket, name))

    monkeypatch.setattr(client, "keep_alive", keep_alive_and_read_back)
    try:
        async with kube.watch(
            EVENTS, None, resource_version="5", timeout_seconds=300, skipped=lambda *a: None
        ) as stream:
            with pytest.raises(errors.QuietWatch):
                async for _ in stream:
                    pass
    finally:
        done.set()
        await kube.close()
        await runner.cleanup()
    assert opened.is_set()
    assert options == {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 1, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3}


def test_keepalive_options_follow_the_read_timeout():
    class Sock:
        def __init__(self):
            self.set = {}

        def setsockopt(self, level, option, value):
            self.set[option] = value

    class Transport:
        def __init__(self, sock):
            self.sock = sock

        def get_extra_info(self, name):
            return self.sock if name == "socket" else None

    class Conn:
        def __init__(self, transport):
            self.transport = transport

    class Resp:
        def __init__(self, conn):
            self.connection = conn

    sock = Sock()
    keep_alive(Resp(Conn(Transport(sock))), 120.0)
    assert sock.set[socket.SO_KEEPALIVE] == 1
    assert sock.set[socket.TCP_KEEPIDLE] == 30
    assert sock.set[socket.TCP_KEEPINTVL] == 10
    assert sock.set[socket.TCP_KEEPCNT] == 3
    assert sock.set[socket.TCP_USER_TIMEOUT] == 60_000  # dead in 60 s, before the 120 s
    keep_alive(Resp(None), 120.0)  # no connection: nothing to set, no error


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        ("0.5", 0.5),
        ("-3", 0.0),
        ("inf", None),
        ("nan", None),
        ("1e999", None),
        ("Wed, 21 Oct 2026 07:28:00 GMT", None),
        ("", None),
    ],
)
def test_a_retry_after_header_is_a_finite_number_of_seconds_or_nothing(header, seconds):
    exc = client.error_for_status(429, {"Retry-After": header}, b"")
    assert exc.retry_after == seconds


async def test_objects_and_namespaces_as_the_enrichment_reads_them(tmp_path, sim):
    """get_object, and the one list and watch for any resource with NAMESPACES, against the
    simulated API server: an object by its path, a missing one as NotFound, the Namespaces'
    list and their changes, each decoded by the resource's decoder; and the pool has room for
    the enrichment's reads."""
    sim.set_namespace("shop", {"team": "payments"})
    sim.put_object("/api/v1/namespaces/shop/pods/web", {"metadata": {"name": "web", "uid": "u"}})
    kube = KubeClient(KubernetesSettings(kubeconfig=kubeconfig(tmp_path, sim.url)), 9)
    await kube.connect()
    skipped = []
    try:
        assert kube.connection.client.configuration.connection_pool_maxsize == 8 + 9
        pod = await kube.get_object("/api/v1/namespaces/shop/pods/web")
        assert pod["metadata"]["uid"] == "u"
        with pytest.raises(errors.NotFound):
            await kube.get_object("/api/v1/namespaces/shop/pods/gone")
        pages = kube.list_pages(
            NAMESPACES, None, limit=10, field_selector="", skipped=lambda *a: skipped.append(a)
        )
        [(rv, [(shop, shop_rv)])] = [p async for p in pages]
        assert msgspec.json.decode(shop.buf)["metadata"]["labels"]["team"] == "payments"
        assert not shop.list_item  # a Namespace gets no Event's kind
        assert shop_rv <= rv
        async with kube.watch(
            NAMESPACES,
            None,
            resource_version=str(rv),
            timeout_seconds=5,
            skipped=lambda *a: skipped.append(a),
        ) as batches:
            sim.set_namespace("blog", {"team": "content"})
            async for batch in batches:
                changes = [(kind, ev) for kind, ev, _ in batch if kind != "BOOKMARK"]
                if changes:
                    [(kind, ev)] = changes
                    obj = msgspec.json.decode(ev.buf[ev.start : ev.end])
                    assert (kind, obj["metadata"]["labels"]["team"]) == ("ADDED", "content")
                    break
    finally:
        await kube.close()
    assert skipped == []
