"""NATS in operator mode (decentralised auth) for real: a nats-server trusting an operator made by
e2e/natsauth (tests/standins/natsauth.py), the bridge and the subscribers on user .creds files, and
what a running bridge does when its user's JWT expires, is revoked, or is rotated on disk. Then an
NKey user without JWT, on a server without operator."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from k8s_event_sim.natsserver import NatsServer
from tests import provisioning
from tests.integration.harness import (
    BridgeProcess,
    Bridges,
    ConsumerProcess,
    Writer,
    bridge_config,
    eventually,
    readyz,
    subscriber_config,
)
from tests.otlp_endpoint import Endpoint
from tests.standins import gotools
from tests.standins.natsauth import Operator
from tools import natsperms

pytestmark = pytest.mark.integration
GO_TOOLS = ("natsauth",)

STREAM = "K8S_EVENTS"
PERMISSIONS = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "permissions.json"
# what the server tells a client whose user's JWT ran out or was revoked while it was connected,
# and (both) when it connects again with that JWT
EXPIRED = "User Authentication Expired"
REVOKED = "User Authentication Revoked"
REFUSED = "Authorization Violation"


@pytest.fixture
def operator(tmp_path: Path) -> Iterator[Operator]:
    """An operator with accounts SYS and APP, and those of deploy/nats/accounts.json, and a
    nats-server in operator mode trusting it."""
    op = Operator(tmp_path / "operator").setup(natsperms.ACCOUNTS)
    op.start()
    yield op
    op.stop()


@pytest.fixture
def bridges(tmp_path: Path) -> Iterator[Bridges]:
    b = Bridges(tmp_path)
    yield b
    b.kill_all()


@pytest.fixture
def subscribers() -> Iterator[list[ConsumerProcess]]:
    procs: list[ConsumerProcess] = []
    yield procs
    for p in procs:
        p.kill()


def start_bridge(
    bridges: Bridges, tmp_path: Path, url: str, kubeconfig: Path, **nats: Any
) -> BridgeProcess:
    cfg = bridge_config(tmp_path, url, kubeconfig, nats={"servers": [url], **nats})
    return bridges.start(cfg)


async def published(bridge: BridgeProcess, n: float) -> bool:
    return await bridge.metric("events_published") >= n


async def auth_failed(bridge: BridgeProcess, *texts: str) -> dict[str, Any] | None:
    """The bridge's ``nats_auth_failed`` line whose ``reason`` carries one of the server's
    ``texts``."""
    for e in bridge.log_events("nats_auth_failed"):
        reason = str(e.get("reason") or "")
        if any(t.lower() in reason.lower() for t in texts):
            return e
    return None


async def stream_ids(url: str, creds: Path) -> list[str]:
    """The Nats-Msg-Id of every Event in the stream (status events left out), read as the user
    of ``creds``."""
    nc = await nats.connect(url, user_credentials=str(creds), allow_reconnect=False)
    try:
        js = nc.jetstream()
        info = await js.stream_info(STREAM)
        ids: list[str] = []
        if info.state.messages:
            sub = await js.subscribe("k8s.events.>", stream=STREAM, ordered_consumer=True)
            for _ in range(info.state.messages):
                try:
                    m = await sub.next_msg(timeout=2.0)
                except nats.errors.TimeoutError:
                    break
                if "._bridge." not in m.subject:
                    ids.append((m.headers or {})["Nats-Msg-Id"])
            await sub.unsubscribe()
        return ids
    finally:
        await nc.close()


async def refused(url: str, creds: Path | None = None) -> bool:
    """A connection (on ``creds``, or with no credentials) is refused."""
    nc = nats.NATS()
    try:
        await nc.connect(
            url,
            user_credentials=None if creds is None else str(creds),
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )
    except (nats.errors.Error, OSError):
        return True
    finally:
        await nc.close()  # also after a refusal: nats-py leaves the socket open then
    return False


def replace_file(path: Path, content: bytes) -> None:
    """Atomically, as a rotated Secret is: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(content)
    tmp.chmod(0o600)
    os.replace(tmp, path)


