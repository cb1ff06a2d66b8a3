"""Wiring only: settings → clients → tasks → signals → drain."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors

from bridge import logs, natsconn, streams
from bridge.backoff import Backoff
from bridge.checkpoints import CheckpointStore, KvCheckpointStore, checkpoint_key
from bridge.converting import Converter, Message
from bridge.errors import (
    BridgeError,
    ConfigError,
    Forbidden,
    KubeError,
    PublishError,
    Unauthorized,
)
from bridge.filtering import Filter, server_field_selector
from bridge.health import Health
from bridge.httpserver import HttpServer
from bridge.kube import KubeClient
from bridge.metrics import Metrics
from bridge.pipeline import Intake, enqueue_status, now_rfc3339
from bridge.progress import Progress
from bridge.publishing import Outgoing, Publisher
from bridge.queueing import BoundedQueue
from bridge.settings import Settings
from bridge.watching import Watcher

log = logs.get("app")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
T = TypeVar("T")


class Scope:
    def __init__(
        self, namespace: str | None, key: str, progress: Progress, watcher: Watcher
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.progress = progress
        self.watcher = watcher
        self.saved: int | None = progress.safe_rv


class Bridge:
    """One running bridge. ``run()`` returns the process exit code."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.health = Health(settings.http.unready_after)
        self.http = HttpServer(settings.http.host, settings.http.port, self.health, self.metrics)
        self.stop_requested = asyncio.Event()
        self.scopes: list[Scope] = []
        self.cluster = settings.cluster.name or ""
        self.publisher: Publisher | None = None
        self.queue: BoundedQueue[Outgoing] = BoundedQueue(
            settings.queue.max_events, settings.queue.max_bytes
        )
        self._last_save = time.monotonic()
        self._kube: KubeClient | None = None
        self._nc: Any = None
        self._js: Any = None

    def request_stop(self) -> None:
        self.stop_requested.set()

    async def run(self) -> int:
        await self.http.start()
        log.info("http_listening", host=self.settings.http.host, port=self.http.port)
        try:
            return await self._run()
        except ConfigError as exc:
            log.error("config_error", error=str(exc))
            return EXIT_CONFIG
        finally:
            await self._close()

    async def _until_stopped(self, coro: Any) -> Any:
        """Run a start-up step, or give up on it when a stop is requested."""
        task = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self.stop_requested.wait())
        done, _ = await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            stop.cancel()
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise _Stopped

    async def _run(self) -> int:
        s = self.settings
        self._kube = KubeClient(s.kubernetes)
        await self._kube.connect()  # credentials are a config matter: exit 2 when bad
        try:
            self._nc = await self._until_stopped(
                natsconn.connect(
                    s.nats, on_state=self._nats_state, on_reconnected=self._nats_reconnected
                )
            )
            js = self._js = self._nc.jetstream()
            try:
                await self._until_stopped(
                    self._retrying("ensure_stream", lambda: streams.ensure_stream(js, s.nats))
                )
                store: CheckpointStore = await self._until_stopped(
                    self._retrying(
                        "open_checkpoint_bucket",
                        lambda: KvCheckpointStore.open(
                            js, s.checkpoint.bucket, s.nats.num_replicas
                        ),
                    )
                )
            except PublishError as exc:
                log.error("stream_unusable", error=str(exc))
                return EXIT_FAILED
            if not self.cluster:
                self.cluster = await self._until_stopped(self._cluster_uid())
            return await self._pipeline(store)
        except _Stopped:
            log.info("stopped_during_startup")
            return EXIT_OK

    async def _retrying(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """A start-up step against NATS, retried through passing failures (a NATS cluster
        still electing leaders answers with timeouts and 503s); config mismatches are final."""
        backoff = Backoff(initial=0.5, cap=10.0)
        while True:
            try:
                return await step()
            except PublishError:
                raise
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                delay = backoff.next_delay()
                log.warning(
                    f"{what}_failed", error=f"{type(exc).__name__}: {exc}", retry_in=round(delay, 2)
                )
                await asyncio.sleep(delay)

    async def _cluster_uid(self) -> str:
        assert self._kube is not None
        backoff = Backoff.from_settings(self.settings.kubernetes.backoff)
        while True:
            try:
                uid = await self._kube.cluster_uid()
                log.info("cluster_id_derived", cluster=uid, source="kube-system namespace uid")
                return uid
            except KubeError as exc:
                delay = backoff.next_delay(getattr(exc, "retry_after", None))
                if isinstance(exc, Forbidden | Unauthorized):
                    self.metrics.auth_failures.labels(str(exc.status)).inc()
                    log.warn_sampled(
                        "cluster_id_auth",
                        "kube_permission_denied",
                        interval=60,
                        status=exc.status,
                        needs="get on namespaces/kube-system (or set cluster.name)",
                        detail=str(exc),
                    )
                    if isinstance(exc, Unauthorized):
                        with contextlib.suppress(BridgeError):
                            await self._kube.reload_credentials()
                else:
                    log.warning(
                        "cluster_id_unavailable",
                        error=str(exc),
                        retry_in=round(delay, 2),
                        hint="set cluster.name to skip this lookup",
                    )
                await asyncio.sleep(delay)

    async def _pipeline(self, store: CheckpointStore) -> int:
        s = self.settings
        assert self._kube is not None
        converter = Converter(self.cluster, s.nats.subject_prefix, s.cloudevents.mode)
        event_filter = Filter(s.filter)
        selector = server_field_selector(s.kubernetes.field_selector, s.filter)
        publisher = self.publisher = Publisher(
            self._nc,
            self.metrics,
            ack_timeout=s.nats.ack_timeout,
            max_inflight=s.nats.max_inflight,
            on_no_stream=self._stream_missing,
        )
        publisher.set_connected(self._nc.is_connected)
        await publisher.start()
        self.health.publish_wait = publisher.oldest_wait
        # read at scrape time: exact even while the pipeline is blocked
        self.metrics.queue_depth.set_function(lambda: len(self.queue))
        self.metrics.queue_bytes.set_function(lambda: self.queue.bytes)
        self.metrics.inflight.set_function(lambda: publisher.in_flight)
        namespaces: list[str | None] = [*s.kubernetes.namespaces] or [None]
        for ns in namespaces:
            key = checkpoint_key(self.cluster, ns)
            cp = await self._until_stopped(
                self._retrying("load_checkpoint", functools.partial(store.load, key))
            )
            progress = Progress(cp.resource_version if cp else None)
            intake = Intake(ns or "*", progress, event_filter, converter, self.queue, self.metrics)
            watcher = Watcher(
                self._kube,
                intake,
                s.kubernetes,
                namespace=ns,
                checkpoint=cp.resource_version if cp else None,
                checkpoint_at=cp.saved_at if cp else None,
                include_deleted=s.filter.include_deleted,
                field_selector=selector,
                metrics=self.metrics,
                health=self.health,
            )
            self.scopes.append(Scope(ns, key, progress, watcher))
            log.info(
                "scope_started",
                scope=ns or "*",
                checkpoint=key,
                resource_version=cp.resource_version if cp else None,
                start="watch from checkpoint"
                if cp is not None
                else f"list (kubernetes.initial={s.kubernetes.initial})",
                field_selector=selector,
            )
        scopes = [sc.namespace or "*" for sc in self.scopes]
        await enqueue_status(self.queue, _process_status(converter, "started", scopes=scopes))
        watchers = [
            asyncio.create_task(sc.watcher.run(), name=f"watch:{sc.key}") for sc in self.scopes
        ]
        workers = [
            asyncio.create_task(publisher.run(self.queue), name="publish"),
            asyncio.create_task(publisher.reap(), name="reap"),
            asyncio.create_task(self._checkpointing(store), name="checkpoint"),
        ]
        stop = asyncio.create_task(self.stop_requested.wait(), name="stop")
        done, _ = await asyncio.wait(
            [stop, *watchers, *workers], return_when=asyncio.FIRST_COMPLETED
        )
        code = EXIT_OK
        for t in done:
            if t is not stop and not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                log.error("task_failed", task=t.get_name(), error=repr(exc))
                code = EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILED
        # 1. stop reading the API server.
        for t in watchers:
            t.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        # 2. wait, bounded, for what was read to be acked.
        drained = await self._drain(converter, s.shutdown.drain_timeout)
        # 3. save how far we got, then let go.
        for t in [*workers, stop]:
            t.cancel()
        await asyncio.gather(*workers, stop, return_exceptions=True)
        await self._save_all(store, final=True)
        log.info(
            "stopped",
            drained=drained,
            queued=len(self.queue),
            in_flight=publisher.in_flight,
            checkpoints={sc.key: sc.saved for sc in self.scopes},
        )
        return code

    async def _drain(self, converter: Converter, timeout: float) -> bool:
        """Wait, at most ``timeout`` in all, until what was read is acked."""
        assert self.publisher is not None
        publisher = self.publisher
        deadline = time.monotonic() + timeout
        stopped = _process_status(converter, "stopped")
        try:  # the queue may be full and NATS away: the deadline holds for this too
            await asyncio.wait_for(enqueue_status(self.queue, stopped), timeout)
        except TimeoutError:
            pass
        while len(self.queue) or publisher.busy:
            if time.monotonic() >= deadline:
                log.warning(
                    "drain_timeout",
                    queued=len(self.queue),
                    in_flight=publisher.in_flight,
                    note="not acked: the checkpoint stays before them, read again on restart",
                )
                return False
            await asyncio.sleep(0.02)
        return True

    async def _stream_missing(self) -> None:
        """No stream answered a publish: it was deleted, or is not there yet."""
        if self.settings.nats.create_stream and self._js is not None:
            try:
                await streams.ensure_stream(self._js, self.settings.nats)
            except (PublishError, nats.errors.Error, TimeoutError) as exc:
                log.warn_sampled(
                    "recreate",
                    "stream_recreate_failed",
                    interval=30,
                    error=f"{type(exc).__name__}: {exc}",
                )
        await asyncio.sleep(1.0)  # at most one attempt a second

    async def _checkpointing(self, store: CheckpointStore) -> None:
        interval = self.settings.checkpoint.interval
        while True:
            await asyncio.sleep(interval)
            await self._save_all(store)
            self.metrics.checkpoint_age.set(time.monotonic() - self._last_save)

    async def _save_all(self, store: CheckpointStore, final: bool = False) -> None:
        """Save every scope whose safe resourceVersion moved, together, within 5 s."""
        due = [(sc, sc.progress.safe_rv) for sc in self.scopes]
        due = [(sc, rv) for sc, rv in due if rv is not None and rv != sc.saved]
        if not due:
            return
        results = await asyncio.gather(
            *(asyncio.wait_for(store.save(sc.key, rv), timeout=5.0) for sc, rv in due if rv),
            return_exceptions=True,
        )
        for (sc, rv), result in zip(due, results, strict=True):
            if isinstance(result, BaseException):
                log.warn_sampled(
                    "save",
                    "checkpoint_save_failed",
                    interval=10,
                    key=sc.key,
                    error=f"{type(result).__name__}: {result}",
                    final=final,
                )
                continue
            assert rv is not None
            sc.saved = rv
            self._last_save = time.monotonic()
            self.metrics.checkpoint_rv.labels(sc.namespace or "*").set(rv)
            log.debug("checkpoint_saved", key=sc.key, resource_version=rv)

    def _nats_state(self, up: bool) -> None:
        self.health.nats_up(up)
        self.metrics.nats_connected.set(1 if up else 0)
        if self.publisher is not None:
            self.publisher.set_connected(up)

    async def _nats_reconnected(self) -> None:
        if self.publisher is not None:
            await self.publisher.resend_all()

    async def _close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.close(), timeout=5)
        if self._kube is not None:
            await self._kube.close()
        await self.http.stop()


def _process_status(converter: Converter, what: str, **data: Any) -> Message:
    """The ``started`` / ``stopped`` status event of this process."""
    at = now_rfc3339()
    host, pid = socket.gethostname(), os.getpid()
    return converter.status(
        what, f"{what}/{host}/{pid}/{at}", {"host": host, "pid": pid, "at": at, **data}, at
    )


class _Stopped(Exception):
    pass


async def serve(settings: Settings) -> int:
    """The ``run`` command: a bridge with SIGTERM/SIGINT handling."""
    # Everything imported so far (kubernetes_asyncio alone is ~70 MB of objects) lives as
    # long as the process: keep it out of the cyclic GC's full collections, which otherwise
    # walk it every time and stall the event loop for tens of milliseconds.
    gc.collect()
    gc.freeze()
    bridge = Bridge(settings)
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info(
                "stop_requested",
                signal=signal.Signals(signum).name,
                note="a second signal exits at once",
            )
            bridge.request_stop()
        else:
            log.warning("exiting_now", signal=signal.Signals(signum).name)
            os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    return await bridge.run()


__all__ = ["Bridge", "serve"]
