"""Read the stream k8s-event-bridge writes (docs/consumers.md).

- ``events``: decode a message (either CloudEvents mode) into a CloudEvent and a typed view:
  ``KubeEvent`` or one of the bridge's status events (``Gap``, ``ApiserverUnreachable``, ...).
- ``consuming``: a durable pull consumer with explicit acks, back-off, idempotency by the
  CloudEvent id (``seen``), callbacks per kind (``Handlers``), ``Retry`` to hold a message,
  ``Discard`` to drop an untrusted one without remembering its id; ``options`` (acks,
  batches, where a durable starts), ``durables`` (its config checked), ``fetching`` (each
  fetch bounded in messages and bytes), ``replaying`` (``replay``: a stretch of the stream
  without a durable).
- ``connecting``: a NATS connection that reconnects forever.
- ``runtime``: the one runtime of a subscriber program (signals, logs, metrics, the hardened
  HTTP probes, NATS, the durable opened, the drain): a program gives its settings and its
  handler (``runtime.Subscriber``).

The subscribers built on it: ``k8s_event_consumer.alerting`` (Alertmanager),
``k8s_event_consumer.remediation`` (acts on the API server) and ``k8s_event_consumer.otlp``
(OpenTelemetry log records).
"""

from k8s_event_consumer.connecting import NatsOptions, connect
from k8s_event_consumer.consuming import Consumer, Delivery, Discard, Handlers, Retry
from k8s_event_consumer.events import (
    ApiserverDegraded,
    ApiserverReachable,
    ApiserverRecovered,
    ApiserverUnreachable,
    BadMessage,
    Decoded,
    Dropped,
    Gap,
    KubeEvent,
    LeaderChanged,
    ObjectRef,
    Started,
    Status,
    Stopped,
    decode,
)
from k8s_event_consumer.options import ConsumerOptions, Start
from k8s_event_consumer.replaying import replay
from k8s_event_consumer.seen import KVSeen, MemorySeen

__all__ = [
    "ApiserverDegraded",
    "ApiserverReachable",
    "ApiserverRecovered",
    "ApiserverUnreachable",
    "BadMessage",
    "Consumer",
    "ConsumerOptions",
    "Decoded",
    "Delivery",
    "Discard",
    "Dropped",
    "Gap",
    "Handlers",
    "KVSeen",
    "KubeEvent",
    "LeaderChanged",
    "MemorySeen",
    "NatsOptions",
    "ObjectRef",
    "Retry",
    "Start",
    "Started",
    "Status",
    "Stopped",
    "connect",
    "decode",
    "replay",
]
