"""An attacker's view of the NATS side (issue 31): a program's own user, with the shipped
permissions (deploy/nats/permissions.json) on a real nats-server, trying to get a message into
the bridge's stream by a way the publish permissions do not name: the reply subject of a
request JetStream answers. nats-server checks a publish's subject against the permissions, not
its reply subject, and JetStream's answer to a request is published in the account like any
message: a stream listening on the reply subject stores it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import nats
import pytest

from k8s_event_common import streams as shapes
from k8s_event_consumer.consuming import Consumer
from k8s_event_consumer.seen import KVSeen
from tests.integration import test_nats_permissions as perms
from tests.integration.test_nats_permissions import (
    ALERTING,
    OPERATOR,
    READ_OPTIONS,
    REMEDIATION,
    SEEN_BUCKET,
    STREAM,
    User,
    cloud_events,
    messages,
    provision_durable,
)
from tests.support import eventually
from tools import natsperms

pytestmark = pytest.mark.integration

# the real nats-server with the shipped permissions, and its users (test_nats_permissions.py)
passwords, server, users = perms.passwords, perms.server, perms.users
provisioned, stocked = perms.provisioned, perms.stocked

TEAM_B = "k8s.events.team-b.default.Pod.Forged"


async def _answered(u: User) -> None:
    """A request of ``u``'s through its own inbox, answered: the server handled every request
    ``u`` sent before it (one connection's messages are handled in order)."""
    await u.nc.request(f"$JS.API.STREAM.INFO.{STREAM}", b"", timeout=5)


async def test_a_bucket_with_direct_gets_lets_no_forged_event_into_the_stream(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """The operator made the worker's bucket with direct gets (the nats CLI's default). A direct
    get's answer is the stored message itself, body and headers: the worker's user writes a
    forged CloudEvent into its bucket and asks for it with another team's Event subject as the
    reply subject; the stream would store it as an Event of team-b. The worker refuses that
    bucket (``allow_direct`` is a difference), and its user may not direct-get at all."""
    operator = await users(OPERATOR)
    await operator.js.delete_key_value(SEEN_BUCKET)
    await operator.js.create_key_value(bucket=SEEN_BUCKET, history=1, ttl=7 * 86400.0, direct=True)
    rem = await users(REMEDIATION)
    with pytest.raises(shapes.ShapeMismatch, match="allow_direct"):
        await KVSeen.open(rem.nc, SEEN_BUCKET)

    before = await messages(stocked)
    _, body, headers = cloud_events(1, seed=7)[0]
    await rem.js.publish(f"$KV.{SEEN_BUCKET}.forged", body, headers=headers)
    direct = f"$JS.API.DIRECT.GET.KV_{SEEN_BUCKET}.$KV.{SEEN_BUCKET}.forged"
    await rem.nc.publish(direct, b"", reply=TEAM_B)
    await _answered(rem)
    assert await rem.violated("publish", direct)
    assert await messages(stocked) == before


def _requests(program: str) -> list[tuple[str, bytes]]:
    """One request on each subject ``program``'s user may publish (deploy/nats/permissions.json),
    as an attacker holding that credential would send it: a pull request for a thousand
    messages (each one delivered, not acked), a message get, an info, a write of its own
    bucket or dead-letter stream, an ack with a made-up token."""
    out = []
    for subject in json.loads(natsperms.PERMISSIONS.read_text())[program]["publish"]["allow"]:
        subject = subject.replace(">", "forged")
        if subject.startswith("$JS.API.CONSUMER.MSG.NEXT."):
            payload = json.dumps({"batch": 1000, "expires": 2_000_000_000}).encode()
        elif subject.startswith("$JS.API.STREAM.MSG.GET."):
            payload = json.dumps({"seq": 1}).encode()
        else:
            payload = b"{}"
        out.append((subject, payload))
    return out


def _answers(subject: str, durable: str) -> bool:
    """Whether JetStream answers a request on ``subject`` when only ``durable`` exists (an ack
    with a made-up token gets no answer, nor a pull request on a durable that is not there; a
    write of a stream's subject gets its PubAck)."""
    pull = "$JS.API.CONSUMER.MSG.NEXT."
    return not subject.startswith("$JS.ACK.") and (
        not subject.startswith(pull) or subject == f"{pull}{STREAM}.{durable}"
    )


DIGESTS = "K8S_DIGESTS"  # k8s-event-digests' stream (issue 41)
STORES = (STREAM, f"KV_{perms.CHECKPOINT_BUCKET}", f"KV_{SEEN_BUCKET}", perms.DEAD_STREAM, DIGESTS)


async def _stored(operator: User) -> dict[str, int]:
    return {s: int((await operator.js.stream_info(s)).state.messages) for s in STORES}


@pytest.mark.parametrize("program", natsperms.PROGRAMS)
async def test_one_request_of_a_program_makes_jetstream_store_nothing_where_its_reply_points(
    stocked: User, users: Callable[[str], Any], server: Any, program: str
) -> None:
    """Each request a program's user may send, with a reply subject that points into the stream
    (another team's Event subject), the checkpoint bucket, the worker's Seen bucket (the key of a
    CloudEvent id), the dead-letter stream or the digests' stream. On one account for all
    (before issue 40) JetStream answered into them: a STREAM.INFO answer became a handled-id
    entry of the worker, and one pull request on an Event subject made it store and deliver 848
    to 1,003 messages. Each program now lives in an account of its own and reaches JetStream
    through service imports: every answer comes back into its account (its spy sees each one
    arrive on the reply subject), and nothing is stored outside what the program may write
    itself."""
    operator = await users(OPERATOR)
    await operator.js.add_stream(perms.dead_letter_shape())
    await operator.js.add_stream(shapes.digest_stream(DIGESTS, "k8s.digests", max_age=3600.0))
    if program != perms.BRIDGE:
        await provision_durable(users, program, ["k8s.events.>"])
    before = await _stored(operator)
    assert before[STREAM] > 0
    attacker = await users(program)
    spy = await nats.connect(server.url, user=perms.SPY + program, password=perms.SPY)
    seen: dict[str, int] = {}

    def landed(target: str) -> Callable[[Any], Any]:
        async def count(msg: Any) -> None:
            seen[target] = seen.get(target, 0) + 1

        return count

    targets = [
        TEAM_B,
        f"$KV.{perms.CHECKPOINT_BUCKET}.forged",
        f"$KV.{SEEN_BUCKET}.{KVSeen.key('forged-id')}",
        perms.DEAD_SUBJECT,
        "k8s.digests.test.team-b.Pod.Forged",
    ]
    try:
        for target in targets:
            await spy.subscribe(target, cb=landed(target))
        await spy.flush()
        own_writes = {s: 0 for s in STORES}
        for subject, payload in _requests(program):
            for target in targets:
                await attacker.nc.publish(subject, payload, reply=target)
                if subject == perms.DEAD_SUBJECT:
                    own_writes[perms.DEAD_STREAM] += 1
            if subject.startswith(f"$KV.{SEEN_BUCKET}."):
                own_writes[f"KV_{SEEN_BUCKET}"] += 1  # one key: the bucket keeps its last value
        answering = sum(_answers(s, program) for s, _ in _requests(program))

        async def all_answered() -> bool:
            return all(seen.get(t, 0) >= answering for t in targets)

        try:
            await eventually(all_answered, timeout=60)  # a loaded machine answers late
        except Exception:
            raise AssertionError(seen) from None
        await _answered(attacker)
        after = await _stored(operator)
        # nothing outside what the program may write itself: an answer whose reply subject is
        # one of its own imports goes through it (into the stream or the checkpoint bucket for
        # the bridge, the worker's own bucket, the OTLP subscriber's dead-letter stream, where
        # seen.py checks what a handled-id entry says, the digests' stream for the digests
        # program); nothing anywhere else
        mine = {
            perms.BRIDGE: {STREAM, f"KV_{perms.CHECKPOINT_BUCKET}"},
            REMEDIATION: {f"KV_{SEEN_BUCKET}"},
            perms.OTLP: {perms.DEAD_STREAM},
            perms.DIGESTS: {DIGESTS},
        }.get(program, set())
        assert {s: n for s, n in after.items() if s not in mine} == {
            s: before[s] + own_writes[s] for s in STORES if s not in mine
        }, (before, after, seen)
        if program != perms.BRIDGE:
            # the pull requests' deliveries came back to the spy, none was stored again
            durable = await operator.js.consumer_info(STREAM, program)
            assert durable.num_pending == 0 and durable.delivered.stream_seq == before[STREAM]
    finally:
        await spy.close()


async def test_a_durable_made_headers_only_is_refused(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """The operator made the subscriber's durable ``headers_only`` (the rest as shipped): each
    message would come without its body, be counted bad and terminated, every Event lost to
    this subscriber. The subscriber refuses to bind, naming the key."""
    from nats.js.api import AckPolicy, ConsumerConfig

    from k8s_event_consumer.durables import ConsumerConflict

    operator = await users(OPERATOR)
    config = READ_OPTIONS.config(ALERTING, ["k8s.events.>"])
    assert config.ack_policy == AckPolicy.EXPLICIT
    config.headers_only = True
    await operator.js.add_consumer(STREAM, config=ConsumerConfig.from_response(config.as_dict()))
    al = await users(ALERTING)
    with pytest.raises(ConsumerConflict, match="headers_only"):
        await Consumer.open(
            al.nc,
            stream=STREAM,
            durable=ALERTING,
            subjects=["k8s.events.>"],
            options=READ_OPTIONS,
            subject_prefix="k8s.events",
        )
