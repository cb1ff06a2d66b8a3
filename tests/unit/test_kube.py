"""The Kubernetes boundary without a server: credential reloads and the connection pool."""

import yaml

from bridge.kube import KubeClient
from bridge.settings import KubernetesSettings


def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
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