async def consumer_metric(proc: ConsumerProcess, name: str) -> float:
    _, text = await proc.get("/metrics")
    return sum(
        float(ln.rsplit(" ", 1)[1])
        for ln in text.splitlines()
        if ln.startswith(name) and not ln.startswith("#")
    )


@pytest.mark.parametrize(
    "permissions", [None, PERMISSIONS], ids=["unrestricted", "least-privilege"]
)
async def test_the_bridge_and_the_subscribers_run_on_user_creds_in_operator_mode(
    tmp_path, sim, kubeconfig, operator, bridges, subscribers, permissions
):
    """least-privilege: each user has only its program's permissions of
    deploy/nats/permissions.json, in its program's account of deploy/nats/accounts.json (the
    bridge's owns the stream; each subscriber's imports what its user may publish); the stream,
    the buckets, the durables and the OTLP subscriber's dead-letter stream are provisioned first
    with the operator's own user of the bridge's account (``provision``), as docs/deploy.md
    says. unrestricted: every user in one account, APP, allowed everything."""
    owner = None if permissions is None else natsperms.ACCOUNT

    def user(program: str) -> Path:
        if permissions is None:
            return operator.user(program)
        return operator.user(
            program,
            program=program,
            permissions_file=permissions,
            account=natsperms.account_of(program),
        )

    url = operator.server.url
    assert await refused(url)
    admin = str(operator.user("admin", account=owner))
    await provisioning.bridge([url], creds_file=admin)
    bridge = start_bridge(
        bridges, tmp_path, url, kubeconfig, creds_file=str(user("k8s-event-bridge"))
    )
    await bridge.wait_ready()
    w = Writer(sim)
    await w.write(20)
    await eventually(lambda: published(bridge, len(w.ids)))
    reader = operator.user("reader", account=owner)
    assert sorted(await stream_ids(url, reader)) == sorted(w.ids)

    # the remediation worker (dry run: it acts on nothing) on its own user
    nats_of = {"servers": [url], "creds_file": str(user("k8s-event-remediation"))}
    path = subscriber_config(
        tmp_path,
        "k8s_event_consumer.remediation",
        nats_of,
        kubeconfig,
        remediation={"dry_run": True},
    )
    await provisioning.subscriber("k8s_event_consumer.remediation", path, [url], creds_file=admin)
    worker = ConsumerProcess(
        path, tmp_path / "remediation.log", module="k8s_event_consumer.remediation"
    ).start()
    subscribers.append(worker)
    await worker.wait_ready(30)

    async def read_all() -> bool:
        return await consumer_metric(worker, "k8s_event_remediation_events_total") >= len(w.ids)

    await eventually(read_all, timeout=30)
    nc = await nats.connect(url, user_credentials=str(reader), allow_reconnect=False)
    try:
        info = await nc.jetstream().consumer_info(STREAM, "k8s-event-remediation")
    finally:
        await nc.close()
    assert info.delivered.stream_seq >= len(w.ids)

    # the alerting subscriber on its own user: its read-back at start (recover_window) and
    # its durable; no Alertmanager needed to read (what it can not send, it holds)
    nats_of = {"servers": [url], "creds_file": str(user("k8s-event-alerting"))}
    path = subscriber_config(
        tmp_path,
        "k8s_event_consumer.alerting",
        nats_of,
        kubeconfig,
        alertmanager={"urls": ["http://127.0.0.1:9"], "attempts": 1, "timeout": "1s"},
        alerts={"reasons": ["NoSuchReason"], "recover_window": "1h"},
    )
    await provisioning.subscriber("k8s_event_consumer.alerting", path, [url], creds_file=admin)
    alerting = ConsumerProcess(
        path, tmp_path / "alerting.log", module="k8s_event_consumer.alerting"
    ).start()
    subscribers.append(alerting)
    await alerting.wait_ready(30)

    async def alerting_read_all() -> bool:
        return await consumer_metric(alerting, "k8s_event_alerting_events_total") >= len(w.ids)

    await eventually(alerting_read_all, timeout=30)

    # the OTLP subscriber on its own user: every Event to an endpoint, one refused for good
    # into its dead-letter stream (published through JetStream: a PubAck on its inbox)
    refused_id = w.ids[3]
    endpoint = await Endpoint(refuse={refused_id}).start()
    try:
        nats_of = {"servers": [url], "creds_file": str(user("k8s-event-otlp"))}
        path = subscriber_config(
            tmp_path,
            "k8s_event_consumer.otlp",
            nats_of,
            kubeconfig,
            otlp={"endpoint": endpoint.url, "flush_interval": "200ms"},
        )
        await provisioning.subscriber("k8s_event_consumer.otlp", path, [url], creds_file=admin)
        otlp = ConsumerProcess(path, tmp_path / "otlp.log", module="k8s_event_consumer.otlp")
        subscribers.append(otlp.start())
        await otlp.wait_ready(30)

        async def otlp_sent_all() -> bool:
            return set(w.ids) - {refused_id} <= set(endpoint.accepted) and bool(
                await consumer_metric(otlp, 'k8s_event_otlp_records_total{result="dead_lettered"}')
            )

        await eventually(otlp_sent_all, timeout=30)
    finally:
        await endpoint.stop()
    nc = await nats.connect(url, user_credentials=str(reader), allow_reconnect=False)
    try:
        dead = await nc.jetstream().stream_info("K8S_EVENTS_DEAD")
    finally:
        await nc.close()
    assert dead.state.messages == 1

    logs = alerting.logs() + worker.logs() + otlp.logs() + bridge.logs()
    assert "nats_permission_denied" not in logs
    # the kit's counts exported by each: every message read handled, none bad
    for proc, prefix in (
        (worker, "k8s_event_remediation"),
        (alerting, "k8s_event_alerting"),
        (otlp, "k8s_event_otlp"),
    ):
        handled = f'{prefix}_messages_total{{result="handled"}}'
        assert await consumer_metric(proc, handled) >= len(w.ids)
        _, text = await proc.get("/metrics")
        assert f'{prefix}_messages_total{{result="bad"}} 0' in text
    if permissions is not None:
        await reply_subjects_land_at_home(operator, url, reader, user("k8s-event-alerting"))


