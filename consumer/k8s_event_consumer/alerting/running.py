"""The alerting subscriber on the runtime (``k8s_event_consumer.runtime``): its durable bound,
the stream's last window read back and its own alerts taken back from Alertmanager, then each
message made alerts (``alerts.State``) and sent (``alertmanager.Client``), and every alert due
sent again by the resend loop.

``Alerting`` holds the handlers and the resend loop around one ``alerts.State`` and one
``alertmanager.Client``; ``Program`` gives them to the runtime.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from datetime import timedelta
from typing import Any

from nats.aio.client import Client as NATS

from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.connecting import CredentialError, client_tls_context
from k8s_event_common.digests import Digest
from k8s_event_consumer import logs, runtime
from k8s_event_consumer.alerting import alertmanager
from k8s_event_consumer.alerting.alerts import (
    Alert,
    Refusal,
    Rules,
    State,
    Stored,
    claimed_time,
    future_dated,
    rfc3339,
)
from k8s_event_consumer.alerting.holding import Bounds, Why, cut, value
from k8s_event_consumer.alerting.settings import Settings
from k8s_event_consumer.consuming import Consumer, Delivery, Handlers, Retry
from k8s_event_consumer.events import (
    STATUS_KINDS,
    ApiserverReachable,
    ApiserverUnreachable,
    Dropped,
    Gap,
    KubeEvent,
    Status,
    kind,
)
from k8s_event_consumer.metrics import Counter, Metrics
from k8s_event_consumer.options import Start
from k8s_event_consumer.replaying import replay

log = logs.get("alerting")

METRICS_PREFIX = "k8s_event_alerting_"
# A metric label names a message's kind from the fixed set (events.STATUS_KINDS, else "other"):
# a label value taken from the message unchecked would make a new series per value.
KINDS = ("event", "digest", *STATUS_KINDS, "other")
COUNTERS = (
    Counter.by(
        "events_total",
        "Kubernetes Events read, by result: alerted, ignored, or refused (their namespace, or "
        "every one, holds its most alerts)",
        "result",
        ("alerted", "ignored", "refused"),
    ),
    Counter.by(
        "digests_total",
        "digests read (nats.reads: digests), by result: alerted (the threshold reached), "
        "under (below it: resolves a firing alert, fires nothing), ignored (not a Warning of "
        "a kept reason), refused (a bound reached)",
        "result",
        ("alerted", "under", "ignored", "refused"),
    ),
    Counter.by(
        "alerts_refused_total",
        "alerts not held because a bound was reached, by why: namespace_alerts, "
        "namespace_bytes, alerts, bytes (every namespace), status_alerts, refusal_alerts",
        "why",
        tuple(w.value for w in Why),
    ),
    Counter.by(
        "status_events_total",
        "status events of the bridge read, by what (other: a kind this version does not know)",
        "what",
        (*STATUS_KINDS, "other"),
    ),
    Counter.by(
        "future_dated_total",
        "messages dated ahead of their stream timestamp by more than "
        "alerts.max_clock_skew, by what (event or the status event's kind)",
        "what",
        KINDS,
    ),
    Counter(
        "sends_total",
        "alert sends per Alertmanager, by result: ok, unavailable, rejected",
        ("alertmanager", "result"),
    ),
    Counter("held_total", "messages held (nak'd) because no Alertmanager took their alerts"),
    Counter.by(
        "resends_total",
        "rounds of the resend loop, by result: ok or failed",
        "result",
        ("ok", "failed"),
    ),
    Counter("replayed_total", "messages of the stream read back into the state at start"),
    Counter("adopted_total", "alerts taken back from Alertmanager at start"),
)
FUTURE_DATED_LOGGED = 1024  # ids remembered so each future-dated message is logged once


def stored(d: Delivery) -> Stored:
    """Where JetStream stored the delivered message (its sequence, the stream's timestamp)."""
    return Stored(d.stream_sequence, d.timestamp)


class Alerting:
    """What the subscriber does with each message, and the resend loop."""

    def __init__(
        self,
        state: State,
        client: alertmanager.Client,
        metrics: Metrics,
        *,
        hold: float,
        resend_interval: float,
        clock: Clock = SYSTEM,
    ) -> None:
        self.state = state
        self.clock = clock
        self.client = client
        self.metrics = metrics
        self.hold = hold
        self.resend_interval = resend_interval
        self._future_logged: OrderedDict[str, None] = OrderedDict()
        # after no Alertmanager took a send, the next messages are held at once until this
        # time (monotonic) instead of each waiting out its attempts
        self._down_until = 0.0
        self._refused = False  # the message in hand made an alert that was refused
        state.on_refused = self.refused
        metrics.read(
            "alerts",
            "alerts kept (sent and sent again), by alertname and state",
            lambda: {key: float(n) for key, n in self.state.summary().items()},
            labels=("alertname", "state"),
        )
        metrics.gauge(
            "alert_bytes",
            "bytes of the Warning Event alerts kept (their label and annotation values), "
            "bounded by alerts.max_bytes",
            lambda: float(self.state.held.events.bytes),
        )

    def refused(self, r: Refusal) -> None:
        """An alert not kept (a bound reached): counted, and logged once a minute per why."""
        self._refused = True
        self.metrics.inc("alerts_refused_total", why=r.why.value)
        b = self.state.rules.bounds
        log.warn_sampled(
            r.why.value,
            "alert_refused",
            why=r.why.value,
            alertname=r.alertname,
            cluster=r.cluster,
            namespace=r.namespace,
            refused=int(self.metrics.value("alerts_refused_total", why=r.why.value)),
            namespace_alerts=self.state.held.namespace((r.cluster, r.namespace)).alerts,
            bounds=f"{b.namespace_alerts} alerts and {b.namespace_bytes} bytes a namespace, "
            f"{b.alerts} and {b.bytes} in all, {b.status_alerts} status alerts",
        )

    def handlers(self) -> Handlers:
        return Handlers(
            on_event=self.on_event,
            on_gap=self.on_gap,
            on_apiserver_unreachable=self.on_apiserver_unreachable,
            on_apiserver_reachable=self.on_apiserver_reachable,
            on_dropped=self.on_dropped,
            on_status=self.on_status,
            on_digest=self.on_digest,
        )

    def checked(self, m: KubeEvent | Status | Digest, d: Delivery) -> Stored:
        """Where the message was stored; one dated ahead of that is counted and logged once
        (``future_dated``): the state takes it as written at the stream's time."""
        at = stored(d)
        claimed = claimed_time(m)
        if future_dated(claimed, at, self.state.rules.max_clock_skew):
            self.metrics.inc("future_dated_total", what=kind(m))
            mid = value(m.id)
            if mid not in self._future_logged:
                self._future_logged[mid] = None
                if len(self._future_logged) > FUTURE_DATED_LOGGED:
                    self._future_logged.popitem(last=False)
                assert claimed is not None and at.time is not None
                log.warning(
                    "future_dated",
                    id=mid,
                    what=kind(m),
                    stream_sequence=at.sequence,
                    claimed=rfc3339(claimed),
                    stored=rfc3339(at.time),
                    action="taken as written at the stream's time"
                    + ("; it resolves nothing" if isinstance(m, ApiserverReachable) else ""),
                )
        return at

    async def on_event(self, ev: KubeEvent, d: Delivery) -> None:
        self._refused = False
        alerts = self.state.event(ev, self.checked(ev, d))
        result = "refused" if self._refused else "alerted" if alerts else "ignored"
        self.metrics.inc("events_total", result=result)
        if alerts:
            log.debug("event_alert", id=value(ev.id), reason=value(ev.reason), count=ev.count)
            await self.deliver(alerts, d)

    async def on_digest(self, dg: Digest, d: Delivery) -> None:
        self._refused = False
        alerts = self.state.digest(dg, self.checked(dg, d))
        if self._refused:
            result = "refused"
        elif not self.state.rules.wants_series(dg.series):
            result = "ignored"
        elif dg.occurrences >= self.state.rules.threshold(dg.series.reason):
            result = "alerted"
        else:
            result = "under"
        self.metrics.inc("digests_total", result=result)
        if alerts:
            log.debug(
                "digest_alert",
                id=value(dg.id),
                reason=value(dg.series.reason),
                occurrences=dg.occurrences,
                result=result,
            )
            await self.deliver(alerts, d)

    async def on_gap(self, s: Gap, d: Delivery) -> None:
        self.metrics.inc("status_events_total", what=kind(s))
        log.info(
            "gap", cluster=value(s.cluster), scope=value(s.scope), certainty=value(s.certainty)
        )
        await self.deliver(self.state.gap(s, self.checked(s, d)), d)

    async def on_apiserver_unreachable(self, s: ApiserverUnreachable, d: Delivery) -> None:
        self.metrics.inc("status_events_total", what=kind(s))
        log.info(
            "apiserver_unreachable",
            cluster=value(s.cluster),
            scope=value(s.scope),
            detail=cut(s.detail, self.state.rules.message_bytes),
        )
        await self.deliver(self.state.unreachable(s, self.checked(s, d)), d)

    async def on_apiserver_reachable(self, s: ApiserverReachable, d: Delivery) -> None:
        self.metrics.inc("status_events_total", what=kind(s))
        log.info("apiserver_reachable", cluster=value(s.cluster), scope=value(s.scope))
        await self.deliver(self.state.reachable(s, self.checked(s, d)), d)

    async def on_dropped(self, s: Dropped, d: Delivery) -> None:
        self.metrics.inc("status_events_total", what=kind(s))
        log.warning(
            "dropped",
            cluster=value(s.cluster),
            dropped_id=value(s.dropped_id),
            size=s.size,
            reason=value(s.reason),
        )
        await self.deliver(self.state.dropped(s, self.checked(s, d)), d)

    async def on_status(self, s: Status, d: Delivery) -> None:
        self.metrics.inc("status_events_total", what=kind(s))

    async def deliver(self, alerts: Sequence[Alert], d: Delivery) -> None:
        """Send the alerts a message made; when no Alertmanager takes them, hold the message
        (``Retry``): JetStream delivers it again after ``hold`` seconds."""
        if not alerts:
            return
        if self.clock.monotonic() < self._down_until:
            self.metrics.inc("held_total")
            raise Retry(self.hold, "no Alertmanager took the last alerts")
        try:
            outcome = await self.client.send(alerts)
        except alertmanager.NotDelivered as exc:
            self._down_until = self.clock.monotonic() + self.hold
            self._count(exc.failures, [])
            self.metrics.inc("held_total")
            log.warning(
                "alerts_held",
                id=value(d.id),
                delivery=d.num_delivered,
                hold=self.hold,
                error=str(exc),
            )
            raise Retry(self.hold, str(exc)) from exc
        self._down_until = 0.0
        self._count(outcome.failed, outcome.delivered)
        for url, err in outcome.rejected.items():
            log.error("alerts_rejected", id=value(d.id), alertmanager=url, error=str(err))

    def _count(
        self, failed: dict[str, alertmanager.AlertmanagerError], delivered: list[str]
    ) -> None:
        for url in delivered:
            self.metrics.inc("sends_total", alertmanager=url, result="ok")
        for url, err in failed.items():
            result = "rejected" if isinstance(err, alertmanager.Rejected) else "unavailable"
            self.metrics.inc("sends_total", alertmanager=url, result=result)

    async def resend(self) -> bool:
        """One round: every alert due sent again, in POSTs bounded in alerts and bytes
        (``alertmanager.bodies``). False when some POST reached none."""
        due = self.state.due()
        ok = True
        try:
            outcome = await self.client.send(due)
        except alertmanager.NotDelivered as exc:
            self._count(exc.failures, [])
            log.warning("resend_failed", alerts=len(due), error=str(exc))
            ok = False
        else:
            self._count(outcome.failed, outcome.delivered)
        self.metrics.inc("resends_total", result="ok" if ok else "failed")
        if ok and due:
            self._down_until = 0.0
        return ok

    async def resend_forever(self) -> None:
        while True:
            await self.clock.sleep(self.resend_interval)
            await self.resend()

    def apply(self, d: Delivery) -> None:
        """A message into the state without sending (the replay at start): in the stream's
        order, as the consumer applies it."""
        ev, st, dg = d.decoded.event, d.decoded.status, d.decoded.digest
        if ev is not None:
            self.state.event(ev, self.checked(ev, d))
        elif dg is not None:
            self.state.digest(dg, self.checked(dg, d))
        elif isinstance(st, Gap):
            self.state.gap(st, self.checked(st, d))
        elif isinstance(st, ApiserverUnreachable):
            self.state.unreachable(st, self.checked(st, d))
        elif isinstance(st, ApiserverReachable):
            self.state.reachable(st, self.checked(st, d))
        elif isinstance(st, Dropped):
            self.state.dropped(st, self.checked(st, d))

    async def recover(
        self,
        nc: NATS,
        stream: str,
        subjects: Sequence[str],
        window: timedelta,
        name: str | None = None,
    ) -> int:
        """Read the last ``window`` of the stream into the state, sending nothing: after a
        restart the resend loop then sends every alert still due, even to an Alertmanager
        that restarted meanwhile (Alertmanager keeps alerts in memory only)."""
        since = self.clock.utcnow() - window
        n = 0
        for subject in subjects:
            start = Start.at_time(since)
            async for d in replay(
                nc, stream=stream, subject=subject, start=start, name=name, gets=name is None
            ):
                try:
                    self.apply(d)
                except Exception as exc:  # one message the state can not take stops no start
                    log.warning(
                        "replay_skipped", id=value(d.id), error=f"{type(exc).__name__}: {exc}"
                    )
                n += 1
        self.metrics.inc("replayed_total", n)
        log.info("recovered", messages=n, since=since.isoformat(), alerts=len(self.state.due()))
        return n

    async def adopt(self) -> int:
        """Take back this subscriber's alerts that Alertmanager still shows firing."""
        taken = 0
        for url in self.client.urls:
            n = 0
            try:
                async for alert in self.client.alerts(url):  # one at a time: never all at once
                    n += self.state.adopt([alert])
            except alertmanager.AlertmanagerError as exc:
                log.warning("adopt_failed", alertmanager=url, adopted=n, error=str(exc))
            else:
                log.info("adopted", alertmanager=url, alerts=n)
            taken += n
        self.metrics.inc("adopted_total", taken)
        return taken


def rules(cfg: Settings) -> Rules:
    a = cfg.alerts
    return Rules(
        reasons=frozenset(a.reasons),
        resolve_after=timedelta(seconds=a.resolve_after),
        gap_alert_for=timedelta(seconds=a.gap_alert_for),
        dropped_alert_for=timedelta(seconds=a.dropped_alert_for),
        resolved_retention=timedelta(seconds=a.resolved_retention),
        max_clock_skew=timedelta(seconds=a.max_clock_skew),
        labels=dict(a.labels),
        extension_labels=tuple(a.extension_labels),
        generator_url=cfg.generator_url,
        message_bytes=a.message_bytes,
        min_occurrences=cfg.digests.min_occurrences,
        thresholds=dict(cfg.digests.reasons),
        digest_grace=timedelta(seconds=cfg.digests.grace),
        bounds=Bounds(
            alerts=a.max_alerts,
            bytes=a.max_bytes,
            namespace_alerts=a.max_alerts_per_namespace,
            namespace_bytes=a.max_bytes_per_namespace,
            status_alerts=a.max_status_alerts,
        ),
    )


def client(cfg: Settings, clock: Clock = SYSTEM) -> alertmanager.Client:
    """Raises ``CredentialError`` for a TLS file that does not load."""
    am = cfg.alertmanager
    ctx = (
        client_tls_context(
            am.tls.ca_file, am.tls.cert_file, am.tls.key_file, where="alertmanager.tls"
        )
        if am.tls.ca_file or am.tls.cert_file
        else None
    )
    auth = alertmanager.Auth(
        user=am.user,
        password=am.password.get_secret_value() if am.password else None,
        bearer_token=am.bearer_token.get_secret_value() if am.bearer_token else None,
        bearer_token_file=am.bearer_token_file,
    )
    return alertmanager.Client(
        am.urls,
        timeout=am.timeout,
        attempts=am.attempts,
        retry_backoff=am.retry_backoff,
        # as Prometheus: a firing alert without an end lives 4 resend intervals per send
        horizon=timedelta(seconds=4 * cfg.alerts.resend_interval),
        auth=auth,
        ssl_context=ctx,
        clock=clock.utcnow,
        sleep=clock.sleep,
    )


class Program(runtime.Subscriber):
    """The alerting subscriber: ``k8s-event-alerting``."""

    name = "alerting"
    counters = COUNTERS

    async def setup(self) -> None:
        cfg: Settings = self.settings
        try:
            self.client = client(cfg, self.clock)
        except CredentialError as exc:  # a TLS file that does not load
            raise runtime.Unusable(str(exc)) from exc
        self.alerting = Alerting(
            State(rules(cfg), self.clock.utcnow),
            self.client,
            self.metrics,
            hold=cfg.alertmanager.hold,
            resend_interval=cfg.alerts.resend_interval,
            clock=self.clock,
        )

    def status(self) -> dict[str, Any]:
        return {"alertmanagers": self.settings.alertmanager.urls}

    async def prepare(self, nc: NATS, consumer: Consumer) -> None:
        cfg: Settings = self.settings
        if cfg.recover_window > 0:
            window = timedelta(seconds=cfg.recover_window)
            # by message gets, no consumer: its user may create none (docs/deploy.md); the
            # stream the durable reads (with reads: digests the digests', all of its subjects)
            await self.alerting.recover(nc, cfg.nats.read_stream, cfg.nats.filters, window)
        await self.alerting.adopt()

    async def consume(self, consumer: Consumer) -> None:
        await consumer.run(self.alerting.handlers())

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return [self.alerting.resend_forever()]

    async def close(self) -> None:
        if hasattr(self, "client"):
            await self.client.close()
