"""The NATS connection of a subscriber: auth and TLS, reconnecting forever.

nats-py closes a client for good after 60 failed reconnects by default; a subscriber that must
outlive a NATS outage reconnects without limit (``max_reconnect_attempts=-1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS

log = logging.getLogger("k8s_event_consumer.nats")


@dataclass(frozen=True)
class NatsOptions:
    servers: list[str] = field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    name: str = "k8s-event-consumer"
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    connect_timeout: float = 5.0


def _tls(opts: NatsOptions) -> ssl.SSLContext | None:
    wants = any(s.startswith(("tls://", "wss://")) for s in opts.servers)
    if not (wants or opts.tls_ca_file or opts.tls_cert_file):
        return None
    ctx = ssl.create_default_context(cafile=opts.tls_ca_file)
    if opts.tls_cert_file and opts.tls_key_file:
        ctx.load_cert_chain(opts.tls_cert_file, opts.tls_key_file)
    return ctx


async def connect(opts: NatsOptions) -> NATS:
    """A client that reconnects forever once connected; the first connect is tried for
    ``connect_timeout`` per server (nats-py raises if none answers)."""

    async def disconnected() -> None:
        log.warning("nats_disconnected")

    async def reconnected() -> None:
        log.info("nats_reconnected")

    async def error(exc: Exception) -> None:
        log.warning("nats_error: %s: %s", type(exc).__name__, exc)

    kwargs: dict[str, Any] = {
        "servers": opts.servers,
        "name": opts.name,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1,
        "connect_timeout": opts.connect_timeout,
        "disconnected_cb": disconnected,
        "reconnected_cb": reconnected,
        "error_cb": error,
        "tls": _tls(opts),
    }
    if opts.user:
        kwargs.update(user=opts.user, password=opts.password)
    if opts.token:
        kwargs["token"] = opts.token
    if opts.creds_file:
        kwargs["user_credentials"] = opts.creds_file
    if opts.nkey_seed_file:
        kwargs["nkeys_seed"] = opts.nkey_seed_file
    return await nats.connect(**kwargs)


async def connect_until(
    opts: NatsOptions, stopping: asyncio.Event, *, every: float = 2.0
) -> NATS | None:
    """``connect``, tried every ``every`` seconds until NATS answers (a subscriber may start
    before it), or None when ``stopping`` is set meanwhile."""
    while not stopping.is_set():
        try:
            return await connect(opts)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("nats_unavailable servers=%s: %s", opts.servers, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), every)
    return None
