"""Least privilege on the NATS side (deploy/nats/, docs/deploy.md "NATS: least privilege per
program"): a real nats-server runs the shipped config fragment, made from permissions.json, with
a user per program. Each program works with its own user; what a user must not do is refused by
the server (a permissions violation) and leaves the stream, the buckets and the durables as
they were."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
import yaml
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

from bridge.core.converting import Converter
from bridge.jetstream.checkpoints import KvCheckpointStore
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings as BridgeNatsSettings
from k8s_event_consumer.consuming import Consumer, ConsumerOptions, Handlers, KVSeen, Start
from k8s_event_sim.natsserver import NatsServer, binary, free_port
from k8s_event_sim.workload import make_event
from tests.integration.harness import Bridges, ConsumerProcess, Writer, bridge_config, eventually
from tools import natsperms

pytestmark = pytest.mark.integration

BRIDGE, ALERTING, REMEDIATION = natsperms.PROGRAMS
SUBSCRIBERS = (ALERTING, REMEDIATION)
STREAM = "K8S_EVENTS"
CHECKPOINT_BUCKET = "k8s_event_bridge"
SEEN_BUCKET = "k8s_event_remediation"
INBOX = {p: "_INBOX_" + p.replace("-", "_") for p in natsperms.PROGRAMS}
REFUSED_WITHIN = 1.0  # seconds a refused request waits for the answer that never comes


# ----------------------------------------------------------------------------- the server


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A password per program, in the environment variables the fragment names (nats-server
    inherits them). nats-server parses a variable's value as a config value: a password
    that starts with a letter and holds letters and digits only is taken as a string."""
    out = {p: "p" + secrets.token_hex(16) for p in natsperms.PROGRAMS}
    for program, password in out.items():
        monkeypatch.setenv(natsperms.password_variable(program), password)
    return out


@pytest.fixture
def server(tmp_path: Path, passwords: dict[str, str]) -> Any:
    """nats-server -js with deploy/nats/nats-server.conf included, as an operator would."""
    d = tmp_path / "authnats"
    d.mkdir()
    shutil.copy(natsperms.CONF, d / "k8s-event-bridge.conf")
    (d / "nats.conf").write_text("include ./k8s-event-bridge.conf\n")
    s = NatsServer(store_dir=str(d / "store"), args=["-c", str(d / "nats.conf")]).start()
    yield s
    s.cleanup()


class User:
    """A program's credentials connected the way the program connects: its own user and
    inbox prefix. ``errors`` keeps what the server said (nats-py reports a permissions
    violation to the error callback, lowercased, and keeps the connection)."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.errors: list[str] = []
        self.nc = NATS()

    async def connect(self, server: NatsServer, password: str) -> User:
        async def error_cb(exc: Exception) -> None:
            self.errors.append(str(exc).lower())

        await self.nc.connect(
            server.url,
            user=self.program,
            password=password,
            inbox_prefix=INBOX[self.program],
            error_cb=error_cb,
            max_reconnect_attempts=0,
        )
        return self

    @property
    def js(self) -> Any:
        return self.nc.jetstream()

    async def violated(self, action: str, subject: str) -> bool:
        """Whether the server refused ``action`` (publish, subscription) on ``subject``."""
        await self.nc.flush(timeout=5)
        want = f'permissions violation for {action} to "{subject}"'.lower()
        return any(want in e for e in self.errors)

    async def refused_request(self, subject: str, payload: bytes = b"") -> None:
        """A JetStream API request that must get no answer, and the server's refusal."""
        with pytest.raises(nats.errors.TimeoutError):
            await self.nc.request(subject, payload, timeout=REFUSED_WITHIN)
        await eventually(lambda: self.violated("publish", subject), timeout=5)

    async def refused_publish(self, subject: str, payload: bytes) -> None:
        """A JetStream publish (a stream message, a KV write) that gets no ack."""
        with pytest.raises(nats.errors.TimeoutError):
            await self.js.publish(subject, payload, timeout=REFUSED_WITHIN)
        await eventually(lambda: self.violated("publish", subject), timeout=5)


