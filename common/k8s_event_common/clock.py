"""Time as every program uses it, in one object: injected wherever time is read or waited on.

``Clock`` holds five callables: ``monotonic()`` (durations, deadlines), ``wall()`` (epoch
seconds: how old a resourceVersion is, Lease timestamps, the ``at`` of status events),
``sleep(seconds)``, ``timeout(seconds)`` (an async context manager that cuts off what runs in
it, as ``asyncio.timeout`` does) and ``random()`` (jitter); ``wait_for`` and ``timestamp`` are
made of them. ``SYSTEM`` is the real one. They are plain attributes, not methods, so that a
read on the publish path costs what calling ``time.monotonic`` costs; a test replaces one of
them (``Clock(monotonic=...)``) or takes a ``ManualClock``, on which time moves only when
slept or advanced and a timeout fires only when time passes its deadline (client-go's
reflector keeps its clock as a field for the same reason).
"""

from __future__ import annotations

import asyncio
import random as _random
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

# ``timeout(seconds)``: None for no deadline; raises TimeoutError out of the block once past it
Timeout = Callable[[float | None], AbstractAsyncContextManager[Any]]


class Clock:
    __slots__ = ("monotonic", "random", "sleep", "timeout", "wall")

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        timeout: Timeout = asyncio.timeout,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.monotonic = monotonic
        self.wall = wall
        self.sleep = sleep
        self.timeout = timeout
        self.random = random

    async def wait_for(self, aw: Awaitable[T], seconds: float | None) -> T:
        """``await aw``, cut off after ``seconds`` (``TimeoutError``), as ``asyncio.wait_for``."""
        async with self.timeout(seconds):
            return await aw

    def timestamp(self) -> str:
        """The wall time as RFC 3339 in UTC, to the microsecond (status events' ``at``)."""
        return datetime.fromtimestamp(self.wall(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


SYSTEM = Clock()


class ManualClock(Clock):
    """For tests: ``now`` moves only when slept (each sleep recorded in ``slept``) or
    ``advance``d, and a ``timeout`` fires once ``now`` passes its deadline; the wall clock is
    ``wall_at_zero + now``; ``random()`` returns ``rand``."""

    __slots__ = ("_timeouts", "now", "rand", "slept", "wall_at_zero")

    def __init__(
        self, now: float = 0.0, *, wall_at_zero: float = 1_000_000.0, rand: float = 0.0
    ) -> None:
        super().__init__(
            monotonic=self._monotonic,
            wall=self._wall,
            sleep=self._sleep,
            timeout=self._timeout,
            random=self._random,
        )
        self.now = now
        self.wall_at_zero = wall_at_zero
        self.rand = rand
        self.slept: list[float] = []
        self._timeouts: set[_ManualTimeout] = set()

    def advance(self, seconds: float) -> None:
        """Move time on; every timeout whose deadline is passed fires."""
        self.now += seconds
        for t in [t for t in self._timeouts if t.deadline <= self.now]:
            t.fire()

    def _monotonic(self) -> float:
        return self.now

    def _wall(self) -> float:
        return self.wall_at_zero + self.now

    def _random(self) -> float:
        return self.rand

    async def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)  # let the other tasks run, as a real sleep would

    def _timeout(self, seconds: float | None) -> _ManualTimeout:
        return _ManualTimeout(self, seconds)


class _ManualTimeout:
    """``asyncio.timeout`` on a ``ManualClock``: fired by the clock, not by the loop's time."""

    __slots__ = ("_cm", "clock", "deadline")

    def __init__(self, clock: ManualClock, seconds: float | None) -> None:
        self.clock = clock
        self.deadline = float("inf") if seconds is None else clock.now + seconds
        self._cm = asyncio.timeout(None)

    async def __aenter__(self) -> _ManualTimeout:
        await self._cm.__aenter__()
        if self.deadline <= self.clock.now:
            self.fire()
        else:
            self.clock._timeouts.add(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.clock._timeouts.discard(self)
        await self._cm.__aexit__(exc_type, exc, tb)

    def fire(self) -> None:
        self.clock._timeouts.discard(self)
        if self._cm.expired() or self._cm.when() is not None:
            return
        self._cm.reschedule(asyncio.get_running_loop().time())