async def reply_subjects_land_at_home(
    operator: Operator, url: str, reader: Path, alerting_creds: Path
) -> None:
    """Operator mode, accounts of deploy/nats/accounts.json: the alerting subscriber's user asks
    for stream info with the worker's handled-id key as its reply subject, and pulls from its
    durable with another team's Event subject as its reply. Both answers come back into the
    alerting account (a spy user there sees them); nothing is stored in the stream or the bucket."""
    spy = operator.user("spy", account=natsperms.account_of("k8s-event-alerting"))
    seen_subject = "$KV.k8s_event_remediation.forged"
    event_subject = "k8s.events.team-b.default.Pod.Forged"

    async def counts() -> tuple[int, int]:
        nc = await nats.connect(url, user_credentials=str(reader), allow_reconnect=False)
        try:
            js = nc.jetstream()
            stream = await js.stream_info(STREAM)
            bucket = await js.stream_info("KV_k8s_event_remediation")
            return stream.state.messages, bucket.state.messages
        finally:
            await nc.close()

    before = await counts()
    landed: dict[str, int] = {}
    watcher = await nats.connect(url, user_credentials=str(spy), allow_reconnect=False)
    attacker = await nats.connect(
        url,
        user_credentials=str(alerting_creds),
        inbox_prefix="_INBOX_k8s_event_alerting",
        allow_reconnect=False,
    )
    try:
        for subject in (seen_subject, event_subject):

            async def count(msg: Any, subject: str = subject) -> None:
                landed[subject] = landed.get(subject, 0) + 1

            await watcher.subscribe(subject, cb=count)
        await watcher.flush()
        await attacker.publish(f"$JS.API.STREAM.INFO.{STREAM}", b"", reply=seen_subject)
        await attacker.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.k8s-event-alerting",
            json.dumps({"batch": 1000, "expires": 1_000_000_000}).encode(),
            reply=event_subject,
        )
        await eventually(lambda: len(landed) == 2, timeout=60)  # a loaded machine answers late
    finally:
        await attacker.close()
        await watcher.close()
    assert await counts() == before


