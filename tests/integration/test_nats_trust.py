"""The attacker's side of the NATS connection: a server (or anyone in the middle) that answers
INFO without asking for TLS, when TLS was asked for. It must receive no credential at all (not
a password, a token, a JWT nor a nonce signature that could be relayed): the connection is
refused before CONNECT, ``nats_tls_refused`` names the server, and the next server is tried.
The same for the bridge and the subscribers (one connection module, k8s_event_common)."""

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

from k8s_event_common.connecting import Connection
from k8s_event_common.options import NatsOptions
from k8s_event_sim.natsserver import NatsServer
from tests.creds import write_creds, write_seed
from tests.integration.harness import (
    SUBSCRIBERS,
    ConsumerProcess,
    bridge_config,
    eventually,
    subscriber_config,
)
from tests.streams import k8s_events

pytestmark = pytest.mark.integration

PASSWORD = "Sentinel-Pass-7c1e"
TOKEN = "Sentinel-Token-93ab"


@dataclass
class FakeServer:
    """Speaks the first line of the NATS protocol (INFO) on loopback, records every byte each
    connection sends, and answers nothing more: what a hostile server sees of a client."""

    info: dict[str, Any]
    port: int = 0
    received: list[bytearray] = field(default_factory=list)
    _server: asyncio.base_events.Server | None = None

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = bytearray()
        self.received.append(got)
        writer.write(b"INFO " + json.dumps(self.info).encode() + b"\r\n")
        try:
            await writer.drain()
            while data := await reader.read(65536):
                got.extend(data)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"tls://127.0.0.1:{self.port}"

    def everything(self) -> bytes:
        return b"".join(bytes(r) for r in self.received)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


def plain_info(**extra: Any) -> dict[str, Any]:
    """What nats-server says to a client when it does not require TLS, with auth and a nonce
    to sign: everything a client could hand over."""
    return {
        "server_id": "NFAKE",
        "server_name": "fake",
        "version": "2.15.1",
        "proto": 1,
        "headers": True,
        "max_payload": 1048576,
        "auth_required": True,
        "nonce": "bm9uY2UtdG8tcmVsYXk",
        **extra,
    }


@pytest.fixture
async def fake() -> AsyncIterator[FakeServer]:
    server = await FakeServer(plain_info()).start()
    yield server
    await server.stop()


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, str]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server-key.pem"))
    return {
        "ca": str(tmp_path / "ca.pem"),
        "cert": str(tmp_path / "server.pem"),
        "key": str(tmp_path / "server-key.pem"),
    }


def tls_server(tmp_path: Path, tls: dict[str, str], *auth: str, first: bool = False) -> NatsServer:
    """A real nats-server requiring TLS (``first``: the TLS handshake before INFO)."""
    if not first:
        args = ["--tls", "--tlscert", tls["cert"], "--tlskey", tls["key"], *auth]
        return NatsServer(store_dir=str(tmp_path / "tlsnats"), args=args).start()
    conf = tmp_path / "handshake-first.conf"
    conf.write_text(
        f'tls {{ cert_file: "{tls["cert"]}", key_file: "{tls["key"]}", handshake_first: true }}\n'
    )
    return NatsServer(store_dir=str(tmp_path / "tlsnats"), args=["-c", str(conf), *auth]).start()


def secrets_in(data: bytes, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s.encode() in data]


