"""The attacker's side of a NATS connection over WebSocket: a ``wss://`` endpoint that answers
the upgrade with a redirect (307) to a plaintext ``http://`` or ``ws://`` endpoint, or to another
host. aiohttp's ``ws_connect`` (nats-py's WebSocket transport) follows redirects, so the upgrade
can end on a socket without TLS while the URL still says ``wss://``. TLS is decided on the socket
in use, never on the URL: the endpoint the redirect leads to receives no CONNECT (no password),
``nats_tls_refused`` (or ``nats_redirect_refused``) says what happened, the refusal is counted,
and a real nats-server with TLS over WebSocket still takes the connection (``tls=true``, read
from the socket)."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import WSMsgType, web

from k8s_event_common import connecting
from k8s_event_common.connecting import Connection
from k8s_event_common.options import NatsOptions
from k8s_event_sim.natsserver import NatsServer, free_port
from tests.integration.harness import eventually

pytestmark = [
    pytest.mark.integration,
    # nats-py 2.16 passes ws_connect a float timeout, which aiohttp 3.14 deprecates (a warning,
    # an error under this suite's warnings-as-errors)
    pytest.mark.filterwarnings("ignore:parameter 'timeout' of type 'float':DeprecationWarning"),
]

PASSWORD = "Sentinel-WsPass-5d2a"

INFO = {
    "server_id": "NFAKE",
    "server_name": "fake",
    "version": "2.15.1",
    "proto": 1,
    "headers": True,
    "max_payload": 1048576,
    "auth_required": True,
    "tls_required": True,  # what a real wss endpoint says; the client must not believe it
    "nonce": "bm9uY2UtdG8tcmVsYXk",
}


@dataclass
class Site:
    """An aiohttp site on loopback, TLS when ``ssl_ctx`` is given."""

    app: web.Application
    ssl_ctx: ssl.SSLContext | None = None
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> Site:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.ssl_ctx).start()
        return self

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@dataclass
class FakeWsNats:
    """Takes the WebSocket upgrade, says INFO, records every frame the client sends: what the
    endpoint at the end of a redirect sees of a client."""

    received: list[bytes] = field(default_factory=list)
    upgrades: int = 0

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.upgrades += 1
        await ws.send_bytes(b"INFO " + json.dumps(INFO).encode() + b"\r\n")
        async for msg in ws:
            if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                self.received.append(data)
        return ws

    def everything(self) -> bytes:
        return b"".join(self.received)


def redirecting(location: str) -> web.Application:
    async def answer(_: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": location})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    return app


def recording(fake: FakeWsNats) -> web.Application:
    app = web.Application()
    app.router.add_get("/{tail:.*}", fake.handle)
    return app


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server-key.pem"))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    return {
        "ca": str(tmp_path / "ca.pem"),
        "cert": str(tmp_path / "server.pem"),
        "key": str(tmp_path / "server-key.pem"),
        "server_ctx": server_ctx,
    }


@pytest.fixture
async def fake_ws() -> AsyncIterator[tuple[FakeWsNats, Site]]:
    fake = FakeWsNats()
    site = await Site(recording(fake)).start()
    yield fake, site
    await site.stop()


def _refusals(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [r.fields for r in caplog.records if r.getMessage() == event]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "location",
    # aiohttp refuses a Location with a ws:// scheme itself (NonHttpUrlRedirectClientError):
    # the plaintext WebSocket endpoint is reached as http://, on this host or another name
    ["http://127.0.0.1:{port}/", "http://localhost:{port}/"],
    ids=["to-http", "to-http-other-host"],
)
async def test_a_wss_upgrade_redirected_to_plaintext_gets_no_connect(
    pki: dict[str, Any],
    fake_ws: tuple[FakeWsNats, Site],
    caplog: pytest.LogCaptureFixture,
    location: str,
) -> None:
    fake, plain = fake_ws
    front = await Site(redirecting(location.format(port=plain.port)), pki["server_ctx"]).start()
    before = connecting.refusals().get("tls", 0)
    conn = Connection(
        NatsOptions(
            servers=[f"wss://127.0.0.1:{front.port}"],
            tls_ca_file=pki["ca"],
            user="bridge",
            password=PASSWORD,
            connect_timeout=2,
        ),
        logger="test.nats.ws",
    )
    task = asyncio.create_task(conn.connect())
    try:
        with caplog.at_level(logging.INFO, logger="test.nats.ws"):
            # the redirect was followed (the plaintext endpoint took the upgrade); then either
            # the client wrote to it or it was refused
            await eventually(
                lambda: fake.received or _refusals(caplog, "nats_tls_refused"),
                timeout=30,
                what="a frame or the refusal",
            )
        data = fake.everything()
        assert b"CONNECT" not in data, data[:200]
        assert PASSWORD.encode() not in data
        refused = _refusals(caplog, "nats_tls_refused")[0]
        assert refused["tls"] is False
        assert refused["transport"] == "websocket"
        assert refused["redirected_to"].endswith(f":{plain.port}")
        assert connecting.refusals()["tls"] > before
        assert fake.upgrades >= 1 and not task.done()
        assert not _refusals(caplog, "nats_connected")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await conn.close()
        await front.stop()


async def test_a_wss_upgrade_redirected_to_another_tls_host_gets_no_connect(
    pki: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A redirect that keeps TLS but leads elsewhere: the credentials go only to the servers
    configured (a NATS server never redirects an upgrade)."""
    fake = FakeWsNats()
    other = await Site(recording(fake), pki["server_ctx"]).start()
    front = await Site(redirecting(f"https://localhost:{other.port}/"), pki["server_ctx"]).start()
    before = connecting.refusals().get("redirect", 0)
    conn = Connection(
        NatsOptions(
            servers=[f"wss://127.0.0.1:{front.port}"],
            tls_ca_file=pki["ca"],
            user="bridge",
            password=PASSWORD,
            connect_timeout=2,
        ),
        logger="test.nats.ws",
    )
    task = asyncio.create_task(conn.connect())
    try:
        with caplog.at_level(logging.INFO, logger="test.nats.ws"):
            await eventually(
                lambda: fake.received or _refusals(caplog, "nats_redirect_refused"),
                timeout=30,
                what="a frame or the refusal",
            )
        assert b"CONNECT" not in fake.everything()
        refused = _refusals(caplog, "nats_redirect_refused")[0]
        assert refused["tls"] is True
        assert refused["redirected_to"] == f"https://localhost:{other.port}"
        assert connecting.refusals()["redirect"] > before
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await conn.close()
        await front.stop()
        await other.stop()


