"""The Kubernetes boundary without a server: credential reloads and the connection pool."""

import asyncio

import yaml
from aiohttp import web

from bridge.kube.client import READ_BUFSIZE, KubeClient
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


async def test_reloads_by_several_scopes_at_once_build_one_client(tmp_path):
    kube = KubeClient(KubernetesSettings(kubeconfig=kubeconfig(tmp_path)))
    await kube.connect()
    first = kube._client
    await kube.reload_credentials()  # right after a (re)load: another scope just did it
    assert kube._client is first
    kube._loaded_at -= 2.0
    await kube.reload_credentials()
    assert kube._client is not first
    assert kube._retired[0][1] is first  # not closed under the other scopes' watches
    await kube.close()
    assert first.rest_client.pool_manager.closed


async def test_pool_has_a_connection_for_every_scope(tmp_path):
    namespaces = [f"ns{i}" for i in range(150)]
    kube = KubeClient(KubernetesSettings(kubeconfig=kubeconfig(tmp_path), namespaces=namespaces))
    await kube.connect()
    assert kube._client.configuration.connection_pool_maxsize >= 150
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

    app = web.Application()
    app.router.add_get("/api/v1/events", watch)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    kube = KubeClient(
        KubernetesSettings(kubeconfig=kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    )
    await kube.connect()
    sizes = []
    try:
        async with kube.watch_events(None, resource_version="0", timeout_seconds=5) as stream:
            await asyncio.sleep(0.5)  # a busy bridge: the server has sent all it could
            async for chunk in stream:
                sizes.append(sum(map(len, chunk)))
    finally:
        await kube.close()
        await runner.cleanup()
    assert sum(sizes) == 8000 * (len(line) - 1)
    assert max(sizes) <= 4 * READ_BUFSIZE + 2**18, max(sizes)