async def test_a_jwt_expiring_while_connected_fails_readiness_not_the_process(
    tmp_path, sim, kubeconfig, operator, bridges
):
    # long enough for the bridge to start and publish; the test waits on conditions only
    creds = operator.user("bridge", expires=10)
    bridge = start_bridge(bridges, tmp_path, operator.server.url, kubeconfig, creds_file=str(creds))
    await bridge.wait_ready()
    w = Writer(sim)
    await w.write(5)
    await eventually(lambda: published(bridge, len(w.ids)))

    await eventually(lambda: auth_failed(bridge, EXPIRED, REFUSED), timeout=30)
    await eventually(lambda: readyz(bridge, 503), timeout=15)
    assert bridge.running()


async def test_a_user_revoked_while_connected_fails_readiness_not_the_process(
    tmp_path, sim, kubeconfig, operator, bridges
):
    creds = operator.user("bridge")
    bridge = start_bridge(bridges, tmp_path, operator.server.url, kubeconfig, creds_file=str(creds))
    await bridge.wait_ready()
    w = Writer(sim)
    await w.write(5)
    await eventually(lambda: published(bridge, len(w.ids)))

    await operator.revoke("bridge")
    await eventually(lambda: auth_failed(bridge, REVOKED, REFUSED), timeout=15)
    await eventually(lambda: readyz(bridge, 503), timeout=15)
    assert bridge.running()


async def test_creds_rotated_on_disk_then_old_user_revoked_reconnects_on_the_new_file(
    tmp_path, sim, kubeconfig, operator, bridges
):
    # the bridge's file: a mounted Secret, replaced as a whole when it is rotated
    secret = tmp_path / "secret" / "nats.creds"
    secret.parent.mkdir()
    secret.write_bytes(operator.user("bridge-1").read_bytes())
    bridge = start_bridge(
        bridges, tmp_path, operator.server.url, kubeconfig, creds_file=str(secret)
    )
    await bridge.wait_ready()
    w = Writer(sim)
    await w.write(5)
    await eventually(lambda: published(bridge, len(w.ids)))

    replace_file(secret, operator.user("bridge-2").read_bytes())
    await operator.revoke("bridge-1")  # its connections are gone once this returns
    before = await bridge.metric("events_published")
    await w.write(10)
    await eventually(lambda: published(bridge, before + 10), timeout=30)
    assert await readyz(bridge, 200)
    # bridge-1 is refused for good: what was published since came on bridge-2's connection
    assert await refused(operator.server.url, operator.dir / "bridge-1.creds")
    assert sorted(await stream_ids(operator.server.url, operator.user("reader"))) == sorted(w.ids)


async def test_nkey_user_without_jwt(tmp_path, sim, kubeconfig, bridges):
    op = Operator(tmp_path / "keys")
    op.dir.mkdir()
    seed, public = op.nkey("bridge")
    conf = tmp_path / "nats-nkey.conf"
    conf.write_text(f"authorization {{ users: [ {{ nkey: {public} }} ] }}\n")
    server = NatsServer(store_dir=str(tmp_path / "nats"), args=["-c", str(conf)]).start()
    try:
        assert await refused(server.url)
        bridge = start_bridge(bridges, tmp_path, server.url, kubeconfig, nkey_seed_file=str(seed))
        await bridge.wait_ready()
        w = Writer(sim)
        await w.write(10)
        await eventually(lambda: published(bridge, len(w.ids)))
        assert seed.read_text().strip() not in bridge.logs()
    finally:
        server.cleanup()


