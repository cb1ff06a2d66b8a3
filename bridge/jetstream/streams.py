"""The JetStream stream and checkpoint bucket the bridge uses: exactly the shipped shape, or
the bridge does not run.

The shapes and their comparison are shared with the subscribers
(``k8s_event_common.streams``). An existing stream or bucket whose configuration differs in any
key that matters (subjects, retention, storage, sizes as configured, rollups, purge and delete
flags, republish, sources, mirror, transforms, ...) stops the bridge: ``StreamConfigMismatch``
names each difference, and the log line ``stream_config_differs`` says it once per key.

A missing one is created with exactly that shape when ``nats.create_stream`` allows and the
credentials may (a development convenience: the shipped NATS permissions grant no program
``STREAM.CREATE``; an operator provisions them first, ``k8s-event-bridge provision``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

from bridge import logs
from bridge.errors import (
    BridgeError,
    JetStreamUnavailable,
    NoStream,
    PublishError,
    StreamConfigMismatch,
)
from bridge.jetstream.connection import unavailable
from bridge.settings import NatsSettings
from k8s_event_common import streams as shapes
from k8s_event_common.clock import SYSTEM, Clock

LOGGER = "bridge.streams"
log = logs.get("streams")

CHECKPOINT_HISTORY = 5
# the shipped subscribers' buckets of handled ids (remediation's nats.seen_bucket)
SEEN_BUCKETS = ["k8s_event_remediation"]
CONNECT_WITHIN = 30.0  # seconds ``provision`` waits for a NATS server


def wanted_config(settings: NatsSettings) -> StreamConfig:
    """The stream's one shape, from the settings."""
    return shapes.event_stream(
        settings.stream,
        settings.subject_prefix,
        max_age=settings.max_age,
        max_bytes=int(settings.max_bytes),
        num_replicas=settings.num_replicas,
        duplicate_window=settings.duplicate_window,
    )


def checkpoint_config(bucket: str, settings: NatsSettings) -> StreamConfig:
    """The checkpoint bucket's one shape (its stream ``KV_<bucket>``)."""
    return shapes.kv_bucket(bucket, history=CHECKPOINT_HISTORY, replicas=settings.num_replicas)


async def ensure_stream(nc: NATS, settings: NatsSettings) -> None:
    """Check the stream there, or create it. Raises ``PublishError`` when it can not be
    used (``StreamConfigMismatch`` naming each difference), ``JetStreamUnavailable`` when
    JetStream did not answer (worth trying again)."""
    with unavailable(f"stream {settings.stream}"):
        await ensure(
            nc, wanted_config(settings), settings, what="stream", create=settings.create_stream
        )


async def ensure(
    nc: NATS, want: StreamConfig, settings: NatsSettings, *, what: str, create: bool
) -> None:
    """Check the stream ``want`` names against ``want``; create it when missing and
    ``create`` (and the credentials may: with the shipped permissions the request gets no
    answer, ``JetStreamUnavailable``, asked again until an operator provisioned it). The one
    check both sides share (``k8s_event_common.streams.ensure``), its errors the bridge's."""
    try:
        await shapes.ensure(nc, want, what, create=create, domain=settings.domain, logger=LOGGER)
    except shapes.ShapeMismatch as exc:  # each key logged: stream_config_differs
        raise StreamConfigMismatch(str(exc)) from exc
    except shapes.StreamNotCreated as exc:
        raise JetStreamUnavailable(
            f"{what} {want.name} does not exist and creating it got no answer (may these "
            "credentials create it? provision it: k8s-event-bridge provision)"
        ) from exc
    except shapes.StreamMissing as exc:
        if create:  # made, and gone again
            raise PublishError(str(exc)) from exc
        raise NoStream(
            f"{what} {want.name} does not exist and nats.create_stream is false: provision "
            "it (k8s-event-bridge provision)"
        ) from exc


def recreating(
    nc: NATS, settings: NatsSettings, clock: Clock = SYSTEM
) -> Callable[[], Coroutine[Any, Any, None]]:
    """The publisher's answer when no stream took a publish: the stream was deleted, or is not
    there yet. Creates it again when ``nats.create_stream`` allows; at most once a second.
    One found remade in another shape raises ``StreamConfigMismatch``: the publisher takes no
    ack from it and the bridge stops (``Publisher.refuse``)."""

    async def recreate() -> None:
        if settings.create_stream:
            try:
                await ensure_stream(nc, settings)
            except StreamConfigMismatch:
                raise  # remade by someone in another shape: the publisher stops taking acks
            except BridgeError as exc:
                log.warn_sampled(
                    "recreate",
                    "stream_recreate_failed",
                    interval=30,
                    error=f"{type(exc).__name__}: {exc}",
                )
        await clock.sleep(1.0)

    return recreate


async def provision(
    settings: NatsSettings, bucket: str, seen_buckets: list[str], *, update: bool = False
) -> int:
    """``k8s-event-bridge provision``: the stream, the checkpoint bucket and each subscriber's
    bucket of handled ids (``seen_buckets``) made with exactly their shapes, with the NATS
    credentials of the configuration (an operator's: the programs' own may not). Idempotent;
    one that differs is named key by key and left (exit 1), unless ``update`` and JetStream
    lets the keys change. The exit code."""
    import asyncio

    from bridge.jetstream import connection

    try:
        conn = await asyncio.wait_for(connection.connect(settings), CONNECT_WITHIN)
    except TimeoutError:
        log.error(
            "provision_failed", error=f"no NATS server took a connection in {CONNECT_WITHIN}s"
        )
        return 1
    api = shapes.api_prefix(settings.domain)
    wanted = [
        (wanted_config(settings), "stream"),
        (checkpoint_config(bucket, settings), "checkpoint bucket"),
        *(
            (shapes.seen_bucket(b, replicas=settings.num_replicas), "seen bucket")
            for b in seen_buckets
        ),
    ]
    failed = False
    try:
        for want, what in wanted:
            try:
                status = await shapes.provision(conn.nc, want, api=api, update=update)
            except shapes.ShapeMismatch as exc:
                failed = True
                shapes.log_differences(exc.differences, want, what, logger=LOGGER)
                continue
            except (nats.errors.Error, nats.js.errors.APIError) as exc:
                failed = True
                log.error("provision_failed", what=what, stream=want.name, error=str(exc))
                continue
            log.info("provisioned", what=what, stream=want.name, status=status)
    finally:
        await connection.close(conn)
    return 1 if failed else 0
