"""Wiring only: settings → clients → tasks → signals → drain.

The clients are the two boundaries (``bridge.kube``, ``bridge.jetstream``); the tasks and the
drain are the runtime's (``bridge.runtime.pipeline``); the signals are handled here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
from typing import Any

from bridge import __version__, logs
from bridge.errors import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, ConfigError, PublishError
from bridge.jetstream import connection, streams
from bridge.jetstream.checkpoints import KvCheckpointStore
from bridge.jetstream.publishing import Publisher
from bridge.kube.client import KubeClient, lease_namespace
from bridge.metrics import Metrics
from bridge.runtime import starting
from bridge.runtime.checkpointing import Scope
from bridge.runtime.health import Health
from bridge.runtime.http import HttpServer
from bridge.runtime.leading import Elector
from bridge.runtime.pipeline import Pipeline
from bridge.runtime.starting import Stopped, jetstream_step, until_stopped
from bridge.settings import Settings
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("app")


class Bridge:
    """One running bridge. ``run()`` returns the process exit code."""

    def __init__(self, settings: Settings, clock: Clock = SYSTEM) -> None:
        self.settings = settings
        self.clock = clock
        self.metrics = Metrics(__version__)
        self.health = Health(settings.http.unready_after, clock=clock)
        self.http = HttpServer(
            settings.http.host, settings.http.port, self.health, self.metrics, clock
        )
        self.stop_requested = asyncio.Event()
        self.pipeline: Pipeline | None = None
        self._publisher: Publisher | None = None
        self.elector: Elector | None = None

    @property
    def scopes(self) -> list[Scope]:
        return self.pipeline.scopes if self.pipeline is not None else []

    def request_stop(self) -> None:
        self.stop_requested.set()

    async def run(self) -> int:
        await self.http.start()
        log.info("http_listening", host=self.settings.http.host, port=self.http.port)
        try:
            async with contextlib.AsyncExitStack() as clients:
                return await self._run(clients)
        except ConfigError as exc:
            log.error("config_error", error=str(exc))
            return EXIT_CONFIG
        finally:
            await self.http.stop()

    async def _run(self, clients: contextlib.AsyncExitStack) -> int:
        s = self.settings
        stop = self.stop_requested
        # a namespace that is not a namespace name is a config error, before anything starts
        lease_ns = lease_namespace(s.leader_election.namespace) if s.leader_election.enabled else ""
        kube = KubeClient(s.kubernetes, s.enrich.max_inflight + 1 if s.enrich.enabled else 0)
        await kube.connect()  # credentials are a config matter: exit 2 when bad
        clients.push_async_callback(kube.close)
        # the connections refused before CONNECT, counted by the shared connection
        self.metrics.nats_refused.read = connection.refusals
        try:
            conn = await until_stopped(
                stop,
                connection.connect(
                    s.nats,
                    on_state=self._nats_state,
                    on_reconnected=self._nats_reconnected,
                    clock=self.clock,
                ),
            )
            clients.push_async_callback(connection.close, conn)
            nc = conn.nc
            # read from the client at scrape time, not kept from the last callback
            self.metrics.nats_connected.set_function(lambda: 1.0 if nc.is_connected else 0.0)
            await until_stopped(
                stop,
                jetstream_step(
                    "ensure_stream", lambda: streams.ensure_stream(nc, s.nats), self.clock
                ),
            )
            store = await until_stopped(
                stop,
                jetstream_step(
                    "open_checkpoint_bucket",
                    lambda: KvCheckpointStore.open(nc, s.checkpoint.bucket, s.nats),
                    self.clock,
                ),
            )
            cluster = s.cluster.name
            if not cluster:
                cluster = await until_stopped(
                    stop, starting.cluster_id(kube, s.kubernetes.backoff, self.metrics, self.clock)
                )
            publisher = self._publisher = Publisher(
                nc,
                self.metrics,
                ack_timeout=s.nats.ack_timeout,
                max_inflight=s.nats.max_inflight,
                max_inflight_bytes=s.nats.max_inflight_bytes,
                on_no_stream=streams.recreating(nc, s.nats, self.clock),
                stream=s.nats.stream,
                domain=s.nats.domain,
                clock=self.clock,
            )
            publisher.set_connected(nc.is_connected)
            await publisher.start()
            if s.leader_election.enabled:
                # a warm standby until it holds the Lease: NATS, stream and bucket checked
                await until_stopped(stop, self._lead(kube, cluster, lease_ns))
            self.pipeline = Pipeline(
                s,
                cluster=cluster,
                source=kube,
                reader=kube,
                publisher=publisher,
                store=store,
                metrics=self.metrics,
                health=self.health,
                clock=self.clock,
            )
            hold: asyncio.Task[None] | None = None
            if self.elector is not None:
                hold = asyncio.create_task(self.elector.hold(), name="lease")
                clients.push_async_callback(self._let_go, hold)
                self.pipeline.role = "leader"
                e = self.elector
                self.pipeline.leadership = {
                    "identity": e.identity,
                    "previousHolder": e.previous_holder,
                    "lease": e.lease,
                    "transitions": e.transitions,
                    "at": self.clock.timestamp(),
                }
            # it reads and publishes from here on (it holds the Lease, or runs alone)
            self.metrics.leader.set(1)
            await until_stopped(stop, self.pipeline.open())
            self.http.status = self.pipeline.status
        except PublishError as exc:
            # the stream or the checkpoint bucket can not be used: asking again will not help
            log.error("stream_unusable", error=str(exc))
            return EXIT_FAILED
        except Stopped:
            log.info("stopped_during_startup")
            return EXIT_OK
        try:
            return await self.pipeline.run(stop, fence=hold)
        finally:
            self.metrics.leader.set(0)

    async def _lead(self, kube: KubeClient, cluster: str, namespace: str) -> None:
        """Stand by, warm and ready, until this process holds the Lease (in ``namespace``)."""
        le = self.settings.leader_election
        identity = le.identity or os.environ.get("POD_NAME") or socket.gethostname()
        elector = self.elector = Elector(
            kube, le, identity=identity, namespace=namespace, clock=self.clock
        )
        self.health.standby = True
        self.http.status = lambda: self._standby_status(cluster)
        log.info("standing_by", identity=identity, lease=elector.lease)
        try:
            await elector.acquire()
        finally:
            self.health.standby = False

    def _standby_status(self, cluster: str) -> dict[str, Any]:
        e = self.elector
        assert e is not None
        return {
            "cluster": cluster,
            "role": "standby",
            "identity": e.identity,
            "leader": e.holder or None,
            "lease": e.lease,
            "nats": {"connected": self.health.nats_connected},
        }

    async def _let_go(self, hold: asyncio.Task[None]) -> None:
        """After the pipeline stopped: a clean stop hands the Lease back; a lost one is gone."""
        lost = hold.done() and not hold.cancelled() and hold.exception() is not None
        hold.cancel()
        await asyncio.gather(hold, return_exceptions=True)
        if not lost and self.elector is not None:
            await self.elector.release()

    def _nats_state(self, up: bool) -> None:
        self.health.nats_up(up)
        if self._publisher is not None:
            self._publisher.set_connected(up)

    async def _nats_reconnected(self) -> None:
        if self._publisher is not None:
            await self._publisher.resend_all()


async def serve(settings: Settings) -> int:
    """The ``run`` command: a bridge with SIGTERM/SIGINT handling."""
    # Everything imported so far (kubernetes_asyncio's client above all) lives as long as the
    # process: keep it out of the cyclic GC's full collections, which otherwise walk it every
    # time and stall the event loop.
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
