"""Least privilege for the digests (issue 41): a real nats-server runs the shipped config fragment
(deploy/nats/, made from permissions.json) with the users of test_nats_permissions.py and
``k8s-event-digests``. Only that user may write into the digests' stream; it reads the versions
stream through the consumers its ``provision`` made (``k8s-event-digests``, ``-0``, ``-1``) and
moves one with ``$JS.API.CONSUMER.RESET``, and creates none: a consumer's config names its
``deliver_subject``, and JetStream pushes from the owner account into any stream there. The
alerting and OTLP subscribers read digests through their ``-digests`` durables only."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from k8s_event_common import digests
from k8s_event_common import streams as shapes
from k8s_event_consumer.seen import KVSeen
from tests.integration import test_nats_permissions as perms
from tests.integration.test_nats_permissions import (
    ALERTING,
    BRIDGE,
    CHECKPOINT_BUCKET,
    DEAD_STREAM,
    DIGESTS,
    OPERATOR,
    OTLP,
    REMEDIATION,
    SEEN_BUCKET,
    STREAM,
    User,
    messages,
)

pytestmark = pytest.mark.integration

# the real nats-server with the shipped permissions, and its users (test_nats_permissions.py)
passwords, server, users = perms.passwords, perms.server, perms.users
provisioned, stocked = perms.provisioned, perms.stocked

DIGEST_STREAM = "K8S_DIGESTS"
PREFIX = "k8s.digests"
READERS = ("k8s-event-digests", "k8s-event-digests-0", "k8s-event-digests-1")  # its consumers


def digest(i: int = 0, namespace: str = "shop") -> digests.Digest:
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=5 * i)
    series = digests.Series("test", namespace, "Pod", f"web-{i}", f"uid-{i}", "BackOff")
    return digests.Digest(
        series=series,
        start=start,
        end=start + timedelta(minutes=5),
        occurrences=57,
        versions=57,
        first_seen=start,
        last_seen=start + timedelta(minutes=4),
        count_from=3,
        count_to=60,
        uids=(f"event-uid-{i}",),
        uids_omitted=0,
        first_message="Back-off restarting failed container",
        last_message="Back-off restarting failed container",
        sampled=False,
        combined=False,
        stream=STREAM,
        first_seq=1,
        last_seq=20,
    )


def message(d: digests.Digest) -> tuple[str, bytes, dict[str, str]]:
    """A digest as its writer publishes it: its subject, its bytes, its id as the message id."""
    headers = {**digests.HEADERS, "Nats-Msg-Id": d.id}
    return digests.subject(PREFIX, d.series), digests.encode(d), headers


async def stored(operator: User) -> int:
    return int((await operator.js.stream_info(DIGEST_STREAM)).state.messages)


@pytest.fixture
async def with_digests(stocked: User, users: Callable[[str], Any]) -> User:
    """What ``k8s-event-digests provision`` makes with the operator's credentials: the digests'
    stream, and the digests program's consumers of the versions stream (pull, no acks), beside
    the stream of 20 Events and the checkpoint bucket. Returns the operator."""
    operator: User = await users(OPERATOR)
    await operator.js.add_stream(shapes.digest_stream(DIGEST_STREAM, PREFIX, max_age=3600.0))
    for name in READERS:
        config = ConsumerConfig(
            name=name,
            durable_name=name,
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.ALL,
            filter_subject="k8s.events.>",
        )
        await operator.js.add_consumer(STREAM, config=config)
    return operator


async def pull(u: User, subject: str, batch: int) -> list[int]:
    """The stream sequences a pull request of ``batch`` on ``subject`` delivers (no ack)."""
    inbox = f"{perms.INBOX[u.program]}.pull"
    sub = await u.nc.subscribe(inbox)
    try:
        await u.nc.publish(subject, json.dumps({"batch": batch}).encode(), reply=inbox)
        out = []
        for _ in range(batch):
            m = await sub.next_msg(timeout=5)
            out.append(int(m.reply.split(".")[5]))  # $JS.ACK.<stream>.<consumer>.<n>.<seq>...
        return out
    finally:
        await sub.unsubscribe()


async def reset(u: User, consumer: str, seq: int) -> dict[str, Any]:
    subject = f"$JS.API.CONSUMER.RESET.{STREAM}.{consumer}"
    answer = await u.nc.request(subject, json.dumps({"seq": seq}).encode(), timeout=5)
    out: dict[str, Any] = json.loads(answer.data)
    return out


async def test_the_digests_user_writes_a_digest_and_reads_the_versions_from_any_point(
    with_digests: User, users: Callable[[str], Any]
) -> None:
    """It publishes a digest (stored once under its id), reads it back by sequence, and reads the
    versions stream through a consumer of its own from sequence 11, then from 1 again (a
    rebuild), through each of its consumers."""
    d = await users(DIGESTS)
    subject, body, headers = message(digest())
    ack = await d.js.publish(subject, body, headers=headers, timeout=5)
    assert (ack.stream, ack.seq, ack.duplicate) == (DIGEST_STREAM, 1, None)
    again = await d.js.publish(subject, body, headers=headers, timeout=5)
    assert again.duplicate and await stored(with_digests) == 1
    got = await d.js.get_msg(DIGEST_STREAM, 1)
    assert got.data == body and got.subject == subject
    assert (await d.js.stream_info(STREAM)).state.messages == 20
    for name in READERS:
        assert (await d.js.consumer_info(STREAM, name)).config.ack_policy == AckPolicy.NONE
        assert "error" not in await reset(d, name, 11)
        assert await pull(d, f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{name}", 10) == list(
            range(11, 21)
        )
        assert "error" not in await reset(d, name, 1)
        assert await pull(d, f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{name}", 3) == [1, 2, 3]
    assert d.errors == []


@pytest.mark.parametrize("program", [BRIDGE, ALERTING, REMEDIATION, OTLP])
async def test_no_program_but_the_digests_one_can_write_a_digest(
    with_digests: User, users: Callable[[str], Any], program: str
) -> None:
    """Refused by the server (no ack), nothing stored in the digests' stream, whatever the
    namespace; nor may it purge or delete that stream."""
    u = await users(program)
    for d in (digest(1), digest(2, namespace="team-b")):
        subject, body, _ = message(d)
        await u.refused_publish(subject, body)
    await u.refused_request(f"$JS.API.STREAM.PURGE.{DIGEST_STREAM}", b"{}")
    await u.refused_request(f"$JS.API.STREAM.DELETE.{DIGEST_STREAM}")
    assert await stored(with_digests) == 0


async def test_the_digests_user_can_not_write_an_event_a_bucket_or_a_dead_letter(
    with_digests: User, users: Callable[[str], Any]
) -> None:
    operator = with_digests
    await operator.js.add_stream(perms.dead_letter_shape())
    kv = await operator.js.key_value(CHECKPOINT_BUCKET)
    before = await kv.get("test.all")
    d = await users(DIGESTS)
    subject, body, _ = perms.cloud_events(1, seed=3)[0]
    await d.refused_publish(subject, body)
    await d.refused_publish(f"$KV.{CHECKPOINT_BUCKET}.test.all", b'{"resourceVersion":"1"}')
    await d.refused_publish(f"$KV.{SEEN_BUCKET}.{KVSeen.key('uid/1')}", b"1")
    await d.refused_publish(perms.DEAD_SUBJECT, b"{}")
    for stream in (STREAM, DIGEST_STREAM, f"KV_{CHECKPOINT_BUCKET}", DEAD_STREAM):
        await d.refused_request(f"$JS.API.STREAM.PURGE.{stream}", b"{}")
        await d.refused_request(f"$JS.API.STREAM.DELETE.{stream}")
        await d.refused_request(f"$JS.API.STREAM.UPDATE.{stream}", b"{}")
    await d.refused_request(f"$JS.API.STREAM.CREATE.{DIGEST_STREAM}_2", b"{}")
    await d.refused_request(f"$JS.API.STREAM.MSG.GET.KV_{CHECKPOINT_BUCKET}", b'{"seq":1}')
    after = await kv.get("test.all")
    assert (after.revision, after.value) == (before.revision, before.value)
    assert await messages(operator) == 20
    assert (await operator.js.stream_info(DEAD_STREAM)).state.messages == 0
    assert (await operator.js.stream_info(f"KV_{SEEN_BUCKET}")).state.messages == 0


@pytest.mark.parametrize(
    "name",
    [READERS[1], "k8s-event-digests-2", ALERTING, None],
    ids=["own", "other", "alerting", "unnamed"],
)
async def test_the_digests_user_can_not_create_a_consumer_even_under_its_own_name(
    with_digests: User, users: Callable[[str], Any], name: str | None
) -> None:
    """Were it allowed to create one, a push consumer's deliver subject would make JetStream
    copy the versions stream into the dead-letter stream (or any stream of the owner account
    but the one it reads): refused, under its own consumer's name as under any other, and
    nothing lands there. Its consumers stay pull consumers; it may not delete them."""
    operator = with_digests
    await operator.js.add_stream(perms.dead_letter_shape())
    d = await users(DIGESTS)
    config = {"ack_policy": "none", "deliver_subject": perms.DEAD_SUBJECT}
    if name is not None:
        config |= {"name": name, "durable_name": name}
    body = json.dumps({"stream_name": STREAM, "config": config}).encode()
    subject = f"$JS.API.CONSUMER.CREATE.{STREAM}" + (f".{name}" if name else "")
    await d.refused_request(subject, body)
    if name is not None:
        await d.refused_request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{name}.k8s.events.>", body)
        await d.refused_request(f"$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{name}", body)
        await d.refused_request(f"$JS.API.CONSUMER.DELETE.{STREAM}.{name}")
    digests_config = {"stream_name": DIGEST_STREAM, "config": {"ack_policy": "none"}}
    await d.refused_request(
        f"$JS.API.CONSUMER.CREATE.{DIGEST_STREAM}", json.dumps(digests_config).encode()
    )
    assert (await operator.js.stream_info(DEAD_STREAM)).state.messages == 0
    assert (await operator.js.stream_info(STREAM)).state.consumer_count == len(READERS)
    for reader in READERS:
        c = await operator.js.consumer_info(STREAM, reader)
        assert c.config.deliver_subject is None and c.delivered.stream_seq == 0


async def test_the_digests_user_can_not_move_or_read_another_ones_durable(
    with_digests: User, users: Callable[[str], Any]
) -> None:
    await perms.provision_durable(users, ALERTING, ["k8s.events.>"])
    d = await users(DIGESTS)
    other = f"{STREAM}.{ALERTING}"
    await d.refused_request(f"$JS.API.CONSUMER.RESET.{other}", b'{"seq": 15}')
    await d.refused_request(f"$JS.API.CONSUMER.MSG.NEXT.{other}", b'{"batch": 1}')
    await d.refused_request(f"$JS.API.CONSUMER.INFO.{other}")
    c = await with_digests.js.consumer_info(STREAM, ALERTING)
    assert c.delivered.stream_seq == 0 and c.num_pending == 20


async def durable_on_digests(operator: User, name: str) -> None:
    """A subscriber's ``-digests`` durable, as its ``provision`` makes it (``reads: digests``)."""
    config = ConsumerConfig(
        name=name,
        durable_name=name,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=f"{PREFIX}.>",
    )
    await operator.js.add_consumer(DIGEST_STREAM, config=config)


