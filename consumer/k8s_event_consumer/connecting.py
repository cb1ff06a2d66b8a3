"""The NATS connection of a subscriber: the bridge's own (``k8s_event_common.connecting``: auth,
TLS never skipped, credential files checked and re-read at each connect, no secret printed, a
hung server left within seconds, reconnecting forever), with the subscribers' defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from nats.aio.client import Client as NATS

from k8s_event_common import connecting as shared
from k8s_event_common import options
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.logformat import Logger

log = Logger("k8s_event_consumer.nats")


@dataclass(frozen=True)
class NatsOptions(options.NatsOptions):
    """``k8s_event_common.connecting.NatsOptions`` with a subscriber's name and inbox."""

    name: str = "k8s-event-consumer"
    inbox_prefix: str = "_INBOX_k8s_event_consumer"


async def connect(opts: options.NatsOptions, clock: Clock = SYSTEM) -> NATS:
    """A client that reconnects forever once connected; nats-py tries the servers in turn until
    one takes it (cancel to give up). Raises ``k8s_event_common.credentials.CredentialError``
    when a credential or TLS file can not be used."""
    conn = shared.Connection(opts, logger="k8s_event_consumer.nats", clock=clock)
    return await conn.connect()


async def connect_until(
    opts: options.NatsOptions, stopping: asyncio.Event, *, every: float = 2.0, clock: Clock = SYSTEM
) -> NATS | None:
    """``connect``, until NATS takes the connection (a subscriber may start before it), or None
    when ``stopping`` is set meanwhile. ``every``: the wait between whole attempts, should
    nats-py give one up."""
    while not stopping.is_set():
        attempt = asyncio.ensure_future(connect(opts, clock))
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({attempt, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if attempt.done():
            try:
                return attempt.result()
            except (OSError, TimeoutError) as exc:
                log.warning("nats_unavailable", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    await clock.wait_for(stopping.wait(), every)
                continue
        attempt.cancel()
        await asyncio.gather(attempt, return_exceptions=True)
    return None
