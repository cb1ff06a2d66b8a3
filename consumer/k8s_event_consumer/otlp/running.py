"""The running subscriber: settings → the OTLP client → NATS → the stream checked, the
dead-letter stream checked (made, with an operator's credentials) → the durable bound → batches
shipped until SIGTERM or SIGINT → the batch in hand settled → stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

import nats.errors
import nats.js.errors

from k8s_event_common import streams
from k8s_event_common.connecting import (
    CredentialError,
    TLSGuardUnavailable,
    client_tls_context,
)
from k8s_event_common.streams import ShapeMismatch
from k8s_event_consumer import logs
from k8s_event_consumer.connecting import connect_until
from k8s_event_consumer.consuming import (
    Consumer,
    ConsumerConflict,
    NoSeen,
    Start,
    ensure_shape,
)
from k8s_event_consumer.metrics import Metrics
from k8s_event_consumer.otlp import sender
from k8s_event_consumer.otlp.settings import Settings
from k8s_event_consumer.otlp.shipping import Backoff, DeadLetters, Shipper
from k8s_event_consumer.serving import HttpServer

log = logs.get("otlp")

METRICS_PREFIX = "k8s_event_otlp_"
COUNTERS = (
    (
        "records_total",
        "records by result: accepted (the endpoint took it), dead_lettered (refused for good, "
        "stored on the dead-letter subject), dead_letter_failed (not stored: sent again later), "
        "handed_back (refused with no proof the endpoint takes others: sent again later), "
        "unmappable (a message no record can be made of: acked)",
    ),
    (
        "requests_total",
        "export requests by result: accepted, partial (a 2xx refusing some records), refused "
        "(400, 413, 422), failed (500), unavailable (429, 502, 503, 504, no answer), blocked "
        "(any other)",
    ),
    ("splits_total", "requests split in halves, by why: size, refused, partial, failed"),
    (
        "resent_records_total",
        "records sent again after a partial success or a 500 had possibly taken them "
        "(duplicates with the same cloudevents.event_id; a request that got no answer in time "
        'and was sent again is counted in requests_total{result="unavailable"})',
    ),
)
UNLABELLED = ("resent_records_total",)
# the labelled counters' known values, each exported from 0 on
KNOWN = (
    (
        "records_total",
        "result",
        ("accepted", "dead_lettered", "dead_letter_failed", "handed_back", "unmappable"),
    ),
    (
        "requests_total",
        "result",
        ("accepted", "partial", "refused", "failed", "unavailable", "blocked"),
    ),
    ("splits_total", "why", ("size", "refused", "partial", "failed")),
)
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
STOP_TIMEOUT = 20.0  # seconds the batch in hand may take to settle after SIGTERM


def _version() -> str:
    try:
        return package_version("k8s-event-bridge-consumer")
    except PackageNotFoundError:
        return ""


def client(cfg: Settings) -> sender.Client:
    """Raises ``CredentialError`` for a TLS file that does not load."""
    o = cfg.otlp
    ctx = (
        client_tls_context(o.tls.ca_file, o.tls.cert_file, o.tls.key_file, where="otlp.tls")
        if o.tls.ca_file or o.tls.cert_file
        else None
    )
    return sender.Client(
        o.url,
        timeout=o.timeout,
        headers={k: v.get_secret_value() for k, v in o.headers.items()},
        compression=o.compression,
        ssl_context=ctx,
    )


async def serve(cfg: Settings, provision: bool = False) -> int:
    """Run until SIGTERM or SIGINT; ``provision``: only make the durable and the dead-letter
    stream (an operator's credentials: the subscriber's own may not), then exit."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    metrics = Metrics(METRICS_PREFIX, COUNTERS, UNLABELLED)
    for name, label, values in KNOWN:  # exported from 0 on: increase() sees the first step
        for v in values:
            metrics.inc(name, 0, **{label: v})
    shipping_now: list[Shipper] = []  # the shipper, once there is one (the gauges read it)
    metrics.gauge(
        "held_records",
        "records in hand, not yet settled",
        lambda: {(): float(shipping_now[0].held if shipping_now else 0)},
    )
    metrics.gauge(
        "endpoint_up",
        "0 after the endpoint did not take a request (until it takes one again), else 1",
        lambda: {(): 0.0 if shipping_now and not shipping_now[0].endpoint_up else 1.0},
    )
    try:
        otlp = client(cfg)
    except CredentialError as exc:  # a TLS file that does not load
        log.error("config_error", error=str(exc))
        return EXIT_CONFIG
    http = HttpServer(metrics)
    if cfg.http.port is not None and not provision:  # a provision run serves nothing
        await http.start(cfg.http.host, cfg.http.port)
    nc = None
    try:
        try:
            nc = await connect_until(cfg.nats.options(), stopping)
        except (CredentialError, TLSGuardUnavailable) as exc:
            log.error("config_error", error=f"nats: {exc}")
            return EXIT_CONFIG
        if nc is None:
            return EXIT_OK
        http.watch(nc)
        dl = cfg.dead_letter
        consumer = None
        while consumer is None:
            try:
                await ensure_shape(
                    nc,
                    streams.dead_letter_stream(dl.stream, [dl.subject], max_age=dl.max_age),
                    "dead-letter stream",
                    unchecked=["num_replicas"],
                )
                consumer = await Consumer.open(
                    nc,
                    stream=cfg.nats.stream,
                    durable=cfg.nats.durable,
                    subjects=cfg.nats.filters,
                    options=cfg.nats.consumer_options(max_deliver=-1),
                    start=Start.all() if cfg.nats.start == "all" else Start.new(),
                    subject_prefix=cfg.nats.subject_prefix,
                    # every delivery sent, a redelivered one again: a copy carries the same id,
                    # and an id seen first on a forged message must not hide the genuine one
                    seen=NoSeen(),
                )
            except ConsumerConflict as exc:
                log.error("consumer_conflict", durable=cfg.nats.durable, error=str(exc))
                return EXIT_FAILED
            except ShapeMismatch as exc:  # each key logged by the kit: stream_config_differs
                log.error("stream_refused", stream=exc.stream, error=str(exc))
                return EXIT_FAILED
            except (nats.js.errors.NotFoundError, nats.errors.Error, TimeoutError) as exc:
                # the bridge makes its stream, an operator the dead-letter one: not yet
                log.warning("stream_unavailable", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), 2.0)
                if stopping.is_set():
                    return EXIT_OK
        if provision:
            log.info("provisioned", durable=cfg.nats.durable, dead_letter_stream=dl.stream)
            return EXIT_OK
        shipper = Shipper(
            otlp,
            DeadLetters(nc.jetstream(), dl.subject, cfg.otlp.url, nc.max_payload or (1 << 20)),
            metrics,
            stopping,
            max_request_bytes=cfg.otlp.max_request_bytes,
            backoff=Backoff(cfg.otlp.backoff_initial, cfg.otlp.backoff_max),
            resource=tuple(sorted(cfg.otlp.resource_attributes.items())),
            version=_version(),
        )
        shipping_now.append(shipper)
        consumer.stats.export(metrics)
        http.ready = True
        log.info(
            "consuming",
            stream=cfg.nats.stream,
            durable=cfg.nats.durable,
            subjects=cfg.nats.filters,
            endpoint=cfg.otlp.url,
            dead_letter_subject=dl.subject,
        )
        running = asyncio.create_task(
            consumer.run_batches(
                shipper.ship, linger=cfg.otlp.flush_interval, max_bytes=cfg.otlp.max_request_bytes
            ),
            name="consuming",
        )
        stop_wait = asyncio.create_task(stopping.wait(), name="stopping")
        done, _ = await asyncio.wait([running, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        if running in done and running.exception() is not None:
            log.error("task_failed", task="consuming", error=repr(running.exception()))
            return EXIT_FAILED
        log.info("stopping", held=shipper.held)
        await consumer.stop()
        try:
            await asyncio.wait_for(running, STOP_TIMEOUT)
        except TimeoutError:
            log.warning("stop_timeout", held=shipper.held)
        log.info("stopped", **vars(consumer.stats))
        return EXIT_OK
    finally:
        http.ready = False
        await otlp.close()
        await http.stop()
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
