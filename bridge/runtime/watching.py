"""The list+watch loop over core/v1 Events, modelled on client-go's Reflector.

``Watcher.run`` drives the state machine of ``bridge.core.watchstate``: it lists when it has
no resourceVersion to resume from or after a 410, watches from the last resourceVersion it
passed on, and backs off on failures. Each item goes to a ``Sink`` in stream order. Its parts,
each readable alone:

- the list pager (``bridge.kube.paging``) and the watch-line reader (``bridge.kube.lines``),
  behind the ``EventSource`` port: pages and watch events, already decoded;
- where to resume (``bridge.core.resume.ResumePoint``): what client-go's
  ``relistResourceVersion`` answers from;
- the gap decision after a 410 relist (``bridge.core.gaps``, pure);
- the breaker in front of the API server (``bridge.core.breaker``), on the back-off steps
  (``bridge.core.backoff``), all on one injected ``Clock``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from bridge import errors, logs
from bridge.core import gaps
from bridge.core.backoff import Backoff
from bridge.core.breaker import GAUGE, Breaker, Change
from bridge.core.checkpoints import scope_name
from bridge.core.clock import SYSTEM, Clock
from bridge.core.resume import ResumePoint
from bridge.core.watchstate import Outcome, WatchState, next_state
from bridge.metrics import Metrics
from bridge.runtime.health import ScopeHealth
from bridge.runtime.ports import EventSource, Item, Sink, WatchEntry
from bridge.settings import KubernetesSettings

log = logs.get("watching")

CHANGE_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})
# A watch that the server ends this soon without sending anything is a failure, not a
# normal close: going again at once would be a tight loop.
MIN_HEALTHY_WATCH = 1.0


def classify(exc: BaseException) -> Outcome:
    """Retriable or not, decided in one place for the Kubernetes boundary."""
    if isinstance(exc, errors.QuietWatch):
        return Outcome.QUIET
    if isinstance(exc, errors.ResourceExpired):
        return Outcome.EXPIRED
    if isinstance(exc, errors.Unauthorized | errors.Forbidden):
        return Outcome.AUTH
    return Outcome.RETRIABLE


class Watcher:
    def __init__(
        self,
        source: EventSource,
        sink: Sink,
        settings: KubernetesSettings,
        *,
        namespace: str | None,
        checkpoint: int | None,
        field_selector: str,
        checkpoint_at: float | None = None,
        include_deleted: bool = False,
        metrics: Metrics,
        health: ScopeHealth,
        clock: Clock = SYSTEM,
    ) -> None:
        self.source = source
        self.sink = sink
        self.settings = settings
        self.namespace = namespace
        self.scope = scope_name(namespace)
        self.field_selector = field_selector
        self.include_deleted = include_deleted
        self.m = metrics
        self.health = health
        self.clock = clock
        self.resume = ResumePoint(checkpoint, checkpoint_at, clock.wall())
        self.backoff = Backoff.from_settings(settings.backoff, clock=clock)
        # in front of the API server: probes on the same back-off steps (core/breaker.py)
        self.breaker = Breaker(settings.breaker, self.backoff, clock=clock)
        metrics.scope_started(self.scope)
        self.state = WatchState.WATCHING if checkpoint is not None else WatchState.LISTING
        self._reachable = True
        self._retry_after: float | None = None
        self._lines_read = 0  # lines of the current watch, the skipped ones too
        self.lists = 0

    @property
    def rv(self) -> int | None:
        """The last resourceVersion passed on: where the next watch starts."""
        return self.resume.rv

    @rv.setter
    def rv(self, rv: int | None) -> None:
        self.resume.rv = rv

    async def run(self) -> None:
        must_list = False
        reload_credentials = False
        probe = False
        while self.state is not WatchState.STOPPED:
            if self.state is not WatchState.BACKING_OFF:
                wait = self.breaker.ready_in()
                if wait > 0:  # open: nothing goes to the API server until the next probe
                    log.info("breaker_open_waiting", scope=self.scope, seconds=round(wait, 3))
                    await self.clock.sleep(wait)
                    continue
                probe = self.breaker.begin()
                self.m.breaker_state.labels(self.scope).set(GAUGE[self.breaker.state])
            if self.state is WatchState.LISTING:
                # No relist (the costly call) while the API server is degraded: a cheap
                # request probes it first, and the relist follows once it is healthy again.
                outcome = await self._attempt(self._probe() if probe else self._list())
            elif self.state is WatchState.WATCHING:
                outcome = await self._attempt(self._watch())  # a watch is cheap: its own probe
            else:
                # open: the breaker paces the next request, on the same back-off steps
                if not self.breaker.is_open:
                    delay = self.backoff.next_delay(self._retry_after)
                    log.info("backing_off", scope=self.scope, seconds=round(delay, 3))
                    await self.clock.sleep(delay)
                self._retry_after = None
                if reload_credentials:
                    try:
                        await self.source.reload_credentials()
                    except errors.BridgeError as exc:
                        log.error("credentials_reload_failed", error=str(exc))
                outcome = Outcome.RETRY
            if outcome in (Outcome.CLOSED, Outcome.QUIET, Outcome.LISTED):
                self.resume.synced()
            t = next_state(self.state, outcome, have_rv=self.rv is not None, must_list=must_list)
            if outcome is Outcome.CLOSED or outcome is Outcome.QUIET:
                self.m.watch_restarts.labels(outcome.value).inc()
            must_list = t.must_list
            reload_credentials = t.reload_credentials
            self.state = t.state

    async def _attempt(self, step: Awaitable[Outcome]) -> Outcome:
        try:
            return await step
        except errors.KubeError as exc:
            outcome = classify(exc)
            if outcome is Outcome.QUIET:
                # No bookmarks on Event watches: silence is what a quiet scope sounds like. The
                # connection is alive (TCP keepalive would have ended it): watch again at once.
                log.debug("watch_quiet", scope=self.scope, resource_version=self.rv)
                return outcome
            await self._failed(exc, outcome)
            return outcome

    async def _reached(self, latency: float) -> None:
        """The API server answered a list or opened a watch, after ``latency`` seconds."""
        self.health.watch_ok()
        await self._answered(latency)

    async def _answered(self, latency: float) -> None:
        await self._breaker_changed(self.breaker.success(latency))
        if not self._reachable:
            self._reachable = True
            self.m.apiserver_reachable.set(1)
            await self.sink.reachability(True, "the API server answers again")

    async def _failed(self, exc: errors.KubeError, outcome: Outcome) -> None:
        if outcome is Outcome.EXPIRED:
            self.resume.expire()  # what was passed on last; kept until a list succeeds
            self.m.watch_restarts.labels("expired").inc()
            log.info(
                "resource_version_expired",
                scope=self.scope,
                resource_version=self.rv,
                detail=str(exc),
            )
            return
        self.resume.broken()
        self.health.watch_failed(f"{type(exc).__name__}: {str(exc)[:300]}")
        self.m.watch_restarts.labels("error" if outcome is Outcome.RETRIABLE else "auth").inc()
        if isinstance(exc, errors.TooManyRequests | errors.KubeUnavailable):
            self._retry_after = exc.retry_after
        if outcome is Outcome.RETRIABLE:
            detail = f"{type(exc).__name__}: {str(exc)[:200]}"
            await self._breaker_changed(self.breaker.failure(detail, self._retry_after))
        if outcome is Outcome.AUTH:
            status = "403" if isinstance(exc, errors.Forbidden) else "401"
            self.m.auth_failures.labels(status).inc()
            where = "cluster-wide" if self.namespace is None else f"in namespace {self.namespace}"
            need = (
                ("list and watch on events (core/v1) " + where)
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
            return
        log.warning(
            "kube_request_failed",
            scope=self.scope,
            state=self.state.value,
            error=type(exc).__name__,
            detail=str(exc)[:300],
        )
        if isinstance(exc, errors.KubeUnavailable) and self._reachable:
            self._reachable = False
            self.m.apiserver_reachable.set(0)
            await self.sink.reachability(False, str(exc)[:300])

    async def _list(self) -> Outcome:
        """A consistent, paged list; publishes what is newer than what was passed on."""
        relist = self.resume.expired is not None
        self.lists += 1
        if self.lists > 1:
            self.m.relists.labels("expired" if relist else "no_resource_version").inc()
        rv = self.rv
        only_rv = rv is None and self.settings.initial == "new"
        list_rv: int | None = None
        passed = skipped = 0
        pages = self.source.list_pages(
            self.namespace,
            limit=1 if only_rv else self.settings.page_size,
            field_selector=self.field_selector,
            skipped=self._bad,
            only_resource_version=only_rv,
        )
        while True:
            asked = self.clock.monotonic()
            page = await anext(pages, None)
            if page is None:
                break
            await self._reached(self.clock.monotonic() - asked)
            list_rv, listed = page
            if list_rv is None:
                raise errors.KubeUnavailable("list answer has no resourceVersion")
            batch: list[Item] = []
            for item, item_rv in listed:
                if rv is not None and item_rv <= rv:
                    skipped += 1  # passed on before the relist: the stream has it
                    continue
                passed += 1
                # List items come without kind/apiVersion; watch objects carry them: the
                # Event adds them to its data, so subscribers see one shape either way.
                batch.append(("ADDED", item, None))
            if batch:
                await self.sink.items(batch)
        assert list_rv is not None
        expired = self.resume.expired
        if expired is not None:
            age = self.clock.wall() - expired.seen_at
            await self._relisted(expired.rv, list_rv, age, expired.covered, passed)
        self.resume.listed(list_rv, self.clock.wall())
        log.info(
            "listed",
            scope=self.scope,
            resource_version=list_rv,
            published=passed,
            not_newer=skipped,
            relist=relist,
        )
        self.sink.mark(list_rv)
        return Outcome.LISTED

    async def _relisted(
        self, from_rv: int, to_rv: int, age: float, covered: bool, newer: int
    ) -> None:
        """After a 410 relist: report a gap unless the list proves nothing was missed
        (``bridge.core.gaps``)."""
        s = self.settings
        gap = gaps.after_relist(
            from_rv,
            to_rv,
            newer=newer,
            age=age,
            covered=covered,
            event_ttl=s.event_ttl,
            include_deleted=self.include_deleted,
        )
        if gap is None:
            return
        if gap.certainty is None:
            log.info(
                "relisted_nothing_missed",
                scope=self.scope,
                from_resource_version=from_rv,
                to_resource_version=to_rv,
                seconds_behind=round(age),
            )
            return
        self.m.gaps.labels(gap.certainty).inc()
        log.warning(
            "history_gap",
            scope=self.scope,
            from_resource_version=from_rv,
            to_resource_version=to_rv,
            newer_events=newer,
            certainty=gap.certainty,
            why=gap.why,
        )
        await self.sink.gap(from_rv, to_rv, certainty=gap.certainty, why=gap.why)

    async def _probe(self) -> Outcome:
        """One cheap request instead of a relist while the breaker is not healthy: a list of
        one Event, without the field selector (which the API server would apply by reading
        on until it found a match)."""
        asked = self.clock.monotonic()
        doc = await self.source.list_events(self.namespace, limit=1, field_selector="")
        if not isinstance(doc.get("metadata"), dict):
            raise errors.KubeUnavailable("probe answer has no metadata")
        await self._answered(self.clock.monotonic() - asked)
        log.info("apiserver_probed", scope=self.scope, breaker=self.breaker.state.value)
        return Outcome.RETRY  # list next, once the breaker lets it

    async def _breaker_changed(self, change: Change | None) -> None:
        self.m.breaker_state.labels(self.scope).set(GAUGE[self.breaker.state])
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

    async def _watch(self) -> Outcome:
        lo, hi = self.settings.watch_timeout_min, self.settings.watch_timeout_max
        timeout = int(lo + (hi - lo) * self.clock.random())
        started = self.clock.monotonic()
        assert self.rv is not None
        start_rv = self.rv
        self._lines_read = 0
        asked = self.clock.monotonic()
        async with self.source.watch_events(
            self.namespace,
            resource_version=str(self.rv),
            timeout_seconds=max(1, timeout),
            field_selector=self.field_selector,
            skipped=self._skipped_line,
        ) as stream:
            await self._reached(self.clock.monotonic() - asked)
            log.debug(
                "watch_started", scope=self.scope, resource_version=self.rv, timeout_seconds=timeout
            )
            async for entries in stream:
                self._lines_read += len(entries)
                await self._handle(entries)
        if self.rv == start_rv and self.clock.monotonic() - started < MIN_HEALTHY_WATCH:
            # Closed at once without moving on (nothing, garbage, a stale bookmark): going
            # again at once would be a tight loop.
            raise errors.KubeUnavailable(f"the watch closed at once after {self._lines_read} lines")
        log.debug(
            "watch_closed", scope=self.scope, resource_version=self.rv, lines=self._lines_read
        )
        return Outcome.CLOSED

    async def _handle(self, entries: list[WatchEntry]) -> None:
        """The watch events of one read, handed on in one batch (or more: a bookmark or an
        error ends one), in RV order: one not newer than the last passed on is dropped. The
        resume point moves only past what the sink has taken (client-go's watchHandler)."""
        batch: list[Item] = []
        rv_before = self.rv
        last = rv_before
        for kind, ev, rv in entries:
            if kind in CHANGE_TYPES:
                assert rv is not None
                if last is not None and rv <= last:
                    self.m.skipped.labels("not_newer").inc()
                else:
                    batch.append((kind, ev, rv))
                    last = rv
            elif kind == "BOOKMARK":
                # A Bookmark means the watch has synced here: just update the resourceVersion.
                assert rv is not None
                if last is None or rv > last:
                    await self._pass_on(batch)  # in order: the items before the bookmark
                    batch = []
                    self.sink.mark(rv)
                    self.rv = last = rv
            else:  # ERROR, the reader's last entry
                await self._pass_on(batch)
                raise errors.from_status(*ev.status())
        await self._pass_on(batch)
        if self.rv != rv_before:
            self.resume.moved_on(self.clock.wall())

    async def _pass_on(self, batch: list[Item]) -> None:
        if batch:
            await self.sink.items(batch)
            self.rv = batch[-1][2]

    def _skipped_line(self, reason: str, sample: Any) -> None:
        self._lines_read += 1
        self._bad(reason, sample)

    def _bad(self, reason: str, sample: Any) -> None:
        self.m.skipped.labels(reason).inc()
        text = (
            sample[:300].decode("utf-8", "replace")
            if isinstance(sample, bytes)
            else (str(sample)[:300])
        )
        log.warn_sampled(reason, "input_skipped", reason=reason, scope=self.scope, sample=text)