@pytest.fixture
async def users(
    server: NatsServer, passwords: dict[str, str]
) -> AsyncIterator[Callable[[str], Any]]:
    opened: list[User] = []

    async def connect(program: str) -> User:
        u = await User(program).connect(server, passwords[program])
        opened.append(u)
        return u

    yield connect
    for u in opened:
        await u.nc.close()


def cloud_events(n: int, seed: int = 1) -> list[tuple[str, bytes, dict[str, str]]]:
    """``n`` Events as the bridge publishes them: (subject, body, headers)."""
    rng = random.Random(seed)
    conv = Converter("test", "k8s.events", "structured")
    out = []
    for i in range(n):
        ev = make_event(rng, i=i)
        ev["metadata"].update(uid=f"uid-{seed}-{i}", resourceVersion=str(100 + i))
        m = conv.convert(ev)
        out.append((m.subject, m.payload, m.headers))
    return out


async def messages(bridge: User) -> int:
    info = await bridge.js.stream_info(STREAM)
    return int(info.state.messages)


@pytest.fixture
async def stocked(users: Callable[[str], Any]) -> User:
    """The stream with 20 Events and the checkpoint bucket with a checkpoint, made by the
    bridge's user (which may)."""
    bridge = await users(BRIDGE)
    await bridge.js.add_stream(StreamConfig(name=STREAM, subjects=["k8s.events.>"]))
    for subject, body, headers in cloud_events(20):
        await bridge.js.publish(subject, body, headers=headers)
    store = await KvCheckpointStore.open(bridge.js, CHECKPOINT_BUCKET)
    await store.save("test.all", 119)
    return bridge


async def read_all(user: User, subjects: list[str], want: int, seen: Any = None) -> Consumer:
    """The kit's ``Consumer`` with the subscriber's credentials: its durable created, every
    message handled and acked; returns the stopped consumer."""
    consumer = await Consumer.open(
        user.nc,
        stream=STREAM,
        durable=user.program,
        subjects=subjects,
        options=ConsumerOptions(fetch_timeout=0.5),
        start=Start.all(),
        seen=seen,
    )
    handled: list[str] = []

    async def on_event(ev: Any, d: Any) -> None:
        handled.append(d.id)
        if len(handled) == want:
            await consumer.stop()

    await asyncio.wait_for(consumer.run(Handlers(on_event=on_event)), timeout=30)
    assert len(handled) == want == consumer.stats.handled
    return consumer


# ----------------------------------------------------------------------------- the files


def _fragment_as_json(text: str) -> dict[str, Any]:
    """nats-server.conf read back: its comments dropped, each ``$VARIABLE`` quoted, the one
    top-level key braced: the rest is JSON (tools/natsperms.py writes it so)."""
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    body = re.sub(r":\s*\$([A-Z0-9_]+)", r': "$\1"', body)
    doc: dict[str, Any] = json.loads("{" + body.replace("accounts:", '"accounts":', 1) + "}")
    return doc


def test_the_config_fragment_gives_each_user_the_permissions_of_permissions_json() -> None:
    assert not natsperms.stale(), f"deploy/nats/nats-server.conf is stale: {natsperms.COMMAND}"
    wanted = json.loads(natsperms.PERMISSIONS.read_text())
    assert sorted(wanted) == sorted(natsperms.PROGRAMS)
    (account,) = _fragment_as_json(natsperms.CONF.read_text())["accounts"].values()
    assert account["jetstream"] == "enabled"
    users = {u["user"]: u for u in account["users"]}
    assert sorted(users) == sorted(natsperms.PROGRAMS)
    for program, user in users.items():
        assert user["permissions"] == wanted[program], program
        assert user["password"] == "$" + natsperms.password_variable(program)


