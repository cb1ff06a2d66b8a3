"""The one wait helper (k8s_event_sim.waiting, re-exported by tests/support.py): it returns
the first truthy answer, and a timeout names what it waited for and how far it got."""

from __future__ import annotations

import pytest

from tests.support import NotMet, eventually, eventually_sync


def counter(until: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def check() -> int | None:
        calls.append(1)
        return len(calls) if len(calls) >= until else None

    return calls, check


async def test_eventually_returns_the_first_truthy_answer_of_a_sync_or_async_check() -> None:
    calls, check = counter(3)
    assert await eventually(check, 5, 0.001) == 3  # type: ignore[arg-type]
    assert len(calls) == 3

    async def ready() -> str:
        return "yes"

    assert await eventually(ready, 5) == "yes"


async def test_a_timeout_names_what_was_awaited_and_the_last_answer() -> None:
    with pytest.raises(
        NotMet, match=r"the stream holding 3 messages: not met in 0.05s \(last: 0\)"
    ):
        await eventually(lambda: 0, 0.05, 0.01, what="the stream holding 3 messages")


async def test_without_a_name_the_timeout_quotes_the_check() -> None:
    with pytest.raises(AssertionError, match=r"lambda: len\(\[\]\) > 0"):
        await eventually(lambda: len([]) > 0, 0.02, 0.01)


async def test_a_server_not_up_yet_is_retried_and_reported() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(NotMet, match="ConnectionRefusedError: connection refused"):
        await eventually(refused, 0.03, 0.01)


async def test_any_other_exception_ends_the_wait_at_once() -> None:
    calls: list[int] = []

    def broken() -> bool:
        calls.append(1)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await eventually(broken, 5, 0.01)
    assert calls == [1]


def test_the_sync_twin_waits_and_raises_the_error_asked_for() -> None:
    _, check = counter(2)
    assert eventually_sync(check, 5, 0.001) == 2  # type: ignore[arg-type]
    with pytest.raises(TimeoutError, match="nats-server listening: not met"):
        eventually_sync(lambda: False, 0.02, 0.01, what="nats-server listening", error=TimeoutError)
