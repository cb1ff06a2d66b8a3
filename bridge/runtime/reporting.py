"""What one watch scope tells operators and subscribers: its log lines, metrics, health and the
sink's status events.

The ``Watcher`` (``bridge.runtime.watching``) decides: which state, where to resume, what to list
or watch, which outcome. ``WatchReport`` tells, one method per thing that happened, each writing
what goes with it in one order:

- the API server answered (``answered``) or failed (``failed``, ``denied``, ``expired``): the
  breaker's gauge and its opening or recovery (``apiserver_degraded``, ``apiserver_recovered``,
  ``Sink.degradation``), reachability (``Sink.reachability``: the scope's first answer in this
  process, then each change), the scope's health, the permission a 401 or 403 says is missing
  (``kube_permission_denied``);
- a list (``relisting``, ``relisted``, ``listed``): a history gap after a 410 (``history_gap``,
  ``Sink.gap``), or that the list proves nothing was missed;
- input left out (``skipped``): counted by reason, bad input warned about with a sample;
- the loop's waits and restarts (``breaker_open_waiting``, ``backing_off``, ``restarted``).

The lines are the watcher's (logger ``bridge.watching``). A warning that input can repeat
(``input_skipped``, ``kube_permission_denied``) is written at most once a minute per reason.
"""

from __future__ import annotations

from typing import Any

from bridge import errors, logs
from bridge.core.breaker import GAUGE, Breaker, Change
from bridge.core.gaps import Gap
from bridge.core.resources import EVENTS, Resource
from bridge.core.watchstate import WatchState
from bridge.metrics import Metrics
from bridge.runtime.health import ScopeHealth
from bridge.runtime.ports import Sink

log = logs.get("watching")


