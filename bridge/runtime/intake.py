"""The middle of the data flow: watcher → intake (filter, ledger) → stage → queue (→ publisher).

``Intake`` is the watcher's ``Sink`` for one watch scope. It records every item in that
scope's ``Progress`` in stream order: filtered and bad items are done at once, accepted ones
get a pending entry and go to the ``Stage`` (``bridge.runtime.staging``, or the enricher),
one call per batch, settled when JetStream acks them, so the checkpoint never passes an event
that is not stored. Status events (gap, apiserver reachable or not, degraded or recovered) go
the same way; only the gap holds the checkpoint.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from bridge.core.converting import Converter
from bridge.core.filtering import Filter
from bridge.core.messages import Message
from bridge.core.progress import Progress
from bridge.metrics import Metrics
from bridge.runtime.ports import Item, Stage, Staged
from bridge.runtime.staging import skip_input
from k8s_event_common.clock import SYSTEM, Clock


class Intake:
    def __init__(
        self,
        scope: str,
        progress: Progress,
        event_filter: Filter,
        converter: Converter,
        stage: Stage,
        metrics: Metrics,
        clock: Clock = SYSTEM,
    ) -> None:
        self.scope = scope
        self.progress = progress
        self.filter = event_filter
        self.converter = converter  # for the status events
        self.stage = stage
        self.m = metrics
        self.clock = clock

    async def items(self, batch: list[Item]) -> None:
        m = self.m
        accepts = self.filter.accepts
        progress = self.progress
        pending = progress.pending
        done = progress.done
        staged: list[Staged] = []
        stage_one = staged.append
        filtered = taken = 0
        for watch_type, ev, rv in batch:
            taken += 1
            try:
                accepted = accepts(watch_type, ev)
            except Exception as exc:
                skip_input(m, exc, ev)
                done(rv)
                continue
            if not accepted:
                filtered += 1
                done(rv)
                continue
            stage_one((ev, pending(rv), taken))
        # one call for the batch; a full stage (queue) hands back the Event it did not take
        stage = self.stage
        rest = iter(staged)
        counted = 0
        while (full := stage.put_nowait(rest)) is not None:
            ev, entry, upto = full
            # counted as received: what is in hand, not the rest of the batch
            m.received.inc(upto - counted)
            counted = upto
            await stage.put(ev, entry)
        m.received.inc(taken - counted)
        if filtered:
            m.filtered.inc(filtered)

    def mark(self, rv: int) -> None:
        self.progress.done(rv)

    async def gap(self, from_rv: int, to_rv: int, *, certainty: str, why: str) -> None:
        at = self.clock.timestamp()
        data = {
            "scope": self.scope,
            "fromResourceVersion": str(from_rv),
            "toResourceVersion": str(to_rv),
            "detectedAt": at,
            "certainty": certainty,  # "likely" or "possible" (docs/delivery.md)
            "why": why,
            "meaning": "versions of Events written between these resourceVersions may be "
            "missing: the API server compacted them before the bridge read them; "
            "the newest version of every Event that still exists follows",
        }
        msg = self.converter.status("gap", f"gap/{self.scope}/{from_rv}-{to_rv}", data, at)
        # It reports on history, so it holds the checkpoint like an Event: the relist's end
        # (``mark``) comes after it, and until it is stored a restart resumes from before the
        # relist, meets the 410 again and finds the gap again (model/: GAPHELD).
        await self.stage.put_status(msg, self.progress.pending(None))

    async def reachability(self, reachable: bool, detail: str) -> None:
        what = "apiserver_reachable" if reachable else "apiserver_unreachable"
        at = self.clock.timestamp()
        await self.status(
            what,
            f"{what}/{socket.gethostname()}/{self.scope}/{at}",
            {"scope": self.scope, "detail": detail, "at": at},
            at,
        )

    async def degradation(self, degraded: bool, data: dict[str, Any]) -> None:
        what = "apiserver_degraded" if degraded else "apiserver_recovered"
        at = self.clock.timestamp()
        await self.status(
            what,
            f"{what}/{socket.gethostname()}/{self.scope}/{at}",
            {"scope": self.scope, **data, "at": at},
            at,
        )

    async def status(self, what: str, msg_id: str, data: dict[str, Any], at: str) -> None:
        await self.stage.put_status(self.converter.status(what, msg_id, data, at))


def process_status(converter: Converter, clock: Clock, what: str, **data: Any) -> Message:
    """The ``started`` / ``stopped`` status event of this process."""
    at = clock.timestamp()
    host, pid = socket.gethostname(), os.getpid()
    return converter.status(
        what, f"{what}/{host}/{pid}/{at}", {"host": host, "pid": pid, "at": at, **data}, at
    )
