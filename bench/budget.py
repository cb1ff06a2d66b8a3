"""The bridge's worst case of memory, computed from its configuration (and the OTLP
subscriber's, ``OtlpBudget``, and the remediation worker's, ``RemediationBudget``, at the end).

What a bridge can hold at once is bounded by its configuration, not by the cluster or the
length of an outage (docs/performance.md, "Memory: the worst case"):

    RSS <= base                                          idle bridge + a full-speed flow
           + scopes * (aiohttp's read buffer + one read in hand: lines, views, a message)
           + scopes * 2 list pages of kubernetes.page_size Events of LIST_EVENT_BYTES
           + queue.max_bytes + queue.max_events * PER_MESSAGE
           + 3 * nats.max_inflight_bytes + nats.max_inflight * PER_MESSAGE
           + 4 * MAX_LINE_BYTES                          one line at the most: its parts, the
                                                         joined line, the Event's bytes, the
                                                         converted message
           + nats-py's outgoing buffer while reconnecting (pending_size)
           + scopes retired kube clients (one per scope at most: k8s_event_common.kube)
           + the converter's caches (entries and key lengths bounded: bridge.core.converting;
             with a subject template of one's own, its subjects too)
           + with enrich: the Events waiting for their lookups (a quarter of queue.max_bytes
             of their bytes, twice: each may share its read up to twice its size;
             enrich.max_pending of objects and read tasks), the lookup cache
             (enrich.cache_bytes as counted, CACHE_COPIES of it in objects) and the
             namespaces' values (NAMESPACES assumed, each its labels' and annotations')

- ``base``: an idle bridge with one scope, measured (``python -m bench.idle``), with the
  working set of a full-speed flow of ordinary Events on top (``FLOW_MIB``, measured by
  ``python -m bench.run``: its peak minus its idle minus what its queue and window held);
- the queue holds converted messages (the CloudEvent's bytes, counted by the queue) and a few
  hundred bytes of objects each;
- the publish window holds the same messages until acked; while the connection is stalled
  each may also be framed in nats-py's outgoing buffer and in the socket's user-space buffer:
  up to three copies;
- the one assumption: a list page is ``page_size`` Events of ordinary size (LIST_EVENT_BYTES
  on average); a page of 500 Events of 1.5 MiB each is not bounded by anything but the page
  size (lower ``kubernetes.page_size`` in a cluster whose Events are that large).

``python -m bench.silence`` checks the bound against a real bridge whose JetStream is silent
for minutes while large Events keep coming. The constants are measured on CPython 3.11 /
x86_64; ``Budget.of(settings)`` computes the bound for a configuration.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from bridge.core import converting
from bridge.kube.lines import MAX_LINE_BYTES
from bridge.runtime import enriching
from bridge.settings import Settings
from k8s_event_common import owners
from k8s_event_common.subjects import DEFAULT_TEMPLATE
from k8s_event_consumer import fetching, seen
from k8s_event_consumer.alerting import alertmanager, alerts, holding
from k8s_event_consumer.alerting import running as alerting_running
from k8s_event_consumer.alerting.settings import Settings as AlertingSettings
from k8s_event_consumer.otlp import settings as otlp_settings
from k8s_event_consumer.otlp import shipping
from k8s_event_consumer.remediation import settings as remediation_settings
from k8s_event_consumer.remediation.worker import LAST_ACTIONS

MIB = 1024 * 1024
IDLE_MIB = 55.0  # an idle bridge, one scope (bench.idle: 53-54 measured; rounded up)
FLOW_MIB = 9.0  # a full-speed flow of ~1.2 KB Events on top (bench.run peak - idle)
PER_SCOPE_MIB = 0.15  # each more scope: its tasks, metrics, connection (bench.idle: ~0.05)
PER_MESSAGE = 512  # bytes of objects per message held besides its bytes (measured: ~350)
QUEUE_COPIES = 1.0
WINDOW_COPIES = 3.0
LINE_COPIES = 4.0
NATS_PENDING = 2 * MIB  # nats-py's outgoing buffer bound while reconnecting (pending_size)
READ_BUFFER = 2 * 2**16  # aiohttp's read buffer of one watch (bridge.kube.client)
IN_HAND = 3 * READ_BUFFER  # one read's lines, their decoded views and converted messages
LIST_EVENT_BYTES = 2048  # the average Event of a list page (~1.2 KB measured, rounded up)
RETIRED_CLIENT = MIB  # a kube client with the system's trust store (~840 KB measured)
# the converter's three caches full of the longest keys they keep, objects included: a subject
# entry holds its key, the subject and the source (~900 B), a type ~400 B, a timestamp ~250 B
CACHES = converting.SUBJECT_CACHE_SIZE * (1024 + 512 + 256)
# the enrichment (bridge.runtime.enriching): per Event waiting, its view and place (~1 KB) and
# one read task for a distinct object (~3 KB); the cache's objects cost up to twice what it
# counts (dicts, tuples, the LRU's links); per namespace its values (a label or two)
PER_WAITING = 4096
WAITING_COPIES = 2.0  # a waiting Event shares its read up to twice its size (Event.detached)
CACHE_COPIES = 2.0
NAMESPACES = 5000  # the second assumption: a cluster of up to this many namespaces
NAMESPACE_BYTES = 256  # per namespace, then per value kept: a label's, an annotation's
LABEL_BYTES = 200
ANNOTATION_BYTES = 1024 + 200  # annotations longer than 1 KiB are left out
# the subjects of a template other than the default, cached by their values (converting)
TEMPLATE_CACHE = converting.SUBJECT_CACHE_SIZE * 1024


@dataclass(frozen=True)
class Budget:
    base: float
    scopes: float
    lists: float
    queue: float
    window: float
    line: float
    nats_pending: float
    retired_clients: float
    caches: float
    enrichment: float = 0.0

    @classmethod
    def of(cls, settings: Settings, line_bytes: int = MAX_LINE_BYTES) -> Budget:
        """The bound for ``settings``; ``line_bytes``: the longest watch line read (by
        default the longest the bridge reads at all)."""
        n = len(settings.kubernetes.scopes)
        q, nats = settings.queue, settings.nats
        return cls(
            base=(IDLE_MIB + FLOW_MIB) * MIB,
            scopes=(n - 1) * PER_SCOPE_MIB * MIB + n * (READ_BUFFER + IN_HAND),
            lists=n * 2 * settings.kubernetes.page_size * LIST_EVENT_BYTES,
            queue=q.max_bytes * QUEUE_COPIES + q.max_events * PER_MESSAGE,
            window=nats.max_inflight_bytes * WINDOW_COPIES + nats.max_inflight * PER_MESSAGE,
            line=min(line_bytes, MAX_LINE_BYTES) * LINE_COPIES,
            nats_pending=NATS_PENDING,
            retired_clients=n * RETIRED_CLIENT,
            caches=CACHES + (TEMPLATE_CACHE if nats.subject_template != DEFAULT_TEMPLATE else 0),
            enrichment=_enrichment(settings),
        )

    @property
    def total(self) -> float:
        return (
            self.base
            + self.scopes
            + self.lists
            + self.queue
            + self.window
            + self.line
            + self.nats_pending
            + self.retired_clients
            + self.caches
            + self.enrichment
        )

    @property
    def total_mib(self) -> float:
        return self.total / MIB

    def rows(self) -> list[tuple[str, float]]:
        """(part, MiB) in the order of the formula, the total last."""
        return [
            ("base (idle + flow)", self.base / MIB),
            ("scopes (buffers, a read in hand)", self.scopes / MIB),
            ("list pages", self.lists / MIB),
            ("queue", self.queue / MIB),
            ("publish window", self.window / MIB),
            ("the longest line", self.line / MIB),
            ("nats-py outgoing buffer", self.nats_pending / MIB),
            ("retired kube clients", self.retired_clients / MIB),
            ("converter caches", self.caches / MIB),
            ("enrichment (waiting, cache, namespaces)", self.enrichment / MIB),
            ("total", self.total_mib),
        ]


def _enrichment(settings: Settings) -> float:
    e = settings.enrich
    if not e.enabled:
        return 0.0
    waiting = enriching.stage_bytes(settings) * WAITING_COPIES + e.max_pending * PER_WAITING
    cache = e.cache_bytes * CACHE_COPIES if e.reads_objects else 0.0
    namespaces = 0
    if e.namespace.labels or e.namespace.annotations:
        per = (
            NAMESPACE_BYTES
            + len(e.namespace.labels) * LABEL_BYTES
            + len(e.namespace.annotations) * ANNOTATION_BYTES
        )
        namespaces = NAMESPACES * per
    return waiting + cache + namespaces


# --- the OTLP subscriber (k8s-event-otlp) ---------------------------------------------------
#
#     RSS <= base                                   an idle subscriber + a flow of ordinary Events
#            + (max_request_bytes + max_payload) * 3.5
#                                                   the batch in hand: the kit's fetch stops once
#                                                   it holds max_request_bytes, one message more at
#                                                   most; each message as received, decoded (the
#                                                   CloudEvent's data as Python objects) and mapped
#                                                   (its log record, protobuf)
#            + nats.batch * 16 KiB                  the objects of each message in hand, in all
#                                                   three, and in the request
#            + max(max_request_bytes, max_payload) * 4.5
#                                                   the request in flight: the protobuf message,
#                                                   its serialised body, its gzip (no smaller when
#                                                   the text does not compress), the transport's
#                                                   buffer; a request of several records is at most
#                                                   max_request_bytes, one record alone one message
#            + max_payload * 2                      a dead letter: its message and nats-py's frame
#            + max_payload + 64 KiB + 2 MiB         nats-py: a message being read, its outgoing
#                                                   buffer while reconnecting
#
# max_payload: NATS' (1 MiB unless the server is configured otherwise), the largest message of
# the stream. The per-byte copies and the per-message objects are measured (RSS before and after
# each step, CPython 3.11 / x86_64): decoding 1.2x a message's bytes + ~5 KB, mapping 1.25x +
# ~4-5 KB, the request message 0.8x + ~4-6 KB, its body 1.2x, its gzip up to 1.4x (RSS rounding).

OTLP_IDLE_MIB = 55.0  # an idle OTLP subscriber (54.1 MiB measured; rounded up)
# a flow's working set the terms below do not count (the HTTP session and connection, the
# allocator's arenas): 10,000 Events of ~2 KB in batches of 512 peaked 11.8 MiB over idle,
# less than the 16 MiB the terms count for such a batch; kept as an allowance
OTLP_FLOW_MIB = 4.0
MAX_PAYLOAD = MIB  # NATS' default max_payload
OTLP_BATCH_COPIES = 3.5  # a message in hand: received (1), decoded (1.25), mapped (1.25)
OTLP_PER_MESSAGE = 16 * 1024  # objects per message in hand (decoded, mapped, in the request)
OTLP_REQUEST_COPIES = 4.5  # protobuf (1), body (1.25), gzip (1.25), transport (1)
OTLP_DEAD_LETTER_COPIES = 2.0  # the message with its headers, nats-py's frame of it
NATS_READ_CHUNK = 64 * 1024  # what nats-py reads at once, on top of a message being parsed
OTLP_PER_FAILED = 200  # an id refused alone without proof: its digest, an int, their entry


@dataclass(frozen=True)
class Parts:
    """A bound as the sum of its parts, each a float field of the dataclass; ``LABELS`` names
    each part for the docs' tables."""

    LABELS: ClassVar[dict[str, str]] = {}

    @property
    def total(self) -> float:
        return float(sum(getattr(self, f.name) for f in dataclasses.fields(self)))

    @property
    def total_mib(self) -> float:
        return self.total / MIB

    def rows(self) -> list[tuple[str, float]]:
        """(part, MiB) in the order of the formula, the total last."""
        parts = [
            (self.LABELS[f.name], getattr(self, f.name) / MIB) for f in dataclasses.fields(self)
        ]
        return [*parts, ("total", self.total_mib)]