class WatchReport:
    def __init__(
        self,
        sink: Sink,
        *,
        scope: str,
        namespace: str | None,
        resource: Resource = EVENTS,
        metrics: Metrics,
        health: ScopeHealth,
        breaker: Breaker,
    ) -> None:
        self.sink = sink
        self.scope = scope
        self.namespace = namespace
        self.resource = resource
        self.m = metrics
        self.health = health
        self.breaker = breaker  # read for its state, never moved from here
        # as last told (None: nothing yet). The first answer is told too: an outage that an
        # earlier process saw (a leader fenced while the API server was away) ends in the stream
        # with the first answer of the process that leads after it, and the gauge is 1 from then.
        self._reachable: bool | None = None
        metrics.scope_started(scope)

    # -- the API server

    async def answered(self, change: Change | None, *, reached: bool) -> None:
        """The API server answered in time or not (``change``: what the breaker made of it);
        ``reached``: a list's page or an opened watch, not a probe (the scope is healthy)."""
        if reached:
            self.health.watch_ok()
        await self.breaker_changed(change)
        if self._reachable is not True:
            first = self._reachable is None
            self._reachable = True
            self.m.apiserver_reachable.set(1)
            await self.sink.reachability(
                True,
                "the first answer of this process" if first else "the API server answers again",
            )

    async def failed(self, exc: errors.KubeError, state: WatchState, change: Change | None) -> None:
        """A request failed and will be retried (``change``: what the breaker made of it)."""
        self.health.watch_failed(f"{type(exc).__name__}: {str(exc)[:300]}")
        self.restarted("error")
        await self.breaker_changed(change)
        log.warning(
            "kube_request_failed",
            scope=self.scope,
            state=state.value,
            error=type(exc).__name__,
            detail=str(exc)[:300],
        )
        if isinstance(exc, errors.KubeUnavailable) and self._reachable is not False:
            self._reachable = False
            self.m.apiserver_reachable.set(0)
            await self.sink.reachability(False, str(exc)[:300])

    def denied(self, exc: errors.KubeError) -> None:
        """A 401 or 403: which permission or credentials the bridge needs."""
        self.health.watch_failed(f"{type(exc).__name__}: {str(exc)[:300]}")
        self.restarted("auth")
        status = "403" if isinstance(exc, errors.Forbidden) else "401"
        self.m.auth_failures.labels(status).inc()
        where = "cluster-wide" if self.namespace is None else f"in namespace {self.namespace}"
        r = self.resource
        need = (
            (f"list and watch on {r.name} ({r.api}) " + where)
            if status == "403"
            else ("valid credentials (token expired or rotated, or the kubeconfig is wrong)")
        )
        log.warn_sampled(
            f"auth{status}",
            "kube_permission_denied",
            interval=60,
            status=int(status),
            scope=self.scope,
            needs=need,
            detail=str(exc),
        )

    def expired(self, exc: errors.KubeError, rv: int | None) -> None:
        """A 410: the history after ``rv`` is compacted away."""
        self.restarted("expired")
        log.info("resource_version_expired", scope=self.scope, resource_version=rv, detail=str(exc))

    def probed(self) -> None:
        log.info("apiserver_probed", scope=self.scope, breaker=self.breaker.state.value)

    def breaker_state(self) -> None:
        """The breaker's state as it is now, as a gauge."""
        self.m.breaker_state.labels(self.scope).set(GAUGE[self.breaker.state])

    async def breaker_changed(self, change: Change | None) -> None:
        self.breaker_state()
        if change is None:
            return
        if change.opened:
            self.m.breaker_opened.labels(self.scope, change.reason).inc()
            log.warning(
                "apiserver_degraded",
                scope=self.scope,
                reason=change.reason,
                detail=change.detail,
                note="no relists until a probe is answered in time",
            )
            data: dict[str, Any] = {"reason": change.reason, "detail": change.detail}
        else:
            log.info(
                "apiserver_recovered",
                scope=self.scope,
                detail=change.detail,
                degraded_for_seconds=round(change.open_for, 1),
            )
            data = {"detail": change.detail, "degradedForSeconds": round(change.open_for, 1)}
        await self.sink.degradation(change.opened, data)

    # -- lists and watches

    def relisting(self, expired: bool) -> None:
        """A list after the first: after a 410 (``expired``) or for want of a resourceVersion."""
        self.m.relists.labels("expired" if expired else "no_resource_version").inc()

    async def relisted(self, gap: Gap | None) -> None:
        """The gap decision after a 410 relist (``bridge.core.gaps``; None: nothing between)."""
        if gap is None:
            return
        if gap.certainty is None:
            log.info(
                "relisted_nothing_missed",
                scope=self.scope,
                from_resource_version=gap.from_rv,
                to_resource_version=gap.to_rv,
                seconds_behind=round(gap.age),
            )
            return
        self.m.gaps.labels(gap.certainty).inc()
        log.warning(
            "history_gap",
            scope=self.scope,
            from_resource_version=gap.from_rv,
            to_resource_version=gap.to_rv,
            newer_events=gap.newer,
            certainty=gap.certainty,
            why=gap.why,
        )
        await self.sink.gap(gap.from_rv, gap.to_rv, certainty=gap.certainty, why=gap.why)

    def listed(self, rv: int, published: int, not_newer: int, relist: bool) -> None:
        log.info(
            "listed",
            scope=self.scope,
            resource_version=rv,
            published=published,
            not_newer=not_newer,
            relist=relist,
        )

    def watch_started(self, rv: int, timeout: int) -> None:
        log.debug("watch_started", scope=self.scope, resource_version=rv, timeout_seconds=timeout)

    def watch_closed(self, rv: int | None, lines: int) -> None:
        log.debug("watch_closed", scope=self.scope, resource_version=rv, lines=lines)

    def quiet(self, rv: int | None) -> None:
        """A watch that heard nothing for a while: a quiet scope, no outage."""
        log.debug("watch_quiet", scope=self.scope, resource_version=rv)

    def skipped(self, reason: str, sample: Any = None) -> None:
        """Input left out, counted by ``reason``. With a ``sample`` (bad input, from the list
        pager or the watch-line reader) also a warning; without one (an event not newer than
        the last passed on, which a watch may send again) only counted."""
        self.m.skipped.labels(reason).inc()
        if sample is None:
            return
        text = (
            sample[:300].decode("utf-8", "replace")
            if isinstance(sample, bytes)
            else (str(sample)[:300])
        )
        log.warn_sampled(reason, "input_skipped", reason=reason, scope=self.scope, sample=text)

    # -- the loop

    def restarted(self, cause: str) -> None:
        """A watch ended (``closed``, ``quiet``) or failed (``error``, ``auth``, ``expired``)."""
        self.m.watch_restarts.labels(cause).inc()

    def breaker_open_waiting(self, seconds: float) -> None:
        log.info("breaker_open_waiting", scope=self.scope, seconds=round(seconds, 3))

    def backing_off(self, seconds: float) -> None:
        log.info("backing_off", scope=self.scope, seconds=round(seconds, 3))

    def reload_failed(self, exc: errors.BridgeError) -> None:
        log.error("credentials_reload_failed", error=str(exc))