async def test_a_redirected_ws_upgrade_gets_no_connect_without_tls_too(
    fake_ws: tuple[FakeWsNats, Site], caplog: pytest.LogCaptureFixture
) -> None:
    """``ws://`` with no TLS wanted: a redirect elsewhere still gets no credential (the
    servers configured are the only ones that do)."""
    fake, plain = fake_ws
    front = await Site(redirecting(f"http://localhost:{plain.port}/")).start()
    conn = Connection(
        NatsOptions(
            servers=[f"ws://127.0.0.1:{front.port}"],
            user="bridge",
            password=PASSWORD,
            connect_timeout=2,
        ),
        logger="test.nats.ws",
    )
    task = asyncio.create_task(conn.connect())
    try:
        with caplog.at_level(logging.INFO, logger="test.nats.ws"):
            await eventually(
                lambda: fake.received or _refusals(caplog, "nats_redirect_refused"),
                timeout=30,
                what="a frame or the refusal",
            )
        assert b"CONNECT" not in fake.everything()
        refused = _refusals(caplog, "nats_redirect_refused")[0]
        assert refused["tls"] is False
        assert refused["redirected_to"] == f"http://localhost:{plain.port}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await conn.close()
        await front.stop()


async def test_ws_url_with_tls_wanted_gets_no_connect(
    pki: dict[str, Any], fake_ws: tuple[FakeWsNats, Site], caplog: pytest.LogCaptureFixture
) -> None:
    """``ws://`` with a CA set: TLS is wanted, nats-py never upgrades a ws:// socket."""
    fake, plain = fake_ws
    conn = Connection(
        NatsOptions(
            servers=[f"ws://127.0.0.1:{plain.port}"],
            tls_ca_file=pki["ca"],
            user="bridge",
            password=PASSWORD,
            connect_timeout=2,
        ),
        logger="test.nats.ws",
    )
    task = asyncio.create_task(conn.connect())
    try:
        with caplog.at_level(logging.INFO, logger="test.nats.ws"):
            await eventually(
                lambda: _refusals(caplog, "nats_tls_refused"), timeout=30, what="the refusal"
            )
        assert b"CONNECT" not in fake.everything()
        assert _refusals(caplog, "nats_tls_refused")[0]["tls"] is False
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await conn.close()