@dataclass(frozen=True)
class OtlpBudget(Parts):
    """The OTLP subscriber's worst case, computed from its settings (``OtlpBudget.of``)."""

    LABELS: ClassVar[dict[str, str]] = {
        "base": "base (idle + flow)",
        "batch": "the batch in hand",
        "request": "the request in flight",
        "dead_letter": "a dead letter, the ids awaiting proof",
        "nats": "nats-py buffers",
    }

    base: float
    batch: float
    request: float
    dead_letter: float
    nats: float

    @classmethod
    def of(cls, settings: otlp_settings.Settings, max_payload: int = MAX_PAYLOAD) -> OtlpBudget:
        limit = settings.otlp.max_request_bytes
        return cls(
            base=(OTLP_IDLE_MIB + OTLP_FLOW_MIB) * MIB,
            batch=(limit + max_payload) * OTLP_BATCH_COPIES
            + settings.nats.batch * OTLP_PER_MESSAGE,
            request=max(limit, max_payload) * OTLP_REQUEST_COPIES,
            dead_letter=max_payload * OTLP_DEAD_LETTER_COPIES
            + shipping.FAILED_REMEMBERED * OTLP_PER_FAILED,
            nats=max_payload + NATS_READ_CHUNK + NATS_PENDING,
        )


