"""Least privilege on the NATS side (deploy/nats/, docs/deploy.md "NATS: least privilege per
program"): a real nats-server runs the shipped config fragment, made from permissions.json, with
a user per program. Each program works with its own user; what a user must not do is refused by
the server (a permissions violation) and leaves the stream, the buckets and the durables as
they were.

No program may create a stream, a bucket or a consumer (each has one shape, provisioned first by
an operator: ``OPERATOR`` here, a user of the account with every right, as an operator's own
credentials are); each program refuses a stream or bucket of another shape, and the bridge an
ack from another stream. The OTLP subscriber may publish its dead letters (into the dead-letter
stream the operator made) and nothing else outside its durable."""

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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
import yaml
from aiohttp import web
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

from bridge.core.converting import Converter
from bridge.errors import StreamConfigMismatch
from bridge.jetstream import streams
from bridge.jetstream.checkpoints import KvCheckpointStore
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings as BridgeNatsSettings
from k8s_event_common import streams as shapes
from k8s_event_consumer.consuming import Consumer, Handlers
from k8s_event_consumer.options import ConsumerOptions, Start
from k8s_event_consumer.otlp.settings import DeadLetterSettings
from k8s_event_consumer.seen import KVSeen
from k8s_event_sim.natsserver import NatsServer, binary, free_port
from k8s_event_sim.workload import make_event
from tests import provisioning
from tests.integration.harness import Bridges, ConsumerProcess, Writer, bridge_config, eventually
from tests.otlp_endpoint import Endpoint
from tools import natsperms

pytestmark = pytest.mark.integration

BRIDGE, ALERTING, REMEDIATION, OTLP, DIGESTS = natsperms.PROGRAMS
SUBSCRIBERS = (ALERTING, REMEDIATION, OTLP)
STREAM = "K8S_EVENTS"
DEAD_STREAM = "K8S_EVENTS_DEAD"  # the OTLP subscriber's dead letters, on DEAD_SUBJECT
DEAD_SUBJECT = "k8s.dead.otlp"
CHECKPOINT_BUCKET = "k8s_event_bridge"
SEEN_BUCKET = "k8s_event_remediation"
INBOX = {p: "_INBOX_" + p.replace("-", "_") for p in natsperms.PROGRAMS}
OPERATOR = "operator"  # not a program: the operator's own user (provisions, inspects)
SPY = "spy-"  # spy-<program>: a user of that program's account allowed everything (tests only)
INBOX[OPERATOR] = "_INBOX"
REFUSED_WITHIN = 1.0  # seconds a refused request waits for the answer that never comes


# ----------------------------------------------------------------------------- the server


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A password per program, in the environment variables the fragment names (nats-server
    inherits them). nats-server parses a variable's value as a config value: a password
    that starts with a letter and holds letters and digits only is taken as a string."""
    out = {p: "p" + secrets.token_hex(16) for p in (*natsperms.PROGRAMS, OPERATOR)}
    for program, password in out.items():
        monkeypatch.setenv(natsperms.password_variable(program), password)
    return out


@pytest.fixture
def server(tmp_path: Path, passwords: dict[str, str]) -> Any:
    """nats-server -js with deploy/nats/nats-server.conf included, as an operator would."""
    d = tmp_path / "authnats"
    d.mkdir()
    # the shipped fragment, its users as they are, and the operator's user in the account
    operator = (
        f'      {{"user": "{OPERATOR}", "password": ${natsperms.password_variable(OPERATOR)}}},\n'
    )
    fragment = natsperms.CONF.read_text().replace(
        '    "users": [\n', '    "users": [\n' + operator, 1
    )
    assert operator in fragment
    # and a spy in each program's account: it sees what lands there (answers included)
    for program in natsperms.PROGRAMS:
        head = f'  "{natsperms.account_of(program)}": {{\n    "users": [\n'
        spy = f'      {{"user": "{SPY}{program}", "password": "{SPY}"}},\n'
        assert head in fragment, head
        fragment = fragment.replace(head, head + spy, 1)
    (d / "k8s-event-bridge.conf").write_text(fragment)
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


def operator_settings(server: NatsServer, passwords: dict[str, str]) -> BridgeNatsSettings:
    return BridgeNatsSettings(
        servers=[server.url], user=OPERATOR, password=passwords[OPERATOR], inbox_prefix="_INBOX"
    )


@pytest.fixture
async def provisioned(server: NatsServer, passwords: dict[str, str]) -> None:
    """The stream, the checkpoint bucket and the remediation worker's bucket, made by the
    operator with ``k8s-event-bridge provision``'s code (the programs' users may not)."""
    settings = operator_settings(server, passwords)
    assert await streams.provision(settings, CHECKPOINT_BUCKET, [SEEN_BUCKET]) == 0


async def provision_durable(users: Callable[[str], Any], durable: str, subjects: list[str]) -> None:
    """A subscriber's durable, made by the operator with the kit (the subscriber's own user may
    only bind to it), with the options ``read_all`` reads with."""
    operator = await users(OPERATOR)
    c = await Consumer.open(
        operator.nc,
        stream=STREAM,
        durable=durable,
        subjects=subjects,
        options=READ_OPTIONS,
        start=Start.all(),
    )
    await c._sub.unsubscribe()


@pytest.fixture
async def stocked(provisioned: None, users: Callable[[str], Any]) -> User:
    """The stream with 20 Events and the checkpoint bucket with a checkpoint, written by the
    bridge's user into what the operator provisioned."""
    bridge = await users(BRIDGE)
    for subject, body, headers in cloud_events(20):
        await bridge.js.publish(subject, body, headers=headers)
    store = await KvCheckpointStore.open(bridge.nc, CHECKPOINT_BUCKET)
    await store.save("test.all", 119)
    return bridge


