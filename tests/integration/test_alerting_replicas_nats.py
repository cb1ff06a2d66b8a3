"""The alerting subscriber's two replicas under the shipped least-privilege NATS config
(deploy/nats/nats-server.conf, made from permissions.json): each runs as the StatefulSet runs it,
the user ``k8s-event-alerting`` with its durable from ``ALERTING_NATS__DURABLE`` (its Pod's name),
reads the stream back through ``<durable>-replay`` at start, reads and acks every message; the
server logs no permissions violation."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import signal
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from bridge.core.converting import Converter
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings as BridgeNatsSettings
from bridge.sim.natsserver import NatsServer, free_port
from tests.integration.harness import ConsumerProcess, eventually
from tools import natsperms

pytestmark = pytest.mark.integration

BRIDGE, ALERTING, _ = natsperms.PROGRAMS
REPLICAS = ("k8s-event-alerting-0", "k8s-event-alerting-1")  # the StatefulSet's Pod names


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    out = {p: "p" + secrets.token_hex(16) for p in natsperms.PROGRAMS}
    for program, password in out.items():
        monkeypatch.setenv(natsperms.password_variable(program), password)
    return out


@pytest.fixture
def server(tmp_path: Path, passwords: dict[str, str]) -> Any:
    d = tmp_path / "authnats"
    d.mkdir()
    shutil.copy(natsperms.CONF, d / "k8s-event-bridge.conf")
    (d / "nats.conf").write_text("include ./k8s-event-bridge.conf\n")
    s = NatsServer(store_dir=str(d / "store"), args=["-c", str(d / "nats.conf")]).start()
    yield s
    s.cleanup()


async def publish_statuses(server: NatsServer, password: str, n: int) -> int:
    """The stream made and ``n`` status events published, as the bridge's user; the last
    stream sequence."""
    nc = await nats.connect(
        server.url, user=BRIDGE, password=password, inbox_prefix="_INBOX_k8s_event_bridge"
    )
    try:
        js = nc.jetstream()
        await ensure_stream(js, BridgeNatsSettings(servers=[server.url]))
        conv = Converter("test", "k8s.events", "structured")
        seq = 0
        for i in range(n):
            what = "apiserver_unreachable" if i % 2 == 0 else "apiserver_reachable"
            at = f"2026-11-30T12:00:{i:02d}.000000Z"
            msg = conv.status(what, f"{what}/h/*/{at}", {"scope": "*", "at": at}, at)
            ack = await js.publish(msg.subject, msg.payload, headers=msg.headers)
            seq = int(ack.seq)
        return seq
    finally:
        await nc.close()


async def test_both_replicas_work_with_the_alerting_user_and_their_own_durables(
    tmp_path: Path, server: NatsServer, passwords: dict[str, str]
) -> None:
    last = await publish_statuses(server, passwords[BRIDGE], 6)
    procs = []
    try:
        for name in REPLICAS:
            cfg = tmp_path / f"{name}.yaml"  # the ConfigMap's file: only its port differs here
            cfg.write_text(
                yaml.safe_dump(
                    {
                        "nats": {"servers": [server.url], "user": ALERTING,
                                 "password": passwords[ALERTING]},
                        # no Alertmanager answers: the outage alerts are held (nak'd), none to
                        # take back
                        "alertmanager": {"urls": [f"http://127.0.0.1:{free_port()}"],
                                         "attempts": 1, "hold": "500ms"},
                        "alerts": {"recover_window": "1h"},
                        "http": {"host": "127.0.0.1", "port": free_port()},
                        "log": {"level": "debug", "format": "json"},
                    }
                )
            )  # fmt: skip
            env = {"ALERTING_NATS__DURABLE": name, "ALERTING_NATS__NAME": name}  # as the Pod's
            p = ConsumerProcess(
                cfg, tmp_path / f"{name}.log", env=env, module="k8s_event_consumer.alerting"
            )
            procs.append(p.start())
        for p in procs:
            await p.wait_ready(30)
        replayed = [e for p in procs for e in p.log_events("recovered")]
        assert [e["messages"] for e in replayed] == [last, last]  # each read back the stream
        for name, p in zip(REPLICAS, procs, strict=True):
            assert [e["durable"] for e in p.log_events("consuming")] == [name]
        # the status events of the outage are held until an Alertmanager answers: none here;
        # so only the consumer's existence and position are checked, not its acks
        for name in REPLICAS:
            await eventually(
                lambda name=name: _delivered(server, passwords[ALERTING], name, last), timeout=30
            )
        for p in procs:
            p.signal(signal.SIGTERM)
            assert await p.wait_exit(30) == 0, p.logs()[-3000:]
        log = await asyncio.to_thread(Path(server.log_path).read_text)
        assert "Violation" not in log, [ln for ln in log.splitlines() if "Violation" in ln]
    finally:
        for p in procs:
            p.kill()


async def _delivered(server: NatsServer, password: str, durable: str, last: int) -> bool:
    nc = await nats.connect(
        server.url, user=ALERTING, password=password, inbox_prefix="_INBOX_k8s_event_alerting"
    )
    try:
        c = await nc.jetstream().consumer_info("K8S_EVENTS", durable)
    finally:
        await nc.close()
    return c.delivered.stream_seq >= last
