"""Waiting for a condition: ``eventually`` (async) and its sync twin ``eventually_sync``.

The one wait helper of the demo, the benchmark, the soak, the simulated servers and the tests
(``tests/support.py`` re-exports both). Each polls a check until it answers something truthy
and returns that answer; at the deadline it raises ``NotMet`` (or the ``error`` given), naming
what it waited for (``what``, else the check's source) and the check's last answer, so a test
that times out says which condition failed and how far it got.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

import aiohttp

__all__ = ["RETRIABLE", "NotMet", "eventually", "eventually_sync"]

T = TypeVar("T")

# what a check may raise while what it asks is not up yet: read as "not yet", kept as its last
# answer for the message
RETRIABLE: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError)


class NotMet(AssertionError):
    """A condition waited for was not met in time (an AssertionError: a test fails on it)."""


def _describe(check: Callable[..., Any]) -> str:
    """The check's source when it is a lambda (``lambda: logged(bridge, "x")``), else its
    name: what a timeout names when the caller said nothing."""
    name = getattr(check, "__qualname__", repr(check))
    if name.endswith("<lambda>"):
        try:
            source = inspect.getsource(check).strip()
        except (OSError, TypeError):
            return name
        return source if len(source) <= 300 else source[:300] + "..."
    return name


def _raised(exc: BaseException) -> str:
    """An exception as the last answer: its text only (the exception itself would keep its
    traceback's frames, and what they hold, such as an open socket, alive past the wait)."""
    return f"{type(exc).__name__}: {exc}"


def _failure(
    error: Callable[[str], BaseException],
    what: str | None,
    check: Callable[..., Any],
    timeout: float,
    last: object,
) -> BaseException:
    return error(f"{what or _describe(check)}: not met in {timeout:g}s (last: {last!r})")


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    timeout: float = 20.0,
    interval: float = 0.1,
    *,
    what: str | None = None,
    retry_on: tuple[type[BaseException], ...] = RETRIABLE,
    error: Callable[[str], BaseException] = NotMet,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    timeout: float = 20.0,
    interval: float = 0.1,
    *,
    what: str | None = None,
    retry_on: tuple[type[BaseException], ...] = RETRIABLE,
    error: Callable[[str], BaseException] = NotMet,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    timeout: float = 20.0,
    interval: float = 0.1,
    *,
    what: str | None = None,
    retry_on: tuple[type[BaseException], ...] = RETRIABLE,
    error: Callable[[str], BaseException] = NotMet,
) -> Any:
    """Until ``check()`` (awaited when it returns an awaitable) is truthy; return its value.

    An exception of ``retry_on`` counts as "not yet" (a server not listening yet); any other
    ends the wait at once. ``what`` names the condition in the error raised at the deadline.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while True:
        try:
            answer = check()
            if inspect.isawaitable(answer):
                answer = await answer
        except retry_on as exc:
            last = _raised(exc)
        else:
            if answer:
                return answer
            last = answer
        if loop.time() >= deadline:
            raise _failure(error, what, check, timeout, last)
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], T],
    timeout: float = 20.0,
    interval: float = 0.1,
    *,
    what: str | None = None,
    retry_on: tuple[type[BaseException], ...] = RETRIABLE,
    error: Callable[[str], BaseException] = NotMet,
) -> T:
    """``eventually`` for code without an event loop (a process starting, a cluster
    converging): blocks, sleeping ``interval`` between checks."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            answer = check()
        except retry_on as exc:
            last = _raised(exc)
        else:
            if answer:
                return answer
            last = answer
        if time.monotonic() >= deadline:
            raise _failure(error, what, check, timeout, last)
        time.sleep(interval)
