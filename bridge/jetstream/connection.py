"""The NATS connection: auth and TLS from the settings, reconnecting forever.

``max_reconnect_attempts=-1``: nats-py's default (60) closes the client for good after a long
outage. The first connect is retried with back-off too, so the bridge may start before NATS.

``passing`` is this boundary's one predicate for a failure worth trying again, and
``unavailable`` maps such a failure to ``errors.JetStreamUnavailable`` for the layers above,
which never see a nats-py exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS

from bridge import errors, logs
from bridge.core.backoff import Backoff, retrying
from bridge.settings import NatsSettings

log = logs.get("nats")


def passing(exc: BaseException) -> bool:
    """A nats-py failure that may go away by itself: NATS away, JetStream electing leaders or
    without quorum (timeouts, 503), a socket error."""
    return isinstance(exc, nats.errors.Error | TimeoutError | OSError)


# JetStream API errors that a cluster stops giving by itself: 10005 "no suitable peers for
# placement" (a replicated stream or bucket while a node is down or has not joined yet; also
# for good when nats.num_replicas exceeds the cluster, which the warning then names).
PASSING_API_ERRORS = frozenset({10005})


def passing_api_error(exc: BaseException) -> bool:
    return isinstance(exc, nats.js.errors.ServiceUnavailableError) or (
        isinstance(exc, nats.js.errors.APIError) and exc.err_code in PASSING_API_ERRORS
    )


@contextlib.contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Map nats-py's failures of ``what``: JetStream's own refusal (an API error other than
    503: a config it will not take, a feature it lacks) to ``errors.JetStreamRefused``, which
    asking again will not change; a passing failure to ``errors.JetStreamUnavailable``."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, errors.BridgeError):
            raise
        if isinstance(exc, nats.js.errors.APIError) and not passing_api_error(exc):
            raise errors.JetStreamRefused(f"{what}: {exc}") from exc
        if isinstance(exc, nats.js.errors.APIError) and exc.err_code in PASSING_API_ERRORS:
            raise errors.JetStreamUnavailable(
                f"{what}: {exc} (a node of the cluster down or not joined yet, or fewer nodes "
                "than nats.num_replicas)"
            ) from exc
        if not passing(exc):
            raise
        raise errors.JetStreamUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc


def tls_context(settings: NatsSettings) -> ssl.SSLContext | None:
    tls = settings.tls
    wants_tls = any(s.startswith(("tls://", "wss://")) for s in settings.servers)
    if not (tls.ca_file or tls.cert_file or wants_tls):
        return None
    try:
        ctx = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file and tls.key_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise errors.ConfigError(f"nats.tls: {exc}") from exc
    return ctx


def connect_options(settings: NatsSettings) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "servers": settings.servers,
        "name": settings.name,
        "connect_timeout": settings.connect_timeout,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1,
        # a half-open connection is noticed in about a minute, not nats-py's 4-6
        "ping_interval": 20,
        "max_outstanding_pings": 3,
        "skip_subject_validation": True,  # every subject is sanitised by bridge.subjects
    }
    if settings.user:
        opts["user"] = settings.user
    if settings.password is not None:
        opts["password"] = settings.password.get_secret_value()
    if settings.token is not None:
        opts["token"] = settings.token.get_secret_value()
    if settings.nkey_seed_file:
        opts["nkeys_seed"] = settings.nkey_seed_file
    if settings.creds_file:
        opts["user_credentials"] = settings.creds_file
    ctx = tls_context(settings)
    if ctx is not None:
        opts["tls"] = ctx
    return opts


async def connect(
    settings: NatsSettings,
    *,
    on_state: Callable[[bool], None] = lambda up: None,
    on_reconnected: Callable[[], Awaitable[None]] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> NATS:
    """Connect, retrying the first connect forever with back-off; report up/down."""

    async def error_cb(exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if "authorization" in text.lower() or "authentication" in text.lower():
            # nats-py keeps retrying (max_reconnect_attempts=-1); say once a minute why.
            log.warn_sampled(
                "auth",
                "nats_auth_failed",
                interval=60,
                error=text,
                servers=settings.servers,
                hint="check nats.user/password, token, nkey_seed_file, creds_file",
            )
            return
        log.warn_sampled(f"err:{type(exc).__name__}", "nats_error", interval=30, error=text)

    async def disconnected_cb() -> None:
        on_state(False)
        log.warning("nats_disconnected")

    async def reconnected_cb() -> None:
        on_state(True)
        log.info("nats_reconnected", server=_server(connected[0]) if connected else "")
        if on_reconnected is not None:
            await on_reconnected()

    async def closed_cb() -> None:
        on_state(False)

    opts = connect_options(settings)
    connected: list[NATS] = []

    async def attempt() -> NATS:
        nc = NATS()
        try:
            await nc.connect(
                error_cb=error_cb,
                disconnected_cb=disconnected_cb,
                reconnected_cb=reconnected_cb,
                closed_cb=closed_cb,
                **opts,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await nc.close()
            raise
        return nc

    async def failed(exc: Exception, delay: float) -> None:
        if isinstance(exc, nats.errors.AuthorizationError | ssl.SSLError):
            log.error("nats_auth_failed", error=str(exc) or type(exc).__name__)
        log.warning(
            "nats_connect_failed",
            servers=settings.servers,
            error=f"{type(exc).__name__}: {exc}",
            retry_in=round(delay, 2),
        )

    nc = await retrying(
        attempt, Backoff(initial=0.5, cap=10.0), passing=passing, on_failure=failed, sleep=sleep
    )
    connected.append(nc)
    on_state(True)
    log.info("nats_connected", server=_server(nc))
    return nc


def _server(nc: NATS) -> str:
    return str(nc.connected_url.netloc if nc.connected_url else "")


async def close(nc: NATS) -> None:
    """Close the connection, waiting at most 5 s: a server that went away must not hold up
    the exit."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), timeout=5)