# --- the remediation worker (k8s-event-remediation) ------------------------------------------
#
#     RSS <= base                                   an idle worker (its kube client, NATS, its
#                                                   bucket) + a flow of ordinary Events
#            + 2 * (fetch + nats.batch * 4 KiB)     the messages of a fetch, in hand until each is
#                                                   handled, and of the next, which comes while the
#                                                   list of the last is still held: fetch =
#                                                   nats.max_batch_bytes (at least max_payload +
#                                                   8 KiB: the largest message must come), or
#                                                   nats.batch * max_payload with a kit that bounds
#                                                   a fetch in messages only
#            + max_payload * 2                      the one being handled, decoded (its CloudEvent,
#                                                   the Event's dict), while it is decoded
#            + (2 + owners.MAX_DEPTH) * 1.5 MiB     the claim's proof held at once: the Event and
#                                                   the Pod read back, the owners walked
#            + 1.5 MiB * 2                          one answer being read: its bytes (kept by
#                                                   kubernetes_asyncio as last_response until the
#                                                   next request) and their text while parsed
#            + 1 MiB                                a retired kube client (a token reloaded)
#            + min(4096, rate_limit * 100/s) * 288 B
#                                                   when each object was acted on (_last_action:
#                                                   the last rate_limit of them, 4,096 at most)
#            + max_payload + 64 KiB + 2 MiB         nats-py: a message being read, what it reads
#                                                   at once, its outgoing buffer while reconnecting
#
# 1.5 MiB: the largest object the API server stores (etcd's default request limit), which bounds
# an Event's message (core/v1 sets it no length) and every object read. The assumption: an
# object is of ordinary shape, text mostly; its Python objects then weigh its JSON (measured:
# json.loads of an Event with a 1.5 MiB message holds 1.0x, 2.0x while it parses), where an
# object of many tiny entries (a Pod of 100,000 environment variables) weighs up to 25x its JSON
# and is bounded by nothing but the API server's object size. The pace of actions is the second
# assumption: 100 a second (55 measured against the simulated API server, whose reads cost no
# disk; a real one records each action's Event in etcd first).

