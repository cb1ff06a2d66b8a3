"""Liveness and readiness, per watch scope and for NATS, on an injected clock.

Ready once every scope has finished its first list (or its first watch from a checkpoint), and
as long as no scope's watch and not NATS has been unhealthy for longer than ``unready_after``
(a warm standby, which watches nothing, is ready while NATS is):
short blips (a watch reconnect, a NATS failover) do not flap the Pod out of its Service. One
scope that never syncs (no RBAC in its namespace, say) keeps the bridge not ready, by name.
"""

from __future__ import annotations

from collections.abc import Callable

from k8s_event_common.clock import SYSTEM, Clock


class ScopeHealth:
    """One watch scope: synced yet, failing since when, and the last failure."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        self.synced = False
        self.bad_since: float | None = None
        self.last_error = ""

    def watch_ok(self) -> None:
        """The API server answered this scope's list or opened its watch."""
        self.synced = True
        self.bad_since = None

    def failing_for(self) -> float:
        """Seconds the scope's list or watch has been failing; 0 while it works."""
        return 0.0 if self.bad_since is None else self._clock.monotonic() - self.bad_since

    def watch_failed(self, error: str) -> None:
        self.last_error = error
        if self.bad_since is None:
            self.bad_since = self._clock.monotonic()


class Health:
    def __init__(self, unready_after: float, clock: Clock = SYSTEM) -> None:
        self.unready_after = unready_after
        self._clock = clock
        self.scopes: dict[str, ScopeHealth] = {}
        self._nats_bad_since: float | None = clock.monotonic()
        # seconds the oldest publish has waited for its ack (set once the publisher exists)
        self.publish_wait: Callable[[], float] = lambda: 0.0
        # a warm standby (leader election): healthy with no scope, as long as NATS is
        self.standby = False

    def scope(self, name: str) -> ScopeHealth:
        """The health of the scope ``name`` (``*`` for all namespaces), made on first use."""
        found = self.scopes.get(name)
        if found is None:
            found = self.scopes[name] = ScopeHealth(name, self._clock)
        return found

    def nats_up(self, up: bool) -> None:
        if up:
            self._nats_bad_since = None
        elif self._nats_bad_since is None:
            self._nats_bad_since = self._clock.monotonic()

    @property
    def nats_connected(self) -> bool:
        return self._nats_bad_since is None

    def problems(self) -> list[str]:
        """Why the bridge is not ready; empty when it is."""
        now = self._clock.monotonic()
        out = []
        if not self.scopes and not self.standby:
            out.append("no watch has started yet")
        for sc in self.scopes.values():
            if not sc.synced:
                why = f": {sc.last_error}" if sc.last_error else ""
                out.append(f"scope {sc.name}: the first list or watch has not finished{why}")
            elif sc.bad_since is not None and now - sc.bad_since > self.unready_after:
                out.append(
                    f"scope {sc.name}: the watch has failed for {now - sc.bad_since:.0f}s"
                    f": {sc.last_error}"
                )
        if self._nats_bad_since is not None and now - self._nats_bad_since > self.unready_after:
            out.append(f"NATS has been unreachable for {now - self._nats_bad_since:.0f}s")
        waited = self.publish_wait()
        if waited > self.unready_after:
            out.append(f"a publish has waited {waited:.0f}s for its JetStream ack")
        return out

    @property
    def ready(self) -> bool:
        return not self.problems()
