"""The one runtime of every subscriber: what a program on the kit shares with the others, so
that each program is a short module giving its settings and its handler (``Subscriber``).

``serve(program, settings)`` runs one: signals → metrics → the program's clients
(``Subscriber.setup``) → the HTTP probes (``k8s_event_common.http``, the bridge's hardened
server) → NATS → the stream checked and the durable bound (``Subscriber.provide``, then
``Consumer.open``), retried in one loop while they are missing → ``Subscriber.prepare`` →
ready → ``Subscriber.consume`` (and ``Subscriber.background``) until SIGTERM or SIGINT → the
drain → the clients closed. With ``provision`` it only makes the durable and what
``provide`` makes (an operator's credentials: a subscriber's own may make nothing), then exits.

Exit codes (every program, as the bridge): 0 a clean stop (or the stop asked for before the
start was done); 1 a failure (the stream or the durable in another shape, a task that ended by
itself); 2 a configuration that can not be used (``Unusable``, a credential or TLS file). The
first signal drains (the message or batch in hand finishes, at most ``stop_timeout``); a
second exits at once. Every log line is an event name and fields (``k8s_event_consumer.<name>``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any, ClassVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS

from k8s_event_common import connecting, http, streams
from k8s_event_common import metrics as common_metrics
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.connecting import CredentialError, TLSGuardUnavailable
from k8s_event_common.logformat import Logger
from k8s_event_common.streams import ShapeMismatch
from k8s_event_consumer import logs
from k8s_event_consumer.connecting import connect_until
from k8s_event_consumer.consuming import Consumer, Stats
from k8s_event_consumer.durables import ConsumerConflict
from k8s_event_consumer.metrics import Counter, Metrics
from k8s_event_consumer.options import Start
from k8s_event_consumer.seen import MemorySeen, Seen

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
OPEN_RETRY = 2.0  # seconds between attempts to open what is missing (the stream, a bucket ...)


class Unusable(Exception):
    """The program can not run with what it was given: ``code`` 2 for its configuration (a TLS
    file that does not load, a kubeconfig), 1 for anything else."""

    def __init__(self, why: str, code: int = EXIT_CONFIG, event: str = "config_error") -> None:
        super().__init__(why)
        self.code = code
        self.event = event  # the log line's name


@dataclass(frozen=True)
class Context:
    """What the runtime hands a program."""

    settings: Any  # the program's settings (``SubscriberSettings``: nats, http, log, its own)
    metrics: Metrics
    clock: Clock
    stopping: asyncio.Event  # set by the first signal
    provision: bool  # a provision run: make what is missing, serve nothing
    log: Logger


class Subscriber:
    """One program on the runtime. ``consume`` is the handler; the rest have defaults."""

    name: ClassVar[str]  # ``alerting``: logs ``k8s_event_consumer.alerting``, metrics below
    # False: the program reads the stream its own way (``k8s-event-digests``: a projection
    # that must see every message in order); ``prepare`` and ``consume`` get an ``Unbound``
    durable: ClassVar[bool] = True
    counters: ClassVar[Sequence[Counter]] = ()  # its own, besides the runtime's
    stop_timeout: ClassVar[float] = 10.0  # seconds the message or batch in hand may take

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.metrics = ctx.metrics
        self.clock = ctx.clock
        self.log = ctx.log

    async def setup(self) -> None:
        """Before NATS: the program's clients (``Unusable`` when they can not be made)."""

    async def provide(self, nc: NATS) -> Seen:
        """What the durable needs besides the stream, checked against its shape (and made,
        where the credentials may): a bucket, a dead-letter stream; the ids already handled."""
        return MemorySeen()

    async def prepare(self, nc: NATS, consumer: Consumer) -> None:
        """After the durable is bound, before ready: what the program reads first."""

    async def consume(self, consumer: Consumer) -> None:
        """The handler: ``consumer.run(handlers)`` or ``consumer.run_batches(...)``."""
        raise NotImplementedError

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        """What runs beside ``consume`` until the stop (a resend loop)."""
        return ()

    def status(self) -> dict[str, Any]:
        """Fields of the ``starting`` and ``stopped`` log lines."""
        return {}

    async def close(self) -> None:
        """The program's clients closed (after the drain, also after a failed start)."""


