"""The JetStream stream the bridge publishes to: created when missing, never silently changed.

An existing stream is compared with the settings. If it does not take the bridge's subjects
the bridge can not work and says so (``StreamConfigMismatch``); any other difference (age,
size, replicas, duplicate window) is reported in one warning line per key and left as it is:
it belongs to whoever created the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from bridge import logs
from bridge.core.clock import SYSTEM, Clock
from bridge.errors import BridgeError, NoStream, PublishError, StreamConfigMismatch
from bridge.jetstream.connection import passing_api_error, unavailable
from bridge.settings import NatsSettings

log = logs.get("streams")


def wanted_config(settings: NatsSettings) -> StreamConfig:
    return StreamConfig(
        name=settings.stream,
        subjects=[f"{settings.subject_prefix}.>"],
        storage=StorageType.FILE,
        max_age=settings.max_age,
        max_bytes=settings.max_bytes,
        num_replicas=settings.num_replicas,
        duplicate_window=settings.duplicate_window,
    )


def differences(have: StreamConfig, want: StreamConfig) -> dict[str, tuple[Any, Any]]:
    """Keys whose value differs: {key: (existing, wanted)}; subjects are checked apart."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in ("storage", "max_age", "max_bytes", "num_replicas", "duplicate_window"):
        a, b = getattr(have, key), getattr(want, key)
        if isinstance(a, float) or isinstance(b, float):
            same = a is not None and b is not None and abs(float(a) - float(b)) < 1e-3
        else:
            same = a == b
        if not same:
            out[key] = (a, b)
    return out


def _covers(patterns: list[str], subject_filter: str) -> bool:
    """Whether one of the stream's subject patterns takes every subject of ``prefix.>``."""
    want = subject_filter.split(".")
    for p in patterns:
        toks = p.split(".")
        ok = True
        for i, t in enumerate(toks):
            if t == ">":
                break
            if i >= len(want) or (t != "*" and t != want[i]) or want[i] == ">":
                ok = False
                break
        else:
            ok = len(toks) == len(want)
        if ok:
            return True
    return False


async def ensure_stream(js: JetStreamContext, settings: NatsSettings) -> None:
    """Create the stream, or check the one there. Raises ``PublishError`` when it can not be
    used, ``JetStreamUnavailable`` when JetStream did not answer (worth trying again)."""
    with unavailable(f"stream {settings.stream}"):
        await _ensure_stream(js, settings)


async def _ensure_stream(js: JetStreamContext, settings: NatsSettings) -> None:
    want = wanted_config(settings)
    try:
        info = await js.stream_info(settings.stream)
    except nats.js.errors.NotFoundError:
        if not settings.create_stream:
            raise NoStream(
                f"stream {settings.stream} does not exist and nats.create_stream is false"
            ) from None
        try:
            await js.add_stream(want)
        except nats.js.errors.APIError as exc:
            if passing_api_error(exc):
                raise  # passing: ``unavailable`` makes it JetStreamUnavailable, asked again
            raise PublishError(f"creating stream {settings.stream}: {exc}") from exc
        log.info(
            "stream_created",
            stream=settings.stream,
            subjects=want.subjects,
            max_age=settings.max_age,
            duplicate_window=settings.duplicate_window,
        )
        return
    have = info.config
    subject_filter = f"{settings.subject_prefix}.>"
    if not _covers(list(have.subjects or []), subject_filter):
        raise StreamConfigMismatch(
            f"stream {settings.stream} has subjects {have.subjects}, which do not take "
            f"{subject_filter}; fix the stream or nats.subject_prefix"
        )
    for key, (existing, wanted) in differences(have, want).items():
        log.warning(
            "stream_config_differs",
            stream=settings.stream,
            key=key,
            existing=str(existing),
            wanted=str(wanted),
            note="left unchanged; change the stream yourself if wanted",
        )


def recreating(
    js: JetStreamContext, settings: NatsSettings, clock: Clock = SYSTEM
) -> Callable[[], Coroutine[Any, Any, None]]:
    """The publisher's answer when no stream took a publish: the stream was deleted, or is not
    there yet. Creates it again when ``nats.create_stream`` allows; at most once a second."""

    async def recreate() -> None:
        if settings.create_stream:
            try:
                await ensure_stream(js, settings)
            except BridgeError as exc:
                log.warn_sampled(
                    "recreate",
                    "stream_recreate_failed",
                    interval=30,
                    error=f"{type(exc).__name__}: {exc}",
                )
        await clock.sleep(1.0)

    return recreate
