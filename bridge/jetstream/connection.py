"""The NATS connection: the one the subscribers use too (``k8s_event_common.connecting``:
auth, TLS never skipped, credential files checked, no secret printed, a hung server left within
seconds, reconnecting forever), from the bridge's settings.

``passing`` is this boundary's one predicate for a failure worth trying again, and
``unavailable`` maps such a failure to ``errors.JetStreamUnavailable`` for the layers above,
which never see a nats-py exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator

import nats.errors
import nats.js.errors

from bridge import errors
from bridge.settings import NatsSettings
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.connecting import Connection, TLSGuardUnavailable
from k8s_event_common.connecting import refusals as refusals  # the metric reads it (app)
from k8s_event_common.credentials import CredentialError


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


async def connect(
    settings: NatsSettings,
    *,
    on_state: Callable[[bool], None] = lambda up: None,
    on_reconnected: Callable[[], Awaitable[None]] | None = None,
    clock: Clock = SYSTEM,
) -> Connection:
    """Connect through the shared connection (``k8s_event_common.connecting``: TLS never
    skipped, credentials checked, a hung server left); nats-py tries the servers in turn until
    one takes it. Cancel to give up."""
    try:
        conn = Connection(
            settings.options(),
            logger="bridge.nats",
            on_state=on_state,
            on_reconnected=on_reconnected,
            clock=clock,
        )
    except (CredentialError, TLSGuardUnavailable) as exc:
        raise errors.ConfigError(f"nats: {exc}") from exc
    await conn.connect()
    return conn


async def close(conn: Connection) -> None:
    """Close the connection, waiting at most a few seconds: a server that went away must not
    hold up the exit."""
    await conn.close()
