"""Credentials for real: in-cluster config over TLS with a rotating service-account token,
and NATS auth (user/password, token, TLS, mutual TLS) against a real nats-server."""

import logging
import ssl

import pytest
import trustme

from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.natsserver import NatsServer
from tests.integration.harness import Writer, bridge_config, event_ids, eventually, logged

pytestmark = pytest.mark.integration


@pytest.fixture
def ca():
    return trustme.CA()


async def test_in_cluster_config_with_rotating_token_over_tls(
    tmp_path, ca, nats_server, run_bridge
):
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    sim = SimApiServer(ssl_context=server_ctx, tokens={"sa-token-1"})
    await sim.start()
    try:
        sa = tmp_path / "serviceaccount"
        sa.mkdir()
        (sa / "token").write_text("sa-token-1")
        ca.cert_pem.write_to_path(str(sa / "ca.crt"))
        # The service-account paths are fixed inside a Pod; here they are moved to tmp.
        prelude = (
            "import kubernetes_asyncio.config.incluster_config as m\n"
            f"m.SERVICE_TOKEN_FILENAME = {str(sa / 'token')!r}\n"
            f"m.SERVICE_CERT_FILENAME = {str(sa / 'ca.crt')!r}\n"
        )
        cfg = bridge_config(tmp_path, nats_server.url, tmp_path / "unused", cluster={"name": None})
        text = cfg.read_text().replace(
            "kubeconfig: " + str(tmp_path / "unused"), "kubeconfig: null"
        )
        cfg.write_text(text)
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(sim.port),
            "KUBECONFIG": "/nonexistent",
        }
        w = Writer(sim)
        bridge = run_bridge(config=cfg, env=env, prelude=prelude)
        await bridge.wait_ready()
        await w.write(20)
        await eventually(lambda: _has(nats_server.url, w.ids))
        # no cluster.name: the id is the kube-system namespace uid, in subject and source
        ids = await event_ids(nats_server.url)
        assert ids
        assert any(
            e.get("event") == "cluster_id_derived" and e["cluster"] == sim.kube_system_uid
            for e in bridge.log_events()
        )
        # the kubelet rotates the projected token; the old one stops working
        (sa / "token").write_text("sa-token-2")
        sim.tokens = {"sa-token-2"}
        sim.close_watches()
        await w.write(30)
        await eventually(lambda: _has(nats_server.url, w.ids), timeout=30)
        assert sorted(await event_ids(nats_server.url)) == sorted(w.ids)
    finally:
        await sim.stop()


async def test_the_worker_in_a_pod_reloads_its_rotated_token_on_a_401(
    tmp_path, ca, monkeypatch, caplog
):
    """The remediation worker on the shared connection, in-cluster over TLS: the kubelet
    rotates the projected token and the API server refuses the old one; the next read is
    answered 401, the token file is read again and the read asked once more (before the
    shared connection the worker had no reload: the 401 was ``Refused`` and the message
    ended)."""
    from k8s_event_common.kube.lean import incluster_config
    from k8s_event_consumer.remediation.kube import Kube
    from k8s_event_consumer.remediation.settings import KubernetesSettings

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    sim = SimApiServer(ssl_context=server_ctx, tokens={"sa-token-1"})
    await sim.start()
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("sa-token-1")
    ca.cert_pem.write_to_path(str(sa / "ca.crt"))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(sa / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(sa / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(sim.port))
    sim.put_object("/api/v1/namespaces/shop/pods/web", {"metadata": {"name": "web", "uid": "u"}})
    kube = Kube(KubernetesSettings(cluster="c"))
    caplog.set_level(logging.INFO)
    try:
        await kube.connect()
        first = kube.connection.client
        assert (await kube.get("v1", "Pod", "shop", "web"))["metadata"]["uid"] == "u"
        (sa / "token").write_text("sa-token-2")  # rotated; the old one stops working
        sim.tokens = {"sa-token-2"}
        kube.connection.loaded_at -= 2  # not just loaded
        assert (await kube.get("v1", "Pod", "shop", "web"))["metadata"]["uid"] == "u"
        assert kube.connection.client is not first
        [asked] = [r for r in caplog.records if r.getMessage() == "unauthorized_asked_again"]
        assert asked.fields["reloaded"] is True
    finally:
        await kube.close()
        await sim.stop()


async def _has(url, ids):
    return set(ids) <= set(await event_ids(url))


def _tls_files(tmp_path, ca, name="127.0.0.1"):
    cert = ca.issue_cert(name)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server-key.pem"))
    client = ca.issue_cert("bridge-client")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "client-key.pem"))


@pytest.mark.parametrize(
    ("server_args", "nats_section"),
    [
        (["--user", "bridge", "--pass", "s3cret"], {"user": "bridge", "password": "s3cret"}),
        (["--auth", "t0ken"], {"token": "t0ken"}),
        (
            ["--tls", "--tlscert", "{d}/server.pem", "--tlskey", "{d}/server-key.pem"],
            {"tls": {"ca_file": "{d}/ca.pem"}},
        ),
        (
            [
                "--tlsverify",
                "--tlscert",
                "{d}/server.pem",
                "--tlskey",
                "{d}/server-key.pem",
                "--tlscacert",
                "{d}/ca.pem",
            ],
            {
                "tls": {
                    "ca_file": "{d}/ca.pem",
                    "cert_file": "{d}/client.pem",
                    "key_file": "{d}/client-key.pem",
                }
            },
        ),
    ],
    ids=["user-password", "token", "tls", "mutual-tls"],
)
async def test_nats_auth_modes(
    tmp_path, ca, sim, kubeconfig, run_bridge, server_args, nats_section
):
    _tls_files(tmp_path, ca)
    d = str(tmp_path)
    args = [a.replace("{d}", d) for a in server_args]

    def fill(v):
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v.replace("{d}", d) if isinstance(v, str) else v

    server = NatsServer(store_dir=str(tmp_path / "authnats"), args=args).start()
    try:
        scheme = "tls" if "tls" in nats_section else "nats"
        url = f"{scheme}://127.0.0.1:{server.port}"
        cfg = bridge_config(tmp_path, url, kubeconfig, nats=fill(nats_section))
        w = Writer(sim)
        bridge = run_bridge(config=cfg)
        await bridge.wait_ready()
        await w.write(10)
        await eventually(lambda: _metric(bridge, len(w.ids)))
        assert "s3cret" not in bridge.logs() and "t0ken" not in bridge.logs()
    finally:
        server.cleanup()


async def _metric(bridge, n):
    return await bridge.metric("events_published") >= n


async def test_wrong_nats_password_is_logged_and_retried_not_crashed(
    tmp_path, sim, kubeconfig, run_bridge
):
    server = NatsServer(
        store_dir=str(tmp_path / "authnats"), args=["--user", "bridge", "--pass", "right"]
    ).start()
    try:
        cfg = bridge_config(
            tmp_path, server.url, kubeconfig, nats={"user": "bridge", "password": "wrong"}
        )
        bridge = run_bridge(config=cfg)
        await eventually(lambda: logged(bridge, "nats_auth_failed"), timeout=15)
        assert bridge.proc.poll() is None
        status, text = await bridge.get("/readyz")
        assert status == 503 and "not ready" in text
        assert "wrong" not in bridge.logs()
    finally:
        server.cleanup()
