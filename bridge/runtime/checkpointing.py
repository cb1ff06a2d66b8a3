"""Saving how far each watch scope got: its safe resourceVersion, into the checkpoint store.

The safe resourceVersion (``core.progress``) keeps the checkpoint rule (docs/design.md, "The
checkpoint rule"), so saving it never skips an Event. Saved at most every
``checkpoint.interval``, only when it moved, and once more on stop.
"""

from __future__ import annotations

import asyncio

from bridge import logs
from bridge.core.checkpoints import scope_name
from bridge.core.progress import Progress
from bridge.metrics import Metrics
from bridge.runtime.ports import CheckpointStore
from bridge.runtime.watching import Watcher
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("checkpointing")

SAVE_TIMEOUT = 5.0  # one save of every due scope; a store that does not answer is tried later


class Scope:
    """One watch scope (a namespace, or all): its checkpoint key, progress and watcher."""

    def __init__(
        self, namespace: str | None, key: str, progress: Progress, watcher: Watcher
    ) -> None:
        self.namespace = namespace
        self.name = scope_name(namespace)
        self.key = key
        self.progress = progress
        self.watcher = watcher
        self.saved: int | None = progress.safe_rv
        self.saved_at = 0.0  # monotonic time of the last save
        self.behind_since: float | None = None  # since when something read is not saved

    def lag(self, now: float) -> float:
        """Seconds the oldest read but unsaved progress has waited; 0 when all read is saved
        (so a quiet scope stays at 0, however long since its last save)."""
        rv = self.watcher.rv
        if rv is None or (self.saved is not None and rv <= self.saved):
            self.behind_since = None
            return 0.0
        if self.behind_since is None:
            self.behind_since = now
        return now - max(self.behind_since, self.saved_at)


class Checkpointer:
    def __init__(
        self,
        store: CheckpointStore,
        scopes: list[Scope],
        metrics: Metrics,
        interval: float,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.scopes = scopes
        self.metrics = metrics
        self.interval = interval
        self._clock = clock
        self._last_save = clock.monotonic()

    async def run(self) -> None:
        """Save what moved, every interval, until cancelled."""
        while True:
            await self._clock.sleep(self.interval)
            await self.save_all()
            self.observe()

    def observe(self) -> None:
        now = self._clock.monotonic()
        self.metrics.checkpoint_age.set(now - self._last_save)
        for sc in self.scopes:
            self.metrics.checkpoint_lag.labels(sc.name).set(sc.lag(now))

    async def save_all(self, final: bool = False) -> None:
        """Save every scope whose safe resourceVersion moved, together, within SAVE_TIMEOUT."""
        due: list[tuple[Scope, int]] = []
        for sc in self.scopes:
            rv = sc.progress.safe_rv
            if rv is not None and rv != sc.saved:
                due.append((sc, rv))
        if not due:
            return
        results = await asyncio.gather(
            *(self._clock.wait_for(self.store.save(sc.key, rv), SAVE_TIMEOUT) for sc, rv in due),
            return_exceptions=True,
        )
        for (sc, rv), result in zip(due, results, strict=True):
            if isinstance(result, BaseException):
                log.warn_sampled(
                    "save",
                    "checkpoint_save_failed",
                    interval=10,
                    key=sc.key,
                    error=f"{type(result).__name__}: {result}",
                    final=final,
                )
                continue
            sc.saved = rv
            sc.saved_at = self._last_save = self._clock.monotonic()
            self.metrics.checkpoint_rv.labels(sc.name).set(rv)
            log.debug("checkpoint_saved", key=sc.key, resource_version=rv)
