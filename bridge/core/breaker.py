"""The circuit breaker in front of the API server, on an injected clock (the seeds'
degradation pattern).

``HEALTHY`` lets every request through. It opens (``OPEN``) after ``failures`` requests in a
row failed, or when the 95th percentile of the last ``latency_samples`` response times passes
``latency_p95`` (at least ``MIN_SAMPLES`` of them, or the whole window when it is smaller).
While open, no request goes until the next step of the back-off (the watcher's own: the
breaker shares it, so opening never shortens a wait); then one request goes as the probe
(``HALF_OPEN``). A probe answered within ``latency_p95`` closes it; a failed or slow one opens
it again for the next, longer step. What the caller must not do while it is not healthy is its
business (the watcher: no relist, the costly call, but a cheap probe instead).

Which outcomes count: a request answered (a list page, a watch opened) is a success with its
latency; a failure is what the API server's trouble looks like (5xx, 429, refused, reset,
timeout); a 401/403 or a 410 says nothing about the server's health and is not recorded.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass

from bridge.core.backoff import Backoff
from bridge.settings import BreakerSettings
from k8s_event_common.clock import SYSTEM, Clock

MIN_SAMPLES = 5


class BreakerState(enum.Enum):
    HEALTHY = "healthy"
    OPEN = "open"
    HALF_OPEN = "half_open"


GAUGE = {BreakerState.HEALTHY: 0, BreakerState.OPEN: 1, BreakerState.HALF_OPEN: 2}


@dataclass(frozen=True)
class Change:
    """The breaker opened (``degraded``) or closed (``recovered``)."""

    opened: bool
    reason: str  # "failures" or "latency" when it opened; "probe" when it closed
    detail: str
    open_for: float = 0.0  # when it closed: seconds it was not healthy


class Breaker:
    def __init__(
        self,
        settings: BreakerSettings,
        backoff: Backoff,
        clock: Clock = SYSTEM,
    ) -> None:
        self.failures = settings.failures
        self.latency_p95 = settings.latency_p95
        self._samples: deque[float] = deque(maxlen=settings.latency_samples)
        self._min_samples = min(MIN_SAMPLES, settings.latency_samples)
        self._backoff = backoff
        self._clock = clock
        self.state = BreakerState.HEALTHY
        self.consecutive_failures = 0
        self.opened_at: float | None = None
        self._probe_at = 0.0

    @property
    def healthy(self) -> bool:
        return self.state is BreakerState.HEALTHY

    @property
    def is_open(self) -> bool:
        return self.state is BreakerState.OPEN

    def p95(self) -> float | None:
        """The 95th percentile of the recent response times (nearest rank), once there are
        enough of them."""
        if len(self._samples) < self._min_samples:
            return None
        ordered = sorted(self._samples)
        return ordered[math.ceil(0.95 * len(ordered)) - 1]

    def ready_in(self) -> float:
        """Seconds until a request may go: 0 unless open and the next probe is not due."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self._probe_at - self._clock.monotonic())

    def begin(self) -> bool:
        """A request goes now (call when ``ready_in()`` is 0). True when it is the probe."""
        if self.state is BreakerState.OPEN:
            self.state = BreakerState.HALF_OPEN
        return self.state is BreakerState.HALF_OPEN

    def success(self, latency: float) -> Change | None:
        """A request was answered after ``latency`` seconds."""
        self.consecutive_failures = 0
        if self.state is BreakerState.HALF_OPEN:
            if latency <= self.latency_p95:
                return self._close(f"a probe was answered in {latency:.2f}s")
            return self._open(
                None, "latency", f"the probe took {latency:.2f}s (limit {self.latency_p95:g}s)"
            )
        self._samples.append(latency)
        p95 = self.p95()
        if self.state is BreakerState.HEALTHY and p95 is not None and p95 > self.latency_p95:
            return self._open(
                None,
                "latency",
                f"p95 response time {p95:.2f}s over the last {len(self._samples)} requests "
                f"(limit {self.latency_p95:g}s)",
            )
        return None

    def failure(self, detail: str, retry_after: float | None = None) -> Change | None:
        """A request failed the way an unhealthy server fails."""
        self.consecutive_failures += 1
        if self.state is BreakerState.HALF_OPEN:
            return self._open(retry_after, "failures", f"the probe failed: {detail}")
        if self.state is BreakerState.OPEN:
            self._probe_at = self._clock.monotonic() + self._backoff.next_delay(retry_after)
            return None
        if self.consecutive_failures >= self.failures:
            return self._open(
                retry_after,
                "failures",
                f"{self.consecutive_failures} requests in a row failed, the last: {detail}",
            )
        return None

    def _open(self, retry_after: float | None, reason: str, detail: str) -> Change | None:
        was = self.state
        now = self._clock.monotonic()
        self.state = BreakerState.OPEN
        self._probe_at = now + self._backoff.next_delay(retry_after)
        if was is BreakerState.HEALTHY:
            self.opened_at = now
            return Change(True, reason, detail)
        return None  # a failed probe: still degraded, nothing new to tell

    def _close(self, detail: str) -> Change:
        open_for = self.open_for()
        self.state = BreakerState.HEALTHY
        self._samples.clear()  # the slow answers were the degradation that is over
        self.opened_at = None
        return Change(False, "probe", detail, open_for)

    def open_for(self) -> float:
        return 0.0 if self.opened_at is None else self._clock.monotonic() - self.opened_at

    def describe(self) -> dict[str, object]:
        """What ``/status`` shows of it."""
        p95 = self.p95()
        return {
            "state": self.state.value,
            "consecutive_failures": self.consecutive_failures,
            "p95_seconds": None if p95 is None else round(p95, 3),
            "next_probe_in_seconds": round(self.ready_in(), 1) if self.is_open else None,
            "open_for_seconds": None if self.opened_at is None else round(self.open_for(), 1),
        }
