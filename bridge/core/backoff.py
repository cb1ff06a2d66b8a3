"""The retry schedule, and the one retry loop every start-up step goes through.

``Backoff`` has client-go's reflector numbers, on an injected ``Clock`` (time and randomness):
0.8 s, doubled on every failure, jittered up to twice that (jitter 1.0), never above the 30 s
cap, and started afresh once the last failure is more than 2 minutes old (the connection was
healthy in between). ``Retry-After`` from the server is a floor for the next delay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from bridge.settings import BackoffSettings
from k8s_event_common.clock import SYSTEM, Clock

T = TypeVar("T")


class Backoff:
    def __init__(
        self,
        initial: float = 0.8,
        factor: float = 2.0,
        cap: float = 30.0,
        reset_after: float = 120.0,
        jitter: float = 1.0,
        clock: Clock = SYSTEM,
    ) -> None:
        self.initial = initial
        self.factor = factor
        self.cap = cap
        self.reset_after = reset_after
        self.jitter = jitter
        self._clock = clock
        self._base = initial
        self._last: float | None = None

    @classmethod
    def from_settings(
        cls,
        b: BackoffSettings,
        clock: Clock = SYSTEM,
    ) -> Backoff:
        """The schedule of ``kubernetes.backoff``."""
        return cls(b.initial, b.factor, b.max, b.reset_after, clock=clock)

    def next_delay(self, retry_after: float | None = None) -> float:
        """The delay before the next attempt; each call counts as one more failure."""
        now = self._clock.monotonic()
        if self._last is not None and now - self._last > self.reset_after:
            self._base = self.initial
        self._last = now
        base = min(self._base, self.cap)
        delay = min(self.cap, base * (1.0 + self.jitter * self._clock.random()))
        self._base = min(self._base * self.factor, self.cap)
        if retry_after is not None and retry_after > delay:
            delay = min(retry_after, self.cap)  # a server's word, bounded by the operator's
        return delay


async def retrying(
    step: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    passing: Callable[[Exception], bool],
    on_failure: Callable[[Exception, float], Awaitable[None]],
    clock: Clock = SYSTEM,
) -> T:
    """``await step()`` until it succeeds.

    A failure that ``passing`` accepts is handed to ``on_failure`` with the delay before the
    next attempt (a ``retry_after`` attribute on it, as ``KubeError``s from a 429 or 503 carry,
    is a floor for that delay), then slept off; any other failure is raised at once.
    """
    while True:
        try:
            return await step()
        except Exception as exc:
            if not passing(exc):
                raise
            delay = backoff.next_delay(getattr(exc, "retry_after", None))
            await on_failure(exc, delay)
            await clock.sleep(delay)