REMEDIATION_IDLE_MIB = 55.0  # an idle worker (53.0 MiB measured; rounded up)
# a flow's working set the terms do not count (the kube client's connection, the allocator's
# arenas): 2,000 ordinary Events through an idle worker added 0.9 MiB; kept as an allowance
REMEDIATION_FLOW_MIB = 4.0
FETCHES_HELD = 2  # consuming.run holds the last fetch's list while the next one comes
REMEDIATION_PER_MESSAGE = 4 * 1024  # a fetched message's objects (Msg, headers, subjects)
REMEDIATION_DECODE_COPIES = 2.0  # events.decode of a message: 1.0x held, 2.0x while it runs
OBJECT_BYTES = int(1.5 * MIB)  # the API server's largest object (etcd's request limit)
OBJECT_COPIES = 1.0  # an object read back, as Python objects (text mostly: the assumption)
READ_COPIES = 2.0  # an answer's bytes (kubernetes_asyncio's last_response) and their text
ACTIONS_PER_SECOND = 100  # the worker's fastest pace of actions (the assumption)
LAST_ACTION_BYTES = 288  # an entry (141 B measured: a uid, a float, a slot), with room
FETCH_ROOM = 8 * 1024  # a fetch's byte budget is at least max_payload and a subject's room


@dataclass(frozen=True)
class RemediationBudget(Parts):
    """The remediation worker's worst case, computed from its settings
    (``RemediationBudget.of``)."""

    LABELS: ClassVar[dict[str, str]] = {
        "base": "base (idle + flow)",
        "fetches": "the messages of two fetches",
        "decoding": "the message being handled, decoded",
        "proof": "the Event, the Pod and the owners read back",
        "read": "an answer being read",
        "retired_client": "a retired kube client",
        "last_actions": "when each object was acted on",
        "nats": "nats-py buffers",
    }

    base: float
    fetches: float
    decoding: float
    proof: float
    read: float
    retired_client: float
    last_actions: float
    nats: float

    @classmethod
    def of(
        cls, settings: remediation_settings.Settings, max_payload: int = MAX_PAYLOAD
    ) -> RemediationBudget:
        n = settings.nats
        entries = min(LAST_ACTIONS, settings.remediation.rate_limit * ACTIONS_PER_SECOND)
        return cls(
            base=(REMEDIATION_IDLE_MIB + REMEDIATION_FLOW_MIB) * MIB,
            fetches=FETCHES_HELD * (fetched(n, max_payload) + n.batch * REMEDIATION_PER_MESSAGE),
            decoding=max_payload * REMEDIATION_DECODE_COPIES,
            proof=(2 + owners.MAX_DEPTH) * OBJECT_BYTES * OBJECT_COPIES,
            read=OBJECT_BYTES * READ_COPIES,
            retired_client=RETIRED_CLIENT,
            last_actions=entries * LAST_ACTION_BYTES,
            nats=max_payload + NATS_READ_CHUNK + NATS_PENDING,
        )


