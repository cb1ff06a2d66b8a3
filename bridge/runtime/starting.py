"""Start-up steps: each retried through passing failures, each given up when a stop comes.

NATS may start after the bridge, a JetStream cluster still electing leaders answers with
timeouts and 503s, and an API server may refuse a moment: every step goes through
``core.backoff.retrying`` until it succeeds or fails for good, and ``until_stopped`` lets a
SIGTERM end the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from bridge import errors, logs
from bridge.core.backoff import Backoff, retrying
from bridge.metrics import Metrics
from bridge.runtime.ports import ClusterIdentity
from bridge.settings import BackoffSettings
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("starting")

T = TypeVar("T")


class Stopped(Exception):
    """A stop was requested before the step finished."""


async def until_stopped(stop: asyncio.Event, coro: Coroutine[Any, Any, T]) -> T:
    """Run a start-up step, or give up on it (``Stopped``) when ``stop`` is set first."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise Stopped


async def jetstream_step(what: str, step: Callable[[], Awaitable[T]], clock: Clock = SYSTEM) -> T:
    """A start-up step against JetStream, retried while JetStream is unavailable; a stream
    that can not be used (``PublishError``) is final."""

    async def failed(exc: Exception, delay: float) -> None:
        error = f"{type(exc).__name__}: {exc}"
        log.warning(f"{what}_failed", error=error, retry_in=round(delay, 2))

    return await retrying(
        step,
        Backoff(initial=0.5, cap=10.0, clock=clock),
        passing=lambda exc: isinstance(exc, errors.JetStreamUnavailable),
        on_failure=failed,
        clock=clock,
    )


async def cluster_id(
    kube: ClusterIdentity, backoff: BackoffSettings, metrics: Metrics, clock: Clock = SYSTEM
) -> str:
    """The kube-system namespace's uid, the id of a cluster without ``cluster.name``; asked
    again (with ``kubernetes.backoff``) until the API server answers and allows it."""

    async def failed(exc: Exception, delay: float) -> None:
        assert isinstance(exc, errors.KubeError)
        if isinstance(exc, errors.Forbidden | errors.Unauthorized):
            metrics.auth_failures.labels(str(exc.status)).inc()
            log.warn_sampled(
                "cluster_id_auth",
                "kube_permission_denied",
                interval=60,
                status=exc.status,
                needs="get on namespaces/kube-system (or set cluster.name)",
                detail=str(exc),
            )
            if isinstance(exc, errors.Unauthorized):
                with contextlib.suppress(errors.BridgeError):
                    await kube.reload_credentials()
        else:
            log.warning(
                "cluster_id_unavailable",
                error=str(exc),
                retry_in=round(delay, 2),
                hint="set cluster.name to skip this lookup",
            )

    uid = await retrying(
        kube.cluster_uid,
        Backoff.from_settings(backoff, clock=clock),
        passing=lambda exc: isinstance(exc, errors.KubeError),
        on_failure=failed,
        clock=clock,
    )
    log.info("cluster_id_derived", cluster=uid, source="kube-system namespace uid")
    return uid
