"""The OTLP subscriber told its requests are too large (``otlp.sizing``, ``otlp.shipping``): it
sends smaller ones, down to what passes, and keeps the limit it learned; a record alone larger
than what the endpoint takes is a dead letter once there is proof the endpoint works; what
repeats in a loop is logged sampled, with a count. Against a fake endpoint that refuses any
request over N bytes as a real collector does (otelcol v0.139.0: a 400 with a
``google.rpc.Status`` saying ``http: request body too large``, counting the decompressed body)
or as a proxy does (413)."""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

import pytest

from k8s_event_consumer import seen
from k8s_event_consumer.consuming import Delivery, Retry
from k8s_event_consumer.otlp import sender, sizing
from k8s_event_consumer.otlp.shipping import LOG_EVERY, Backoff
from tests.unit.test_otlp import (
    FakeDeadLetters,
    FakeEndpoint,
    delivery,
    event_obj,
    shipper,
)
from tests.virtualtime import LOOP, virtual_time

KIB = 1024
MESSAGE = "http: request body too large"  # Go's http.MaxBytesError, as otelcol answers it
# a google.rpc.Status: code 3 (InvalidArgument), the message: what otelcol's OTLP receiver sends
RPC_TOO_LARGE = b"\x08\x03\x12" + bytes([len(MESSAGE)]) + MESSAGE.encode()
NGINX_413 = b"<html><head><title>413 Request Entity Too Large</title></head></html>"


class LimitedEndpoint(FakeEndpoint):
    """Refuses every request over ``limit`` bytes of protobuf (what a collector counts once it
    decompressed the body) as too large, through the real reading of answers: a 400 as otelcol
    answers it, or a proxy's 413; takes the others (and refuses ``bad`` ones as any
    endpoint)."""

    def __init__(self, limit: int, status: int = 400, **kw: Any) -> None:
        super().__init__(**kw)
        self.limit = limit
        self.too_large_status = status
        self.too_large = 0  # requests refused as too large
        self.sizes: list[int] = []  # of the requests taken

    async def send(self, body: bytes) -> sender.Answer:
        if len(body) > self.limit:
            self.requests += 1
            self.too_large += 1
            if self.too_large_status == 400:
                return sender.answer(400, {"Content-Type": sender.PROTOBUF}, RPC_TOO_LARGE)
            return sender.answer(413, {"Content-Type": "text/html"}, NGINX_413)
        got = await super().send(body)
        if isinstance(got, sender.Accepted):
            self.sizes.append(len(body))
        return got


def records(n: int, start: int = 0, rng: random.Random | None = None) -> list[Delivery]:
    """``n`` Events from ``start``; with ``rng`` their messages of 100 B to 3 KB."""
    out = []
    for i in range(start, start + n):
        text = "x" * rng.randrange(100, 3000) if rng else "Back-off restarting failed container"
        out.append(delivery(event_obj(uid=f"u-{i}", rv=i, message=text), seq=i + 1))
    return out


def ids(ds: list[Delivery]) -> list[str]:
    return [d.id for d in ds]


# --- the answer -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "content_type", "body", "too_large"),
    [
        (400, sender.PROTOBUF, RPC_TOO_LARGE, True),  # otelcol v0.139.0, as it answers
        (400, "application/json", b'{"code":3,"message":"http: request body too large"}', True),
        (413, "text/html", NGINX_413, True),
        (413, "", b"", True),  # a 413 is too large whatever it says
        (400, "text/plain", b"Payload Too Big", True),
        (400, sender.PROTOBUF, b"\x08\x03\x12\x0abad record", False),
        (422, "text/plain", b"attribute too large", False),  # a record's fault, not the size
        (500, "text/plain", b"request body too large", False),
    ],
)
def test_too_large_is_read_from_a_413_or_a_400_that_says_so(
    status: int, content_type: str, body: bytes, too_large: bool
) -> None:
    got = sender.answer(status, {"Content-Type": content_type}, body)
    assert getattr(got, "too_large", False) is too_large


# --- the limit alone -----------------------------------------------------------------------------


def test_a_refusal_halves_the_limit_then_bisects_between_taken_and_refused() -> None:
    limit = sizing.RequestLimit(4 * 1024 * KIB)
    assert limit.refused(600 * KIB) == 300 * KIB  # halving below the refused request
    assert limit.refused(300 * KIB) == 150 * KIB
    assert limit.taken(140 * KIB) is None  # a shaped request taken: remembered as passing
    # refused above what passed: never below what passed, which is known to work
    assert limit.refused(150 * KIB) == 140 * KIB
    assert limit.refused_at == 150 * KIB
    # the endpoint took less than it did (its limit went down): what passed is forgotten
    assert limit.refused(100 * KIB) == 50 * KIB
    assert limit.refused(2 * KIB) == sizing.FLOOR  # never under the floor
    assert limit.refused(2 * KIB) is None  # at the floor: nothing lower