def fetched(nats: Any, max_payload: int) -> float:
    """The most bytes one fetch of the kit brings: ``nats.batch`` messages of ``max_payload``
    at most, and no more than ``nats.max_batch_bytes`` where the kit bounds its fetch in bytes
    (raised to ``max_payload`` and a subject's room)."""
    by_count = nats.batch * max_payload
    budget = getattr(nats, "max_batch_bytes", None)
    if budget is None:  # a kit that asks for messages only
        return float(by_count)
    return float(min(by_count, max(budget, max_payload + FETCH_ROOM)))


# -- the alerting subscriber ------------------------------------------------------------------
#
# What the alerting subscriber (k8s_event_consumer.alerting) can hold at once, from its config
# and the NATS server's max_payload (docs/performance.md, "The alerting subscriber"):
#
#     RSS <= base                                     an idle subscriber + a flow's working set
#            + the larger of what is in hand:
#                consuming: FETCH_COPIES * nats.max_batch_bytes   the fetched messages, and
#                                                     nats-py's read buffer as they come
#                           + MESSAGE_COPIES * max_payload        one message decoded
#                at start:  MESSAGE_COPIES * max_payload          the read-back: one at a time
#                           + ADOPT_IN_HAND           one alert read back from Alertmanager
#            + alerts.max_bytes + alerts.max_alerts * PER_ALERT   the Event alerts: their
#                                                     strings as counted, the rest by number
#            + alerts.max_status_alerts * (PER_ALERT + status alert's strings)
#            + REFUSAL_ALERTS * (PER_ALERT + REFUSAL_ALERT_BYTES)
#            + SEQUENCES_KEPT * PER_SEQUENCE          status keys' sequences, by digest
#            + FUTURE_DATED_LOGGED * PER_LOGGED_ID    ids logged once
#            + MEMORY_SEEN * PER_SEEN                 ids handled, by digest (MemorySeen)
#            + POST_COPIES * MAX_POST_BYTES           one POST in hand (its parts, its body)
#            + NATS_PENDING                           nats-py's outgoing buffer, reconnecting
#
# The one assumption: the server's max_payload (1 MiB by default; the stream sets no
# max_msg_size): no message is larger. The constants are measured on CPython 3.11 / x86_64
# (tests/integration/test_alerting_memory.py runs the hostile case and checks the bound).

