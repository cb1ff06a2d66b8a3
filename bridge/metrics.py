"""Prometheus metrics, prefix ``k8s_event_bridge_``, in a registry of their own.

The names follow Prometheus' conventions: counters end in ``_total``, a quantity with a unit
says it (``_seconds``, ``_bytes``), labels take a bounded set of values (``scope`` is one per
configured namespace, the rest are fixed words). deploy/monitoring/ (alert rules, dashboard) is
checked against what a real bridge exposes (tests/integration/test_monitoring.py).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from k8s_event_common.metrics import (
    HotCounter,
    HotHistogram,
    labelled_counter,
    nats_refused,
    registry,
    render,
)

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
# why a publish attempt failed, besides DROP_REASONS (bridge.jetstream.publishing)
PUBLISH_FAILURES = ("send", "no_responders", "bad_ack", "wrong_stream", "stream_refused")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self, version: str = "") -> None:
        # with process_* and python_info; every labelled counter's known values from 0 on:
        # increase() and rate() see an alert's first event (labelled_counter)
        r = self.registry = registry()
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
        self.failed = labelled_counter(
            r,
            f"{PREFIX}_publish_failures",
            "Publish attempts that failed, by reason (each is retried unless the reason is "
            "permanent: then the message is dropped, see messages_dropped_total)",
            "reason",
            (*DROP_REASONS, *PUBLISH_FAILURES),
        )
        self.dropped = labelled_counter(
            r,
            f"{PREFIX}_messages_dropped",
            "Messages no server of the stream can take (too large), replaced in the stream by a "
            "dropped status event, by reason",
            "reason",
            DROP_REASONS,
        )
        self.retries = Counter(
            f"{PREFIX}_publish_retries",
            "Publishes sent again with the same Nats-Msg-Id",
            registry=r,
        )
        self.skipped = labelled_counter(
            r, f"{PREFIX}_input_skipped", "Bad input skipped, by reason", "reason", SKIP_REASONS
        )
        self.latency = HotHistogram(
            f"{PREFIX}_publish_latency_seconds",
            "From sending a message to its JetStream ack",
            LATENCY_BUCKETS,
            registry=r,
        )
        self.watch_restarts = labelled_counter(
            r,
            f"{PREFIX}_watch_restarts",
            "Watches started again, by cause",
            "cause",
            ("closed", "quiet", "expired", "error", "auth"),
        )
        self.relists = labelled_counter(
            r,
            f"{PREFIX}_relists",
            "Lists after the first, by cause",
            "cause",
            ("expired", "no_resource_version"),
        )
        self.gaps = labelled_counter(
            r,
            f"{PREFIX}_gaps",
            "Gap events: history that may be lost to compaction, by certainty (likely, possible)",
            "certainty",
            ("likely", "possible"),
        )
        self.auth_failures = labelled_counter(
            r,
            f"{PREFIX}_kube_auth_failures",
            "401/403 answers from the API server",
            "status",
            ("401", "403"),
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
        # read from the shared connection's count, set by the app (bridge.jetstream's)
        self.nats_refused = nats_refused(r, f"{PREFIX}_nats_refused")
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
        self.enrich_cache = labelled_counter(
            r,
            f"{PREFIX}_enrich_cache_lookups",
            "Object lookups of the enrichment by result: hit (fresh in the cache) or miss",
            "result",
            ("hit", "miss"),
        )
        self.enrich_reads = labelled_counter(
            r,
            f"{PREFIX}_enrich_reads",
            "Objects read from the API server for the enrichment, by result (ok, notfound, "
            "forbidden, unreachable, error); one read serves every Event waiting on the object",
            "result",
            ENRICH_READS,
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

        for part in ENRICH_PARTS:  # two labels: every pair from 0 on
            for why in ENRICH_WHYS:
                self.enrich_missing.labels(part, why)

    def scope_started(self, scope: str) -> None:
        """A scope's labelled series, from 0 on."""
        self.breaker_state.labels(scope).set(0)
        for reason in ("failures", "latency"):
            self.breaker_opened.labels(scope, reason)

    def render(self) -> bytes:
        return render(self.registry)