class Unbound:
    """In place of the ``Consumer`` of a program without a durable: ``stop`` asks ``consume``
    to end (``stopping`` is set), ``stats`` stays empty."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.stopping = asyncio.Event()

    async def stop(self) -> None:
        self.stopping.set()


def version() -> str:
    try:
        return package_version("k8s-event-bridge-consumer")
    except PackageNotFoundError:
        return ""


class Runtime:
    """One run of one program (``serve``)."""

    def __init__(
        self, program: type[Subscriber], settings: Any, provision: bool, clock: Clock
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.stopping = asyncio.Event()
        self.log_name = f"k8s_event_consumer.{program.name}"
        self.log = Logger(self.log_name)
        self.metrics = Metrics(f"k8s_event_{program.name}_", program.counters)
        self.program = program(
            Context(settings, self.metrics, clock, self.stopping, provision, self.log)
        )
        self.provision = provision
        self.consumer: Consumer | None = None
        self.nc: NATS | None = None
        self.ready = False
        self.server: http.HttpServer | None = None
        self._signals = 0
        self._export()

    def _export(self) -> None:
        m = self.metrics
        common_metrics.nats_refused(m.registry, m.prefix + "nats_refused", connecting.refusals)
        m.gauge(
            "nats_connected",
            "1 while connected to NATS (read from the client when scraped)",
            lambda: 1.0 if self.nc is not None and self.nc.is_connected else 0.0,
        )
        m.gauge("ready", "1 while /readyz answers 200", lambda: 0.0 if self.problems() else 1.0)
        m.read("build_info", "Always 1: the running version", lambda: {(version(),): 1.0},
               labels=("version",))  # fmt: skip

    def problems(self) -> list[str]:
        """Why /readyz answers 503: nothing once the durable is bound while NATS is connected."""
        if not self.ready:
            return ["not consuming yet"]
        if self.nc is None or not self.nc.is_connected:
            return ["not connected to NATS"]
        return []

    def on_signal(self, signum: int) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            self.log.info("stop_requested", signal=name, note="a second signal exits at once")
            self.stopping.set()
        else:
            self.log.warning("exiting_now", signal=name)
            os._exit(128 + signum)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal, sig)
        tasks: list[asyncio.Task[None]] = []
        try:
            await self.program.setup()
            await self._serve_http()
            return await self._run(tasks)
        except Unusable as exc:
            self.log.error(exc.event, error=str(exc))
            return exc.code
        finally:
            self.ready = False
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.program.close()
            if self.server is not None:
                await self.server.stop()
            if self.nc is not None:
                with contextlib.suppress(Exception):
                    await self.nc.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            self.log.info("stopped", **self._stats())

    async def _serve_http(self) -> None:
        h = self.settings.http
        if h.port is None or self.provision:  # a provision run serves nothing
            return
        routes = http.probes(self.problems, self.metrics.render)
        self.server = http.HttpServer(
            h.host, h.port, routes, clock=self.clock, logger=f"{self.log_name}.http"
        )
        await self.server.start()
        self.log.info("http_listening", host=h.host, port=self.server.port)

    async def _run(self, tasks: list[asyncio.Task[None]]) -> int:
        n = self.settings.nats
        self.log.info(
            "starting",
            stream=n.read_stream,
            durable=n.durable,
            subjects=n.filters,
            provision=self.provision,
            **self.program.status(),
        )
        try:
            self.nc = await connect_until(n.options(), self.stopping, clock=self.clock)
        except (CredentialError, TLSGuardUnavailable) as exc:  # a file that does not load
            raise Unusable(f"nats: {exc}") from exc
        if self.nc is None:
            return EXIT_OK  # stopped before NATS took the connection
        try:
            consumer = self.consumer = await self._open(self.nc)
        except (ConsumerConflict, ShapeMismatch):
            return EXIT_FAILED  # logged by _open: asking again will not help
        if consumer is None:
            return EXIT_OK
        if self.provision:
            self.log.info("provisioned", durable=n.durable, **self.program.status())
            return EXIT_OK
        await self.program.prepare(self.nc, consumer)
        consumer.stats.export(self.metrics)
        self.ready = True
        self.log.info("consuming", stream=n.read_stream, durable=n.durable, subjects=n.filters)
        consuming = asyncio.create_task(self.program.consume(consumer), name="consuming")
        tasks.append(consuming)
        tasks.extend(asyncio.create_task(c) for c in self.program.background())
        stop = asyncio.create_task(self.stopping.wait(), name="stopping")
        done, _ = await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        for t in done:
            if t is not stop:  # every task runs until the stop: one that ended failed
                error = repr(t.exception()) if not t.cancelled() else "cancelled"
                self.log.error("task_failed", task=t.get_name(), error=error)
                return EXIT_FAILED
        self.log.info("stopping", **self.program.status())
        self.ready = False
        await consumer.stop()
        try:
            await self.clock.wait_for(asyncio.shield(consuming), self.program.stop_timeout)
        except TimeoutError:
            self.log.warning("stop_timeout", seconds=self.program.stop_timeout)
        return EXIT_OK

    async def _open(self, nc: NATS) -> Consumer | None:
        """The one retry loop of the start: what the program needs besides the stream, the
        stream checked, the durable bound; a missing one (the bridge makes its stream, an
        operator the rest) waited for, ``OPEN_RETRY`` seconds at a time, saying what to do.
        None when stopped meanwhile; a shape or a durable that differs raises."""
        n = self.settings.nats
        while not self.stopping.is_set():
            try:
                # the stream first: what it is matters more than a missing bucket
                digests = n.reads == "digests"
                if digests:
                    await streams.check_digest_stream(nc, n.read_stream, n.read_prefix)
                else:
                    await streams.check_event_stream(nc, n.stream, n.subject_prefix)
                seen = await self.program.provide(nc)
                if not self.program.durable:
                    return Unbound()  # type: ignore[return-value]  # stop() and stats alike
                return await Consumer.open(
                    nc,
                    stream=n.read_stream,
                    digests=digests,
                    durable=n.durable,
                    subjects=n.filters,
                    # held messages are never given up on
                    options=n.consumer_options(max_deliver=-1),
                    start=Start.named(n.start),
                    seen=seen,
                    subject_prefix=n.read_prefix,
                    clock=self.clock,
                )
            except ConsumerConflict as exc:
                self.log.error("consumer_conflict", durable=n.durable, error=str(exc))
                raise
            except ShapeMismatch as exc:  # each key logged: stream_config_differs
                self.log.error("stream_refused", stream=exc.stream, error=str(exc))
                raise
            except (nats.js.errors.NotFoundError, nats.errors.Error, TimeoutError) as exc:
                self.log.warning("stream_unavailable", stream=n.read_stream, error=str(exc))
                with contextlib.suppress(TimeoutError):
                    await self.clock.wait_for(self.stopping.wait(), OPEN_RETRY)
        return None

    def _stats(self) -> dict[str, Any]:
        out = dict(self.program.status())
        if self.consumer is not None:
            out.update(vars(self.consumer.stats))
        return out


async def serve(
    program: type[Subscriber], settings: Any, provision: bool = False, clock: Clock = SYSTEM
) -> int:
    """Run ``program`` until SIGTERM or SIGINT (``provision``: make what it needs, then exit),
    its logs set up from ``settings.log``; the exit code."""
    logs.setup(settings.log.level, settings.log.format)
    return await Runtime(program, settings, provision, clock).run()