def test_the_limit_probes_upward_only_after_many_shaped_requests_taken() -> None:
    limit = sizing.RequestLimit(1024 * KIB)
    limit.refused(200 * KIB)  # -> 100 KiB, 200 KiB refused
    for _ in range(sizing.PROBE_AFTER * 3):
        assert limit.taken(10 * KIB) is None  # requests the limit did not shape: no probe
    for _ in range(sizing.PROBE_AFTER - 1):
        assert limit.taken(60 * KIB) is None
    assert limit.taken(60 * KIB) == 150 * KIB  # half-way to what was refused
    for _ in range(sizing.PROBE_AFTER - 1):
        limit.taken(100 * KIB)
    assert limit.taken(100 * KIB) == 175 * KIB
    limit.refused(170 * KIB)  # the probe failed: back to what passed, 170 KiB remembered
    assert limit.value == 100 * KIB
    steps = []
    for _ in range(20 * sizing.PROBE_AFTER):
        if (new := limit.taken(limit.value)) is not None:
            steps.append(new)
    # bisected up to within 1/16 of what was refused, and no further
    assert steps and limit.value < 170 * KIB
    assert 170 * KIB - limit.value <= limit.value // sizing.CLOSE


def test_a_refusal_is_forgotten_after_many_requests_and_the_limit_doubles_to_the_configured() -> (
    None
):
    limit = sizing.RequestLimit(400 * KIB)
    limit.refused(100 * KIB)  # -> 50 KiB
    seen = {limit.value}
    for _ in range(sizing.FORGET_AFTER + 4 * sizing.PROBE_AFTER):
        limit.taken(limit.value)
        seen.add(limit.value)
    # the refusal forgotten, it doubled up to the configured limit and no further
    assert limit.refused_at is None and max(seen) == limit.value == 400 * KIB
    assert sorted(seen)[:3] == [50 * KIB, 75 * KIB, 87.5 * KIB]  # bisecting first


# --- a batch against an endpoint that takes N bytes at most -------------------------------------


@pytest.mark.parametrize("status", [400, 413])
async def test_requests_too_large_get_smaller_until_they_pass_and_the_limit_is_kept(
    status: int,
) -> None:
    ep = LimitedEndpoint(8 * KIB, status)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)  # max_request_bytes: 4 MiB, 512 times what the endpoint takes
    first = records(200)
    assert await s.ship(first) == [None] * 200
    assert sorted(ep.taken) == sorted(ids(first))  # each once: a refusal took nothing
    assert dead.stored == [] and s.metrics.value("records_total", result="handed_back") == 0
    assert 4 * KIB <= s.limit.value <= 8 * KIB  # under what passes, at least half of it
    # one refusal per halving from the batch's size down to the limit, not one per record
    assert ep.too_large <= 6
    assert s.metrics.value("request_limit_changes_total", direction="lowered") == ep.too_large
    assert s.metrics.value("requests_total", result="refused") == ep.too_large
    assert max(ep.sizes) <= 8 * KIB
    # kept: the next batches go in requests that pass, none refused
    refused = ep.too_large
    for k in range(1, 4):
        batch = records(200, start=k * 200)
        assert await s.ship(batch) == [None] * 200
    assert ep.too_large == refused and len(ep.taken) == 800 and len(set(ep.taken)) == 800


async def test_the_limit_converges_near_what_passes_with_few_refusals() -> None:
    """Records of many sizes, batch after batch: the probes upward find the endpoint's limit
    again and again refused a little above it; everything arrives once, nothing is a dead
    letter, and the refusals are a small part of the requests."""
    rng = random.Random(7)
    ep = LimitedEndpoint(40_000)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    sent: list[str] = []
    for _ in range(30):
        batch = records(rng.randrange(20, 200), start=len(sent), rng=rng)
        sent += ids(batch)
        assert await s.ship(batch) == [None] * len(batch)
    assert Counter(ep.taken) == Counter(sent) and dead.stored == []
    assert ep.too_large <= 0.05 * ep.requests, (ep.too_large, ep.requests)
    assert s.metrics.value("request_limit_changes_total", direction="raised") >= 1
    assert 30_000 <= s.limit.value <= 40_000  # found again after the first halving (~25,000)
    assert s.limit.refused_at is not None and s.limit.refused_at > 40_000
    assert max(ep.sizes) <= 40_000


