"""Liveness and readiness, from the watch's and NATS's state and an injected clock.

Ready once the first list (or the first watch from a checkpoint) is done, and as long as
neither the watch nor NATS has been unhealthy for longer than ``unready_after``: short blips
(a watch reconnect, a NATS failover) do not flap the Pod out of its Service.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Health:
    def __init__(self, unready_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.unready_after = unready_after
        self._clock = clock
        self.synced = False
        self._watch_bad_since: float | None = None
        self._nats_bad_since: float | None = clock()
        # seconds the oldest publish has waited for its ack (set once the publisher exists)
        self.publish_wait: Callable[[], float] = lambda: 0.0

    def watch_ok(self) -> None:
        self._watch_bad_since = None

    def watch_failed(self) -> None:
        if self._watch_bad_since is None:
            self._watch_bad_since = self._clock()

    def nats_up(self, up: bool) -> None:
        if up:
            self._nats_bad_since = None
        elif self._nats_bad_since is None:
            self._nats_bad_since = self._clock()

    def problems(self) -> list[str]:
        """Why the bridge is not ready; empty when it is."""
        now = self._clock()
        out = []
        if not self.synced:
            out.append("the first list or watch has not finished")
        if self._watch_bad_since is not None and now - self._watch_bad_since > self.unready_after:
            out.append(f"the watch has failed for {now - self._watch_bad_since:.0f}s")
        if self._nats_bad_since is not None and now - self._nats_bad_since > self.unready_after:
            out.append(f"NATS has been unreachable for {now - self._nats_bad_since:.0f}s")
        waited = self.publish_wait()
        if waited > self.unready_after:
            out.append(f"a publish has waited {waited:.0f}s for its JetStream ack")
        return out

    @property
    def ready(self) -> bool:
        return not self.problems()
