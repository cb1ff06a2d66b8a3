"""Prometheus metrics, prefix ``k8s_event_bridge_``, in a registry of their own.

The names follow Prometheus' conventions: counters end in ``_total``, a quantity with a unit
says it (``_seconds``, ``_bytes``), labels take a bounded set of values (``scope`` is one per
configured namespace, the rest are fixed words). deploy/monitoring/ (alert rules, dashboard) is
checked against what a real bridge exposes (tests/integration/test_monitoring.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import (
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "k8s_event_bridge"
# why a message is given up: bridge.jetstream.publishing (too large for max_payload, or
# JetStream's 10054, over the stream's max_msg_size)
DROP_REASONS = ("too_large", "jetstream_10054")
# why bad input is skipped: bridge.runtime.intake and bridge.runtime.watching
SKIP_REASONS = (
    "invalid_event",
    "unexpected_shape",
    "malformed_item",
    "malformed_line",
    "no_resource_version",
    "unknown_type",
    "not_newer",
)
# what one read of an object for the enrichment came to (bridge.runtime.enriching)
ENRICH_READS = ("ok", "notfound", "forbidden", "unreachable", "error")
# what an Event may go out without, and why (bridge.core.enrichment: PARTS, WHYS)
ENRICH_PARTS = ("namespace", "object", "owner")
ENRICH_WHYS = (
    "timeout", "unreachable", "forbidden", "notfound", "error", "unknown", "kind", "invalid",
    "oversized", "nouid", "scope", "unproven",
)  # fmt: skip
# why a NATS connection was refused before CONNECT (k8s_event_common.connecting.refusals)
NATS_REFUSALS = ("tls", "redirect")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class HotCounter(Collector):
    """A counter bumped once or more per event: a plain int, no lock (one event loop)."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.value = 0
        registry.register(self)

    def inc(self, amount: int = 1) -> None:
        self.value += amount

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.value)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation)


class ReadCounter(Collector):
    """A labelled counter kept elsewhere (``read`` returns its values by label), read when
    scraped: ``nats_refused_total``, counted by the shared NATS connection."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        values: tuple[str, ...],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.values = values
        self.read: Callable[[], Mapping[str, int]] = dict
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        counts = self.read()
        for value in self.values:
            family.add_metric([value], counts.get(value, 0))
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=[self.label])


class HotHistogram(Collector):
    """A histogram observed once per publish: bucket counts in a list, no lock."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: tuple[float, ...],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above every bound
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def collect(self) -> Iterator[Metric]:
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=buckets, sum_value=self.sum
        )

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)


