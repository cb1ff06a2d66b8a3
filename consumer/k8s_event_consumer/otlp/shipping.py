"""A batch of the stream's messages to the OTLP endpoint, each settled only by what the endpoint
said about it (docs/consumers.md, "What is acked when"):

- accepted (a 2xx that refused none of the request's records): done, the message acked;
- refused for good (``sender.Refused``: 400, 413, 422; a 2xx whose partial success refused
  some; ``sender.Failed``: a 500, the records' fault or the endpoint's own): the request is
  split in halves and each sent again, until the refused record is alone. That one goes to the
  dead-letter subject with the endpoint's reason (``DeadLetters``), and is acked once JetStream
  stored it there, when there is **proof** that the endpoint works and only this record does
  not: a partial success (it took the others), or a request the endpoint took since the
  record's batch was first sent or since the record first failed alone. Without proof (a 400
  or a 500 for every request: a proxy, a broken pipeline) the record is handed back (nak'd with
  the back-off) and the next requests are paced by the back-off: nothing goes to the dead
  letters, and the stream moves on slowly, each record coming again. A whole refusal costs no
  duplicates (nothing of it was taken); a partial one (or a 500 from a pipeline that fans out)
  re-sends the records taken with the refused one, each at most once per halving (at most
  ``ceil(log2(batch))`` times), with the same ``cloudevents.event_id``;
- unavailable or blocked (``sender.Unavailable``, ``sender.Blocked``): the batch is held and
  sent again after a back-off (doubling from ``backoff_initial`` to ``backoff_max``, or the
  endpoint's ``Retry-After`` when longer), for as long as it takes; the consumer keeps the
  messages from redelivery meanwhile and fetches nothing more, so memory stays one batch. On
  stop, what is held or not yet sent is nak'd for another replica (or the next start).

A request of several records larger than the limit in effect (``sizing.RequestLimit``:
``max_request_bytes``, lowered when the endpoint says a request was too large) is split before
it is sent; one the endpoint refuses as too large (``sender.Refused.too_large``) lowers the
limit and is sent again in halves, which took nothing twice: a record alone larger than what
the endpoint takes is refused alone, as any refused record. A message that can not be made a
record (none of the bridge's does) is acked and counted ``unmappable``, never a reason to hold
the others.

What can repeat many times a second (a record handed back, a split, an endpoint blocked or
going away and coming back, a dead letter not stored) is logged at most once per
``LOG_EVERY`` seconds per event name, the next line carrying how many were left out
(``suppressed``); the counters count each.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors

from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_consumer import logs
from k8s_event_consumer.consuming import Delivery, Discard, Outcome, Retry
from k8s_event_consumer.metrics import Metrics
from k8s_event_consumer.otlp import mapping, sender, sizing
from k8s_event_consumer.seen import digest

log = logs.get("otlp")

# the headers a dead letter carries besides the message's own
STATUS_HEADER = "K8s-Event-Otlp-Status"
REASON_HEADER = "K8s-Event-Otlp-Reason"
ENDPOINT_HEADER = "K8s-Event-Otlp-Endpoint"
SEQUENCE_HEADER = "K8s-Event-Stream-Sequence"
OMITTED_HEADER = "K8s-Event-Otlp-Body-Omitted"
DEAD_LETTER_RETRY = 5.0  # seconds: a dead letter JetStream did not store is tried again after
# seconds: on stop, what is held is nak'd with this delay: past the expiry of the pull request
# still open on the server (the kit's fetch_timeout, 5 s), which would otherwise take the
# redelivery into this stopping process, where it waits out ack_wait before anyone sends it
HANDBACK_DELAY = 6.0
FAILED_REMEMBERED = 10_000  # ids that failed alone without proof (digests), kept for the proof
DEFERRED = Retry(0.0, "decided once the rest of its batch was sent")
# records refused together, the status, the reason, whether sending them again may repeat some
Deferred = tuple[list[int], int, str, bool]
HEADROOM = 1024  # bytes under max_payload a dead letter's own headers may take
LOG_EVERY = 10.0  # seconds: a line that can repeat in a loop is written at most this often


class DeadLetters:
    """Publishes a refused message to the dead-letter subject through JetStream (stored, or
    an error): the message's own headers (but NATS' own ``Nats-*``, which would steer the
    dead-letter stream: an expected stream, a rollup, a TTL) and body, plus the endpoint's
    status and reason and the stream sequence it had. ``Nats-Msg-Id`` is its CloudEvent id with
    a hash of its body, so a crash between the store and the ack stores it once, and a forged
    message with the same id does not take its place. A message too large to carry with the
    headers (``max_payload``) is stored without its body, which stays in the stream at that
    sequence."""

    def __init__(self, js: Any, subject: str, endpoint: str, max_payload: int = 1 << 20) -> None:
        self._js = js
        self.subject = subject
        self.endpoint = endpoint
        self.max_payload = max_payload

    def message(self, d: Delivery, status: int, reason: str) -> tuple[bytes, dict[str, str]]:
        headers = {k: v for k, v in (d.headers or {}).items() if not k.lower().startswith("nats-")}
        body = d.body
        headers.update(
            {
                STATUS_HEADER: str(status),
                REASON_HEADER: reason,
                ENDPOINT_HEADER: self.endpoint,
                SEQUENCE_HEADER: str(d.stream_sequence),
                "Nats-Msg-Id": f"{d.id}:{hashlib.sha256(body).hexdigest()[:16]}",
            }
        )
        size = len(body) + sum(len(k) + len(v) + 4 for k, v in headers.items())
        if size + HEADROOM > self.max_payload:
            headers[OMITTED_HEADER] = f"{len(body)} bytes: read it from the stream at the sequence"
            body = b""
        return body, headers

    async def put(self, d: Delivery, status: int, reason: str) -> None:
        body, headers = self.message(d, status, reason)
        await self._js.publish(self.subject, body, headers=headers, timeout=5.0)


@dataclass(frozen=True)
class Backoff:
    initial: float = 1.0
    max: float = 30.0

    def delay(
        self,
        attempt: int,
        retry_after: float | None = None,
        random: Callable[[], float] = SYSTEM.random,
    ) -> float:
        """The wait before attempt ``attempt + 1`` (full jitter on the upper half), or the
        endpoint's ``Retry-After`` when it is longer."""
        step = min(self.max, self.initial * 2 ** min(attempt, 30))
        jittered = float(step / 2 + random() * step / 2)
        return max(jittered, retry_after) if retry_after is not None else jittered