ALERTING_IDLE_MIB = 55.0  # an idle subscriber, connected, its durable bound (52.3 measured)
ALERTING_FLOW_MIB = 8.0  # its working set while it reads and sends: aiohttp's, the loop's
FETCH_COPIES = 2.0  # the fetched bodies, and nats-py's read buffer they were cut from
MESSAGE_COPIES = 4.0  # one message decoded: body, its JSON text, the parsed data, the Event
# an alert read back from Alertmanager (MAX_ITEM_BYTES characters, up to 4 bytes each, parsed)
# and a chunk of the answer
ADOPT_IN_HAND = 4 * alertmanager.MAX_ITEM_BYTES + 2 * alertmanager.READ_CHUNK
PER_ALERT = 2560  # an alert's objects besides its strings: 1.7 KB measured, 2.0 KB with 8 uids
# a status alert's strings: two texts (a detail; a why or the resolved detail) of
# alerts.message_bytes and the rest, values of 256 bytes cut (~3.5 KB measured at the defaults)
STATUS_ALERT_VALUES = 4 * 1024
REFUSAL_ALERT_BYTES = 2 * 1024
PER_SEQUENCE = 160  # a 16-byte digest, an int and their dict entry
PER_LOGGED_ID = 400  # an id cut to 256 bytes and its entry
PER_SEEN = 160  # an id handled: a 16-byte digest and its OrderedDict entry (154 B measured)
POST_COPIES = 3.0  # a POST's parts, its joined body, the postable dicts of its alerts


ALERTING_PARTS = {  # AlertingBudget's parts, as rows() names them
    "base": "base (idle + flow)",
    "in_hand": "in hand (a fetch and a message, or the start's)",
    "alerts": "Event alerts (strings + objects)",
    "status_alerts": "status alerts",
    "refusal_alerts": "refusal alerts",
    "maps": "sequences, ids logged, ids handled",
    "post": "one POST",
    "nats_pending": "nats-py outgoing buffer",
}


@dataclass(frozen=True)
class AlertingBudget(Parts):
    """The alerting subscriber's worst case, computed from its settings
    (``AlertingBudget.of``)."""

    LABELS: ClassVar[dict[str, str]] = ALERTING_PARTS

    base: float
    in_hand: float
    alerts: float
    status_alerts: float
    refusal_alerts: float
    maps: float
    post: float
    nats_pending: float

    @classmethod
    def of(cls, settings: AlertingSettings, max_payload: int = MIB) -> AlertingBudget:
        """The bound for the alerting subscriber's ``settings`` against a server whose
        ``max_payload`` is that."""
        a = settings.alerts
        fetch = max(settings.nats.max_batch_bytes, fetching.floor(max_payload))
        consuming = FETCH_COPIES * fetch + MESSAGE_COPIES * max_payload
        starting = MESSAGE_COPIES * max_payload + ADOPT_IN_HAND
        return cls(
            base=(ALERTING_IDLE_MIB + ALERTING_FLOW_MIB) * MIB,
            in_hand=max(consuming, starting),
            alerts=a.max_bytes + a.max_alerts * PER_ALERT,
            status_alerts=a.max_status_alerts
            * (PER_ALERT + 2 * a.message_bytes + STATUS_ALERT_VALUES),
            refusal_alerts=holding.REFUSAL_ALERTS * (PER_ALERT + REFUSAL_ALERT_BYTES),
            maps=alerts.SEQUENCES_KEPT * PER_SEQUENCE
            + alerting_running.FUTURE_DATED_LOGGED * PER_LOGGED_ID
            + seen.MEMORY_SEEN * PER_SEEN,
            post=POST_COPIES * alertmanager.MAX_POST_BYTES,
            nats_pending=NATS_PENDING,
        )