async def test_a_record_alone_larger_than_the_endpoint_takes_is_a_dead_letter_with_proof() -> None:
    ep = LimitedEndpoint(8 * KIB)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    batch = records(30)
    big = delivery(event_obj(uid="big", rv=99, message="y" * 20_000), seq=99)
    batch.insert(12, big)
    assert await s.ship(batch) == [None] * 31  # the others taken, the big one stored
    assert sorted(ep.taken) == sorted(i for i in ids(batch) if i != big.id)
    ((gone, status, reason),) = dead.stored
    assert (gone, status) == (big.id, 400) and "too large" in reason
    # a lone record refused teaches nothing: the limit is not driven down by it
    assert s.limit.value >= 4 * KIB


async def test_a_lone_record_too_large_without_proof_comes_again_and_is_then_a_dead_letter() -> (
    None
):
    ep = LimitedEndpoint(8 * KIB)
    dead = FakeDeadLetters()
    s, _ = shipper(ep, dead)
    big = delivery(event_obj(uid="big", rv=99, message="y" * 20_000), seq=99)
    (first,) = await s.ship([big])
    assert isinstance(first, Retry) and dead.stored == []  # nothing taken yet: no proof
    # remembered for the proof as a 16-byte digest, whatever the id's length
    assert list(s._failed) == [seen.digest(big.id)]
    assert await s.ship(records(5)) == [None] * 5
    assert await s.ship([big]) == [None]  # the same record again: proven, not handed back
    assert [i for i, _, _ in dead.stored] == [big.id]


# --- sampled logs -----------------------------------------------------------------------------


DURATION = 60.0  # seconds of virtual time


def lines(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [
        dict(getattr(r, "fields", {}))
        for r in caplog.records
        if r.name == "k8s_event_consumer.otlp" and r.getMessage() == event
    ]


@virtual_time
async def test_a_refusal_in_a_loop_is_logged_sampled_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An endpoint that refuses everything (a proxy's 400): a record is handed back many
    times a second; the log gets at most one line per LOG_EVERY, each saying how many it
    stands for, and together they account for every one."""
    caplog.set_level(logging.INFO, logger="k8s_event_consumer")
    ep = FakeEndpoint(bad=[f"u-{i}/{i}" for i in range(8)])
    s, _ = shipper(ep, clock=LOOP)
    s.backoff = Backoff(0.05, 0.1)
    while LOOP.monotonic() < DURATION:
        out = await s.ship(records(8))
        assert all(isinstance(o, Retry) for o in out)
    handed = s.metrics.value("records_total", result="handed_back")
    got = lines(caplog, "record_refused_unproven")
    assert handed >= 50 * DURATION  # more than 50 a second
    assert len(got) <= DURATION / LOG_EVERY + 1
    assert all(g["suppressed"] > 0 for g in got[1:])
    # every one accounted for by the lines and the counts they carry, but those of the last
    # interval: its count is said by the next line, and the flood stopped
    unsaid = handed - len(got) - sum(g.get("suppressed", 0) for g in got)
    assert 0 <= unsaid <= handed * 2 * LOG_EVERY / DURATION
    for event in ("batch_refused", "endpoint_unavailable", "endpoint_blocked"):
        assert len(lines(caplog, event)) <= DURATION / LOG_EVERY + 1


@virtual_time
async def test_an_endpoint_that_comes_and_goes_is_logged_sampled_and_its_last_state_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="k8s_event_consumer")
    ep = FakeEndpoint()
    s, _ = shipper(ep, clock=LOOP)
    s.backoff = Backoff(0.5, 1.0)
    n = 0
    while LOOP.monotonic() < 60.0:  # every other request 503: a load balancer's bad backend
        ep.down = 1
        await s.ship(records(2, start=n))
        n += 2
    states = [
        (r.getMessage(), dict(getattr(r, "fields", {})))
        for r in caplog.records
        if r.getMessage() in ("endpoint_available", "endpoint_unavailable")
    ]
    assert 2 <= len(states) <= 60 / LOG_EVERY + 1
    ep.down = 0
    await LOOP.sleep(LOG_EVERY)
    await s.ship(records(1, start=n))  # it is up again: the log's last word says so
    last = [r.getMessage() for r in caplog.records if r.getMessage().startswith("endpoint_")]
    assert last[-1] == "endpoint_available"