async def test_a_real_nats_server_with_tls_over_websocket_still_works(
    tmp_path: Path, pki: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    ws_port = free_port()
    conf = tmp_path / "ws.conf"
    conf.write_text(
        f'websocket {{ port: {ws_port}, tls {{ cert_file: "{pki["cert"]}", '
        f'key_file: "{pki["key"]}" }} }}\n'
        f'authorization {{ user: bridge, password: "{PASSWORD}" }}\n'
    )
    real = NatsServer(store_dir=str(tmp_path / "wsnats"), args=["-c", str(conf)]).start()
    try:
        await eventually(lambda: _listening(ws_port), timeout=10, what="the websocket port")
        conn = Connection(
            NatsOptions(
                servers=[f"wss://127.0.0.1:{ws_port}"],
                tls_ca_file=pki["ca"],
                user="bridge",
                password=PASSWORD,
            ),
            logger="test.nats.ws",
        )
        with caplog.at_level(logging.INFO, logger="test.nats.ws"):
            nc = await asyncio.wait_for(conn.connect(), 30)
        try:
            sub = await nc.subscribe("ws.check")
            await nc.publish("ws.check", b"over tls")
            msg = await sub.next_msg(timeout=10)
            assert msg.data == b"over tls"
            connected = _refusals(caplog, "nats_connected")
            assert connected and connected[0]["tls"] is True
            assert not _refusals(caplog, "nats_tls_refused")
        finally:
            await conn.close()
    finally:
        real.cleanup()


async def _listening(port: int) -> bool:
    try:
        _, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    w.close()
    return True


def test_each_program_exports_the_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """``nats_refused_total{reason}``: the bridge's and the subscribers' /metrics read the
    shared connection's count."""
    from bridge.jetstream import connection as bridge_connection
    from bridge.metrics import Metrics as BridgeMetrics
    from k8s_event_common.clock import SYSTEM
    from k8s_event_consumer.remediation.running import Program
    from k8s_event_consumer.remediation.settings import Settings as RemediationSettings
    from k8s_event_consumer.runtime import Runtime

    monkeypatch.setattr(connecting, "_refusals", {"tls": 3, "redirect": 1})
    bridge = BridgeMetrics()
    bridge.nats_refused.read = bridge_connection.refusals
    text = bridge.render().decode()
    assert 'k8s_event_bridge_nats_refused_total{reason="tls"} 3.0' in text
    assert 'k8s_event_bridge_nats_refused_total{reason="redirect"} 1.0' in text
    settings = RemediationSettings(kubernetes={"cluster": "test"})
    rendered = Runtime(Program, settings, False, SYSTEM).metrics.render().decode()
    assert "# TYPE k8s_event_remediation_nats_refused_total counter" in rendered
    assert 'k8s_event_remediation_nats_refused_total{reason="tls"} 3.0' in rendered


async def test_no_program_hands_its_password_to_a_redirected_wss_upgrade(
    tmp_path: Path,
    pki: dict[str, Any],
    fake_ws: tuple[FakeWsNats, Site],
    sim: Any,
    kubeconfig: Path,
) -> None:
    """The bridge and every subscriber, each given only a ``wss://`` endpoint that redirects
    the upgrade to a plaintext one: each refuses (``nats_tls_refused`` with ``redirected_to``
    and ``tls: false``), stays unready, counts it on /metrics, and the plaintext endpoint
    receives no CONNECT and no password."""
    from tests.integration.harness import (
        SUBSCRIBERS,
        BridgeProcess,
        ConsumerProcess,
        bridge_config,
        subscriber_config,
    )

    fake, plain = fake_ws
    front = await Site(redirecting(f"http://127.0.0.1:{plain.port}/"), pki["server_ctx"]).start()
    url = f"wss://127.0.0.1:{front.port}"
    nats = {"servers": [url], "user": "svc", "tls": {"ca_file": pki["ca"]}, "connect_timeout": "1s"}
    procs: list[Any] = [
        BridgeProcess(
            bridge_config(tmp_path, url, kubeconfig, nats=nats),
            tmp_path / "bridge.log",
            env={"BRIDGE_NATS__PASSWORD": PASSWORD},
        )
    ]
    for module, prefix in SUBSCRIBERS.items():
        path = subscriber_config(tmp_path, module, nats, kubeconfig)
        env = {f"{prefix}NATS__PASSWORD": PASSWORD}
        procs.append(ConsumerProcess(path, tmp_path / f"{module}.log", env=env, module=module))
    try:
        for p in procs:
            p.start()

        async def each_refused() -> bool:
            return all(p.log_events("nats_tls_refused") for p in procs)

        await eventually(each_refused, timeout=60, what="each program's refusal")
        for p in procs:
            assert p.running(), p.logs()[-2000:]
            line = p.log_events("nats_tls_refused")[0]
            assert line["tls"] is False and line["transport"] == "websocket", line
            assert line["redirected_to"] == f"http://127.0.0.1:{plain.port}", line
            status, _ = await p.get("/readyz")
            assert status == 503
            _, metrics = await p.get("/metrics")
            refused = [
                ln for ln in metrics.splitlines() if 'nats_refused_total{reason="tls"}' in ln
            ]
            assert refused and float(refused[0].rsplit(" ", 1)[1]) >= 1, refused
            assert PASSWORD not in p.logs()
        assert fake.upgrades >= len(procs)
        assert b"CONNECT" not in fake.everything()
        assert PASSWORD.encode() not in fake.everything()
    finally:
        for p in procs:
            p.kill()
        await front.stop()
