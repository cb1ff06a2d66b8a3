"""The list+watch loop over core/v1 Events, modelled on client-go's Reflector.

``Watcher.run`` drives the state machine of ``bridge.core.watchstate``: it lists (paged) when
it has no resourceVersion to resume from or after a 410, watches from the last resourceVersion
it passed on, and backs off on failures. Each item goes to a ``Sink`` in stream order.

Which resourceVersion is "the last one passed on":
- a watch event's own ``metadata.resourceVersion`` (watch events come in RV order);
- a BOOKMARK's: the watch has synced there, so just update the resourceVersion;
- a list's ``metadata.resourceVersion``, never one of its items' (they come in no order).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bridge import errors, logs
from bridge.core import events
from bridge.core.backoff import Backoff
from bridge.core.breaker import GAUGE, Breaker, Change
from bridge.core.checkpoints import scope_name
from bridge.core.events import parse_rv, rv_of
from bridge.core.watchstate import Outcome, WatchState, next_state
from bridge.metrics import Metrics
from bridge.runtime.health import ScopeHealth
from bridge.runtime.ports import EventSource, Item, Sink
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
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.sink = sink
        self.settings = settings
        self.namespace = namespace
        self.scope = scope_name(namespace)
        self.rv: int | None = checkpoint
        self._wallclock = wallclock
        # when self.rv was seen (epoch s): a relist can prove nothing was missed only while
        # no Event written after it can have expired (kubernetes.event_ttl)
        self._rv_at = (checkpoint_at if checkpoint_at is not None else wallclock()) - (
            0.0 if checkpoint is None else 1.0
        )
        self.field_selector = field_selector
        self.m = metrics
        self.health = health
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.backoff = Backoff.from_settings(settings.backoff, clock=clock, rand=rand)
        # in front of the API server: probes on the same back-off steps (core/breaker.py)
        self.breaker = Breaker(settings.breaker, self.backoff, clock=clock)
        metrics.scope_started(self.scope)
        self.state = WatchState.WATCHING if checkpoint is not None else WatchState.LISTING
        self._reachable = True
        self._retry_after: float | None = None
        self._gap_from: int | None = None  # set by a 410: the relist must report a gap from here
        self._gap_from_at = 0.0
        # Whether this process has seen every change in scope after self.rv: true after a
        # list or a watch that ended normally (a watch shows deletions too); false from a
        # checkpoint (the bridge was away) and after any failure (an outage of unknown length).
        self._covered = False
        self._gap_covered = False  # _covered when the 410 came, and nothing failed since
        self.include_deleted = include_deleted
        self.lists = 0

    async def run(self) -> None:
        must_list = False
        reload_credentials = False
        probe = False
        while self.state is not WatchState.STOPPED:
            if self.state is not WatchState.BACKING_OFF:
                wait = self.breaker.ready_in()
                if wait > 0:  # open: nothing goes to the API server until the next probe
                    log.info("breaker_open_waiting", scope=self.scope, seconds=round(wait, 3))
                    await self._sleep(wait)
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
                    await self._sleep(delay)
                self._retry_after = None
                if reload_credentials:
                    try:
                        await self.source.reload_credentials()
                    except errors.BridgeError as exc:
                        log.error("credentials_reload_failed", error=str(exc))
                outcome = Outcome.RETRY
            if outcome in (Outcome.CLOSED, Outcome.QUIET, Outcome.LISTED):
                self._covered = True
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
            if self._gap_from is None and self.rv is not None:
                self._gap_from = self.rv  # what was passed on last; kept until a list succeeds
                self._gap_from_at = self._rv_at
                self._gap_covered = self._covered
            self.m.watch_restarts.labels("expired").inc()
            log.info(
                "resource_version_expired",
                scope=self.scope,
                resource_version=self.rv,
                detail=str(exc),
            )
            return
        self._covered = self._gap_covered = False
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
        relist = self._gap_from is not None
        self.lists += 1
        if self.lists > 1:
            self.m.relists.labels("expired" if relist else "no_resource_version").inc()
        only_rv = self.rv is None and self.settings.initial == "new"
        limit = 1 if only_rv else self.settings.page_size
        cont: str | None = None
        list_rv: int | None = None
        passed = skipped = 0
        while True:
            asked = self._clock()
            doc = await self.source.list_events(
                self.namespace, limit=limit, cont=cont, field_selector=self.field_selector
            )
            meta = doc.get("metadata")
            if not isinstance(meta, dict):
                raise errors.KubeUnavailable("list answer has no metadata")
            await self._reached(self._clock() - asked)
            if list_rv is None:
                list_rv = parse_rv(meta.get("resourceVersion"))
                if list_rv is None:
                    raise errors.KubeUnavailable("list answer has no resourceVersion")
            if only_rv:
                break
            items = doc.get("items")
            batch: list[Item] = []
            for raw in items if isinstance(items, list) else ():
                try:
                    item = events.from_item(raw)
                except events.BadLine as exc:
                    self._bad("malformed_item", f"{exc}: {str(raw)[:200]}")
                    continue
                item_rv = rv_of(item.view)
                if item_rv is None:
                    self._bad("no_resource_version", raw)
                    continue
                if self.rv is not None and item_rv <= self.rv:
                    skipped += 1  # passed on before the relist: the stream has it
                    continue
                passed += 1
                # List items come without kind/apiVersion; watch objects carry them: the
                # Event adds them to its data, so subscribers see one shape either way.
                batch.append(("ADDED", item, None))
            if batch:
                await self.sink.items(batch)
            cont = meta.get("continue") or None
            if not isinstance(cont, str) or not cont:
                break
        assert list_rv is not None
        if self._gap_from is not None and list_rv > self._gap_from:
            await self._gap_or_not(self._gap_from, list_rv, newer=passed)
        self._gap_from = None
        log.info(
            "listed",
            scope=self.scope,
            resource_version=list_rv,
            published=passed,
            not_newer=skipped,
            relist=relist,
        )
        self.rv = list_rv
        self._rv_at = self._wallclock()
        self.sink.mark(list_rv)
        return Outcome.LISTED

    async def _gap_or_not(self, from_rv: int, to_rv: int, *, newer: int) -> None:
        """After a 410 relist: report a gap unless the list proves nothing was missed.

        The API server serves Event watches from etcd (no watch cache, no bookmarks), so a
        quiet scope or a narrow selector lets the resourceVersion fall behind etcd's compaction
        and the next watch gets 410 though nothing happened. A list shows what exists, never
        what was deleted, so the proof that nothing happened needs all of:

        - no listed Event is newer than ``from_rv`` (nothing created or changed since and
          still there);
        - ``from_rv`` was seen less than ``kubernetes.event_ttl`` ago (nothing written after
          it has expired yet: an Event's TTL starts at its last write);
        - this process watched the scope without a break up to the 410 (a list or a watch
          that ended normally, then the 410 at once): a watch shows deletions, so nothing can
          have been created and deleted unseen (a namespace deleted, an explicit delete),
          but for the instant between that watch's end and the relist;
        - deletions are not published (``filter.include_deleted`` off): the list can not
          show the expiries of older Events, which happen all the time.

        Otherwise the gap is reported, with how sure: ``likely`` when the list shows changes
        since, the TTL has passed or deletions are published; ``possible`` when only Events
        created and deleted while the bridge was not watching could be missing.
        """
        age = self._wallclock() - self._gap_from_at
        likely = []
        if newer:
            likely.append(
                f"{newer} Events were created or changed since: versions of them in between "
                "may be gone"
            )
        if age >= self.settings.event_ttl:
            likely.append(
                f"the last resourceVersion was seen {age:.0f}s ago, longer than the event "
                "TTL: Events written after it may have expired unseen"
            )
        if self.include_deleted:
            likely.append("deletions are published, and a list shows none")
        if likely:
            certainty, why = "likely", "; ".join(likely)
        elif not self._gap_covered:
            certainty = "possible"
            why = (
                "nothing listed is newer, but the bridge was not watching in between (a "
                "restart or a failed watch): Events created and deleted meanwhile (a namespace "
                "deleted, an explicit delete) leave nothing in a list"
            )
        else:
            log.info(
                "relisted_nothing_missed",
                scope=self.scope,
                from_resource_version=from_rv,
                to_resource_version=to_rv,
                seconds_behind=round(age),
            )
            return
        # Versions between the two may have been compacted away before we read them; the
        # list just passed on the newest version of every Event that still exists.
        self.m.gaps.labels(certainty).inc()
        log.warning(
            "history_gap",
            scope=self.scope,
            from_resource_version=from_rv,
            to_resource_version=to_rv,
            newer_events=newer,
            certainty=certainty,
            why=why,
        )
        await self.sink.gap(from_rv, to_rv, certainty=certainty, why=why)

    async def _probe(self) -> Outcome:
        """One cheap request instead of a relist while the breaker is not healthy: a list of
        one Event, without the field selector (which the API server would apply by reading
        on until it found a match)."""
        asked = self._clock()
        doc = await self.source.list_events(self.namespace, limit=1, field_selector="")
        if not isinstance(doc.get("metadata"), dict):
            raise errors.KubeUnavailable("probe answer has no metadata")
        await self._answered(self._clock() - asked)
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
        timeout = int(lo + (hi - lo) * self._rand())
        started = self._clock()
        assert self.rv is not None
        start_rv = self.rv
        lines = 0
        asked = self._clock()
        async with self.source.watch_events(
            self.namespace,
            resource_version=str(self.rv),
            timeout_seconds=max(1, timeout),
            field_selector=self.field_selector,
        ) as stream:
            await self._reached(self._clock() - asked)
            log.debug(
                "watch_started", scope=self.scope, resource_version=self.rv, timeout_seconds=timeout
            )
            async for chunk in stream:
                lines += len(chunk)
                await self._lines(chunk)
        if self.rv == start_rv and self._clock() - started < MIN_HEALTHY_WATCH:
            # Closed at once without moving on (nothing, garbage, a stale bookmark): going
            # again at once would be a tight loop.
            raise errors.KubeUnavailable(f"the watch closed at once after {lines} lines")
        log.debug("watch_closed", scope=self.scope, resource_version=self.rv, lines=lines)
        return Outcome.CLOSED

    async def _lines(self, chunk: list[bytes]) -> None:
        """The lines that arrived together, handed on in one batch (or more: a bookmark or
        an error ends one). ``self.rv`` moves only past what the sink has taken."""
        batch: list[Item] = []
        rv_before = self.rv
        last = self.rv
        from_line = events.from_line
        for line in chunk:
            try:
                kind, ev = from_line(line)
            except events.BadLine:
                self._bad("malformed_line", line)
                continue
            if kind in CHANGE_TYPES:
                rv = rv_of(ev.view)
                if rv is None:
                    self._bad("no_resource_version", line)
                elif last is not None and rv <= last:
                    self.m.skipped.labels("not_newer").inc()
                else:
                    batch.append((kind, ev, rv))
                    last = rv
            elif kind == "BOOKMARK":
                rv = rv_of(ev.view)
                if rv is None:
                    self._bad("no_resource_version", line)
                elif last is None or rv > last:
                    await self._pass_on(batch)  # in order: the items before the bookmark
                    batch = []
                    self.sink.mark(rv)
                    self.rv = last = rv
            elif kind == "ERROR":
                await self._pass_on(batch)
                raise errors.from_status(*ev.status())
            else:
                self._bad("unknown_type", line)
        await self._pass_on(batch)
        if self.rv != rv_before:
            self._rv_at = self._wallclock()

    async def _pass_on(self, batch: list[Item]) -> None:
        if batch:
            await self.sink.items(batch)
            self.rv = batch[-1][2]

    def _bad(self, reason: str, sample: Any) -> None:
        self.m.skipped.labels(reason).inc()
        text = (
            sample[:300].decode("utf-8", "replace")
            if isinstance(sample, bytes)
            else (str(sample)[:300])
        )
        log.warn_sampled(reason, "input_skipped", reason=reason, scope=self.scope, sample=text)
