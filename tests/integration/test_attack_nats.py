"""An attacker's view of the NATS side (issue 31): a program's own user, with the shipped
permissions (deploy/nats/permissions.json) on a real nats-server, trying to get a message into
the bridge's stream by a way the publish permissions do not name: the reply subject of a
request JetStream answers. nats-server checks a publish's subject against the permissions, not
its reply subject, and JetStream's answer to a request is published in the account like any
message: a stream listening on the reply subject stores it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from k8s_event_common import streams as shapes
from k8s_event_consumer.consuming import Consumer, Handlers
from k8s_event_consumer.options import Start
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


async def test_jetstream_answers_sent_into_event_subjects_are_no_events(
    stocked: User, users: Callable[[str], Any]
) -> None:
    """What a subscriber's or the worker's user can make JetStream answer into an Event subject
    with the requests it is granted (a publish ack of its bucket, stream and consumer info, a
    message get) is JetStream's own JSON, never a CloudEvent: the stream stores it (the server
    does not check reply subjects), a subscriber counts each as a bad message and handles only
    the bridge's Events."""
    before = await messages(stocked)
    await provision_durable(users, ALERTING, ["k8s.events.>"])
    rem = await users(REMEDIATION)
    await rem.nc.publish(f"$KV.{SEEN_BUCKET}.x", b"v", reply=TEAM_B + "1")
    await rem.nc.publish(
        f"$JS.API.STREAM.MSG.GET.KV_{SEEN_BUCKET}",
        json.dumps({"last_by_subj": f"$KV.{SEEN_BUCKET}.x"}).encode(),
        reply=TEAM_B + "2",
    )
    al = await users(ALERTING)
    await al.nc.publish(
        f"$JS.API.STREAM.MSG.GET.{STREAM}", json.dumps({"seq": 1}).encode(), reply=TEAM_B + "3"
    )
    await al.nc.publish(f"$JS.API.CONSUMER.INFO.{STREAM}.{ALERTING}", b"", reply=TEAM_B + "4")
    injected = 4

    async def stored() -> bool:
        return await messages(stocked) == before + injected

    await eventually(stored, timeout=10)
    consumer = await Consumer.open(
        al.nc,
        stream=STREAM,
        durable=ALERTING,
        subjects=["k8s.events.>"],
        options=READ_OPTIONS,
        start=Start.all(),
        subject_prefix="k8s.events",
    )
    handled: list[str] = []

    async def on_event(ev: Any, d: Any) -> None:
        handled.append(d.decoded.subject)

    async def through() -> bool:
        return consumer.stats.handled + consumer.stats.bad == before + injected

    run = asyncio.create_task(consumer.run(Handlers(on_event=on_event)))
    try:
        await eventually(through, timeout=30)
    finally:
        await consumer.stop()
        await asyncio.wait_for(run, 30)
    assert consumer.stats.bad == injected
    assert len(handled) == before and not any(s.startswith(TEAM_B) for s in handled)


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