def test_nats_server_takes_the_fragment_only_with_every_password_set(tmp_path: Path) -> None:
    shutil.copy(natsperms.CONF, tmp_path / "k8s-event-bridge.conf")
    conf = tmp_path / "nats.conf"
    conf.write_text("jetstream: {store_dir: store}\ninclude ./k8s-event-bridge.conf\n")
    env = {natsperms.password_variable(p): "pw" for p in natsperms.PROGRAMS}
    ok = subprocess.run(
        [binary(), "-t", "-c", str(conf)], env=env, capture_output=True, text=True, timeout=30
    )
    assert ok.returncode == 0, ok.stderr
    env.pop(natsperms.password_variable(ALERTING))
    missing = subprocess.run(
        [binary(), "-t", "-c", str(conf)], env=env, capture_output=True, text=True, timeout=30
    )
    assert missing.returncode != 0
    assert natsperms.password_variable(ALERTING) in missing.stderr


# ----------------------------------------------------------------------------- what works


async def test_each_program_works_with_its_own_user(
    tmp_path: Path,
    server: NatsServer,
    passwords: dict[str, str],
    sim: Any,
    kubeconfig: Path,
    users: Callable[[str], Any],
) -> None:
    """The real bridge publishes the simulated API server's Events and keeps its checkpoint;
    the real remediation worker (dry run) and alerting subscriber (its read-back at start
    included) read them through their durables and ack each; the server logs no violation."""
    bridges = Bridges(tmp_path)
    subscribers: list[ConsumerProcess] = []
    try:
        nats_section = {
            "user": BRIDGE,
            "password": passwords[BRIDGE],
            "inbox_prefix": INBOX[BRIDGE],
        }
        bridge = bridges.start(bridge_config(tmp_path, server.url, kubeconfig, nats=nats_section))
        await bridge.wait_ready()
        w = Writer(sim)
        await w.write(30)
        await eventually(lambda: _published(bridge, len(w.ids)), timeout=30)
        for program, module, sections in (
            (
                REMEDIATION,
                "k8s_event_consumer.remediation",
                {
                    "kubernetes": {"cluster": "test", "kubeconfig": str(kubeconfig)},
                    "remediation": {"dry_run": True},
                },
            ),
            (
                ALERTING,
                "k8s_event_consumer.alerting",
                {
                    # no Alertmanager: no Event alerts (no reason kept), none to take back
                    "alertmanager": {"urls": [f"http://127.0.0.1:{free_port()}"], "attempts": 1},
                    "alerts": {"reasons": ["NoSuchReason"], "recover_window": "1h"},
                },
            ),
        ):
            cfg = tmp_path / f"{program}.yaml"
            nats_cfg = {
                "servers": [server.url],
                "user": program,
                "password": passwords[program],
                "inbox_prefix": INBOX[program],
            }
            http = {"host": "127.0.0.1", "port": free_port()}
            cfg.write_text(yaml.safe_dump({"nats": nats_cfg, "http": http, **sections}))
            p = ConsumerProcess(cfg, tmp_path / f"{program}.log", module=module).start()
            subscribers.append(p)
            await p.wait_ready(30)
        await w.write(20)
        await eventually(lambda: _published(bridge, len(w.ids)), timeout=30)

        b = await users(BRIDGE)
        eyes = {p: await users(p) for p in SUBSCRIBERS}

        async def all_acked() -> bool:
            info = await b.js.stream_info(STREAM)
            for program, u in eyes.items():
                c = await u.js.consumer_info(STREAM, program)
                if c.ack_floor.stream_seq != info.state.last_seq or c.num_ack_pending:
                    return False
            return info.state.messages >= len(w.ids)

        await eventually(all_acked, timeout=60, interval=0.5)
        kv = await b.js.key_value(CHECKPOINT_BUCKET)
        assert int(json.loads((await kv.get("test.all")).value)["resourceVersion"]) > 0
        seen = await eyes[REMEDIATION].js.stream_info(f"KV_{SEEN_BUCKET}")
        assert seen.state.messages >= len(w.ids)
        for p in [bridge, *subscribers]:
            p.signal(signal.SIGTERM)
            assert await p.wait_exit(30) == 0, p.logs()[-3000:]
        log = await asyncio.to_thread(Path(server.log_path).read_text)
        assert "Violation" not in log, [ln for ln in log.splitlines() if "Violation" in ln]
    finally:
        bridges.kill_all()
        for p in subscribers:
            p.kill()


