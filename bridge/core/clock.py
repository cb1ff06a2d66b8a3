"""Time as the bridge uses it, in one object: injected wherever time is read or waited on.

``Clock`` holds four callables: ``monotonic()`` (durations, deadlines), ``wall()`` (epoch
seconds: how old a resourceVersion is, Lease timestamps), ``sleep(seconds)`` and ``random()``
(jitter). ``SYSTEM`` is the real one. They are plain attributes, not methods, so that a read on
the publish path costs what calling ``time.monotonic`` costs; a test replaces one of them
(``Clock(monotonic=...)``) or takes a ``ManualClock``, on which time moves only when slept or
advanced (client-go's reflector keeps its clock as a field for the same reason).
"""

from __future__ import annotations

import asyncio
import random as _random
import time
from collections.abc import Awaitable, Callable


class Clock:
    __slots__ = ("monotonic", "random", "sleep", "wall")

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.monotonic = monotonic
        self.wall = wall
        self.sleep = sleep
        self.random = random


SYSTEM = Clock()


class ManualClock(Clock):
    """For tests: ``now`` moves only when slept (each sleep recorded in ``slept``) or
    ``advance``d; the wall clock is ``wall_at_zero + now``; ``random()`` returns ``rand``."""

    __slots__ = ("now", "rand", "slept", "wall_at_zero")

    def __init__(
        self, now: float = 0.0, *, wall_at_zero: float = 1_000_000.0, rand: float = 0.0
    ) -> None:
        super().__init__(
            monotonic=self._monotonic, wall=self._wall, sleep=self._sleep, random=self._random
        )
        self.now = now
        self.wall_at_zero = wall_at_zero
        self.rand = rand
        self.slept: list[float] = []

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def _monotonic(self) -> float:
        return self.now

    def _wall(self) -> float:
        return self.wall_at_zero + self.now

    def _random(self) -> float:
        return self.rand

    async def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # let the other tasks run, as a real sleep would
