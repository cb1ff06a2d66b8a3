"""A batch of the stream's messages to the OTLP endpoint, each settled only by what the endpoint
said about it (docs/consumers.md, "k8s-event-otlp: what is acked when"):

- accepted (a 2xx that refused none of the request's records): done, the message acked;
- refused for good (``sender.Refused``, or a 2xx whose partial success refused some): the
  request is split in halves and each sent again, until the refused record is alone; that one
  goes to the dead-letter subject with the endpoint's reason (``DeadLetters``) and is acked once
  JetStream stored it there. A whole refusal costs no duplicates (nothing of it was taken); a
  partial one re-sends the records taken with the refused one, each at most once per halving
  (at most ``ceil(log2(batch))`` times), with the same ``cloudevents.event_id``;
- failed (``sender.Failed``, a 500: the records' fault or the endpoint's own): split like a
  refusal; a record that fails alone is refused (a dead letter) only when the endpoint took
  other records of its batch since the batch was first sent, proof that the endpoint works and
  this record does not; else it is held like an unavailable endpoint. A 500 for every request
  (the endpoint broken) so holds the batch and sends nothing to the dead letters;
- unavailable or blocked (``sender.Unavailable``, ``sender.Blocked``): the batch is held and
  sent again after a back-off (doubling from ``backoff_initial`` to ``backoff_max``, or the
  endpoint's ``Retry-After``), for as long as it takes; the consumer keeps the messages from
  redelivery meanwhile and fetches nothing more, so memory stays one batch. On stop, what is
  held is nak'd for another replica (or the next start) to send.

A request larger than ``max_request_bytes`` is split before it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors

from k8s_event_consumer import logs
from k8s_event_consumer.consuming import Delivery, Outcome, Retry
from k8s_event_consumer.metrics import Metrics
from k8s_event_consumer.otlp import mapping, sender

log = logs.get("otlp")

# the headers a dead letter carries besides the message's own
STATUS_HEADER = "K8s-Event-Otlp-Status"
REASON_HEADER = "K8s-Event-Otlp-Reason"
ENDPOINT_HEADER = "K8s-Event-Otlp-Endpoint"
SEQUENCE_HEADER = "K8s-Event-Stream-Sequence"
DEAD_LETTER_RETRY = 5.0  # seconds: a dead letter JetStream did not store is tried again after
# seconds: on stop, what is held is nak'd with this delay: past the expiry of the pull request
# still open on the server (the kit's fetch_timeout, 5 s), which would otherwise take the
# redelivery into this stopping process, where it waits out ack_wait before anyone sends it
HANDBACK_DELAY = 6.0


class DeadLetters:
    """Publishes a refused message to the dead-letter subject through JetStream (stored, or
    an error): the message's own headers and body, plus the endpoint's status and reason and
    the stream sequence it had; ``Nats-Msg-Id`` its CloudEvent id, so a crash between the
    store and the ack stores it once."""

    def __init__(self, js: Any, subject: str, endpoint: str) -> None:
        self._js = js
        self.subject = subject
        self.endpoint = endpoint

    async def put(self, d: Delivery, status: int, reason: str) -> None:
        headers = dict(d.headers or {})
        headers.update(
            {
                STATUS_HEADER: str(status),
                REASON_HEADER: reason,
                ENDPOINT_HEADER: self.endpoint,
                SEQUENCE_HEADER: str(d.stream_sequence),
                "Nats-Msg-Id": d.id,
            }
        )
        await self._js.publish(self.subject, d.body, headers=headers, timeout=5.0)


@dataclass(frozen=True)
class Backoff:
    initial: float = 1.0
    max: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """The wait before attempt ``attempt + 1`` (full jitter on the upper half), or the
        endpoint's ``Retry-After`` when it gave one."""
        if retry_after is not None:
            return retry_after
        step = min(self.max, self.initial * 2 ** min(attempt, 30))
        return float(step / 2 + random.random() * step / 2)


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
    ) -> None:
        self.client = client
        self.dead_letters = dead_letters
        self.metrics = metrics
        self.stopping = stopping
        self.max_request_bytes = max_request_bytes
        self.backoff = backoff
        self.resource = resource
        self.version = version
        self.held = 0  # records in hand, not yet settled (a gauge)
        self.endpoint_up = True
        self.accepted_requests = 0  # requests the endpoint took, ever (the proof for a 500)
        self._since = 0  # accepted_requests when the batch in hand was first sent

    async def ship(self, deliveries: list[Delivery]) -> Sequence[Outcome]:
        outcomes: list[Outcome] = [None] * len(deliveries)
        items: list[mapping.Mapped] = []
        for d in deliveries:
            items.append(mapping.mapped(d, self.resource))
        self.held = len(items)
        self._since = self.accepted_requests
        try:
            await self._send(list(range(len(items))), items, deliveries, outcomes, resent=False)
        finally:
            self.held = 0
        return outcomes

    async def _send(
        self,
        idx: list[int],
        items: list[mapping.Mapped],
        deliveries: list[Delivery],
        outcomes: list[Outcome],
        *,
        resent: bool,
    ) -> None:
        """Send the records ``idx``; set each one's outcome."""
        body = mapping.request([items[i] for i in idx], self.version).SerializeToString()
        if len(body) > self.max_request_bytes and len(idx) > 1:
            self.metrics.inc("splits_total", why="size")
            await self._halves(idx, items, deliveries, outcomes, resent=resent)
            return
        attempt = 0
        while True:
            got = await self.client.send(body)
            if resent:
                self.metrics.inc("resent_records_total", len(idx))
            if isinstance(got, sender.Accepted) and got.rejected == 0:
                self._up()
                self.accepted_requests += 1
                self.metrics.inc("requests_total", result="accepted")
                self.metrics.inc("records_total", len(idx), result="accepted")
                return  # outcomes stay None: done
            if isinstance(got, sender.Failed) and (
                len(idx) > 1 or self.accepted_requests > self._since
            ):
                # split it; alone, with the endpoint taking others since: refused for good
                got = sender.Refused(got.status, got.reason)
                failed = True
            else:
                failed = False
            if isinstance(got, sender.Accepted | sender.Refused):
                self._up()
                partial = isinstance(got, sender.Accepted)
                self.metrics.inc(
                    "requests_total",
                    result="partial" if partial else "failed" if failed else "refused",
                )
                if len(idx) == 1:
                    status = 200 if isinstance(got, sender.Accepted) else got.status
                    why = got.message if isinstance(got, sender.Accepted) else got.reason
                    outcomes[idx[0]] = await self._dead(deliveries[idx[0]], status, why)
                    return
                log.info(
                    "batch_refused",
                    records=len(idx),
                    rejected=got.rejected if isinstance(got, sender.Accepted) else len(idx),
                    reason=got.message if isinstance(got, sender.Accepted) else got.reason,
                    action="split in halves",
                )
                why = "partial" if partial else "failed" if failed else "refused"
                self.metrics.inc("splits_total", why=why)
                # a partial success took some (a 500 may have: a pipeline that fans out): each
                # half is sent again (duplicates, same id)
                await self._halves(
                    idx, items, deliveries, outcomes, resent=resent or partial or failed
                )
                return
            # unavailable, blocked, or failed alone with no proof the endpoint works: hold the
            # records and send them again later
            result = {sender.Unavailable: "unavailable", sender.Failed: "failed"}.get(
                type(got), "blocked"
            )
            self.metrics.inc("requests_total", result=result)
            wait = self.backoff.delay(
                attempt, got.retry_after if isinstance(got, sender.Unavailable) else None
            )
            self._down(got, len(idx), wait)
            attempt += 1
            if await self._stopped_within(wait):
                for i in idx:
                    outcomes[i] = Retry(
                        HANDBACK_DELAY, "stopping while the endpoint is unavailable"
                    )
                return

    async def _halves(
        self,
        idx: list[int],
        items: list[mapping.Mapped],
        deliveries: list[Delivery],
        outcomes: list[Outcome],
        *,
        resent: bool,
    ) -> None:
        mid = len(idx) // 2
        for half in (idx[:mid], idx[mid:]):
            await self._send(half, items, deliveries, outcomes, resent=resent)

    async def _dead(self, d: Delivery, status: int, reason: str) -> Outcome:
        """The refused record's message to the dead-letter subject: done once stored."""
        try:
            await self.dead_letters.put(d, status, reason)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError) as exc:
            log.warning("dead_letter_failed", id=d.id, error=f"{type(exc).__name__}: {exc}")
            self.metrics.inc("records_total", result="dead_letter_failed")
            return Retry(DEAD_LETTER_RETRY, "the dead letter was not stored")
        self.metrics.inc("records_total", result="dead_lettered")
        log.error(
            "record_refused",
            id=d.id,
            stream_sequence=d.stream_sequence,
            status=status,
            reason=reason,
            dead_letter_subject=self.dead_letters.subject,
        )
        return None

    def _up(self) -> None:
        if not self.endpoint_up:
            log.info("endpoint_available", endpoint=self.client.url)
        self.endpoint_up = True

    def _down(
        self, got: sender.Unavailable | sender.Failed | sender.Blocked, records: int, wait: float
    ) -> None:
        blocked = not isinstance(got, sender.Unavailable)
        why = got.why if isinstance(got, sender.Unavailable) else got.reason
        if self.endpoint_up or blocked:
            # a blocked answer is this configuration's problem: said each time, as an error
            (log.error if blocked else log.warning)(
                "endpoint_blocked" if blocked else "endpoint_unavailable",
                endpoint=self.client.url,
                records=records,
                error=why,
                retry_in=round(wait, 3),
            )
        self.endpoint_up = False

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()