@pytest.mark.parametrize("auth", ["password", "token", "creds", "nkey"])
async def test_a_server_that_does_not_require_tls_gets_no_credential_and_the_next_one_is_used(
    tmp_path: Path,
    fake: FakeServer,
    tls_files: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    auth: str,
) -> None:
    secrets: list[str]
    server_auth: list[str] = []
    kw: dict[str, Any] = {}
    if auth == "password":
        kw, secrets, server_auth = (
            {"user": "bridge", "password": PASSWORD},
            [PASSWORD],
            ["--user", "bridge", "--pass", PASSWORD],
        )
    elif auth == "token":
        kw, secrets, server_auth = {"token": TOKEN}, [TOKEN], ["--auth", TOKEN]
    elif auth == "creds":
        path, seed = write_creds(tmp_path / "bridge.creds")
        jwt = path.read_text().split("-----BEGIN NATS USER JWT-----\n")[1].split("\n")[0]
        kw, secrets = {"creds_file": str(path)}, [seed.decode(), jwt]
    else:
        path, seed = write_seed(tmp_path / "bridge.nk")
        kw, secrets = {"nkey_seed_file": str(path)}, [seed.decode()]
    real = tls_server(tmp_path, tls_files, *server_auth)
    try:
        opts = NatsOptions(
            servers=[fake.url, f"tls://127.0.0.1:{real.port}"],
            tls_ca_file=tls_files["ca"],
            dont_randomize=True,
            connect_timeout=2,
            **kw,
        )
        conn = Connection(opts, logger="test.nats")
        with caplog.at_level(logging.INFO, logger="test.nats"):
            nc = await asyncio.wait_for(conn.connect(), 30)
        try:
            assert nc.connected_url is not None and nc.connected_url.port == real.port
            assert fake.received, "the fake server was never tried"
            data = fake.everything()
            assert b"CONNECT" not in data, data[:200]
            assert not secrets_in(data, secrets)
            refused = [r for r in caplog.records if r.getMessage() == "nats_tls_refused"]
            assert refused and refused[0].fields["server"] == f"127.0.0.1:{fake.port}"  # type: ignore[attr-defined]
            connected = [r for r in caplog.records if r.getMessage() == "nats_connected"]
            assert connected and connected[0].fields["tls"] is True  # type: ignore[attr-defined]
            # and it works: a round trip through the TLS server
            await nc.flush(timeout=5)
        finally:
            await conn.close()
    finally:
        real.cleanup()