@pytest.mark.parametrize(
    "durable", [f"{ALERTING}-digests", f"{ALERTING}-digests-0", f"{ALERTING}-digests-1",
                f"{OTLP}-digests"]
)  # fmt: skip
async def test_a_subscriber_reads_digests_through_its_digests_durable_and_acks(
    with_digests: User, users: Callable[[str], Any], durable: str
) -> None:
    """The alerting subscriber (each replica's durable, as deploy/consumers/alerting-digests.yaml
    names them) and the OTLP subscriber bind their digests' durable and ack; the alerting one
    reads the digests' stream back by sequence. Neither may read the other's."""
    user = ALERTING if durable.startswith(ALERTING) else OTLP
    other = f"{OTLP}-digests" if user == ALERTING else f"{ALERTING}-digests"
    d = await users(DIGESTS)
    for i in range(3):
        subject, body, headers = message(digest(i))
        await d.js.publish(subject, body, headers=headers, timeout=5)
    for name in (durable, other):
        await durable_on_digests(with_digests, name)
    u = await users(user)
    assert (await u.js.stream_info(DIGEST_STREAM)).state.messages == 3
    sub = await u.js.pull_subscribe_bind(durable=durable, stream=DIGEST_STREAM)
    got = await sub.fetch(3, timeout=5)
    assert [json.loads(m.data)["id"] for m in got] == [digest(i).id for i in range(3)]
    for m in got:
        await m.ack_sync(timeout=5)
    c = await u.js.consumer_info(DIGEST_STREAM, durable)
    assert c.ack_floor.stream_seq == 3 and c.num_ack_pending == 0
    if user == ALERTING:
        assert (await u.js.get_msg(DIGEST_STREAM, 2)).data == message(digest(1))[1]
    else:
        await u.refused_request(f"$JS.API.STREAM.MSG.GET.{DIGEST_STREAM}", b'{"seq": 1}')
    await u.refused_request(f"$JS.API.CONSUMER.MSG.NEXT.{DIGEST_STREAM}.{other}", b'{"batch":1}')
    await u.refused_request(f"$JS.API.CONSUMER.INFO.{DIGEST_STREAM}.{other}")
    await u.refused_request(f"$JS.API.CONSUMER.DELETE.{DIGEST_STREAM}.{durable}")
    body = json.dumps({"stream_name": DIGEST_STREAM, "config": {"ack_policy": "none"}}).encode()
    await u.refused_request(f"$JS.API.CONSUMER.CREATE.{DIGEST_STREAM}", body)
    assert (await with_digests.js.consumer_info(DIGEST_STREAM, other)).delivered.stream_seq == 0


async def test_the_remediation_worker_and_the_bridge_can_not_read_digests(
    with_digests: User, users: Callable[[str], Any]
) -> None:
    await durable_on_digests(with_digests, f"{REMEDIATION}-digests")
    for program in (REMEDIATION, BRIDGE):
        u = await users(program)
        await u.refused_request(f"$JS.API.STREAM.INFO.{DIGEST_STREAM}")
        await u.refused_request(
            f"$JS.API.CONSUMER.MSG.NEXT.{DIGEST_STREAM}.{REMEDIATION}-digests", b'{"batch":1}'
        )
    assert (
        await with_digests.js.consumer_info(DIGEST_STREAM, f"{REMEDIATION}-digests")
    ).delivered.stream_seq == 0