READ_OPTIONS = ConsumerOptions(fetch_timeout=0.5)


async def read_all(
    user: User, subjects: list[str], want: int, seen: Any = None, users: Any = None
) -> Consumer:
    """The kit's ``Consumer`` with the subscriber's credentials: its durable (provisioned by
    the operator first when ``users`` is given) bound, every message handled and acked;
    returns the stopped consumer."""
    if users is not None:
        await provision_durable(users, user.program, subjects)
    consumer = await Consumer.open(
        user.nc,
        stream=STREAM,
        durable=user.program,
        subjects=subjects,
        options=READ_OPTIONS,
        start=Start.all(),
        seen=seen,
        subject_prefix="k8s.events",
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
    assert not natsperms.stale(), f"deploy/nats/ is stale: {natsperms.COMMAND}"
    wanted = json.loads(natsperms.PERMISSIONS.read_text())
    assert sorted(wanted) == sorted(natsperms.PROGRAMS)
    accounts = _fragment_as_json(natsperms.CONF.read_text())["accounts"]
    assert accounts == _fragment_as_json(natsperms.conf(wanted))["accounts"]
    users = {u["user"]: (name, u) for name, a in accounts.items() for u in a["users"]}
    assert sorted(users) == sorted(natsperms.PROGRAMS)
    for program, (account, user) in users.items():
        assert user["permissions"] == wanted[program], program
        assert user["password"] == "$" + natsperms.password_variable(program)
        # one account per program, none with JetStream; the owner has no program's user
        assert account == natsperms.account_of(program) != natsperms.ACCOUNT
        assert [u["user"] for u in accounts[account]["users"]] == [program]
        assert "jetstream" not in accounts[account]
    assert accounts[natsperms.ACCOUNT]["jetstream"] == "enabled"
    assert accounts[natsperms.ACCOUNT]["users"] == []


def test_each_programs_account_imports_what_its_user_may_publish_and_nothing_else() -> None:
    """Every subject a program's user may publish is a service of KUBE_EVENTS, exported to that
    program's account alone (or to each that imports it); a pull request's answers are a
    stream. $JS.API.INFO is imported too, and only so that the server does not answer the
    account's JetStream requests itself."""
    wanted = json.loads(natsperms.PERMISSIONS.read_text())
    accounts = _fragment_as_json(natsperms.CONF.read_text())["accounts"]
    exports = {e["service"]: e for e in accounts[natsperms.ACCOUNT]["exports"]}
    for program in natsperms.PROGRAMS:
        account = natsperms.account_of(program)
        imported = [i["service"]["subject"] for i in accounts[account]["imports"]]
        assert all(
            i["service"]["account"] == natsperms.ACCOUNT for i in accounts[account]["imports"]
        )
        assert imported == [natsperms.SHADOW, *wanted[program]["publish"]["allow"]], program
        for subject in imported:
            assert account in exports[subject]["accounts"], (program, subject)
    for subject, export in exports.items():
        importers = [
            natsperms.account_of(p)
            for p in natsperms.PROGRAMS
            if subject == natsperms.SHADOW or subject in wanted[p]["publish"]["allow"]
        ]
        assert export["accounts"] == importers, subject
        want = "stream" if subject.startswith("$JS.API.CONSUMER.MSG.NEXT.") else "singleton"
        assert export["response_type"] == want, subject
    # operator mode takes the same accounts (e2e/natsauth signs them from accounts.json)
    doc = json.loads(natsperms.ACCOUNTS.read_text())
    assert doc["owner"] == natsperms.ACCOUNT
    assert doc["accounts"] == natsperms.accounts(wanted)


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


async def _taking_alertmanager() -> tuple[str, list[Any], Callable[[], Any]]:
    """An Alertmanager's API as far as this test needs it: it holds no alert (the alerting
    subscriber's read-back at start finds none) and takes every alert POSTed (kept in ``taken``).
    The alerts themselves are tests/integration/test_alerting.py's, with a real Alertmanager."""
    taken: list[Any] = []

    async def alerts(request: web.Request) -> web.Response:
        if request.method == "POST":
            taken.extend(await request.json())
        return web.json_response([])

    app = web.Application()
    app.router.add_route("*", "/api/v2/alerts", alerts)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}", taken, runner.cleanup


