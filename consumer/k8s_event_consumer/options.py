"""How a durable consumer of the stream reads: ``ConsumerOptions`` (acks, redelivery, batches)
and ``Start`` (where a new durable begins)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

DEFAULT_BACKOFF = (1.0, 5.0, 30.0, 60.0)
MAX_BATCH_BYTES = 4 * 1024 * 1024  # bytes of messages a fetch may bring (ConsumerOptions)


@dataclass(frozen=True)
class Start:
    """Where a new durable starts (an existing one keeps its place unless replayed)."""

    policy: DeliverPolicy = DeliverPolicy.ALL
    time: datetime | None = None
    sequence: int | None = None

    @classmethod
    def all(cls) -> Start:
        return cls(DeliverPolicy.ALL)

    @classmethod
    def new(cls) -> Start:
        return cls(DeliverPolicy.NEW)

    @classmethod
    def named(cls, name: str) -> Start:
        """``all`` or ``new``, as the settings' ``nats.start`` says."""
        return cls.all() if name == "all" else cls.new()

    @classmethod
    def at_time(cls, t: datetime) -> Start:
        if t.tzinfo is None:
            raise ValueError("Start.at_time needs an aware datetime")
        return cls(DeliverPolicy.BY_START_TIME, time=t)

    @classmethod
    def at_sequence(cls, seq: int) -> Start:
        if seq < 1:
            raise ValueError("stream sequences start at 1")
        return cls(DeliverPolicy.BY_START_SEQUENCE, sequence=seq)

    def apply(self, config: ConsumerConfig) -> ConsumerConfig:
        config.deliver_policy = self.policy
        # nats-py sends opt_start_time as given: an RFC 3339 string is what JetStream reads
        config.opt_start_time = self.time.isoformat() if self.time else None  # type: ignore[assignment]
        config.opt_start_seq = self.sequence
        return config


@dataclass(frozen=True)
class ConsumerOptions:
    ack_wait: float = 30.0  # seconds JetStream waits for an ack before it delivers again
    max_deliver: int = -1  # deliveries before JetStream gives up on a message; -1: never
    # redelivery delays after a failed handler (nak) and, when set, after ack_wait ran out
    # (JetStream's consumer back-off); the last one repeats
    backoff: Sequence[float] = DEFAULT_BACKOFF
    max_ack_pending: int = 1000
    batch: int = 64  # messages per fetch at most
    # bytes of messages a fetch may bring at most (JetStream counts a message's subject, reply
    # subject, headers and body): the messages in hand before any handler ran; raised to the
    # largest message the server takes when lower (``fetching.floor``)
    max_batch_bytes: int = MAX_BATCH_BYTES
    fetch_timeout: float = 5.0

    def config(self, durable: str, subjects: Sequence[str]) -> ConsumerConfig:
        cfg = ConsumerConfig(
            durable_name=durable,
            name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
        )
        if len(subjects) == 1:
            cfg.filter_subject = subjects[0]
        else:
            cfg.filter_subjects = list(subjects)
        return cfg

    def delay(self, deliveries: int) -> float:
        steps = self.backoff or DEFAULT_BACKOFF
        return float(steps[min(max(deliveries, 1), len(steps)) - 1])