class Shipper:
    """Turns deliveries into records and sends them (module docstring); ``ship`` is the
    consumer's batch handler."""

    def __init__(
        self,
        client: sender.Client,
        dead_letters: DeadLetters,
        metrics: Metrics,
        stopping: asyncio.Event,
        *,
        max_request_bytes: int,
        backoff: Backoff = Backoff(),
        resource: mapping.Resource = (),
        version: str = "",
        clock: Clock = SYSTEM,
    ) -> None:
        self.client = client
        self.clock = clock
        self.log = log.timed(clock.monotonic)
        self.dead_letters = dead_letters
        self.metrics = metrics
        self.stopping = stopping
        self.limit = sizing.RequestLimit(max_request_bytes)
        self.backoff = backoff
        self.resource = resource
        self.version = version
        self.held = 0  # records in hand, not yet settled (a gauge)
        self.endpoint_up = True
        self._said_up = True  # what the log said last of the endpoint
        self.accepted_requests = 0  # requests the endpoint took, ever (the proof)
        self._since = 0  # accepted_requests when the batch in hand was first sent
        # id -> accepted_requests when it failed alone with no proof (the proof later)
        self._failed: OrderedDict[bytes, int] = OrderedDict()  # seen.digest(id): requests
        self._unproven = 0  # lone failures with no proof in a row: the pace
        self._pace_until = 0.0  # monotonic: no request before this (after unproven failures)
        self._deferred: list[Deferred] = []  # refused before the batch proved the endpoint
        self._unproven_splits = 0  # splits of the batch in hand made before any proof

    async def ship(self, deliveries: list[Delivery]) -> Sequence[Outcome]:
        outcomes: list[Outcome] = [None] * len(deliveries)
        items: dict[int, mapping.Mapped] = {}
        for i, d in enumerate(deliveries):
            try:
                items[i] = mapping.mapped(d, self.resource)
            except Exception as exc:  # a message of no shape the bridge writes
                self.metrics.inc("records_total", result="unmappable")
                self.log.error(
                    "unmappable",
                    id=d.id,
                    stream_sequence=d.stream_sequence,
                    error=f"{type(exc).__name__}: {exc}",
                )
                outcomes[i] = Discard(str(exc))
        self.held = len(items)
        self._since = self.accepted_requests
        self._deferred = []
        self._unproven_splits = 0
        try:
            await self._send(sorted(items), items, deliveries, outcomes, resent=False)
            # what was refused before anything of the batch was taken, decided now: with proof
            # a lone record is a dead letter and a group is split again; else handed back
            deferred, self._deferred = self._deferred, []
            proven = self.accepted_requests > self._since
            for group, status, why, again in deferred:
                if proven and len(group) > 1:
                    await self._send(group, items, deliveries, outcomes, resent=again)
                    continue
                for i in group:
                    outcomes[i] = await self._alone(deliveries[i], status, why, False, final=True)
        finally:
            self.held = 0
        return outcomes

    async def _send(
        self,
        idx: list[int],
        items: dict[int, mapping.Mapped],
        deliveries: list[Delivery],
        outcomes: list[Outcome],
        *,
        resent: bool,
    ) -> None:
        """Send the records ``idx``; set each one's outcome."""
        if not idx:
            return
        if len(idx) > 1 and sum(items[i].size() for i in idx) > self.limit.value:
            await self._halves(idx, items, deliveries, outcomes, resent=resent, why="size")
            return
        attempt = 0
        while True:
            if await self._paced() or self.stopping.is_set():
                self._hand_back(idx, outcomes)
                return
            body = mapping.request([items[i] for i in idx], self.version).SerializeToString()
            size = len(body)
            if len(idx) > 1 and size > self.limit.value:  # over, though its records' sizes
                del body  # summed under it (records of one resource share it in a request)
                await self._halves(idx, items, deliveries, outcomes, resent=resent, why="size")
                return
            got = await self.client.send(body)
            del body
            if resent:
                self.metrics.inc("resent_records_total", len(idx))
            if isinstance(got, sender.Accepted) and got.rejected == 0:
                self._taken(len(idx), size)
                return  # outcomes stay None: done
            if isinstance(got, sender.Refused) and got.too_large and len(idx) > 1:
                # too large, not its records' fault: nothing of it taken; smaller requests
                self._too_large(size, got)
                await self._halves(idx, items, deliveries, outcomes, resent=resent, why="size")
                return
            if isinstance(got, sender.Accepted | sender.Refused | sender.Failed):
                if isinstance(got, sender.Accepted):
                    self._up()
                partial = isinstance(got, sender.Accepted)
                kind = (
                    "partial"
                    if partial
                    else "failed"
                    if isinstance(got, sender.Failed)
                    else "refused"
                )
                self.metrics.inc("requests_total", result=kind)
                status = 200 if isinstance(got, sender.Accepted) else got.status
                why = got.message if isinstance(got, sender.Accepted) else got.reason
                if len(idx) == 1:
                    i = idx[0]
                    outcomes[i] = await self._alone(deliveries[i], status, why, partial)
                    if outcomes[i] is DEFERRED:
                        self._deferred.append((idx, status, why, resent))
                    return
                unproven = not partial and self.accepted_requests == self._since
                again = resent or kind != "refused"
                if unproven and self._unproven_splits >= 1:
                    # refused again with nothing of the batch taken: the endpoint may refuse
                    # everything (a proxy's 400, a broken pipeline's 500); split no further
                    # until something is taken
                    self._deferred.append((idx, status, why, again))
                    return
                self._unproven_splits += unproven
                self.log.sampled(
                    "info",
                    "batch_refused",
                    "batch_refused",
                    interval=LOG_EVERY,
                    records=len(idx),
                    status=status,
                    rejected=got.rejected if isinstance(got, sender.Accepted) else len(idx),
                    reason=why,
                    action="split in halves",
                )
                # a partial success took some (a 500 may have: a pipeline that fans out): each
                # half is sent again (duplicates, same id)
                await self._halves(idx, items, deliveries, outcomes, resent=again, why=kind)
                return
            # unavailable or blocked: hold the records and send them again later
            result = "unavailable" if isinstance(got, sender.Unavailable) else "blocked"
            self.metrics.inc("requests_total", result=result)
            wait = self.backoff.delay(
                attempt,
                got.retry_after if isinstance(got, sender.Unavailable) else None,
                self.clock.random,
            )
            self._down(result, got.why if isinstance(got, sender.Unavailable) else got.reason,
                       len(idx), wait)  # fmt: skip
            attempt += 1
            if await self._stopped_within(wait):
                self._hand_back(idx, outcomes)
                return

    async def _halves(
        self,
        idx: list[int],
        items: dict[int, mapping.Mapped],
        deliveries: list[Delivery],
        outcomes: list[Outcome],
        *,
        resent: bool,
        why: str,
    ) -> None:
        self.metrics.inc("splits_total", why=why)
        mid = len(idx) // 2
        for half in (idx[:mid], idx[mid:]):
            await self._send(half, items, deliveries, outcomes, resent=resent)

    async def _alone(
        self, d: Delivery, status: int, why: str, partial: bool, *, final: bool = False
    ) -> Outcome:
        """A record refused alone: a dead letter with proof that the endpoint works (module
        docstring); else decided once the rest of its batch was sent (``DEFERRED``), and then
        handed back and the next requests paced."""
        key = digest(d.id)
        failed_at = self._failed.get(key)
        proof = (
            partial
            or self.accepted_requests > self._since
            or (failed_at is not None and self.accepted_requests > failed_at)
        )
        if proof:
            self._failed.pop(key, None)
            return await self._dead(d, status, why)
        if not final:
            return DEFERRED
        if failed_at is None:
            self._failed[key] = self.accepted_requests
            if len(self._failed) > FAILED_REMEMBERED:
                self._failed.popitem(last=False)
        wait = self.backoff.delay(self._unproven, random=self.clock.random)
        self._unproven += 1
        self.endpoint_up = False
        self._pace_until = self.clock.monotonic() + wait
        self.metrics.inc("records_total", result="handed_back")
        said = self.log.sampled(
            "error",
            "record_refused_unproven",
            "record_refused_unproven",
            interval=LOG_EVERY,
            id=d.id,
            status=status,
            reason=why,
            action="handed back: the endpoint took nothing since; a dead letter once it takes "
            "other records",
            retry_in=round(wait, 3),
        )
        self._said_up = self._said_up and not said
        return Retry(wait, why)

    def _hand_back(self, idx: list[int], outcomes: list[Outcome]) -> None:
        for i in idx:
            outcomes[i] = Retry(HANDBACK_DELAY, "stopping, or paced")

    async def _paced(self) -> bool:
        """Wait out the pace after refusals without proof; True when stopping came first."""
        wait = self._pace_until - self.clock.monotonic()
        if wait <= 0:
            return False
        return await self._stopped_within(wait)

    async def _dead(self, d: Delivery, status: int, reason: str) -> Outcome:
        """The refused record's message to the dead-letter subject: done once stored."""
        try:
            await self.dead_letters.put(d, status, reason)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError) as exc:
            self.log.sampled(
                "warning",
                "dead_letter_failed",
                "dead_letter_failed",
                interval=LOG_EVERY,
                id=d.id,
                error=f"{type(exc).__name__}: {exc}",
            )
            self.metrics.inc("records_total", result="dead_letter_failed")
            return Retry(DEAD_LETTER_RETRY, "the dead letter was not stored")
        self.metrics.inc("records_total", result="dead_lettered")
        self.log.error(
            "record_refused",
            id=d.id,
            stream_sequence=d.stream_sequence,
            status=status,
            reason=reason,
            dead_letter_subject=self.dead_letters.subject,
        )
        return None

    def _taken(self, records: int, size: int) -> None:
        """A request of ``records`` records, ``size`` bytes, taken whole."""
        self._up()
        self.accepted_requests += 1
        self._unproven = 0
        self.metrics.inc("requests_total", result="accepted")
        self.metrics.inc("records_total", records, result="accepted")
        limit = self.limit.value
        raised = self.limit.taken(size)
        self._limit_changed("raised", limit, raised, refused_bytes=self.limit.refused_at)

    def _too_large(self, size: int, got: sender.Refused) -> None:
        """A request of several records, ``size`` bytes, refused as too large."""
        self.metrics.inc("requests_total", result="refused")
        limit = self.limit.value
        self._limit_changed(
            "lowered",
            limit,
            self.limit.refused(size),
            request_bytes=size,
            status=got.status,
            reason=got.reason,
            action="smaller requests (set otlp.max_request_bytes to what the endpoint takes)",
        )

    def _limit_changed(self, direction: str, before: int, after: int | None, **why: Any) -> None:
        """The request limit ``lowered`` or ``raised`` (``after``; None: unchanged): counted,
        logged once per change."""
        if after is None:
            return
        self.metrics.inc("request_limit_changes_total", direction=direction)
        (self.log.warning if direction == "lowered" else self.log.info)(
            f"request_limit_{direction}",
            endpoint=self.client.url,
            from_bytes=before,
            to_bytes=after,
            **why,
        )

    def _up(self) -> None:
        """The endpoint took a request; the log told so once it said otherwise (a line an
        endpoint that comes and goes writes at most once per ``LOG_EVERY``, its state's last
        word written within that much of the change)."""
        self.endpoint_up = True
        if not self._said_up:
            self._said_up = self.log.sampled(
                "info",
                "endpoint_state",
                "endpoint_available",
                interval=LOG_EVERY,
                endpoint=self.client.url,
            )

    def _down(self, result: str, why: str, records: int, wait: float) -> None:
        self.endpoint_up = False
        fields = {
            "endpoint": self.client.url,
            "records": records,
            "error": why,
            "retry_in": round(wait, 3),
        }
        if result == "blocked":
            # this configuration's problem: said at every try, as an error (sampled)
            said = self.log.sampled(
                "error", "endpoint_blocked", "endpoint_blocked", interval=LOG_EVERY, **fields
            )
            self._said_up = self._said_up and not said
        elif self._said_up:
            said = self.log.sampled(
                "warning", "endpoint_state", "endpoint_unavailable", interval=LOG_EVERY, **fields
            )
            self._said_up = not said

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await self.clock.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()
