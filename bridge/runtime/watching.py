"""The one list+watch loop, for any resource, modelled on client-go's Reflector and kopf's
``infinite_watch(resource=...)``: the core/v1 Events of each watch scope, and the Namespaces of
the enrichment, run on it with the same 410, back-off, breaker and health rules.

``Watcher.run`` drives the state machine of ``bridge.core.watchstate``: it lists when it has
no resourceVersion to resume from or after a 410, watches from the last resourceVersion it
passed on, and backs off on failures. Each item goes to a ``Sink`` in stream order: what the
items mean is the caller's. What differs per resource is data (``bridge.core.resources``): its
path, its decoder, and whether it is a history (Events: a relist hands on only what is newer,
a 410 is judged for a gap, the first start follows ``kubernetes.initial``) or a state
(Namespaces: a list is handed on whole, the sink replaces what it held). The watcher decides;
its parts, each readable alone, answer or tell:

- the list pager (``bridge.kube.paging``) and the watch-line reader (``bridge.kube.lines``),
  behind the ``ListerWatcher`` port: pages and watch events, already decoded;
- where to resume (``bridge.core.resume.ResumePoint``): what client-go's
  ``relistResourceVersion`` answers from, and the one owner of "a relist is due";
- the gap decision after a 410 relist of a history (``bridge.core.gaps``, pure);
- the breaker in front of the API server (``bridge.core.breaker``), on the back-off steps
  (``bridge.core.backoff``), all on one injected ``Clock``;
- what it tells operators and subscribers (``bridge.runtime.reporting.WatchReport``): the log
  lines, metrics, health and the sink's status events, one call per thing that happened;
- the first start by age (``kubernetes.initial`` a duration, ``bridge.core.initial``): the first
  list of a scope without a checkpoint leaves out the Events older than that. How it went is
  told once, by ``Watcher.initial`` (a future the pipeline awaits), the ``initial_by_age`` log
  line and ``events_too_old_total``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from bridge import errors, logs
from bridge.core import gaps
from bridge.core.backoff import Backoff
from bridge.core.breaker import Breaker
from bridge.core.checkpoints import scope_name
from bridge.core.initial import FirstList
from bridge.core.resources import EVENTS, Resource
from bridge.core.resume import ResumePoint
from bridge.core.watchstate import Outcome, WatchState, next_state
from bridge.metrics import Metrics
from bridge.runtime.health import ScopeHealth
from bridge.runtime.ports import Item, ListerWatcher, Sink, WatchEntry
from bridge.runtime.reporting import WatchReport
from bridge.settings import KubernetesSettings
from k8s_event_common.clock import SYSTEM, Clock

CHANGE_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})
# A watch that the server ends this soon without sending anything is a failure, not a
# normal close: going again at once would be a tight loop.
MIN_HEALTHY_WATCH = 1.0

log = logs.get("watching")


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
        source: ListerWatcher,
        sink: Sink,
        settings: KubernetesSettings,
        *,
        resource: Resource = EVENTS,
        namespace: str | None,
        checkpoint: int | None,
        field_selector: str,
        checkpoint_at: float | None = None,
        include_deleted: bool = False,
        metrics: Metrics,
        health: ScopeHealth,
        clock: Clock = SYSTEM,
        scope: str | None = None,
    ) -> None:
        """``scope``: the name in logs and metrics (default: the namespace, ``*`` for all)."""
        self.source = source
        self.resource = resource
        self.sink = sink
        self.settings = settings
        self.namespace = namespace
        self.field_selector = field_selector
        self.include_deleted = include_deleted
        self.clock = clock
        self.resume = ResumePoint(checkpoint, checkpoint_at, clock.wall())
        self.backoff = Backoff.from_settings(settings.backoff, clock=clock)
        # in front of the API server: probes on the same back-off steps (core/breaker.py)
        self.breaker = Breaker(settings.breaker, self.backoff, clock=clock)
        self.report = WatchReport(
            sink,
            scope=scope or scope_name(namespace),
            namespace=namespace,
            resource=resource,
            metrics=metrics,
            health=health,
            breaker=self.breaker,
        )
        self.state = WatchState.WATCHING if checkpoint is not None else WatchState.LISTING
        self._retry_after: float | None = None
        self._lines_read = 0  # lines of the current watch, the skipped ones too
        self.lists = 0
        self.m = metrics
        # kubernetes.initial as a maximum age, in seconds: only for a history without a
        # checkpoint (a checkpoint always wins), and only until its first list is done
        self.max_age = settings.initial_max_age if checkpoint is None and resource.history else None
        self._initial: asyncio.Future[dict[str, Any] | None] | None = None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # made by the first read of ``initial``, in run() at the latest
        else:
            self._initial = self._new_initial()

    @property
    def initial(self) -> asyncio.Future[dict[str, Any] | None]:
        """How the first start by age went, resolved once: None at once when the scope starts
        from a checkpoint or ``kubernetes.initial`` is all or new; else, after the first list,
        ``FirstList.report()`` (max_age, cutoff, published, skipped, undated, why). Cancelled
        when ``run()`` ends before that, so nobody waits on it for ever.

        Made in ``__init__`` when a loop runs there (the pipeline builds watchers in its async
        ``open``), else on its first read: always in the loop that runs ``run()``, never by
        the deprecated ``asyncio.get_event_loop()``."""
        if self._initial is None:
            self._initial = self._new_initial()
        return self._initial

    def _new_initial(self) -> asyncio.Future[dict[str, Any] | None]:
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        if self.max_age is None:
            future.set_result(None)
        return future

    @property
    def rv(self) -> int | None:
        """The last resourceVersion passed on: where the next watch starts."""
        return self.resume.rv

    @rv.setter
    def rv(self, rv: int | None) -> None:
        self.resume.rv = rv

    async def run(self) -> None:
        initial = self.initial
        try:
            await self._run()
        finally:
            if not initial.done():
                initial.cancel()  # ended (failed, cancelled) before the first list was done

    async def _run(self) -> None:
        reload_credentials = False
        probe = False
        while self.state is not WatchState.STOPPED:
            if self.state is not WatchState.BACKING_OFF:
                wait = self.breaker.ready_in()
                if wait > 0:  # open: nothing goes to the API server until the next probe
                    self.report.breaker_open_waiting(wait)
                    await self.clock.sleep(wait)
                    continue
                probe = self.breaker.begin()
                self.report.breaker_state()
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
                    self.report.backing_off(delay)
                    await self.clock.sleep(delay)
                self._retry_after = None
                if reload_credentials:
                    try:
                        await self.source.reload_credentials()
                    except errors.BridgeError as exc:
                        self.report.reload_failed(exc)
                outcome = Outcome.RETRY
            if outcome in (Outcome.CLOSED, Outcome.QUIET, Outcome.LISTED):
                self.resume.synced()
            t = next_state(self.state, outcome, can_watch=self.resume.can_watch)
            if outcome is Outcome.CLOSED or outcome is Outcome.QUIET:
                self.report.restarted(outcome.value)
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
                self.report.quiet(self.rv)
                return outcome
            await self._failed(exc, outcome)
            return outcome

    async def _answered(self, latency: float, *, reached: bool = True) -> None:
        """The API server answered after ``latency`` seconds: a list's page or an opened watch
        (``reached``), or a probe."""
        await self.report.answered(self.breaker.success(latency), reached=reached)

    async def _failed(self, exc: errors.KubeError, outcome: Outcome) -> None:
        if outcome is Outcome.EXPIRED:
            self.resume.expire()  # what was passed on last; kept until a list succeeds
            self.report.expired(exc, self.rv)
            return
        self.resume.broken()
        if outcome is Outcome.AUTH:
            self.report.denied(exc)
            return
        if isinstance(exc, errors.TooManyRequests | errors.KubeUnavailable):
            self._retry_after = exc.retry_after
        detail = f"{type(exc).__name__}: {str(exc)[:200]}"
        change = self.breaker.failure(detail, self._retry_after)
        await self.report.failed(exc, self.state, change)

    async def _list(self) -> Outcome:
        """A consistent, paged list. Of a history, hands on what is newer than what was passed
        on, page by page; of a state, all of it, in one batch once the list is done."""
        history = self.resource.history
        relist = self.resume.expired is not None
        self.lists += 1
        if self.lists > 1:
            self.report.relisting(relist)
        rv = self.rv
        only_rv = rv is None and history and self.settings.initial == "new"
        # The first start by age: only while nothing was passed on, i.e. the scope's first list
        # (tried again after a failure) with no checkpoint; never a relist after a 410.
        first = (
            FirstList(self.settings.initial, self.clock.wall(), self.max_age)
            if rv is None and self.max_age is not None
            else None
        )
        list_rv: int | None = None
        passed = skipped = 0
        bad: list[tuple[str, Any]] = []  # a page's bad items, told once its answer is
        whole: list[Item] = []  # a state's list, handed on once it is all there
        pages = self.source.list_pages(
            self.resource,
            self.namespace,
            limit=1 if only_rv else self.settings.page_size,
            field_selector=self.field_selector,
            skipped=lambda reason, sample: bad.append((reason, sample)),
            only_resource_version=only_rv,
        )
        while True:
            asked = self.clock.monotonic()
            page = await anext(pages, None)
            if page is None:
                break
            await self._answered(self.clock.monotonic() - asked)
            for reason, sample in bad:
                self.report.skipped(reason, sample)
            bad.clear()
            list_rv, listed = page
            if list_rv is None:
                raise errors.KubeUnavailable("list answer has no resourceVersion")
            batch: list[Item] = [] if history else whole
            for item, item_rv in listed:
                if history and rv is not None and item_rv <= rv:
                    skipped += 1  # passed on before the relist: the stream has it
                    continue
                if first is not None and not first.take(item):
                    # Too old: not handed on. A list item holds no place of its own in the
                    # ledger (core/progress.py), so this is as done as a filtered one: the
                    # list's end (``mark`` below) moves the checkpoint past it.
                    continue
                passed += 1
                # List items come without kind/apiVersion; watch objects carry them: the
                # Event adds them to its data, so subscribers see one shape either way.
                batch.append(("ADDED", item, None))
            if batch and history:
                await self.sink.items(batch)
        assert list_rv is not None
        if not history:
            await self.sink.items(whole)  # the whole state, an empty one too: it replaces
        expired = self.resume.expired
        if expired is not None and history:
            gap = gaps.after_relist(
                expired.rv,
                list_rv,
                newer=passed,
                age=self.clock.wall() - expired.seen_at,
                covered=expired.covered,
                event_ttl=self.settings.event_ttl,
                include_deleted=self.include_deleted,
            )
            await self.report.relisted(gap)
        self.resume.listed(list_rv, self.clock.wall())
        self.report.listed(list_rv, passed, skipped, relist)
        self.sink.mark(list_rv)
        if first is not None:
            self._first_list_done(first, list_rv)
        return Outcome.LISTED

    def _first_list_done(self, first: FirstList, list_rv: int) -> None:
        """The first start by age is over: told once, in the log, the metric and ``initial``."""
        told = first.report()
        self.m.too_old.inc(first.skipped)
        log.info(
            "initial_by_age",
            scope=self.report.scope,
            resource_version=list_rv,
            max_age=told["max_age"],
            cutoff=told["cutoff"],
            published=told["published"],
            skipped=told["skipped"],
            undated=told["undated"],
        )
        self.max_age = None  # later lists (after a 410) publish whatever is newer
        if not self.initial.done():
            self.initial.set_result(told)

    async def _probe(self) -> Outcome:
        """One cheap request instead of a relist while the breaker is not healthy: a list of
        one object, without the field selector (which the API server would apply by reading
        on until it found a match)."""
        asked = self.clock.monotonic()
        doc = await self.source.list_page(self.resource, self.namespace, limit=1, field_selector="")
        if not isinstance(doc.get("metadata"), dict):
            raise errors.KubeUnavailable("probe answer has no metadata")
        await self._answered(self.clock.monotonic() - asked, reached=False)
        self.report.probed()
        return Outcome.RETRY  # list next, once the breaker lets it

    async def _watch(self) -> Outcome:
        lo, hi = self.settings.watch_timeout_min, self.settings.watch_timeout_max
        timeout = int(lo + (hi - lo) * self.clock.random())
        started = self.clock.monotonic()
        assert self.rv is not None
        start_rv = self.rv
        self._lines_read = 0
        asked = self.clock.monotonic()
        async with self.source.watch(
            self.resource,
            self.namespace,
            resource_version=str(self.rv),
            timeout_seconds=max(1, timeout),
            field_selector=self.field_selector,
            skipped=self._skipped_line,
        ) as stream:
            await self._answered(self.clock.monotonic() - asked)
            self.report.watch_started(start_rv, timeout)
            async for entries in stream:
                self._lines_read += len(entries)
                await self._handle(entries)
        if self.rv == start_rv and self.clock.monotonic() - started < MIN_HEALTHY_WATCH:
            # Closed at once without moving on (nothing, garbage, a stale bookmark): going
            # again at once would be a tight loop.
            raise errors.KubeUnavailable(f"the watch closed at once after {self._lines_read} lines")
        self.report.watch_closed(self.rv, self._lines_read)
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
                    self.report.skipped("not_newer")
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
        self.report.skipped(reason, sample)