async def test_a_server_asking_for_tls_that_can_not_do_it_sees_only_a_tls_hello(
    tls_files: dict[str, str],
) -> None:
    """INFO says tls_required, then the "server" has no certificate the CA vouches for (here:
    none at all): the client's next bytes are a TLS ClientHello, never the protocol in clear."""
    fake = await FakeServer(plain_info(tls_required=True)).start()
    try:
        conn = Connection(
            NatsOptions(
                servers=[fake.url], tls_ca_file=tls_files["ca"], user="u", password=PASSWORD
            ),
            logger="test.nats",
        )
        task = asyncio.create_task(conn.connect())
        await eventually(lambda: _attempts(fake, 2), timeout=20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for got in fake.received:
            assert got[:1] in (b"", b"\x16"), bytes(got[:40])  # a TLS handshake record, or nothing
        assert not secrets_in(fake.everything(), [PASSWORD]) and b"CONNECT" not in fake.everything()
    finally:
        await fake.stop()


async def _attempts(fake: FakeServer, n: int) -> bool:
    return len(fake.received) >= n


async def test_handshake_first_speaks_tls_before_any_protocol_byte(
    tmp_path: Path, fake: FakeServer, tls_files: dict[str, str]
) -> None:
    """tls.handshake_first: the TLS handshake is the first thing on the wire; a server set the
    same way takes the connection, and a plaintext one gets nothing but a ClientHello."""
    real = tls_server(tmp_path, tls_files, "--user", "bridge", "--pass", PASSWORD, first=True)
    try:
        opts = NatsOptions(
            servers=[f"tls://127.0.0.1:{real.port}"],
            tls_ca_file=tls_files["ca"],
            tls_handshake_first=True,
            user="bridge",
            password=PASSWORD,
        )
        conn = Connection(opts, logger="test.nats")
        nc = await asyncio.wait_for(conn.connect(), 30)
        await nc.flush(timeout=5)
        await conn.close()
        plain = Connection(NatsOptions(**{**vars(opts), "servers": [fake.url]}), logger="test.nats")
        task = asyncio.create_task(plain.connect())
        await eventually(lambda: _attempts(fake, 2), timeout=20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for got in fake.received:
            assert got[:1] in (b"", b"\x16"), bytes(got[:40])
        assert not secrets_in(fake.everything(), [PASSWORD])
    finally:
        real.cleanup()


# --- the programs, as processes -------------------------------------------------------------


def _programs(tmp_path: Path, fake: FakeServer, ca: str, kubeconfig: Path) -> list[Any]:
    """The bridge and every subscriber, each given only the fake server, TLS wanted (a CA)
    and a password in the environment."""
    from tests.integration.harness import BridgeProcess

    nats = {"servers": [fake.url], "user": "svc", "tls": {"ca_file": ca}, "connect_timeout": "1s"}
    bridge_cfg = bridge_config(tmp_path, fake.url, kubeconfig, nats=nats)
    procs: list[Any] = [
        BridgeProcess(bridge_cfg, tmp_path / "bridge.log", env={"BRIDGE_NATS__PASSWORD": PASSWORD})
    ]
    for module, prefix in SUBSCRIBERS.items():
        path = subscriber_config(tmp_path, module, nats, kubeconfig)
        env = {f"{prefix}NATS__PASSWORD": PASSWORD}
        procs.append(ConsumerProcess(path, tmp_path / f"{module}.log", env=env, module=module))
    return procs


async def test_no_program_hands_its_password_to_a_server_that_does_not_require_tls(
    tmp_path: Path, fake: FakeServer, tls_files: dict[str, str], sim: Any, kubeconfig: Path
) -> None:
    procs = _programs(tmp_path, fake, tls_files["ca"], kubeconfig)
    try:
        for p in procs:
            p.start()
        # each program came back at least twice (refused, then tried again)
        await eventually(lambda: _attempts(fake, 2 * len(procs)), timeout=60)

        async def each_refused() -> bool:
            return all(p.log_events("nats_tls_refused") for p in procs)

        await eventually(each_refused, timeout=30)
        for p in procs:
            assert p.running(), p.logs()[-2000:]
            line = p.log_events("nats_tls_refused")[0]
            assert line["server"] == f"127.0.0.1:{fake.port}"
            status, _ = await p.get("/readyz")
            assert status == 503
            assert PASSWORD not in p.logs()
        assert b"CONNECT" not in fake.everything()
        assert not secrets_in(fake.everything(), [PASSWORD])
    finally:
        for p in procs:
            p.kill()


def test_the_tls_guard_is_installed_on_this_nats_py() -> None:
    """The guard leans on nats-py's private parts (k8s_event_common.connecting.PRIVATE_USES):
    on the pinned nats-py every one is there, so a connection that wants TLS is guarded."""
    from k8s_event_common import connecting

    conn = Connection(NatsOptions(servers=["tls://127.0.0.1:4222"]), logger="test.nats")
    assert connecting.problems(conn.nc) == []
    assert conn.nc._connect_command.__name__ == "connect_command"  # the guard's
    assert isinstance(conn.kwargs()["tls"], ssl.SSLContext)


async def test_a_subscribers_nats_connected_and_readyz_are_read_from_the_client(
    tmp_path: Path, nats_server: NatsServer, sim: Any, kubeconfig: Path
) -> None:
    """Read when asked, not kept from the last callback: NATS gone, the gauge is 0 and /readyz
    503 at once; back, both come back."""
    import nats as nats_client

    nc = await nats_client.connect(nats_server.url)
    await nc.jetstream().add_stream(k8s_events())
    await nc.close()
    path = subscriber_config(
        tmp_path,
        "k8s_event_consumer.remediation",
        {"servers": [nats_server.url]},
        kubeconfig,
        name="remediation.yaml",
    )
    p = ConsumerProcess(path, tmp_path / "remediation.log").start()
    try:
        await p.wait_ready(timeout=30)

        async def gauge(value: float) -> bool:
            _, text = await p.get("/metrics")
            return f"k8s_event_remediation_nats_connected {value:.1f}" in text.splitlines()

        assert await gauge(1)
        nats_server.kill()

        async def unready() -> bool:
            status, text = await p.get("/readyz")
            return status == 503 and "not connected to NATS" in text

        await eventually(unready, timeout=10)
        assert await gauge(0)
        nats_server.start()
        await p.wait_ready(timeout=30)
        assert await gauge(1)
    finally:
        p.kill()