async def _published(bridge: Any, n: int) -> bool:
    return bool(await bridge.metric("events_published") >= n)


async def test_each_subscriber_reads_through_its_own_durable_and_acks(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """The kit's Consumer with the subscriber's credentials and inbox prefix: the durable
    made (one subject filter, and two: JetStream's two create subjects), each message handled
    and acked; the remediation worker's Seen bucket made and written."""
    alerting = await users(ALERTING)
    remediation = await users(REMEDIATION)
    await read_all(alerting, ["k8s.events.test.>", "k8s.events.other.>"], 20)
    await read_all(
        remediation, ["k8s.events.>"], 20, seen=await KVSeen.open(remediation.nc, SEEN_BUCKET)
    )
    for u in (alerting, remediation):
        c = await u.js.consumer_info(STREAM, u.program)
        assert c.ack_floor.stream_seq == 20 and c.num_ack_pending == 0
        assert not u.errors
    assert (await remediation.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages == 20


async def test_the_alerting_subscribers_read_back_reads_a_large_stream_through_its_own_consumer(
    users: Callable[[str], Any],
) -> None:
    """Its read-back at start goes through a named pull consumer of its own
    (``<durable>-replay``), created, read in batches and deleted: no flow control to answer,
    no unnamed create subject (which would let it rewrite any consumer of the stream)."""
    from k8s_event_consumer.consuming import replay

    bridge = await users(BRIDGE)
    await bridge.js.add_stream(StreamConfig(name=STREAM, subjects=["k8s.events.>"]))
    n = 600
    for i in range(0, n, 150):
        await asyncio.gather(
            *(
                bridge.js.publish(subject, body, headers=headers)
                for subject, body, headers in cloud_events(150, seed=100 + i)
            )
        )
    alerting = await users(ALERTING)
    got = [
        d.id
        async for d in replay(
            alerting.nc, stream=STREAM, subject="k8s.events.>", name=f"{ALERTING}-replay"
        )
    ]
    assert len(got) == n == len(set(got))
    assert (await bridge.js.stream_info(STREAM)).state.consumer_count == 0  # deleted
    assert not alerting.errors
    # the unnamed create subject is not among its permissions
    await alerting.refused_request(
        f"$JS.API.CONSUMER.CREATE.{STREAM}",
        json.dumps({"stream_name": STREAM, "config": {"ack_policy": "none"}}).encode(),
    )


@pytest.mark.parametrize("program", [BRIDGE, REMEDIATION])
async def test_a_bucket_made_with_direct_gets_is_read_too(
    users: Callable[[str], Any], program: str
) -> None:
    """A bucket someone made with the nats CLI (direct gets on) is read through
    $JS.API.DIRECT.GET, one the programs make through $JS.API.STREAM.MSG.GET: both allowed."""
    u = await users(program)
    if program == BRIDGE:
        await u.js.create_key_value(bucket=CHECKPOINT_BUCKET, history=5, direct=True)
        store = await KvCheckpointStore.open(u.js, CHECKPOINT_BUCKET)
        await store.save("test.all", 7)
        cp = await (await KvCheckpointStore.open(u.js, CHECKPOINT_BUCKET)).load("test.all")
        assert cp is not None and cp.resource_version == 7
        bucket = CHECKPOINT_BUCKET
    else:
        await u.js.create_key_value(bucket=SEEN_BUCKET, history=1, direct=True)
        seen = await KVSeen.open(u.nc, SEEN_BUCKET)
        await seen.add("uid/1")
        assert await seen.contains("uid/1") and not await seen.contains("uid/2")
        bucket = SEEN_BUCKET
    assert (await u.js.stream_info(f"KV_{bucket}")).config.allow_direct
    assert not u.errors


# ----------------------------------------------------------------------------- what is refused


async def test_a_subscriber_can_not_publish_an_event_into_the_stream(
    stocked: User, users: Callable[[str], Any]
) -> None:
    subject, body, headers = cloud_events(1, seed=2)[0]
    for program in SUBSCRIBERS:
        u = await users(program)
        before = await messages(stocked)
        with pytest.raises(nats.errors.TimeoutError):
            await u.js.publish(subject, body, headers=headers, timeout=REFUSED_WITHIN)
        await eventually(lambda u=u: u.violated("publish", subject), timeout=5)
        assert await messages(stocked) == before == 20


async def test_a_subscriber_can_not_write_the_checkpoint_or_the_other_ones_seen_bucket(
    stocked: User, users: Callable[[str], Any]
) -> None:
    kv = await stocked.js.key_value(CHECKPOINT_BUCKET)
    before = await kv.get("test.all")
    remediation = await users(REMEDIATION)
    await KVSeen.open(remediation.nc, SEEN_BUCKET)
    seen_before = (await remediation.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages
    for program in SUBSCRIBERS:
        u = await users(program)
        await u.refused_publish(f"$KV.{CHECKPOINT_BUCKET}.test.all", b'{"resourceVersion":"1"}')
        await u.refused_request(f"$JS.API.STREAM.PURGE.KV_{CHECKPOINT_BUCKET}")
        await u.refused_request(f"$JS.API.STREAM.DELETE.KV_{CHECKPOINT_BUCKET}")
    alerting = await users(ALERTING)
    await alerting.refused_publish(f"$KV.{SEEN_BUCKET}.{KVSeen.key('uid/1')}", b"1")
    after = await kv.get("test.all")
    assert (after.revision, after.value) == (before.revision, before.value)
    assert (await remediation.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages == seen_before


@pytest.mark.parametrize("program", [*SUBSCRIBERS, BRIDGE])
async def test_no_program_can_delete_or_purge_the_stream(
    stocked: User, users: Callable[[str], Any], program: str
) -> None:
    u = stocked if program == BRIDGE else await users(program)
    before = await messages(stocked)
    await u.refused_request(f"$JS.API.STREAM.DELETE.{STREAM}")
    await u.refused_request(f"$JS.API.STREAM.PURGE.{STREAM}", b"{}")
    await u.refused_request(f"$JS.API.STREAM.UPDATE.{STREAM}", b"{}")
    assert await messages(stocked) == before == 20


async def test_a_subscriber_can_not_touch_the_other_ones_durable_nor_delete_its_own(
    stocked: User, users: Callable[[str], Any]
) -> None:
    remediation = await users(REMEDIATION)
    await read_all(remediation, ["k8s.events.>"], 20)
    alerting = await users(ALERTING)
    other = f"{STREAM}.{REMEDIATION}"
    await alerting.refused_request(f"$JS.API.CONSUMER.DELETE.{other}")
    await alerting.refused_request(f"$JS.API.CONSUMER.CREATE.{other}.k8s.events.nothing", b"{}")
    await alerting.refused_request(f"$JS.API.CONSUMER.MSG.NEXT.{other}", b'{"batch":1}')
    await alerting.refused_request(f"$JS.API.CONSUMER.INFO.{other}")
    await remediation.refused_request(f"$JS.API.CONSUMER.DELETE.{other}")
    c = await remediation.js.consumer_info(STREAM, REMEDIATION)
    assert c.config.filter_subject == "k8s.events.>" and c.ack_floor.stream_seq == 20


async def test_the_alerting_subscriber_can_not_rewrite_the_workers_durable(
    stocked: User, users: Callable[[str], Any]
) -> None:
    remediation = await users(REMEDIATION)
    await read_all(remediation, ["k8s.events.>"], 20)
    alerting = await users(ALERTING)
    config = {"name": REMEDIATION, "ack_policy": "explicit", "filter_subject": "k8s.events.x.>"}
    await alerting.refused_request(
        f"$JS.API.CONSUMER.CREATE.{STREAM}",
        json.dumps({"stream_name": STREAM, "config": config}).encode(),
    )
    await alerting.refused_request(
        f"$JS.API.CONSUMER.CREATE.{STREAM}.{REMEDIATION}",
        json.dumps({"stream_name": STREAM, "config": config}).encode(),
    )
    c = await remediation.js.consumer_info(STREAM, REMEDIATION)
    assert c.config.filter_subject == "k8s.events.>"


async def test_the_bridge_can_not_create_consumers_nor_write_a_seen_bucket(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """``tail`` needs a consumer: it runs with a reader's credentials, not the bridge's."""
    remediation = await users(REMEDIATION)
    await KVSeen.open(remediation.nc, SEEN_BUCKET)
    config = {"stream_name": STREAM, "config": {"ack_policy": "none", "filter_subject": ">"}}
    await stocked.refused_request(f"$JS.API.CONSUMER.CREATE.{STREAM}", json.dumps(config).encode())
    await stocked.refused_publish(f"$KV.{SEEN_BUCKET}.{KVSeen.key('uid/1')}", b"1")
    assert (await stocked.js.stream_info(STREAM)).state.consumer_count == 0
    assert (await remediation.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages == 0


@pytest.mark.parametrize(
    ("reader", "owner"), [(REMEDIATION, BRIDGE), (ALERTING, REMEDIATION), (BRIDGE, ALERTING)]
)
async def test_no_program_reads_another_ones_inbox(
    stocked: User, users: Callable[[str], Any], reader: str, owner: str
) -> None:
    """The owner's JetStream answers go to its inbox; the reader's subscription there is
    refused and gets none of them, while the owner gets its own."""
    eavesdropper = stocked if reader == BRIDGE else await users(reader)
    victim = stocked if owner == BRIDGE else await users(owner)
    overheard: list[str] = []

    async def keep(msg: Any) -> None:
        overheard.append(msg.subject)

    await eavesdropper.nc.subscribe(f"{INBOX[owner]}.>", cb=keep)
    await eventually(lambda: eavesdropper.violated("subscription", f"{INBOX[owner]}.>"), timeout=5)
    if owner == BRIDGE:
        assert (await victim.js.stream_info(STREAM)).state.messages == 20
    else:
        await read_all(victim, ["k8s.events.>"], 20)
    await victim.nc.flush()
    await eavesdropper.nc.flush()
    assert overheard == []


async def test_tail_with_the_bridges_user_says_what_is_missing(
    tmp_path: Path, stocked: User, server: Any, passwords: dict[str, str]
) -> None:
    """``tail`` needs a consumer, which the bridge's user may not create: a clear message and
    exit 1, no traceback, no password."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env.update(
        BRIDGE_NATS__SERVERS=json.dumps([server.url]),
        BRIDGE_NATS__USER=BRIDGE,
        BRIDGE_NATS__PASSWORD=passwords[BRIDGE],
    )
    exe = Path(sys.executable).parent / "k8s-event-bridge"
    done = await asyncio.to_thread(
        subprocess.run,
        [str(exe), "tail", "--all", "--count", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "may these credentials create a consumer" in done.stderr
    assert "Traceback" not in done.stderr
    assert passwords[BRIDGE] not in done.stderr + done.stdout


# -- the alerting pair (deploy/consumers/alerting.yaml): each replica runs as the StatefulSet
#    runs it, the user k8s-event-alerting with its durable from ALERTING_NATS__DURABLE (its
#    Pod's name), reads the stream back through <durable>-replay at start, reads every message

REPLICAS = ("k8s-event-alerting-0", "k8s-event-alerting-1")  # the StatefulSet's Pod names


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
