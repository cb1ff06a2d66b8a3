"""The data flow, running: one watcher per scope → intake → stage → queue → publisher →
checkpoint (the stage: ``staging.Converting``, or the ``Enricher`` in front of it).

``Pipeline.open`` loads each scope's checkpoint; ``Pipeline.run`` starts the tasks and, when a
stop is asked for (or a task fails), stops in the order that loses nothing: stop reading the
API server, wait (bounded by ``shutdown.drain_timeout``) until what was read is acked, save
the checkpoints. Whatever is not acked by then stays after the checkpoint and is read again on
the next start.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from bridge import logs
from bridge.core.checkpoints import checkpoint_key, scope_name
from bridge.core.converting import Converter
from bridge.core.filtering import Filter, server_field_selector
from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.errors import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, ConfigError
from bridge.metrics import Metrics
from bridge.runtime import namespaces
from bridge.runtime.checkpointing import Checkpointer, Scope
from bridge.runtime.enriching import Enricher
from bridge.runtime.health import Health
from bridge.runtime.intake import Intake, process_status
from bridge.runtime.ports import CheckpointStore, ListerWatcher, ObjectReader, Publisher, Stage
from bridge.runtime.staging import Converting
from bridge.runtime.starting import jetstream_step
from bridge.runtime.watching import Watcher
from bridge.settings import Settings
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("app")

DRAIN_POLL = 0.02


def _settled_none(fut: asyncio.Future[Any]) -> bool:
    """A watcher's ``initial`` that is known already to report nothing."""
    return fut.done() and not fut.cancelled() and fut.result() is None


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        *,
        cluster: str,
        source: ListerWatcher,
        publisher: Publisher,
        store: CheckpointStore,
        metrics: Metrics,
        health: Health,
        clock: Clock = SYSTEM,
        reader: ObjectReader | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.source = source
        self.publisher = publisher
        self.store = store
        self.metrics = metrics
        self.health = health
        self.cluster = cluster
        self.converter = Converter(
            cluster,
            settings.nats.subject_prefix,
            settings.cloudevents.mode,
            settings.nats.subject_template,
        )
        self.queue: BoundedQueue[Outgoing] = BoundedQueue(
            settings.queue.max_events, settings.queue.max_bytes
        )
        # where the intake hands each Event: converted and queued, or enriched first
        self.stage: Stage = Converting(self.converter, self.queue, metrics)
        self.enricher: Enricher | None = None
        if settings.enrich.enabled:
            if reader is None:
                raise ConfigError("enrich is configured but nothing reads the API server's objects")
            self.stage = self.enricher = Enricher(
                settings, reader, Converting(self.converter, self.queue, metrics), metrics, clock
            )
        self.scopes: list[Scope] = []
        # "single" without leader election; "leader" with it, and the status event to publish
        # first (``leader_changed``), set by the app
        self.role = "single"
        self._resumes_from: dict[str, int | None] = {}
        self.leadership: dict[str, Any] | None = None
        self.checkpointer = Checkpointer(
            store, self.scopes, metrics, settings.checkpoint.interval, clock=clock
        )
        # read at scrape time: exact even while the pipeline is blocked
        metrics.queue_depth.set_function(lambda: len(self.queue))
        metrics.queue_bytes.set_function(lambda: self.queue.bytes)
        metrics.inflight.set_function(lambda: publisher.in_flight)
        metrics.publish_wait.set_function(publisher.oldest_wait)
        metrics.queue_max.set(settings.queue.max_events)
        metrics.queue_max_bytes.set(settings.queue.max_bytes)
        health.publish_wait = publisher.oldest_wait
        publisher.on_dropped = self._dropped

    async def open(self) -> None:
        """A scope per namespace (or one for all), each from its checkpoint."""
        s = self.settings
        event_filter = Filter(s.filter)
        selector = server_field_selector(s.kubernetes.field_selector, s.filter)
        for ns in s.kubernetes.scopes:
            name = scope_name(ns)
            key = checkpoint_key(self.cluster, ns)
            cp = await jetstream_step(
                "load_checkpoint", functools.partial(self.store.load, key), self.clock
            )
            rv = cp.resource_version if cp else None
            progress = Progress(rv)
            intake = Intake(
                name, progress, event_filter, self.converter, self.stage, self.metrics, self.clock
            )
            watcher = Watcher(
                self.source,
                intake,
                s.kubernetes,
                namespace=ns,
                checkpoint=rv,
                checkpoint_at=cp.saved_at if cp else None,
                include_deleted=s.filter.include_deleted,
                field_selector=selector,
                metrics=self.metrics,
                health=self.health.scope(name),
                clock=self.clock,
            )
            self._scope_metrics(name)
            self.scopes.append(Scope(ns, key, progress, watcher))
            log.info(
                "scope_started",
                scope=name,
                checkpoint=key,
                resource_version=rv,
                start="watch from checkpoint"
                if cp is not None
                else f"list (kubernetes.initial={s.kubernetes.initial})",
                field_selector=selector,
            )

    def _scope_metrics(self, name: str) -> None:
        """A scope's synced and failing gauges, read from its health at scrape time."""
        health = self.health.scope(name)
        self.metrics.scope_synced.labels(name).set_function(lambda: float(health.synced))
        self.metrics.watch_failing.labels(name).set_function(health.failing_for)

    def _dropped(self, msg: Message, reason: str, detail: str) -> Message:
        """The ``dropped`` status event for a message no server of the stream can take."""
        data = {
            "id": msg.msg_id,
            "subject": msg.subject,
            "size": msg.wire_size,
            "reason": reason,
            "detail": detail,
            "meaning": "this message is not in the stream and never will be: no server of the "
            "stream takes it (raise max_payload or the stream's max_msg_size to keep such Events)",
        }
        at = self.clock.timestamp()
        return self.converter.status("dropped", f"dropped/{msg.msg_id}", data, at)

    def status(self) -> dict[str, Any]:
        """What ``/status`` shows of the running pipeline: each scope, and NATS."""
        now = self.clock.monotonic()
        scopes: dict[str, Any] = {}
        for sc in self.scopes:
            health = self.health.scope(sc.name)
            rv = sc.watcher.rv
            failing = None if health.bad_since is None else now - health.bad_since
            scopes[sc.name] = {
                "state": sc.watcher.state.value,
                "synced": health.synced,
                "resource_version": rv,
                "checkpoint": sc.saved,
                # resourceVersions read but not yet saved as the checkpoint
                "checkpoint_lag": None if rv is None or sc.saved is None else rv - sc.saved,
                "checkpoint_lag_seconds": round(sc.lag(now), 1),
                "in_flight": sc.progress.in_flight,
                "failing_for_seconds": None if failing is None else round(failing, 1),
                "last_error": health.last_error,
                "breaker": sc.watcher.breaker.describe(),
            }
        return {
            "cluster": self.cluster,
            "role": self.role,
            "nats": {
                "connected": self.health.nats_connected,
                "queued": len(self.queue),
                "in_flight": self.publisher.in_flight,
                "oldest_ack_wait_seconds": round(self.publisher.oldest_wait(), 3),
            },
            "scopes": scopes,
            **({"enrich": self.enricher.describe()} if self.enricher is not None else {}),
            "internals": self.internals(),
        }

    def internals(self) -> dict[str, int]:
        """The size of every structure that grows with what passes through: flat after
        warm-up in a healthy bridge, whatever the faults (``make soak`` samples it)."""
        out = {
            "asyncio_tasks": len(asyncio.all_tasks()),
            "queue": len(self.queue),
            "queue_bytes": self.queue.bytes,
            **{f"publisher_{k}": v for k, v in self.publisher.sizes().items()},
            **self.converter.sizes(),
            **(self.enricher.sizes() if self.enricher is not None else {}),
        }
        for sc in self.scopes:
            out[f"progress_entries:{sc.name}"] = len(sc.progress)
        return out

    async def run(self, stop: asyncio.Event, fence: asyncio.Future[Any] | None = None) -> int:
        """Run until ``stop`` is set or a task fails; then drain and save. The exit code.

        ``fence`` (the leader election's hold on the Lease) ending means this process may no
        longer write: everything stops at once, nothing more is published and the checkpoint
        is not written again; the next leader resumes from the last one saved."""
        publisher = self.publisher
        if fence is not None and fence.done():
            log.error("stopped_fenced", reason="the Lease was lost before the watches started")
            return EXIT_FAILED
        by_age = [sc for sc in self.scopes if not _settled_none(sc.watcher.initial)]
        announce: asyncio.Task[None] | None = None
        # where this run resumes from: what leader_changed says, whenever it goes out
        self._resumes_from = {sc.name: sc.saved for sc in self.scopes}
        if not by_age:
            await self._announce({})
        watchers = [
            asyncio.create_task(sc.watcher.run(), name=f"watch:{sc.key}") for sc in self.scopes
        ]
        if by_age:
            # a first start by age: ``started`` follows the first lists, and says what they
            # skipped (a stop before then publishes no ``started``)
            announce = asyncio.create_task(self._announce_after(by_age), name="announce")
        workers = [
            asyncio.create_task(publisher.run(self.queue), name="publish"),
            asyncio.create_task(publisher.reap(), name="reap"),
            asyncio.create_task(self.checkpointer.run(), name="checkpoint"),
        ]
        workers.append(asyncio.create_task(self.stage.run(), name="stage"))
        if self.enricher is not None:
            if self.enricher.plan.watches_namespaces:
                ns_watch = namespaces.watcher(
                    self.source, self.enricher, self.settings.kubernetes, self.metrics, self.clock
                )
                workers.append(asyncio.create_task(ns_watch.run(), name="enrich:namespaces"))
        stopping = asyncio.create_task(stop.wait(), name="stop")
        waits: list[asyncio.Future[Any]] = [stopping, *watchers, *workers]
        if fence is not None:
            waits.append(fence)
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if fence is not None and fence in done:
            if announce is not None:
                announce.cancel()
            for w in [*watchers, *workers, stopping]:
                w.cancel()
            await asyncio.gather(*watchers, *workers, stopping, return_exceptions=True)
            await self.stage.close()
            log.error(
                "stopped_fenced",
                reason=repr(fence.exception()) if not fence.cancelled() else "cancelled",
                queued=len(self.queue),
                in_flight=publisher.in_flight,
                note="no longer the leader: nothing more published, the checkpoint not written",
            )
            return EXIT_FAILED
        code = EXIT_OK
        for f in done:
            if f is stopping:
                continue
            # every other task runs until cancelled: one that ended by itself (an error, a
            # return, a cancellation from within) stops the bridge as a failure
            name = f.get_name() if isinstance(f, asyncio.Task) else "?"
            exc = None if f.cancelled() else f.exception()
            why = repr(exc) if exc is not None else ("cancelled" if f.cancelled() else "ended")
            log.error("task_failed", task=name, error=why)
            code = EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILED
        # 1. stop reading the API server.
        if announce is not None:
            announce.cancel()
            await asyncio.gather(announce, return_exceptions=True)
        for t in watchers:
            t.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        # 2. wait, bounded, for what was read to be acked.
        drained = await self.drain(self.settings.shutdown.drain_timeout)
        # 3. save how far we got, then let go.
        for w in [*workers, stopping]:
            w.cancel()
        await asyncio.gather(*workers, stopping, return_exceptions=True)
        await self.stage.close()
        if fence is not None and fence.done():
            # the Lease was lost while draining: what was acked stays for the next leader
            log.error("stopped_fenced", reason="the Lease was lost while draining")
            return EXIT_FAILED
        await self.checkpointer.save_all(final=True)
        log.info(
            "stopped",
            drained=drained,
            queued=len(self.queue),
            in_flight=publisher.in_flight,
            checkpoints={sc.key: sc.saved for sc in self.scopes},
        )
        return code

    async def _announce(self, initial: dict[str, Any]) -> None:
        """The ``started`` status event (with what a first start by age skipped, per scope),
        then ``leader_changed`` when this process leads."""
        scopes = [sc.name for sc in self.scopes]
        extra = {"initial": initial} if initial else {}
        messages = [process_status(self.converter, self.clock, "started", scopes=scopes, **extra)]
        if self.leadership is not None:
            data = {**self.leadership, "checkpoints": self._resumes_from}
            msg_id = f"leader_changed/{data['identity']}/{data['at']}"
            messages.append(self.converter.status("leader_changed", msg_id, data, data["at"]))
        for msg in messages:
            # behind the Events the first lists put in the stage
            await self.stage.put_message(msg)

    async def _announce_after(self, by_age: list[Scope]) -> None:
        initial: dict[str, Any] = {}
        for sc in by_age:
            report = await sc.watcher.initial
            if report is not None:
                initial[sc.name] = report
        await self._announce(initial)

    def _held(self) -> int:
        """Events read and not yet on the queue (waiting for their lookups)."""
        return len(self.stage)

    async def drain(self, timeout: float) -> bool:
        """Queue the ``stopped`` status event, then wait, at most ``timeout`` in all, until
        what was read is acked."""
        publisher = self.publisher
        deadline = self.clock.monotonic() + timeout
        stopped = process_status(self.converter, self.clock, "stopped")
        try:  # the queue may be full and NATS away: the deadline holds for this too
            await self.clock.wait_for(self.stage.put_status(stopped), timeout)
        except TimeoutError:
            pass
        while len(self.queue) or self._held() or publisher.busy:
            if self.clock.monotonic() >= deadline:
                log.warning(
                    "drain_timeout",
                    queued=len(self.queue),
                    enriching=self._held(),
                    in_flight=publisher.in_flight,
                    note="not acked: the checkpoint stays before them, read again on restart",
                )
                return False
            await self.clock.sleep(DRAIN_POLL)
        return True