async def test_each_program_works_with_its_own_user(
    tmp_path: Path,
    server: NatsServer,
    passwords: dict[str, str],
    sim: Any,
    kubeconfig: Path,
    users: Callable[[str], Any],
) -> None:
    """Provisioned first by the operator (``k8s-event-bridge provision``, each subscriber's
    ``provision``), as docs/deploy.md says: the real bridge publishes the simulated API
    server's Events and keeps its checkpoint; the real remediation worker (dry run), alerting
    subscriber (its read-back at start included) and OTLP subscriber (its dead-letter stream
    checked, every Event sent to an endpoint) read them through their durables and ack each;
    the server logs no violation."""
    bridges = Bridges(tmp_path)
    subscribers: list[ConsumerProcess] = []
    operator = {"user": OPERATOR, "password": passwords[OPERATOR]}
    await provisioning.bridge([server.url], **operator)
    endpoint = await Endpoint().start()
    alertmanager, taken, stop_alertmanager = await _taking_alertmanager()
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
                    # no Event alerts (no reason kept); the bridge's first answer
                    # (apiserver_reachable) is a resolved alert, taken by the stand-in
                    "alertmanager": {"urls": [alertmanager], "attempts": 1},
                    "alerts": {"reasons": ["NoSuchReason"], "recover_window": "1h"},
                },
            ),
            (
                OTLP,
                "k8s_event_consumer.otlp",
                {"otlp": {"endpoint": endpoint.url, "flush_interval": "200ms"}},
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
            await provisioning.subscriber(module, cfg, [server.url], **operator)
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
        assert set(w.ids) <= set(endpoint.accepted)
        assert taken, "the alerting subscriber sent Alertmanager nothing"
        for p in [bridge, *subscribers]:
            p.signal(signal.SIGTERM)
            assert await p.wait_exit(30) == 0, p.logs()[-3000:]
        log = await asyncio.to_thread(Path(server.log_path).read_text)
        assert "Violation" not in log, [ln for ln in log.splitlines() if "Violation" in ln]
    finally:
        bridges.kill_all()
        for p in subscribers:
            p.kill()
        await endpoint.stop()
        await stop_alertmanager()


async def _published(bridge: Any, n: int) -> bool:
    return bool(await bridge.metric("events_published") >= n)


async def test_each_subscriber_reads_through_its_own_durable_and_acks(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """The kit's Consumer with the subscriber's credentials and inbox prefix: the durable the
    operator provisioned (one subject filter, and two) bound, each message handled and acked;
    the remediation worker's Seen bucket (provisioned) written."""
    alerting = await users(ALERTING)
    remediation = await users(REMEDIATION)
    otlp = await users(OTLP)
    await read_all(alerting, ["k8s.events.test.>", "k8s.events.other.>"], 20, users=users)
    await read_all(
        remediation,
        ["k8s.events.>"],
        20,
        seen=await KVSeen.open(remediation.nc, SEEN_BUCKET),
        users=users,
    )
    await read_all(otlp, ["k8s.events.>"], 20, users=users)
    for u in (alerting, remediation, otlp):
        c = await u.js.consumer_info(STREAM, u.program)
        assert c.ack_floor.stream_seq == 20 and c.num_ack_pending == 0
        assert not u.errors
    assert (await remediation.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages == 20


async def test_the_alerting_subscribers_read_back_reads_a_large_stream_with_no_consumer(
    provisioned: None, users: Callable[[str], Any]
) -> None:
    """Its read-back at start gets the messages one after the other
    ($JS.API.STREAM.MSG.GET.<stream>, next by subject), from a time on: no consumer, so its
    user needs no consumer create subject (whose holder could make a push consumer delivering
    into any inbox)."""
    from k8s_event_consumer.replaying import replay

    bridge = await users(BRIDGE)
    n = 600
    for i in range(0, n, 150):
        await asyncio.gather(
            *(
                bridge.js.publish(subject, body, headers=headers)
                for subject, body, headers in cloud_events(150, seed=100 + i)
            )
        )
    alerting = await users(ALERTING)
    past = Start.at_time(datetime.now(UTC) - timedelta(hours=1))
    got = [
        d.id
        async for d in replay(
            alerting.nc, stream=STREAM, subject="k8s.events.>", start=past, gets=True
        )
    ]
    assert len(got) == n == len(set(got))
    assert (await bridge.js.stream_info(STREAM)).state.consumer_count == 0  # none made
    assert not alerting.errors
    # no create subject is among its permissions, the unnamed one least
    await alerting.refused_request(
        f"$JS.API.CONSUMER.CREATE.{STREAM}",
        json.dumps({"stream_name": STREAM, "config": {"ack_policy": "none"}}).encode(),
    )


@pytest.mark.parametrize("program", [BRIDGE, REMEDIATION])
async def test_a_bucket_the_operator_made_with_direct_gets_is_refused(
    server: NatsServer, users: Callable[[str], Any], program: str
) -> None:
    """A bucket the operator made with direct gets on (the nats CLI's default) is refused by
    the program that uses it, naming ``allow_direct``: a direct get is answered with the
    stored message itself on any reply subject, an Event subject too
    (tests/integration/test_attack_nats.py)."""
    operator = await users(OPERATOR)
    u = await users(program)
    if program == BRIDGE:
        await operator.js.create_key_value(bucket=CHECKPOINT_BUCKET, history=5, direct=True)
        with pytest.raises(StreamConfigMismatch, match="allow_direct"):
            await KvCheckpointStore.open(u.nc, CHECKPOINT_BUCKET)
    else:
        ttl = 7 * 86400.0
        await operator.js.create_key_value(bucket=SEEN_BUCKET, history=1, ttl=ttl, direct=True)
        with pytest.raises(shapes.ShapeMismatch, match="allow_direct"):
            await KVSeen.open(u.nc, SEEN_BUCKET)
    assert not u.errors


# ----------------------------------------------------------------------------- what is refused

# -- no program chooses a stream's shape (issue 31): not by creating one, not by accepting one

TEAM_B = "k8s.events.team-b.>"


@pytest.mark.parametrize(
    ("program", "stream", "config"),
    [
        # the bridge's stream with rollups: one publish with Nats-Rollup: all empties it
        (BRIDGE, STREAM, {"subjects": ["k8s.events.>"], "allow_rollup_hdrs": True}),
        (BRIDGE, f"KV_{CHECKPOINT_BUCKET}", {"subjects": [f"$KV.{CHECKPOINT_BUCKET}.>"]}),
        # the worker's bucket copying each write into another team's Event subjects
        (
            REMEDIATION,
            f"KV_{SEEN_BUCKET}",
            {
                "subjects": [f"$KV.{SEEN_BUCKET}.>"],
                "allow_rollup_hdrs": True,
                "republish": {"src": f"$KV.{SEEN_BUCKET}.>", "dest": TEAM_B},
            },
        ),
        (ALERTING, STREAM, {"subjects": ["k8s.events.>"]}),
    ],
    ids=["bridge-stream-rollup", "bridge-bucket", "remediation-bucket-republish", "alerting"],
)
async def test_no_program_may_create_a_stream_or_a_bucket_while_it_is_missing(
    server: NatsServer,
    users: Callable[[str], Any],
    program: str,
    stream: str,
    config: dict[str, Any],
) -> None:
    """First start, after ``nats kv rm``, after storage loss: the stream or bucket is missing,
    and the program's user still may not make it, in any shape."""
    u = await users(program)
    body = json.dumps({"name": stream, "storage": "file", **config}).encode()
    await u.refused_request(f"$JS.API.STREAM.CREATE.{stream}", body)
    operator = await users(OPERATOR)
    assert await shapes.read_config(operator.nc, stream) is None


async def test_a_bridge_started_before_provisioning_waits_and_says_so(
    tmp_path: Path,
    server: NatsServer,
    passwords: dict[str, str],
    kubeconfig: Path,
    users: Callable[[str], Any],
) -> None:
    """First start before the operator provisioned: the bridge's create gets no answer; it
    waits, not ready, naming what to do; once provisioned it checks the stream and runs."""
    nats_section = {"user": BRIDGE, "password": passwords[BRIDGE], "inbox_prefix": INBOX[BRIDGE]}
    bridges = Bridges(tmp_path)
    try:
        bridge = bridges.start(bridge_config(tmp_path, server.url, kubeconfig, nats=nats_section))

        def told() -> bool:
            return any("provision" in e["error"] for e in bridge.log_events("ensure_stream_failed"))

        await eventually(told, timeout=30)
        operator = await users(OPERATOR)
        assert await shapes.read_config(operator.nc, STREAM) is None
        assert (
            await streams.provision(operator_settings(server, passwords), CHECKPOINT_BUCKET, [])
            == 0
        )
        await bridge.wait_ready()
    finally:
        bridges.kill_all()


async def test_the_remediation_worker_does_not_make_its_missing_bucket(
    server: NatsServer, users: Callable[[str], Any]
) -> None:
    """The kit tries (a development convenience with an all-powerful user) and is refused."""
    remediation = await users(REMEDIATION)
    with pytest.raises(nats.js.errors.NotFoundError, match="provision"):
        await KVSeen.open(remediation.nc, SEEN_BUCKET)
    operator = await users(OPERATOR)
    assert await shapes.read_config(operator.nc, f"KV_{SEEN_BUCKET}") is None


@pytest.mark.parametrize(
    "consumer", [ALERTING, f"{ALERTING}-0", f"{ALERTING}-replay", REMEDIATION, None]
)
async def test_the_alerting_user_can_not_make_a_push_consumer_into_another_ones_inbox(
    stocked: User, users: Callable[[str], Any], consumer: str | None
) -> None:
    """Not under its own durable's name, not under its read-back's, not unnamed: its user has
    no consumer create subject at all (the durables are provisioned)."""
    alerting = await users(ALERTING)
    config = {
        "ack_policy": "none",
        "deliver_subject": f"{INBOX[REMEDIATION]}.stolen",
        **({"name": consumer, "durable_name": consumer} if consumer else {}),
    }
    subject = f"$JS.API.CONSUMER.CREATE.{STREAM}" + (f".{consumer}" if consumer else "")
    body = json.dumps({"stream_name": STREAM, "config": config}).encode()
    await alerting.refused_request(subject, body)
    await alerting.refused_request(f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{ALERTING}", body)
    assert (await stocked.js.stream_info(STREAM)).state.consumer_count == 0


CHANGED = {
    "allow_rollup_hdrs": {"allow_rollup_hdrs", "deny_purge"},
    "deny_purge": {"deny_purge"},
    "sources": {"sources"},
    "republish": {"republish"},
}


def weakened_stream(change: str) -> dict[str, Any]:
    """The shipped K8S_EVENTS with one key an admin set otherwise (JetStream's JSON)."""
    config = streams.wanted_config(BridgeNatsSettings()).as_dict()
    changes: dict[str, dict[str, Any]] = {
        # JetStream takes rollups only where purges are allowed (the shape denies both)
        "allow_rollup_hdrs": {"allow_rollup_hdrs": True, "deny_purge": False},
        "deny_purge": {"deny_purge": False},
        "sources": {"sources": [{"name": "ELSEWHERE"}]},
        "republish": {"republish": {"src": "k8s.events.>", "dest": "elsewhere.>"}},
    }
    return {**config, **changes[change]}


async def operator_creates(users: Callable[[str], Any], config: dict[str, Any]) -> None:
    operator = await users(OPERATOR)
    body = json.dumps(config).encode()
    msg = await operator.nc.request(f"$JS.API.STREAM.CREATE.{config['name']}", body, timeout=5)
    assert "error" not in json.loads(msg.data), msg.data


@pytest.mark.parametrize("change", ["allow_rollup_hdrs", "deny_purge", "sources", "republish"])
async def test_the_bridge_refuses_a_stream_an_admin_made_in_another_shape(
    tmp_path: Path,
    server: NatsServer,
    passwords: dict[str, str],
    kubeconfig: Path,
    users: Callable[[str], Any],
    change: str,
) -> None:
    """It exits 1 (as for any stream it can not use) naming the key, publishes nothing: one
    ``Nats-Rollup: all`` can not cut a stream it never fed."""
    await operator_creates(users, weakened_stream(change))
    nats_section = {"user": BRIDGE, "password": passwords[BRIDGE], "inbox_prefix": INBOX[BRIDGE]}
    bridges = Bridges(tmp_path)
    try:
        bridge = bridges.start(bridge_config(tmp_path, server.url, kubeconfig, nats=nats_section))
        assert await bridge.wait_exit(30) == 1, bridge.logs()[-2000:]
    finally:
        bridges.kill_all()
    differs = bridge.log_events("stream_config_differs")
    assert [e["key"] for e in differs] == sorted(weakened_stream(change).keys() & CHANGED[change])
    assert any(change in e.get("error", "") for e in bridge.log_events("stream_unusable"))
    operator = await users(OPERATOR)
    assert (await operator.js.stream_info(STREAM)).state.messages == 0


async def test_a_stream_remade_in_another_shape_while_the_bridge_runs_stops_it(
    tmp_path: Path,
    provisioned: None,
    server: NatsServer,
    passwords: dict[str, str],
    sim: Any,
    kubeconfig: Path,
    users: Callable[[str], Any],
) -> None:
    """Deleted and remade by an admin with rollups while the bridge runs: its next check (soon
    after no stream answered) finds the shape changed; no ack of it counts any more, and the
    bridge stops (exit 1, ``stream_refused`` naming the keys)."""
    nats_section = {"user": BRIDGE, "password": passwords[BRIDGE], "inbox_prefix": INBOX[BRIDGE]}
    bridges = Bridges(tmp_path)
    try:
        bridge = bridges.start(bridge_config(tmp_path, server.url, kubeconfig, nats=nats_section))
        await bridge.wait_ready()
        w = Writer(sim)
        await w.write(5)
        await eventually(lambda: _published(bridge, len(w.ids)), timeout=30)
        operator = await users(OPERATOR)
        await operator.js.delete_stream(STREAM)
        await w.write(5)  # no stream answers these

        async def unanswered() -> bool:
            return bool(await bridge.metric("publish_failures", 'reason="no_responders"') >= 1)

        await eventually(unanswered, timeout=30)
        await operator_creates(users, weakened_stream("allow_rollup_hdrs"))
        assert await bridge.wait_exit(60) == 1, bridge.logs()[-2000:]
    finally:
        bridges.kill_all()
    (refused,) = bridge.log_events("stream_refused")
    assert "allow_rollup_hdrs" in refused["error"] and "deny_purge" in refused["error"]


async def test_provision_names_an_older_bridges_stream_and_updates_it_when_told(
    server: NatsServer, passwords: dict[str, str], users: Callable[[str], Any]
) -> None:
    """The stream as earlier bridges made it (deletes and purges allowed): ``provision``
    names both keys and leaves it (exit 1); ``--update`` turns them on, keeps the messages,
    and a second run finds nothing to do."""
    old = {
        "name": STREAM,
        "subjects": ["k8s.events.>"],
        "storage": "file",
        "max_age": 7 * 86400 * 10**9,
        "max_bytes": -1,
        "num_replicas": 1,
        "duplicate_window": 7200 * 10**9,
    }
    await operator_creates(users, old)
    bridge = await users(BRIDGE)
    for subject, body, headers in cloud_events(3):
        await bridge.js.publish(subject, body, headers=headers)
    auth = {"user": OPERATOR, "password": passwords[OPERATOR]}
    with pytest.raises(AssertionError, match="exited 1"):
        await provisioning.bridge([server.url], **auth)
    operator = await users(OPERATOR)
    have = await shapes.read_config(operator.nc, STREAM)
    assert have is not None and not have["deny_delete"] and not have["deny_purge"]
    updated = await provisioning.bridge([server.url], **auth, args=("--update",))
    assert provisioned_status(updated)[STREAM] == "updated"
    have = await shapes.read_config(operator.nc, STREAM)
    assert have is not None and have["deny_delete"] and have["deny_purge"]
    assert await messages(bridge) == 3
    again = await provisioning.bridge([server.url], **auth)
    assert set(provisioned_status(again).values()) == {"unchanged"}


def provisioned_status(log: str) -> dict[str, str]:
    """{stream: status} from ``provision``'s log lines."""
    lines = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{")]
    return {e["stream"]: e["status"] for e in lines if e.get("event") == "provisioned"}


async def test_the_bridge_refuses_a_checkpoint_bucket_with_a_republish(
    provisioned: None, server: NatsServer, passwords: dict[str, str], users: Callable[[str], Any]
) -> None:
    operator = await users(OPERATOR)
    await operator.js.delete_stream(f"KV_{CHECKPOINT_BUCKET}")  # `nats kv rm`, then remade
    config = {
        **streams.checkpoint_config(CHECKPOINT_BUCKET, BridgeNatsSettings()).as_dict(),
        "republish": {"src": f"$KV.{CHECKPOINT_BUCKET}.>", "dest": TEAM_B},
    }
    await operator_creates(users, config)
    bridge = await users(BRIDGE)
    with pytest.raises(StreamConfigMismatch, match="republish"):
        await KvCheckpointStore.open(bridge.nc, CHECKPOINT_BUCKET)


@pytest.mark.parametrize("program", [REMEDIATION, ALERTING, OTLP])
async def test_a_subscriber_refuses_a_stream_with_rollups(
    tmp_path: Path,
    server: NatsServer,
    passwords: dict[str, str],
    kubeconfig: Path,
    users: Callable[[str], Any],
    program: str,
) -> None:
    """The real subscriber process, on its own user, exits 1 naming the key (the OTLP
    subscriber's dead-letter stream provisioned: it checks that one first)."""
    await operator_creates(users, weakened_stream("allow_rollup_hdrs"))
    if program == OTLP:
        await operator_creates(users, dead_letter_config())
    module = f"k8s_event_consumer.{program.removeprefix('k8s-event-')}"
    sections: dict[str, Any] = {
        "nats": {
            "servers": [server.url],
            "user": program,
            "password": passwords[program],
            "inbox_prefix": INBOX[program],
        },
        "http": {"host": "127.0.0.1", "port": free_port()},
        "log": {"level": "info", "format": "json"},
    }
    if program == REMEDIATION:
        sections["kubernetes"] = {"cluster": "test", "kubeconfig": str(kubeconfig)}
    elif program == ALERTING:
        sections["alertmanager"] = {"urls": [f"http://127.0.0.1:{free_port()}"]}
    else:
        sections["otlp"] = {"endpoint": f"http://127.0.0.1:{free_port()}"}
    cfg = tmp_path / f"{program}.yaml"
    cfg.write_text(yaml.safe_dump(sections))
    p = ConsumerProcess(cfg, tmp_path / f"{program}.log", module=module).start()
    try:
        assert await p.wait_exit(30) == 1, p.logs()[-2000:]
    finally:
        p.kill()
    assert "allow_rollup_hdrs" in p.logs()
    assert "stream_refused" in p.logs()


async def test_the_remediation_worker_refuses_its_bucket_with_a_republish(
    tmp_path: Path,
    stocked: User,
    server: NatsServer,
    passwords: dict[str, str],
    kubeconfig: Path,
    users: Callable[[str], Any],
) -> None:
    """The bucket lost and remade by someone with a republish into another team's Event
    subjects: the worker refuses it (exit 1, naming ``republish``), writes no id into it, and so
    stores no forged Event under ``k8s.events.team-b``."""
    operator = await users(OPERATOR)
    await operator.js.delete_stream(f"KV_{SEEN_BUCKET}")
    config = {
        **shapes.seen_bucket(SEEN_BUCKET).as_dict(),
        "republish": {"src": f"$KV.{SEEN_BUCKET}.>", "dest": TEAM_B},
    }
    await operator_creates(users, config)
    remediation = await users(REMEDIATION)
    with pytest.raises(shapes.ShapeMismatch, match="republish"):
        await KVSeen.open(remediation.nc, SEEN_BUCKET)
    cfg = tmp_path / "remediation.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "nats": {
                    "servers": [server.url],
                    "user": REMEDIATION,
                    "password": passwords[REMEDIATION],
                    "inbox_prefix": INBOX[REMEDIATION],
                },
                "kubernetes": {"cluster": "test", "kubeconfig": str(kubeconfig)},
                "http": {"host": "127.0.0.1", "port": free_port()},
                "log": {"level": "info", "format": "json"},
            }
        )
    )
    p = ConsumerProcess(cfg, tmp_path / "remediation.log").start()
    try:
        assert await p.wait_exit(30) == 1, p.logs()[-2000:]
    finally:
        p.kill()
    assert "republish" in p.logs()
    assert (await operator.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages == 0
    assert await messages(stocked) == 20  # nothing republished into the Events


@pytest.mark.parametrize("fast_path", [True, False], ids=["ack-tap", "subscription"])
async def test_an_ack_from_a_stream_not_the_bridges_is_refused_and_counted(
    server: NatsServer, passwords: dict[str, str], users: Callable[[str], Any], fast_path: bool
) -> None:
    """K8S_EVENTS missing, someone's stream takes its subjects: its acks are no acks of the
    bridge's stream. Each is counted (``wrong_stream``), logged, the message sent again, the
    checkpoint not moved; once K8S_EVENTS takes the subjects, it settles."""
    from bridge.core.messages import Outgoing
    from bridge.core.progress import Progress
    from bridge.core.queueing import BoundedQueue
    from bridge.jetstream.publishing import Publisher
    from bridge.metrics import Metrics

    operator = await users(OPERATOR)
    await operator.js.add_stream(StreamConfig(name="CAPTURED", subjects=["k8s.events.>"]))
    bridge = await users(BRIDGE)
    pub = Publisher(bridge.nc, Metrics(), stream=STREAM, ack_timeout=0.2, fast_path=fast_path)
    await pub.start()
    assert pub.tapped is fast_path  # both ways an ack comes in: fastpath.AckTap, nats-py's
    q: BoundedQueue[Outgoing] = BoundedQueue(10, 1 << 20)
    progress = Progress(0)
    ev = make_event(random.Random(3), i=1)
    ev["metadata"].update(uid="uid-captured", resourceVersion="1")
    msg = Converter("test", "k8s.events", "structured").convert(ev)
    await q.put(Outgoing(msg, progress.pending(1)), msg.wire_size)
    tasks = [asyncio.create_task(pub.run(q)), asyncio.create_task(pub.reap(0.05))]
    try:
        await eventually(lambda: pub._m.failed.labels("wrong_stream")._value.get() >= 2, 10)
        assert progress.safe_rv == 0 and pub.in_flight == 1
        assert pub._m.published.value == 0
        await operator.js.delete_stream("CAPTURED")
        settings = operator_settings(server, passwords)
        assert await streams.provision(settings, CHECKPOINT_BUCKET, []) == 0
        await eventually(lambda: progress.safe_rv == 1, 10)
    finally:
        for t in tasks:
            t.cancel()


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
    for program in (ALERTING, OTLP):
        u = await users(program)
        await u.refused_publish(f"$KV.{SEEN_BUCKET}.{KVSeen.key('uid/1')}", b"1")
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
    await read_all(remediation, ["k8s.events.>"], 20, users=users)
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
    await read_all(remediation, ["k8s.events.>"], 20, users=users)
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
    ("reader", "owner"),
    [(REMEDIATION, BRIDGE), (ALERTING, REMEDIATION), (BRIDGE, ALERTING), (OTLP, REMEDIATION),
     (ALERTING, OTLP)],
)  # fmt: skip
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
        await read_all(victim, ["k8s.events.>"], 20, users=users)
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
    """The stream checked and ``n`` status events published, as the bridge's user; the last
    stream sequence."""
    nc = await nats.connect(
        server.url, user=BRIDGE, password=password, inbox_prefix="_INBOX_k8s_event_bridge"
    )
    try:
        js = nc.jetstream()
        await ensure_stream(nc, BridgeNatsSettings(servers=[server.url]))
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
    tmp_path: Path, server: NatsServer, passwords: dict[str, str], provisioned: None
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
            await provisioning.subscriber(
                "k8s_event_consumer.alerting",
                cfg,
                [server.url],
                user=OPERATOR,
                password=passwords[OPERATOR],
                env=env,
            )
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


# -- the OTLP subscriber (deploy/consumers/otlp.yaml): one durable shared by its replicas, and
#    its dead letters published through JetStream into the dead-letter stream the operator made


def dead_letter_shape() -> StreamConfig:
    """K8S_EVENTS_DEAD as ``k8s-event-otlp provision`` makes it with the default settings."""
    dl = DeadLetterSettings()
    assert (dl.stream, dl.subject) == (DEAD_STREAM, DEAD_SUBJECT)
    return shapes.dead_letter_stream(dl.stream, [dl.subject], max_age=dl.max_age)


def dead_letter_config() -> dict[str, Any]:
    """That shape as JetStream's JSON."""
    return dead_letter_shape().as_dict()  # type: ignore[no-any-return]


async def dead_letters(users: Callable[[str], Any]) -> int:
    operator = await users(OPERATOR)
    return int((await operator.js.stream_info(DEAD_STREAM)).state.messages)


async def test_the_otlp_user_may_publish_its_dead_letters_and_no_one_else_may(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """Into the dead-letter stream the operator made: its publish is stored (a PubAck of
    K8S_EVENTS_DEAD). Another subject of the dead-letter kind is refused it, and its subject
    is refused every other program (no one else writes its dead letters)."""
    await operator_creates(users, dead_letter_config())
    otlp = await users(OTLP)
    ack = await otlp.js.publish(DEAD_SUBJECT, b"{}", headers={"Nats-Msg-Id": "uid-1/1"}, timeout=5)
    assert ack.stream == DEAD_STREAM and ack.seq == 1
    await otlp.refused_request("k8s.dead.other", b"{}")
    for program in (ALERTING, REMEDIATION):
        u = await users(program)
        await u.refused_publish(DEAD_SUBJECT, b"{}")
    await stocked.refused_publish(DEAD_SUBJECT, b"{}")
    assert await dead_letters(users) == 1
    assert otlp.errors and all("k8s.dead.other" in e for e in otlp.errors)  # that one only


async def test_the_otlp_user_can_not_create_change_or_delete_a_stream_or_a_consumer(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """Not the dead-letter stream while it is missing, nor once it is there (update, purge,
    delete); not its durable (create it, change it into a push consumer delivering into
    another program's inbox, delete it), not an unnamed consumer, not one on the dead-letter
    stream. The durable and the dead-letter stream stay as the operator made them."""
    otlp = await users(OTLP)
    body = json.dumps(dead_letter_config()).encode()
    await otlp.refused_request(f"$JS.API.STREAM.CREATE.{DEAD_STREAM}", body)
    operator = await users(OPERATOR)
    assert await shapes.read_config(operator.nc, DEAD_STREAM) is None
    await operator_creates(users, dead_letter_config())
    await operator.js.publish(DEAD_SUBJECT, b"{}", headers={"Nats-Msg-Id": "uid-1/1"})
    await otlp.refused_request(f"$JS.API.STREAM.UPDATE.{DEAD_STREAM}", body)
    await otlp.refused_request(f"$JS.API.STREAM.PURGE.{DEAD_STREAM}", b"{}")
    await otlp.refused_request(f"$JS.API.STREAM.DELETE.{DEAD_STREAM}")
    await provision_durable(users, OTLP, ["k8s.events.>"])
    push = {
        "name": OTLP,
        "durable_name": OTLP,
        "ack_policy": "none",
        "deliver_subject": f"{INBOX[REMEDIATION]}.stolen",
    }
    request = json.dumps({"stream_name": STREAM, "config": push}).encode()
    await otlp.refused_request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{OTLP}", request)
    await otlp.refused_request(f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{OTLP}", request)
    await otlp.refused_request(f"$JS.API.CONSUMER.CREATE.{STREAM}", request)
    await otlp.refused_request(f"$JS.API.CONSUMER.DELETE.{STREAM}.{OTLP}")
    dead = {"stream_name": DEAD_STREAM, "config": {"ack_policy": "none"}}
    await otlp.refused_request(f"$JS.API.CONSUMER.CREATE.{DEAD_STREAM}", json.dumps(dead).encode())
    c = await operator.js.consumer_info(STREAM, OTLP)
    assert c.config.deliver_subject is None and c.config.ack_policy == "explicit"
    assert (await operator.js.stream_info(STREAM)).state.consumer_count == 1
    have = await shapes.read_config(operator.nc, DEAD_STREAM)
    assert have is not None and shapes.differences(have, dead_letter_shape()) == []
    assert await dead_letters(users) == 1
    assert await messages(stocked) == 20


def otlp_config(
    tmp_path: Path, server: NatsServer, password: str, endpoint: str, name: str = "otlp"
) -> Path:
    """deploy/consumers/otlp.yaml's config as the test runs it: its own user and inbox, the
    endpoint in the test, test-sized ack wait, flush and back-off."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "nats": {"servers": [server.url], "user": OTLP, "password": password,
                         "inbox_prefix": INBOX[OTLP], "ack_wait": "3s"},
                "otlp": {"endpoint": endpoint, "flush_interval": "200ms",
                         "backoff_initial": "200ms", "backoff_max": "1s"},
                "http": {"host": "127.0.0.1", "port": free_port()},
                "log": {"level": "debug", "format": "json"},
            }
        )
    )  # fmt: skip
    return cfg


async def test_the_otlp_subscriber_ships_and_dead_letters_on_its_own_user(
    tmp_path: Path,
    stocked: User,
    server: NatsServer,
    passwords: dict[str, str],
    users: Callable[[str], Any],
) -> None:
    """``k8s-event-otlp provision`` with the operator's credentials makes the durable and the
    dead-letter stream; the real subscriber on its own user sends the stream's Events, puts
    the one record the endpoint refuses into the dead-letter stream, acks every message, and
    stops on SIGTERM; the server logs no violation."""
    ids = [headers["Nats-Msg-Id"] for _, _, headers in cloud_events(20)]  # as stocked
    endpoint = await Endpoint(refuse={ids[7]}).start()
    cfg = otlp_config(tmp_path, server, passwords[OTLP], endpoint.url)
    p = None
    try:
        await provisioning.subscriber(
            "k8s_event_consumer.otlp", cfg, [server.url], user=OPERATOR,
            password=passwords[OPERATOR],
        )  # fmt: skip
        p = ConsumerProcess(cfg, tmp_path / "otlp.log", module="k8s_event_consumer.otlp").start()
        await p.wait_ready(30)
        operator = await users(OPERATOR)

        async def settled() -> bool:
            c = await operator.js.consumer_info(STREAM, OTLP)
            return bool(c.ack_floor.stream_seq == 20 and not c.num_ack_pending)

        await eventually(settled, timeout=30)
        assert sorted(endpoint.accepted) == sorted(set(ids) - {ids[7]})
        assert await dead_letters(users) == 1
        dead = await operator.js.get_msg(DEAD_STREAM, 1)
        assert dead.headers and dead.headers["Nats-Msg-Id"].startswith(f"{ids[7]}:")
        p.signal(signal.SIGTERM)
        assert await p.wait_exit(30) == 0, p.logs()[-3000:]
        log = await asyncio.to_thread(Path(server.log_path).read_text)
        assert "Violation" not in log, [ln for ln in log.splitlines() if "Violation" in ln]
    finally:
        if p is not None:
            p.kill()
        await endpoint.stop()


async def test_the_otlp_subscriber_waits_for_its_dead_letter_stream_and_does_not_make_it(
    tmp_path: Path,
    stocked: User,
    server: NatsServer,
    passwords: dict[str, str],
    users: Callable[[str], Any],
) -> None:
    """Started before the operator provisioned: its create gets no answer; it waits, not
    ready, naming what to do, and makes nothing; once ``provision`` ran, it runs."""
    cfg = otlp_config(tmp_path, server, passwords[OTLP], f"http://127.0.0.1:{free_port()}")
    p = ConsumerProcess(cfg, tmp_path / "otlp.log", module="k8s_event_consumer.otlp").start()
    try:

        async def told() -> bool:
            return any("provision" in e["error"] for e in p.log_events("stream_unavailable"))

        await eventually(told, timeout=30)
        assert p.running()
        assert (await p.get("/readyz"))[0] == 503
        operator = await users(OPERATOR)
        assert await shapes.read_config(operator.nc, DEAD_STREAM) is None
        await provisioning.subscriber(
            "k8s_event_consumer.otlp", cfg, [server.url], user=OPERATOR,
            password=passwords[OPERATOR],
        )  # fmt: skip
        await p.wait_ready(30)
    finally:
        p.kill()


async def test_the_otlp_replicas_share_the_durable_a_held_batch_stays_with_one_until_stop(
    tmp_path: Path,
    stocked: User,
    server: NatsServer,
    passwords: dict[str, str],
    users: Callable[[str], Any],
) -> None:
    """Two replicas on the one durable, as the Deployment runs them, the endpoint answering
    503: the one that fetched the batch holds it past ``ack_wait`` (its in-progress acks keep
    JetStream from handing it to the other), and on SIGTERM hands it back (nak), so the other
    gets it; both on the subscriber's own user, and the server logs no violation."""
    endpoint = await Endpoint(answer=503).start()
    procs: list[ConsumerProcess] = []
    try:
        first = otlp_config(tmp_path, server, passwords[OTLP], endpoint.url, "otlp-a")
        await provisioning.subscriber(
            "k8s_event_consumer.otlp", first, [server.url], user=OPERATOR,
            password=passwords[OPERATOR],
        )  # fmt: skip
        for cfg in (first, otlp_config(tmp_path, server, passwords[OTLP], endpoint.url, "otlp-b")):
            p = ConsumerProcess(cfg, tmp_path / f"{cfg.stem}.log", module="k8s_event_consumer.otlp")
            procs.append(p.start())
        for p in procs:
            await p.wait_ready(30)
        operator = await users(OPERATOR)

        async def holding() -> ConsumerProcess | None:
            for p in procs:
                if await _gauge(p, "k8s_event_otlp_held_records"):
                    return p
            return None

        holder = await eventually(holding, timeout=30)
        (other,) = [p for p in procs if p is not holder]
        # back-off 0.2 s doubling to 1 s: ten requests are well past ack_wait (3 s)
        await eventually(lambda: endpoint.requests >= 10, timeout=30)
        c = await operator.js.consumer_info(STREAM, OTLP)
        assert (c.num_ack_pending, c.num_redelivered) == (20, 0)
        assert await _gauge(holder, "k8s_event_otlp_held_records") == 20
        assert await _gauge(other, "k8s_event_otlp_held_records") == 0
        holder.signal(signal.SIGTERM)
        assert await holder.wait_exit(30) == 0, holder.logs()[-3000:]

        async def taken_over() -> bool:
            return await _gauge(other, "k8s_event_otlp_held_records") == 20

        await eventually(taken_over, timeout=30)
        other.signal(signal.SIGTERM)
        assert await other.wait_exit(30) == 0, other.logs()[-3000:]
        assert endpoint.accepted == []
        log = await asyncio.to_thread(Path(server.log_path).read_text)
        assert "Violation" not in log, [ln for ln in log.splitlines() if "Violation" in ln]
    finally:
        for p in procs:
            p.kill()
        await endpoint.stop()


async def _gauge(proc: ConsumerProcess, name: str) -> float:
    _, text = await proc.get("/metrics")
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name))
