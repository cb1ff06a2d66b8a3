"""The kit's fetch (k8s_event_consumer.fetching.Fetcher) against a scripted JetStream: each pull
request asks for a number of messages and a number of bytes, a status ends it, a status of an
earlier request ends nothing, and nothing lost between requests. On virtual time (the real
server's answers: tests/integration/test_consumer_fetch.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.aio.msg import Msg

from k8s_event_consumer import fetching
from k8s_event_consumer.fetching import Fetcher
from tests.virtualtime import LOOP, virtual_time

INBOX = "_INBOX_test.abc"


def data(n: int, size: int = 100) -> Msg:
    return Msg(
        None, subject=f"k8s.events.c.{n}", reply=f"$JS.ACK.S.d.1.{n}.{n}.0.0", data=b"x" * size
    )  # type: ignore[arg-type]


def status(reply: str, code: str, description: str = "") -> Msg:
    headers = {"Status": code, "Description": description}
    return Msg(None, subject=reply, headers=headers)  # type: ignore[arg-type]


@dataclass
class FakeNats:
    """What the Fetcher uses of nats-py's client; ``answer(request, reply)`` is the server."""

    answer: Callable[[dict[str, Any], str], list[Msg]]
    max_payload: int = 1 << 20
    requests: list[dict[str, Any]] = field(default_factory=list)
    cb: Callable[[Msg], Awaitable[None]] | None = None

    def new_inbox(self) -> str:
        return INBOX

    async def subscribe(self, subject: str, cb: Callable[[Msg], Awaitable[None]]) -> Any:
        assert subject == f"{INBOX}.*"
        self.cb = cb
        return self

    async def unsubscribe(self) -> None:
        self.cb = None

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        assert subject == "$JS.API.CONSUMER.MSG.NEXT.K8S_EVENTS.d"
        assert reply.startswith(f"{INBOX}.")
        request = json.loads(payload)
        self.requests.append(request)
        assert self.cb is not None
        for msg in self.answer(request, reply):
            await self.cb(msg)

    async def deliver(self, *msgs: Msg) -> None:
        assert self.cb is not None
        for msg in msgs:
            await self.cb(msg)


def fetcher(nc: FakeNats) -> Fetcher:
    return Fetcher(nc, "K8S_EVENTS", "d", LOOP)  # type: ignore[arg-type]


@virtual_time
async def test_a_fetch_asks_for_a_count_and_bytes_and_ends_at_the_status() -> None:
    def answer(req: dict[str, Any], reply: str) -> list[Msg]:
        return [data(1), data(2), status(reply, "409", fetching.TOO_LARGE)]

    nc = FakeNats(answer)
    got = await fetcher(nc).fetch(64, 300_000, timeout=5)
    assert [m.subject for m in got] == ["k8s.events.c.1", "k8s.events.c.2"]
    assert nc.requests == [{"batch": 64, "max_bytes": 300_000, "no_wait": True}]


@virtual_time
async def test_nothing_there_waits_for_one_message_then_times_out() -> None:
    def answer(req: dict[str, Any], reply: str) -> list[Msg]:
        return [status(reply, "404" if req.get("no_wait") else "408", "No Messages")]

    nc = FakeNats(answer)
    with pytest.raises(nats.errors.TimeoutError):
        await fetcher(nc).fetch(64, 300_000, timeout=5)
    assert nc.requests[1] == {"batch": 1, "max_bytes": 300_000, "expires": int(4.9e9)}


@virtual_time
async def test_a_message_larger_than_what_is_left_ends_the_fetch_empty_without_waiting() -> None:
    def answer(req: dict[str, Any], reply: str) -> list[Msg]:
        return [status(reply, "409", fetching.TOO_LARGE)]

    nc = FakeNats(answer)
    start = LOOP.monotonic()
    assert await fetcher(nc).fetch(64, 10_000, timeout=5) == []
    assert len(nc.requests) == 1 and LOOP.monotonic() == start


@virtual_time
async def test_an_earlier_requests_status_ends_nothing() -> None:
    """A request given up (its answer late) leaves its status behind: the next one reads on."""
    replies: list[str] = []

    def answer(req: dict[str, Any], reply: str) -> list[Msg]:
        replies.append(reply)
        if len(replies) <= 2:
            return []  # the first fetch's answers do not come in time
        stale = status(replies[0], "404", "No Messages")
        return [stale, data(3), data(4), status(reply, "409", "Batch Completed")]

    nc = FakeNats(answer)
    f = fetcher(nc)
    with pytest.raises(nats.errors.TimeoutError):
        await f.fetch(2, 300_000, timeout=1)
    got = await f.fetch(2, 300_000, timeout=1)
    assert [m.subject for m in got] == ["k8s.events.c.3", "k8s.events.c.4"]
    assert len(set(replies)) == len(replies)  # a reply subject of its own per request


@virtual_time
async def test_messages_that_came_after_their_request_was_given_up_come_alone_next() -> None:
    def answer(req: dict[str, Any], reply: str) -> list[Msg]:
        return []

    nc = FakeNats(answer)
    f = fetcher(nc)
    with pytest.raises(nats.errors.TimeoutError):
        await f.fetch(64, 300_000, timeout=1)
    await nc.deliver(data(7), status(f"{INBOX}.2", "408", "Request Timeout"), data(8))
    asked = len(nc.requests)
    got = await f.fetch(64, 300_000, timeout=1)
    assert [m.subject for m in got] == ["k8s.events.c.7", "k8s.events.c.8"]
    assert len(nc.requests) == asked  # no request: they were asked for already


@virtual_time
async def test_a_deleted_durable_is_an_error_and_messages_before_it_are_kept() -> None:
    def deleted(req: dict[str, Any], reply: str) -> list[Msg]:
        return [status(reply, "409", "Consumer Deleted")]

    with pytest.raises(nats.js.errors.APIError):
        await fetcher(FakeNats(deleted)).fetch(64, 300_000, timeout=1)

    def some_then_deleted(req: dict[str, Any], reply: str) -> list[Msg]:
        return [data(1), status(reply, "409", "Consumer Deleted")]

    got = await fetcher(FakeNats(some_then_deleted)).fetch(64, 300_000, timeout=1)
    assert [m.subject for m in got] == ["k8s.events.c.1"]


def test_the_floor_is_the_largest_message_and_size_counts_what_the_server_counts() -> None:
    assert fetching.floor(1 << 20) == (1 << 20) + fetching.SUBJECT_ROOM
    msg = data(1, size=1000)
    assert fetching.size(msg) >= 1000 + len(msg.subject) + len(msg.reply)
