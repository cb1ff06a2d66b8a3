"""Hostile status events against the alerting subscriber's path: a number that is no number,
a time no calendar holds. Each is a ``BadMessage`` (terminated, logged, never redelivered), never
another exception: one would stop the consumer's ``run`` (the subscriber exits, restarts, meets
the same message again: no alert reaches Alertmanager while it lasts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from bridge.core.converting import Converter
from k8s_event_consumer.consuming import Consumer, Handlers
from k8s_event_consumer.events import BadMessage, decode
from k8s_event_consumer.options import ConsumerOptions
from k8s_event_consumer.seen import MemorySeen

CLUSTER = "prod-eu-1"
NOW = "2026-11-30T12:00:00Z"


def status_message(what: str, data: dict[str, Any]) -> Any:
    return Converter(CLUSTER, "k8s.events", "structured").status(what, f"{what}/x", data, NOW)


@pytest.mark.parametrize(
    ("what", "data"),
    [
        ("dropped", {"size": "x"}),
        ("dropped", {"size": {"nested": 1}}),
        ("dropped", {"size": [1]}),
        ("dropped", {"size": "9" * 5000}),  # past int()'s digit limit
        ("apiserver_recovered", {"degradedForSeconds": "soon"}),
        ("leader_changed", {"transitions": "1e400"}),
        ("started", {"pid": "NaN"}),
        ("apiserver_unreachable", {"at": "0001-01-01T00:00:00+01:00"}),  # before year 1 in UTC
        ("apiserver_reachable", {"at": "9999-12-31T23:59:59-01:00"}),  # after 9999 in UTC
        ("gap", {"detectedAt": "2026-13-01T00:00:00Z"}),
    ],
)
def test_a_hostile_status_event_is_a_bad_message_and_nothing_else(
    what: str, data: dict[str, Any]
) -> None:
    msg = status_message(what, {"scope": "*", **data})
    with pytest.raises(BadMessage):
        decode(msg.subject, msg.headers, msg.payload)


def test_well_formed_numbers_and_times_still_decode() -> None:
    msg = status_message("dropped", {"size": 2_000_000, "id": "u/1"})
    d = decode(msg.subject, msg.headers, msg.payload).status
    assert d is not None and d.size == 2_000_000  # type: ignore[attr-defined]
    msg = status_message("apiserver_unreachable", {"at": "2026-11-30T13:00:00+01:00"})
    s = decode(msg.subject, msg.headers, msg.payload).status
    assert s is not None and s.at == datetime(2026, 11, 30, 12, tzinfo=UTC)  # type: ignore[attr-defined]


@dataclass
class FakeMsg:
    """What ``Consumer.handle`` reads of a nats-py message, and what it did to it."""

    subject: str
    headers: dict[str, str] | None
    data: bytes
    settled: list[str] = field(default_factory=list)
    metadata: Any = field(
        default_factory=lambda: SimpleNamespace(
            sequence=SimpleNamespace(stream=7), num_delivered=1, timestamp=None
        )
    )

    async def ack(self) -> None:
        self.settled.append("ack")

    async def nak(self, delay: float | None = None) -> None:
        self.settled.append("nak")

    async def term(self) -> None:
        self.settled.append("term")


async def test_the_consumer_terminates_a_hostile_status_event_and_goes_on() -> None:
    consumer = Consumer(
        None,  # type: ignore[arg-type]
        None,
        "K8S_EVENTS",
        "k8s-event-alerting-0",
        ConsumerOptions(),
        MemorySeen(),
    )
    called: list[Any] = []

    async def on_dropped(s: Any, d: Any) -> None:
        called.append(s)

    bad = status_message("dropped", {"size": "x"})
    good = status_message("dropped", {"size": 10, "id": "u/2"})
    msgs = [FakeMsg(m.subject, m.headers, m.payload) for m in (bad, good)]
    for m in msgs:
        await consumer.handle(m, Handlers(on_dropped=on_dropped))  # type: ignore[arg-type]
    assert [m.settled for m in msgs] == [["term"], ["ack"]]
    assert consumer.stats.bad == 1 and len(called) == 1