class Metrics:
    def __init__(self, version: str = "") -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        # process_* (memory, CPU, open fds, start time: restarts show as its changes) and
        # python_info, as every Python exporter has them
        ProcessCollector(registry=r)
        r.register(PLATFORM_COLLECTOR)
        self.build_info = Gauge(
            f"{PREFIX}_build_info", "Always 1: the running version", ["version"], registry=r
        )
        self.build_info.labels(version).set(1)
        self.received = HotCounter(
            f"{PREFIX}_events_received",
            "Events read from the API server (watch and list items)",
            registry=r,
        )
        self.filtered = HotCounter(
            f"{PREFIX}_events_filtered", "Events the filter dropped", registry=r
        )
        self.too_old = Counter(
            f"{PREFIX}_events_too_old",
            "Events a scope's first list left out, never published: it had no checkpoint and "
            "they last happened before kubernetes.initial (a maximum age)",
            registry=r,
        )
        self.published = HotCounter(
            f"{PREFIX}_events_published",
            "Messages acked by JetStream (events and status events)",
            registry=r,
        )
        self.duplicates = Counter(
            f"{PREFIX}_publish_duplicates",
            "Publishes JetStream acked as duplicates (already in the stream)",
            registry=r,
        )
        self.failed = Counter(
            f"{PREFIX}_publish_failures",
            "Publish attempts that failed, by reason (each is retried unless the reason is "
            "permanent: then the message is dropped, see messages_dropped_total)",
            ["reason"],
            registry=r,
        )
        self.dropped = Counter(
            f"{PREFIX}_messages_dropped",
            "Messages no server of the stream can take (too large), replaced in the stream by a "
            "dropped status event, by reason",
            ["reason"],
            registry=r,
        )
        self.retries = Counter(
            f"{PREFIX}_publish_retries",
            "Publishes sent again with the same Nats-Msg-Id",
            registry=r,
        )
        self.skipped = Counter(
            f"{PREFIX}_input_skipped", "Bad input skipped, by reason", ["reason"], registry=r
        )
        self.latency = HotHistogram(
            f"{PREFIX}_publish_latency_seconds",
            "From sending a message to its JetStream ack",
            LATENCY_BUCKETS,
            registry=r,
        )
        self.watch_restarts = Counter(
            f"{PREFIX}_watch_restarts", "Watches started again, by cause", ["cause"], registry=r
        )
        self.relists = Counter(
            f"{PREFIX}_relists", "Lists after the first, by cause", ["cause"], registry=r
        )
        self.gaps = Counter(
            f"{PREFIX}_gaps",
            "Gap events: history that may be lost to compaction, by certainty (likely, possible)",
            ["certainty"],
            registry=r,
        )
        self.auth_failures = Counter(
            f"{PREFIX}_kube_auth_failures",
            "401/403 answers from the API server",
            ["status"],
            registry=r,
        )
        self.queue_depth = Gauge(
            f"{PREFIX}_queue_depth", "Messages waiting to be published", registry=r
        )
        self.queue_bytes = Gauge(
            f"{PREFIX}_queue_bytes", "Bytes waiting to be published", registry=r
        )
        self.queue_max = Gauge(
            f"{PREFIX}_queue_max_messages",
            "The queue's bound in messages (queue.max_events): the watch waits when it is full",
            registry=r,
        )
        self.queue_max_bytes = Gauge(
            f"{PREFIX}_queue_max_bytes",
            "The queue's bound in bytes (queue.max_bytes): the watch waits when it is full",
            registry=r,
        )
        self.inflight = Gauge(
            f"{PREFIX}_publish_inflight", "Publishes waiting for an ack", registry=r
        )
        self.publish_wait = Gauge(
            f"{PREFIX}_publish_oldest_wait_seconds",
            "Seconds the oldest publish in flight has waited for its JetStream ack; 0 when none "
            "is in flight",
            registry=r,
        )
        self.checkpoint_age = Gauge(
            f"{PREFIX}_checkpoint_age_seconds",
            "Seconds since the checkpoint was last saved",
            registry=r,
        )
        self.checkpoint_lag = Gauge(
            f"{PREFIX}_checkpoint_lag_seconds",
            "Seconds the oldest read but unsaved progress of a scope has waited for the "
            "checkpoint; 0 when all that was read is saved (a quiet scope stays at 0)",
            ["scope"],
            registry=r,
        )
        self.checkpoint_rv = Gauge(
            f"{PREFIX}_checkpoint_resource_version",
            "The saved resourceVersion, by scope",
            ["scope"],
            registry=r,
        )
        self.nats_connected = Gauge(
            f"{PREFIX}_nats_connected", "1 while connected to NATS", registry=r
        )
        self.nats_refused = ReadCounter(
            f"{PREFIX}_nats_refused",
            "NATS connections refused before CONNECT (nothing of the credentials sent): "
            "tls (TLS wanted, the socket has none), redirect (the WebSocket upgrade redirected)",
            "reason",
            NATS_REFUSALS,
            r,
        )
        self.apiserver_reachable = Gauge(
            f"{PREFIX}_apiserver_reachable",
            "1 while the last list or watch reached the API server",
            registry=r,
        )
        self.ready = Gauge(f"{PREFIX}_ready", "1 while /readyz answers 200", registry=r)
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this process reads and publishes: it holds the Lease, or runs without "
            "leader election; 0 while it stands by or starts",
            registry=r,
        )
        self.scope_synced = Gauge(
            f"{PREFIX}_scope_synced",
            "1 once the scope's first list (or watch from its checkpoint) is done",
            ["scope"],
            registry=r,
        )
        self.watch_failing = Gauge(
            f"{PREFIX}_watch_failing_seconds",
            "Seconds the scope's list or watch has been failing; 0 while it works",
            ["scope"],
            registry=r,
        )
        self.breaker_state = Gauge(
            f"{PREFIX}_apiserver_breaker_state",
            "The circuit breaker in front of the API server, per scope: 0 healthy, 1 open, "
            "2 half-open (a probe is out)",
            ["scope"],
            registry=r,
        )
        self.breaker_opened = Counter(
            f"{PREFIX}_apiserver_breaker_opened",
            "Times the breaker opened, by scope and reason (failures, latency)",
            ["scope", "reason"],
            registry=r,
        )
        # the enrichment (enrich): its cache, its reads, what Events went out without
        self.enrich_cache = Counter(
            f"{PREFIX}_enrich_cache_lookups",
            "Object lookups of the enrichment by result: hit (fresh in the cache) or miss",
            ["result"],
            registry=r,
        )
        self.enrich_reads = Counter(
            f"{PREFIX}_enrich_reads",
            "Objects read from the API server for the enrichment, by result (ok, notfound, "
            "forbidden, unreachable, error); one read serves every Event waiting on the object",
            ["result"],
            registry=r,
        )
        self.enrich_missing = Counter(
            f"{PREFIX}_enrich_missing",
            "Events published without part of their enrichment, by part (namespace, object, "
            "owner) and why (timeout, unreachable, forbidden, notfound, error, unknown, kind, "
            "invalid, oversized)",
            ["part", "why"],
            registry=r,
        )
        self.enrich_cache_entries = Gauge(
            f"{PREFIX}_enrich_cache_entries",
            "Objects held by the enrichment's cache (enrich.cache_entries bounds it)",
            registry=r,
        )
        self.enrich_cache_bytes = Gauge(
            f"{PREFIX}_enrich_cache_bytes",
            "Bytes held by the enrichment's cache, as counted (enrich.cache_bytes bounds it)",
            registry=r,
        )
        self.enrich_pending = Gauge(
            f"{PREFIX}_enrich_pending",
            "Events waiting for their lookups (enrich.max_pending bounds it)",
            registry=r,
        )
        self.enrich_namespaces = Gauge(
            f"{PREFIX}_enrich_namespaces",
            "Namespaces known to the enrichment's namespace watch",
            registry=r,
        )

        # Every known label value from 0 on: increase() and rate() see an alert's first event
        # (a series born at 1 has no earlier sample, so its first increase is invisible).
        for certainty in ("likely", "possible"):
            self.gaps.labels(certainty)
        for reason in DROP_REASONS:
            self.dropped.labels(reason)
            self.failed.labels(reason)
        for reason in ("send", "no_responders", "bad_ack", "wrong_stream", "stream_refused"):
            self.failed.labels(reason)
        for cause in ("closed", "quiet", "expired", "error", "auth"):
            self.watch_restarts.labels(cause)
        for cause in ("expired", "no_resource_version"):
            self.relists.labels(cause)
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        for status in ("401", "403"):
            self.auth_failures.labels(status)
        for result in ("hit", "miss"):
            self.enrich_cache.labels(result)
        for result in ENRICH_READS:
            self.enrich_reads.labels(result)
        for part in ENRICH_PARTS:
            for why in ENRICH_WHYS:
                self.enrich_missing.labels(part, why)

    def scope_started(self, scope: str) -> None:
        """A scope's labelled series, from 0 on."""
        self.breaker_state.labels(scope).set(0)
        for reason in ("failures", "latency"):
            self.breaker_opened.labels(scope, reason)

    def render(self) -> bytes:
        return generate_latest(self.registry)
