"""Writes from outside (issue 40): another program's user, on a real nats-server, writing into
the remediation worker's bucket of handled ids and into the Event subjects what it can make
JetStream answer there. nats-server checks a request's subject, not its reply subject, and
JetStream answers into any subject of the account; the server here has no accounts apart
(no auth), as one account would be. The worker reads through the kit: ``Consumer.run`` with
its ``KVSeen`` (``remediation.running.Program.provide``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import nats.js.errors
import pytest

from bridge.core.converting import Converter
from k8s_event_consumer import Consumer, ConsumerOptions, Delivery, Handlers, KubeEvent, KVSeen
from tests.streams import k8s_events
from tests.support import eventually

pytestmark = pytest.mark.integration
STREAM = "K8S_EVENTS"
BUCKET = "k8s_event_remediation"
FAST = ConsumerOptions(ack_wait=1.0, backoff=(0.2, 0.4), fetch_timeout=0.5)


def crash_loop(uid: str = "ev-1", rv: int = 7) -> Any:
    """The bridge's CloudEvent of a Pod's BackOff Event (its converter, structured)."""
    return Converter("c1", "k8s.events", "structured").convert(
        {
            "metadata": {"name": f"web.{uid}", "namespace": "shop", "uid": uid,
                         "resourceVersion": str(rv), "creationTimestamp": "2026-11-30T10:00:00Z"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web", "uid": "p1"},
            "reason": "BackOff",
            "message": "Back-off restarting failed container",
            "type": "Warning",
            "count": 5,
            "lastTimestamp": "2026-11-30T10:05:00Z",
            "source": {"component": "kubelet"},
        }
    )  # fmt: skip


@pytest.fixture
async def worker_nc(nats_server: Any) -> AsyncIterator[Any]:
    nc = await nats.connect(nats_server.url)
    await nc.jetstream().add_stream(k8s_events(stream=STREAM))
    yield nc
    with contextlib.suppress(Exception):
        await nc.close()


@pytest.fixture
async def outsider(nats_server: Any) -> AsyncIterator[Any]:
    """Another program's connection: it never writes the bucket through its API."""
    nc = await nats.connect(nats_server.url)
    yield nc
    with contextlib.suppress(Exception):
        await nc.close()


class Worker:
    """The worker's handler as the kit sees it: the ids it acted on."""

    def __init__(self) -> None:
        self.handled: list[str] = []

    async def on_event(self, ev: KubeEvent, d: Delivery) -> None:
        self.handled.append(d.id)


@contextlib.asynccontextmanager
async def running(nc: Any, seen: KVSeen, worker: Worker) -> AsyncIterator[Consumer]:
    consumer = await Consumer.open(
        nc, stream=STREAM, durable="remediation", subjects=["k8s.events.>"], options=FAST, seen=seen
    )
    task = asyncio.create_task(consumer.run(Handlers(on_event=worker.on_event)))
    try:
        yield consumer
    finally:
        await consumer.stop()
        await asyncio.wait_for(task, 15)


async def test_a_stream_info_answer_sent_into_the_bucket_does_not_hide_a_genuine_crash_loop(
    worker_nc: Any, outsider: Any
) -> None:
    """The attack: ``$JS.API.STREAM.INFO.K8S_EVENTS`` with the reply subject
    ``$KV.<bucket>.<the genuine id's key>``. JetStream stores its JSON answer as the entry; the
    worker handles the genuine message all the same, counts the entry forged and overwrites it
    with its own."""
    seen = await KVSeen.open(worker_nc, BUCKET)
    msg = crash_loop()
    id_ = msg.headers["Nats-Msg-Id"]
    key = KVSeen.key(id_)
    await outsider.publish(f"$JS.API.STREAM.INFO.{STREAM}", b"", reply=f"$KV.{BUCKET}.{key}")
    kv = await worker_nc.jetstream().key_value(BUCKET)

    async def stored() -> bool:
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            return b"stream_info_response" in ((await kv.get(key)).value or b"")
        return False

    await eventually(stored, timeout=10)
    await worker_nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)
    worker = Worker()
    async with running(worker_nc, seen, worker) as consumer:
        await eventually(lambda: consumer.stats.handled == 1, timeout=15)
    assert worker.handled == [id_]
    assert consumer.stats.skipped_duplicates == 0 and seen.forged == 1
    assert (await kv.get(key)).value == seen.value(id_)  # overwritten by the genuine entry
    assert await seen.contains(id_)


@pytest.mark.parametrize("value", [b"1", b"handled", b""], ids=["previous", "word", "empty"])
async def test_a_value_put_by_hand_does_not_hide_a_genuine_crash_loop(
    worker_nc: Any, outsider: Any, value: bytes
) -> None:
    """An entry put under the genuine id's key by another user (the previous version's ``1``
    included): the genuine message is handled, once."""
    seen = await KVSeen.open(worker_nc, BUCKET)
    msg = crash_loop()
    id_ = msg.headers["Nats-Msg-Id"]
    await (await outsider.jetstream().key_value(BUCKET)).put(KVSeen.key(id_), value)
    await worker_nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)
    worker = Worker()
    async with running(worker_nc, seen, worker) as consumer:
        await eventually(lambda: consumer.stats.handled == 1, timeout=15)
    assert worker.handled == [id_] and seen.forged == 1


async def test_what_is_no_cloudevent_of_the_bridges_is_terminated_once_and_the_rest_flows(
    worker_nc: Any, outsider: Any
) -> None:
    """Published into Event subjects from outside, without the bridge's headers: bytes, a JSON
    object, JetStream's answer (a STREAM.INFO whose reply subject is an Event subject), a
    CloudEvent whose id UTF-8 can not carry (its key once raised out of the worker's loop,
    which would stop and meet it again on every start). Each is terminated once: the ack floor
    passes them, nothing is redelivered or pending, each counted bad once; the genuine Event
    after them is handled."""
    seen = await KVSeen.open(worker_nc, BUCKET)
    ce = {"specversion": "1.0", "id": "\ud800x", "source": "s", "type": "io.k8s.event.warning",
          "data": {"metadata": {"uid": "u", "resourceVersion": "1"}}}  # fmt: skip
    await outsider.publish("k8s.events.c1.shop.Pod.web", b"\x00\xffnot json")
    await outsider.publish("k8s.events.c1.shop.Pod.web", b'{"hello": "world"}')
    await outsider.publish(f"$JS.API.STREAM.INFO.{STREAM}", b"", reply="k8s.events.c1.shop.Pod.x")
    await outsider.publish(
        "k8s.events.c1.shop.Pod.web",
        json.dumps(ce).encode(),
        headers={"Content-Type": "application/cloudevents+json"},
    )
    bad = 4
    js = worker_nc.jetstream()

    async def stored() -> bool:
        return (await js.stream_info(STREAM)).state.messages == bad

    await eventually(stored, timeout=10)
    msg = crash_loop()
    await js.publish(msg.subject, msg.payload, headers=msg.headers)
    worker = Worker()
    async with running(worker_nc, seen, worker) as consumer:
        await eventually(lambda: consumer.stats.handled == 1, timeout=15)
        await asyncio.sleep(2 * FAST.ack_wait)  # JetStream's redelivery runs on its own time
    info = await js.consumer_info(STREAM, "remediation")
    assert info.ack_floor.stream_seq == bad + 1
    assert info.num_redelivered == 0 and info.num_ack_pending == 0 and info.num_pending == 0
    assert consumer.stats.bad == bad and consumer.stats.failed == 0
    assert worker.handled == [msg.headers["Nats-Msg-Id"]]
