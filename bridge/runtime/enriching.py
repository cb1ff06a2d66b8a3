"""Enrichment, running: values of the Event's namespace and object, never at delivery's cost.

The enricher is a ``Stage`` (``bridge.runtime.ports``): the intake hands it every accepted
Event (its ledger entry already taken, in stream order). ``Enricher.run`` takes them out in
the same order, each once its lookups are done or its time is up (``enrich.lookup_timeout``
from when it entered the stage), and hands it with what came to the plain stage
(``bridge.runtime.staging.Converting``), which converts it and puts it on the publisher's
queue. A lookup that fails, times out or is refused
does not hold the Event: it goes out without that value, ``k8senriched: partial`` and
``k8senrichmissing`` (``object:timeout``...) saying what is missing.

- Namespaces come from a list and a watch (``bridge.runtime.namespaces``, on the one watch
  loop): always current, and still there while the API server is away.
- Objects are read with ``get`` (``bridge.core.enrichment.Plan.target`` decides which; an
  Event naming no uid reads none), then their controllers up to the top (Pod → ReplicaSet →
  Deployment) as far as ``k8s_event_common.owners.walk`` proves each from the owner's side
  (``owner:unproven`` past that, logged sampled as ``owner_unproven`` with the walk's why).
  Each object is read once however many Events wait on it (one future per object), at most
  ``enrich.max_inflight`` reads at a time, each bounded by ``enrich.lookup_timeout``, and kept
  in a ``LookupCache``.
- Once a read finds the API server unreachable (or slow past the timeout), reads stop for a
  back-off (``core.backoff``: 1 s doubling to 30 s, from 1 s again after a read succeeds):
  meanwhile an Event whose object is not fresh in the cache goes out at once with the last
  values known (stale), or marked ``unreachable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from bridge import errors, logs
from bridge.core.backoff import Backoff
from bridge.core.enrichment import (
    ERROR,
    FORBIDDEN,
    INVALID,
    NOTFOUND,
    NOUID,
    OVERSIZED,
    OVERSIZED_MARK,
    SCOPE,
    TIMEOUT,
    UNKNOWN,
    UNPROVEN,
    UNREACHABLE,
    Enrichment,
    Key,
    LookupCache,
    Namespaces,
    ObjectInfo,
    Plan,
    object_path,
)
from bridge.core.events import Event
from bridge.core.messages import Message
from bridge.core.progress import Entry
from bridge.core.queueing import BoundedQueue
from bridge.metrics import Metrics
from bridge.runtime.ports import ObjectReader, Staged
from bridge.runtime.staging import Converting
from bridge.settings import Settings
from k8s_event_common import owners
from k8s_event_common.clock import SYSTEM, Clock

# the whys of an object not read that say the Event names one it may not (an Event in a
# namespace about another's object, a Node from a namespace not trusted for it, no uid)
REFUSED: Final = frozenset({INVALID, NOUID, SCOPE})

log = logs.get("enriching")

# the pauses of reads after the API server was found unreachable: 1 s, doubling to 30 s
PAUSE_FIRST: Final = 1.0
PAUSE_MAX: Final = 30.0


def stage_bytes(settings: Settings) -> int:
    """Most bytes of Events waiting for their lookups: a quarter of the queue's."""
    return max(64 * 1024, settings.queue.max_bytes // 4)


@dataclass
class Chain:
    """What the reads for one involved object came to."""

    labels: dict[str, str] = field(default_factory=dict)
    object_why: str | None = None  # why the object's values are missing
    top: tuple[str, str] | None = None  # (kind, name) of the farthest owner proven
    owner_why: str | None = None  # why the owner chain stops short (UNPROVEN, or a read's why)
    owner_detail: str = ""  # what owners.walk said of it
    owner_code: str = ""  # owners.walk's reason code


class _Waiting:
    __slots__ = ("chain", "deadline", "entry", "ev", "ready")

    def __init__(
        self,
        ev: Event | None,
        entry: Entry | None,
        deadline: float,
        chain: Chain | asyncio.Future[Chain] | str | None,
        ready: Message | None = None,
    ) -> None:
        self.ev = ev
        self.entry = entry
        self.deadline = deadline
        self.chain = chain  # a Chain, one on its way, why none is read, or None (not asked)
        self.ready = ready  # a status event that keeps its place among the Events


class Enricher:
    def __init__(
        self,
        settings: Settings,
        reader: ObjectReader,
        out: Converting,
        metrics: Metrics,
        clock: Clock = SYSTEM,
    ) -> None:
        s = settings.enrich
        self.settings = settings
        self.plan = Plan(s)
        self.reader = reader
        self.out = out  # converts and queues what leaves the stage
        self.m = metrics
        self.clock = clock
        self.timeout = s.lookup_timeout
        self.namespaces = Namespaces()
        self.cache = LookupCache(s.cache_entries, s.cache_bytes, s.cache_ttl, s.cache_ttl / 10)
        # in order, each waiting for its lookups: bounded, the watch waits when it is full
        self.stage: BoundedQueue[_Waiting] = BoundedQueue(s.max_pending, stage_bytes(settings))
        self._reads: dict[Key, asyncio.Future[ObjectInfo | str]] = {}
        self._chains: dict[tuple[Key, str], asyncio.Future[Chain]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._slots = asyncio.Semaphore(s.max_inflight)
        self._down_until = 0.0  # reads pause until then
        self._pauses: Backoff | None = None  # since the last read that succeeded
        self._synced = asyncio.Event()
        if not self.plan.watches_namespaces:
            self._synced.set()
        # the namespace list failed before it ever succeeded: Events no longer wait for it
        self._list_failed = False
        self._in_hand = 0  # taken from the stage, not yet on the queue
        # read tasks: at most one per Event that may wait (in the stage, and the one in hand)
        self._max_chains = s.max_pending + 1
        # (object, uid) read and found to be another object: until when not to read again
        self._confirmed: dict[tuple[Key, str], float] = {}
        self._hit = metrics.enrich_cache.labels("hit")
        self._miss = metrics.enrich_cache.labels("miss")
        metrics.enrich_cache_entries.set_function(lambda: len(self.cache))
        metrics.enrich_cache_bytes.set_function(lambda: self.cache.bytes)
        metrics.enrich_pending.set_function(lambda: len(self.stage))
        metrics.enrich_namespaces.set_function(lambda: len(self.namespaces))

    # -- the stage -----------------------------------------------------------------------------

    def put_nowait(self, staged: Iterator[Staged]) -> Staged | None:
        """The accepted Events of a batch, in stream order, one by one while fewer than
        ``enrich.max_pending`` wait; the first that finds it full is handed back."""
        for ev, entry, taken in staged:
            w = _Waiting(ev.detached(), entry, 0.0, None)
            if not self.stage.put_nowait(w, ev.end - ev.start):
                return ev, entry, taken
            self._entered(w, ev)
        return None

    async def put(self, ev: Event, entry: Entry) -> None:
        """An accepted Event, in stream order; waits while ``enrich.max_pending`` wait."""
        w = _Waiting(ev.detached(), entry, 0.0, None)
        size = ev.end - ev.start
        if not self.stage.put_nowait(w, size):
            await self.stage.put(w, size)
        self._entered(w, ev)

    def _entered(self, w: _Waiting, ev: Event) -> None:
        # in the stage now (nothing ran in between: the stage task has not seen it yet): its
        # time and its lookups start, so reads are started for no more Events than may wait
        w.deadline = self.clock.monotonic() + self.timeout
        if self.plan.reads_objects:
            w.chain = self._chain_for(ev)

    async def put_message(self, msg: Message) -> None:
        """A status event that must keep its place after the Events already put (``started``
        after a first start by age follows the Events of the first lists)."""
        await self.stage.put(_Waiting(None, None, 0.0, None, ready=msg), len(msg.payload))

    async def put_status(self, msg: Message, entry: Entry | None = None) -> None:
        await self.out.put_status(msg, entry)

    def __len__(self) -> int:
        """Events held: waiting in the stage, or taken out and not yet queued."""
        return len(self.stage) + self._in_hand

    async def run(self) -> None:
        """Take each Event out in order once its lookups are in (or its time is up) and hand
        it on to be converted and queued. Until cancelled."""
        stage = self.stage
        out = self.out
        while True:
            w = await stage.get()
            self._in_hand = 1
            try:
                ev, entry = w.ev, w.entry
                if ev is None or entry is None:
                    if w.ready is not None:
                        await out.put_message(w.ready)
                    continue
                enrichment = await self._enrichment(w, ev)
                await out.put(ev, entry, enrichment)
            finally:
                self._in_hand = 0

    async def _enrichment(self, w: _Waiting, ev: Event) -> Enrichment:
        out = Enrichment()
        plan = self.plan
        meta = ev.view.metadata
        namespace = meta.namespace if meta.namespace.__class__ is str else ""
        if plan.watches_namespaces:
            if not self._synced.is_set() and not self._list_failed:
                # the first list is on its way: wait for it, within the Event's time
                await self._until(self._synced.wait(), w.deadline)
            values = self.namespaces.get(namespace) if namespace else None
            if values is None:
                # not known (yet), or an Event of no namespace
                out.miss("namespace", UNKNOWN)
            else:
                for ext, v in values.items():
                    if v == OVERSIZED_MARK:
                        out.miss("namespace", OVERSIZED)
                    else:
                        out.values[ext] = v
        chain = w.chain
        if isinstance(chain, asyncio.Future):
            if not chain.done():
                remaining = w.deadline - self.clock.monotonic()
                if remaining > 0:
                    # asyncio.wait: never raises the future's outcome, never cancels it
                    with contextlib.suppress(TimeoutError):
                        await self.clock.wait_for(asyncio.wait({chain}), remaining)
            if chain.done() and not chain.cancelled() and chain.exception() is None:
                chain = chain.result()
            else:
                chain = TIMEOUT
        if isinstance(chain, str):
            out.miss("object", chain)
            if chain in REFUSED:
                # an Event the bridge takes no object's values for: why, sampled
                log.warn_sampled(
                    f"object_refused:{chain}",
                    "object_refused",
                    why=chain,
                    event_name=ev.view.metadata.name,
                    namespace=ev.view.metadata.namespace,
                    involved_namespace=str(ev.view.involved.namespace)[:253],
                    involved_kind=str(ev.view.involved.kind)[:100],
                )
        elif chain is not None:
            self._apply(chain, ev, out)
        for item in out.missing:
            part, _, why = item.partition(":")
            self.m.enrich_missing.labels(part, why).inc()
        return out

    def _apply(self, chain: Chain, ev: Event, out: Enrichment) -> None:
        plan = self.plan
        if chain.object_why is not None:
            out.miss("object", chain.object_why)
            return
        for key, ext in plan.obj_labels.items():
            v = chain.labels.get(key)
            if v is not None:
                out.values[ext] = v
        if plan.follows_owners and chain.top is not None:
            kind, name = chain.top
            if plan.owner_kind:
                out.values[plan.owner_kind] = kind
            if plan.owner_name:
                out.values[plan.owner_name] = name
            if chain.owner_why is not None:
                out.miss("owner", chain.owner_why)
                if chain.owner_why == UNPROVEN:
                    log.warn_sampled(
                        f"owner_unproven:{chain.owner_code}",
                        "owner_unproven",
                        why=chain.owner_code,
                        detail=chain.owner_detail[:500],
                        event_name=ev.view.metadata.name,
                        namespace=ev.view.metadata.namespace,
                    )

    async def _until(self, aw: Any, deadline: float) -> None:
        remaining = deadline - self.clock.monotonic()
        if remaining <= 0:
            if asyncio.iscoroutine(aw):
                aw.close()
            return
        with contextlib.suppress(TimeoutError):
            await self.clock.wait_for(aw, remaining)

    # -- objects -------------------------------------------------------------------------------

    def _chain_for(self, ev: Event) -> Chain | asyncio.Future[Chain] | str:
        """The chain of the Event's involved object: from the cache when all of it is fresh
        there, else the future of its reads (shared by every Event on the same object)."""
        v = ev.view
        inv = v.involved
        ns = v.metadata.namespace if v.metadata.namespace.__class__ is str else ""
        target = self.plan.target(ns, inv.kind, inv.namespace, inv.name, inv.apiVersion)
        if isinstance(target, str):
            return target
        uid = inv.uid if inv.uid.__class__ is str else ""
        if not uid:
            # which object of that name it is about can not be told: none is read
            return NOUID
        cached = self._from_cache(target, uid)
        if cached is not None:
            return cached
        fut = self._chains.get((target, uid))
        if fut is None:
            if len(self._chains) >= self._max_chains:
                # as many objects being read as Events may wait: this one's would not come
                # in its time (reads are slower than Events come); not one more task
                return TIMEOUT
            fut = asyncio.get_running_loop().create_future()
            self._chains[(target, uid)] = fut
            task = asyncio.create_task(self._read_chain(target, uid, fut))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return fut

    def _walk(self, key: Key, uid: str) -> Generator[tuple[Key, str], ObjectInfo | str, Chain]:
        """The chain of one involved object, as a walk: it yields each object it needs (the
        object, then its owners up, as ``owners.walk`` asks for them) with the uid it must
        have, and is sent what was found (or why not). The cache (``_from_cache``) and the
        reads (``_chain``) drive the same walk."""
        info = yield key, uid
        if isinstance(info, str):
            return Chain(object_why=info)
        if info.uid != uid:
            # the name now belongs to another object (deleted and made again)
            return Chain(object_why=NOTFOUND)
        chain = Chain(labels=info.labels, top=(key[0], key[2]))
        if not self.plan.follows_owners or info.facts is None:
            return chain
        walk = owners.walk(info.facts, self.plan.kinds)
        try:
            want = next(walk)
            while True:
                got = yield (want.kind, want.namespace, want.name), want.uid
                sent: owners.Facts | str
                if isinstance(got, str):
                    sent = got
                else:
                    sent = got.facts if got.facts is not None else ERROR
                want = walk.send(sent)
        except StopIteration as done:
            result: owners.Owners = done.value
        top = result.top
        if top is not None:
            chain.top = (top.kind, top.name)
        if not result.proven:
            chain.owner_why = UNPROVEN if result.why in owners.UNPROVEN else result.why
            chain.owner_code = result.why
            chain.owner_detail = result.detail
        return chain

    def _from_cache(self, key: Key, uid: str) -> Chain | None:
        """The chain when every object on it is fresh in the cache; None otherwise."""
        now = self.clock.monotonic()
        walk = self._walk(key, uid)
        want, expected = next(walk)
        try:
            while True:
                fresh, info = self.cache.fresh(want, now)
                if not fresh or self._replaced(want, expected, info, now):
                    self._miss.inc()  # not known, or another object of that name: read
                    return None
                want, expected = walk.send(info if info is not None else NOTFOUND)
        except StopIteration as done:
            self._hit.inc()
            chain: Chain = done.value
            return chain

    async def _read_chain(self, key: Key, uid: str, fut: asyncio.Future[Chain]) -> None:
        try:
            chain = await self._chain(key, uid)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:  # never leaves an Event waiting: it goes out marked
            log.warn_sampled(
                "enrich_failed", "enrich_failed", object="/".join(key), error=repr(exc)
            )
            chain = Chain(object_why=ERROR)
        finally:
            self._chains.pop((key, uid), None)
        if not fut.done():
            fut.set_result(chain)

    async def _chain(self, key: Key, uid: str) -> Chain:
        walk = self._walk(key, uid)
        want, expected = next(walk)
        try:
            while True:
                want, expected = walk.send(await self._read(want, expected))
        except StopIteration as done:
            chain: Chain = done.value
            return chain

    def _replaced(self, key: Key, expected: str, info: ObjectInfo | None, now: float) -> bool:
        """A fresh entry of another object than the one expected (deleted and made again
        since it was read): read it again, once; a uid confirmed not to be there is not
        read again for a while (an Event can name any uid)."""
        if not expected or info is None or info.uid == expected:
            return False
        until = self._confirmed.get((key, expected))
        if until is not None and now < until:
            return False
        return True

    async def _read(self, key: Key, expected: str = "") -> ObjectInfo | str:
        """One object: fresh from the cache, else read once for everyone waiting on it."""
        now = self.clock.monotonic()
        fresh, info = self.cache.fresh(key, now)
        if fresh and not self._replaced(key, expected, info, now):
            return info if info is not None else NOTFOUND
        if now < self._down_until:
            return self.cache.stale(key) or UNREACHABLE
        fut = self._reads.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        self._reads[key] = fut
        result: ObjectInfo | str = ERROR
        try:
            result = await self._get(key)
            if expected and isinstance(result, ObjectInfo) and result.uid != expected:
                if len(self._confirmed) >= self.cache.max_entries:
                    self._confirmed.clear()  # bounded whatever uids Events name
                self._confirmed[(key, expected)] = now + self.cache.negative_ttl
        except Exception as exc:
            # whoever else waits on this object gets an answer, not a cancellation
            log.warn_sampled(
                "enrich_failed", "enrich_failed", object="/".join(key), error=repr(exc)
            )
        finally:
            self._reads.pop(key, None)
            if not fut.done():
                fut.set_result(result)
        return result

    async def _get(self, key: Key) -> ObjectInfo | str:
        async with self._slots:
            if self.clock.monotonic() < self._down_until:
                return self.cache.stale(key) or UNREACHABLE
            try:
                obj = await self.clock.wait_for(
                    self.reader.get_object(object_path(key)), self.timeout
                )
            except errors.NotFound:
                self.m.enrich_reads.labels("notfound").inc()
                self.cache.put(key, None, self.clock.monotonic())
                return NOTFOUND
            except (errors.Forbidden, errors.Unauthorized) as exc:
                self.m.enrich_reads.labels("forbidden").inc()
                if isinstance(exc, errors.Unauthorized):
                    await self.reader.reload_credentials()  # a rotated token (coalesced)
                log.warn_sampled(
                    f"enrich_forbidden:{key[0]}",
                    "enrich_forbidden",
                    kind=key[0],
                    detail=str(exc),
                    fix="grant get on this kind (docs/deploy.md) or drop it from "
                    "enrich.object.kinds",
                )
                return FORBIDDEN
            except (TimeoutError, errors.KubeUnavailable) as exc:
                self.m.enrich_reads.labels("unreachable").inc()
                self._went_down(exc)
                why = TIMEOUT if isinstance(exc, TimeoutError) else UNREACHABLE
                return self.cache.stale(key) or why
            except errors.KubeError as exc:
                self.m.enrich_reads.labels("error").inc()
                log.warn_sampled("enrich_error", "enrich_error", kind=key[0], detail=str(exc))
                return self.cache.stale(key) or ERROR
            info = self.plan.object_info(obj, key[0])
            self.m.enrich_reads.labels("ok").inc()
            self._pauses = None  # reachable: the next pause is the first again
            self.cache.put(key, info, self.clock.monotonic())
            return info

    def _went_down(self, exc: BaseException) -> None:
        now = self.clock.monotonic()
        if now < self._down_until:
            return  # a read that was out already when the pause began: one failure, not two
        if self._pauses is None:
            self._pauses = Backoff(
                PAUSE_FIRST, 2.0, PAUSE_MAX, reset_after=math.inf, jitter=0.0, clock=self.clock
            )
        pause = self._pauses.next_delay()
        self._down_until = now + pause
        log.warn_sampled(
            "enrich_unreachable",
            "enrich_paused",
            seconds=pause,
            error=repr(exc),
            note="Events go out with the values last known, or marked unreachable",
        )

    # -- namespaces ----------------------------------------------------------------------------

    def namespaces_synced(self, synced: bool) -> None:
        """Told by the namespace watch (``bridge.runtime.namespaces``, which keeps
        ``self.namespaces``): a list is done (``synced``), or a request failed; before the first
        list is done, Events then stop waiting for it."""
        if synced:
            self._synced.set()
        elif not self._synced.is_set():
            self._list_failed = True

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def describe(self) -> dict[str, Any]:
        """What ``/status`` shows of the enrichment."""
        paused = self._down_until - self.clock.monotonic()
        return {
            "namespaces_synced": self._synced.is_set(),
            "namespaces": len(self.namespaces),
            "cache_entries": len(self.cache),
            "cache_bytes": self.cache.bytes,
            "pending": len(self.stage),
            "reads_in_flight": len(self._reads),
            "reads_paused_for_seconds": round(paused, 1) if paused > 0 else 0.0,
        }

    def sizes(self) -> dict[str, int]:
        return {
            "enrich_pending": len(self.stage),
            "enrich_cache": len(self.cache),
            "enrich_cache_bytes": self.cache.bytes,
            "enrich_reads": len(self._reads),
            "enrich_chains": len(self._chains),
            "enrich_namespaces": len(self.namespaces),
        }