async def test_user_permissions_from_a_permissions_file_are_enforced(tmp_path, operator):
    perms = tmp_path / "permissions.json"
    perms.write_text(
        json.dumps(
            {
                "narrow": {
                    "publish": {"allow": ["ok.>"], "deny": ["ok.secret"]},
                    "subscribe": {"allow": ["ok.>", "_INBOX.>"]},
                    "allow_responses": True,
                }
            }
        )
    )
    creds = operator.user("narrow", program="narrow", permissions_file=perms)
    pub = operator.claims("narrow")["nats"]["pub"]
    assert pub == {"allow": ["ok.>"], "deny": ["ok.secret"]}
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(
        operator.server.url, user_credentials=str(creds), error_cb=on_error, allow_reconnect=False
    )
    try:
        sub = await nc.subscribe("ok.>")
        for subject in ("ok.1", "ok.secret", "other", "ok.2"):
            await nc.publish(subject, b"x")
        await nc.flush()
        # in order on one connection: ok.secret would have come between
        assert [(await sub.next_msg(timeout=2)).subject for _ in range(2)] == ["ok.1", "ok.2"]

        async def violations() -> bool:
            return sum("permissions violation" in e.lower() for e in errors) >= 2

        await eventually(violations, timeout=5)
    finally:
        await nc.close()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["bogus"],
        ["init"],
        ["user", "{d}"],
        ["user", "{d}", "u", "--expires", "soon"],
        ["user", "{d}", "u", "--program", "k8s-event-bridge"],
        ["user", "{d}", "u", "--permissions", str(PERMISSIONS), "--program", "nope"],
        ["user", "{d}", "sys"],
        ["nkey", "{d}", "../u"],
    ],
    ids=lambda a: " ".join(a) or "none",
)
def test_natsauth_refuses_bad_arguments_with_exit_2(tmp_path, args):
    op = Operator(tmp_path / "op").setup()
    done = subprocess.run(
        [str(gotools.ensure("natsauth")), *(a.replace("{d}", str(op.dir)) for a in args)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("natsauth: ") and "usage:" in done.stderr
    assert done.stdout == ""


async def test_in_operator_mode_each_user_connects_and_only_the_digests_one_writes_digests(
    operator: Operator,
) -> None:
    """Every program's user JWT, permissions.json's list in it, fits the CONNECT line (the
    longest lists are the alerting subscriber's and the digests program's, issue 41); in the
    accounts of accounts.json the digests user's digest is stored in K8S_DIGESTS, the
    alerting user's and the bridge's are refused, nothing stored."""
    from k8s_event_common import streams as shapes

    url = operator.server.url
    admin = await nats.connect(
        url,
        user_credentials=str(operator.user("admin", account=natsperms.ACCOUNT)),
        allow_reconnect=False,
    )
    connected: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    try:
        await admin.jetstream().add_stream(
            shapes.digest_stream("K8S_DIGESTS", "k8s.digests", max_age=3600.0)
        )
        for program in natsperms.PROGRAMS:
            creds = operator.user(
                program,
                program=program,
                permissions_file=PERMISSIONS,
                account=natsperms.account_of(program),
            )
            errors[program] = []

            async def on_error(exc: Exception, program: str = program) -> None:
                errors[program].append(str(exc).lower())

            connected[program] = await nats.connect(
                url,
                user_credentials=str(creds),
                inbox_prefix="_INBOX_" + program.replace("-", "_"),
                error_cb=on_error,
                allow_reconnect=False,
            )
        subject = "k8s.digests.test.shop.Pod.BackOff"
        ack = await connected["k8s-event-digests"].jetstream().publish(subject, b"{}", timeout=5)
        assert (ack.stream, ack.seq) == ("K8S_DIGESTS", 1)
        for program in ("k8s-event-alerting", "k8s-event-bridge"):
            with pytest.raises(nats.errors.TimeoutError):
                await connected[program].jetstream().publish(subject, b"{}", timeout=1)

            async def refused(program: str = program) -> bool:
                await connected[program].flush()
                return any(f'publish to "{subject.lower()}"' in e for e in errors[program])

            await eventually(refused, timeout=5)
        info = await connected["k8s-event-alerting"].jetstream().stream_info("K8S_DIGESTS")
        assert info.state.messages == 1
    finally:
        for nc in connected.values():
            await nc.close()
        await admin.close()
