"""Read the stream k8s-event-bridge writes (docs/consumers.md).

- ``events``: decode a message (either CloudEvents mode) into a CloudEvent and a typed view:
  ``KubeEvent`` or one of the bridge's status events (``Gap``, ``ApiserverUnreachable``, ...).
- ``consuming``: a durable pull consumer with explicit acks, back-off, idempotency by the
  CloudEvent id, callbacks per kind (``Handlers``), ``Retry`` to hold a message,
  ``Discard`` to drop an untrusted one without remembering its id; ``replay``.
- ``connecting``: a NATS connection that reconnects forever.

The subscribers built on it: ``k8s_event_consumer.alerting`` (Alertmanager) and
``k8s_event_consumer.remediation`` (acts on the API server).
"""

from k8s_event_consumer.connecting import NatsOptions, connect
from k8s_event_consumer.consuming import (
    Consumer,
    ConsumerOptions,
    Delivery,
    Discard,
    Handlers,
    KVSeen,
    MemorySeen,
    Retry,
    Start,
    replay,
)
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
