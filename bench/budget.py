"""The bridge's worst case of memory, computed from its configuration.

What a bridge can hold at once is bounded by its configuration, not by the cluster or the
length of an outage (docs/performance.md, "Memory: the worst case"):

    RSS <= base + scopes * per_scope
           + queue.max_bytes * QUEUE_COPIES + queue.max_events * PER_MESSAGE
           + nats.max_inflight_bytes * WINDOW_COPIES + nats.max_inflight * PER_MESSAGE
           + one Event being read (its line, decoded, converted: EVENT_COPIES of it)
           + the client's outgoing buffer while reconnecting (nats-py's pending_size)

- ``base``: an idle bridge with one scope, measured (``python -m bench.idle``), with the
  working set of a full-speed flow of ordinary Events on top (``FLOW``, measured by
  ``python -m bench.run``: its peak minus its idle);
- the queue holds converted messages (the CloudEvent's bytes, counted by the queue) and a few
  hundred bytes of objects each;
- the publish window holds the same messages until acked; while the connection is stalled
  each may also be framed in nats-py's outgoing buffer and in the socket's user-space buffer:
  up to three copies;
- a line being read is held raw, as the decoded Event and as the converted message.

``python -m bench.silence`` checks the bound against a real bridge whose JetStream is silent
for minutes while large Events keep coming. The constants are measured on CPython 3.11 /
x86_64 (bench/results/); ``Budget.of(settings)`` computes the bound for a configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.settings import Settings

MIB = 1024 * 1024
IDLE_MIB = 55.0  # an idle bridge, one scope (bench.idle: 53-54 measured; rounded up)
FLOW_MIB = 9.0  # a full-speed flow of ~1.2 KB Events on top (bench.run peak - idle)
PER_SCOPE_MIB = 0.15  # each more scope: its watch's buffers, tasks and metrics (bench.idle)
PER_MESSAGE = 512  # bytes of objects per message held besides its bytes (measured: ~350)
QUEUE_COPIES = 1.0
WINDOW_COPIES = 3.0
EVENT_COPIES = 3.0
NATS_PENDING = 2 * MIB  # nats-py's outgoing buffer bound while reconnecting (pending_size)
READ_BUFFER = 2 * 2**16  # aiohttp's read buffer of one watch (bridge.kube.client)


@dataclass(frozen=True)
class Budget:
    base: float
    scopes: float
    queue: float
    window: float
    event: float
    nats_pending: float

    @classmethod
    def of(cls, settings: Settings, event_bytes: int = 1_500_000) -> Budget:
        """The bound for ``settings``; ``event_bytes``: the largest Event read (by default
        the most the API server stores: etcd's request limit, 1.5 MiB)."""
        n = max(1, len(settings.kubernetes.namespaces))
        q, nats = settings.queue, settings.nats
        return cls(
            base=(IDLE_MIB + FLOW_MIB) * MIB,
            scopes=(n - 1) * PER_SCOPE_MIB * MIB + n * READ_BUFFER,
            queue=q.max_bytes * QUEUE_COPIES + q.max_events * PER_MESSAGE,
            window=nats.max_inflight_bytes * WINDOW_COPIES + nats.max_inflight * PER_MESSAGE,
            event=event_bytes * EVENT_COPIES,
            nats_pending=NATS_PENDING,
        )

    @property
    def total(self) -> float:
        return self.base + self.scopes + self.queue + self.window + self.event + self.nats_pending

    @property
    def total_mib(self) -> float:
        return self.total / MIB

    def rows(self) -> list[tuple[str, float]]:
        """(part, MiB) in the order of the formula, the total last."""
        return [
            ("base (idle + flow)", self.base / MIB),
            ("scopes", self.scopes / MIB),
            ("queue", self.queue / MIB),
            ("publish window", self.window / MIB),
            ("one Event read", self.event / MIB),
            ("nats-py outgoing buffer", self.nats_pending / MIB),
            ("total", self.total_mib),
        ]
