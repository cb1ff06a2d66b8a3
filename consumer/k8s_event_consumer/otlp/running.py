"""The OTLP subscriber on the runtime (``k8s_event_consumer.runtime``): the dead-letter stream
checked (made, with an operator's credentials) beside the durable, then batches shipped
(``shipping.Shipper``) until the stop, the batch in hand settled before it exits."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as NATS

from k8s_event_common import streams
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.connecting import CredentialError, client_tls_context
from k8s_event_consumer import runtime
from k8s_event_consumer.consuming import Consumer
from k8s_event_consumer.metrics import Counter
from k8s_event_consumer.otlp import sender
from k8s_event_consumer.otlp.settings import Settings
from k8s_event_consumer.otlp.shipping import Backoff, DeadLetters, Shipper
from k8s_event_consumer.seen import NoSeen, Seen

METRICS_PREFIX = "k8s_event_otlp_"
COUNTERS = (
    Counter.by(
        "records_total",
        "records by result: accepted (the endpoint took it), dead_lettered (refused for good, "
        "stored on the dead-letter subject), dead_letter_failed (not stored: sent again later), "
        "handed_back (refused with no proof the endpoint takes others: sent again later), "
        "unmappable (a message no record can be made of: acked)",
        "result",
        ("accepted", "dead_lettered", "dead_letter_failed", "handed_back", "unmappable"),
    ),
    Counter.by(
        "requests_total",
        "export requests by result: accepted, partial (a 2xx refusing some records), refused "
        "(400, 413, 422), failed (500), unavailable (429, 502, 503, 504, no answer), blocked "
        "(any other)",
        "result",
        ("accepted", "partial", "refused", "failed", "unavailable", "blocked"),
    ),
    Counter.by(
        "splits_total",
        "requests split in halves, by why: size (over the request limit in effect, or refused "
        "as too large), refused, partial, failed",
        "why",
        ("size", "refused", "partial", "failed"),
    ),
    Counter.by(
        "request_limit_changes_total",
        "changes of the request limit in effect (request_bytes_limit): lowered (the endpoint "
        "refused a request as too large), raised (a probe upward after many taken)",
        "direction",
        ("lowered", "raised"),
    ),
    Counter(
        "resent_records_total",
        "records sent again after a partial success or a 500 had possibly taken them "
        "(duplicates with the same cloudevents.event_id; a request that got no answer in time "
        'and was sent again is counted in requests_total{result="unavailable"})',
    ),
)


def client(cfg: Settings, clock: Clock = SYSTEM) -> sender.Client:
    """Raises ``CredentialError`` for a TLS file that does not load."""
    o = cfg.otlp
    ctx = (
        client_tls_context(o.tls.ca_file, o.tls.cert_file, o.tls.key_file, where="otlp.tls")
        if o.tls.ca_file or o.tls.cert_file
        else None
    )
    return sender.Client(
        o.url,
        timeout=o.timeout,
        headers={k: v.get_secret_value() for k, v in o.headers.items()},
        compression=o.compression,
        ssl_context=ctx,
        clock=clock,
    )


class Program(runtime.Subscriber):
    """The OTLP subscriber: ``k8s-event-otlp``."""

    name = "otlp"
    counters = COUNTERS
    stop_timeout = 20.0  # the batch in hand settles (sent, or handed back)
    shipper: Shipper | None = None

    async def setup(self) -> None:
        try:
            self.client = client(self.settings, self.clock)
        except CredentialError as exc:  # a TLS file that does not load
            raise runtime.Unusable(str(exc)) from exc
        self.metrics.gauge(
            "held_records",
            "records in hand, not yet settled",
            lambda: float(self.shipper.held if self.shipper else 0),
        )
        self.metrics.gauge(
            "endpoint_up",
            "0 after the endpoint did not take a request (until it takes one again), else 1",
            lambda: 0.0 if self.shipper and not self.shipper.endpoint_up else 1.0,
        )
        self.metrics.gauge(
            "request_bytes_limit",
            "the most bytes (protobuf, before compression) a request of several records has "
            "now: otlp.max_request_bytes, or less once the endpoint refused one as too large",
            lambda: float(
                self.shipper.limit.value if self.shipper else self.settings.otlp.max_request_bytes
            ),
        )

    def status(self) -> dict[str, Any]:
        cfg: Settings = self.settings
        out: dict[str, Any] = {
            "endpoint": cfg.otlp.url,
            "dead_letter_stream": cfg.dead_letter.stream,
        }
        if self.shipper is not None:
            out["held"] = self.shipper.held
            out["request_bytes_limit"] = self.shipper.limit.value
        return out

    async def provide(self, nc: NATS) -> Seen:
        dl = self.settings.dead_letter
        await streams.ensure(
            nc,
            streams.dead_letter_stream(dl.stream, [dl.subject], max_age=dl.max_age),
            "dead-letter stream",
            unchecked=["num_replicas"],
        )
        # every delivery sent, a redelivered one again: a copy carries the same id, and an id
        # seen first on a forged message must not hide the genuine one
        return NoSeen()

    async def prepare(self, nc: NATS, consumer: Consumer) -> None:
        cfg: Settings = self.settings
        dl = cfg.dead_letter
        self.shipper = Shipper(
            self.client,
            DeadLetters(nc.jetstream(), dl.subject, cfg.otlp.url, nc.max_payload or (1 << 20)),
            self.metrics,
            self.ctx.stopping,
            max_request_bytes=cfg.otlp.max_request_bytes,
            backoff=Backoff(cfg.otlp.backoff_initial, cfg.otlp.backoff_max),
            resource=tuple(sorted(cfg.otlp.resource_attributes.items())),
            version=runtime.version(),
            clock=self.clock,
        )

    async def consume(self, consumer: Consumer) -> None:
        assert self.shipper is not None
        o = self.settings.otlp
        await consumer.run_batches(
            self.shipper.ship, linger=o.flush_interval, max_bytes=o.max_request_bytes
        )

    async def close(self) -> None:
        if hasattr(self, "client"):
            await self.client.close()
