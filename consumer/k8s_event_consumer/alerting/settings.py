"""The alerting subscriber's configuration: a YAML file plus ``ALERTING_<SECTION>__<KEY>``
environment variables, which override the file (lists and maps as JSON:
``ALERTING_ALERTS__REASONS='["BackOff","OOMKilling"]'``). ``load()`` turns every problem into
one ``ConfigError`` whose message names the key and what is wrong; the command line exits 2 on
it. The docstring under each field is its description: docs/configuration.md (every key with its
type, default and environment variable) is generated from this model (``python -m
tools.configref``); what the subscribers share (NATS, HTTP, log, the loading) is
``k8s_event_consumer.configuring``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from k8s_event_common.cloudevents import EXTENSION_NAME
from k8s_event_common.digests import MAX_NUMBER
from k8s_event_consumer import configuring
from k8s_event_consumer.alerting.holding import MESSAGE_BYTES, MIB
from k8s_event_consumer.configuring import (
    ConfigError,
    Duration,
    ExistingFile,
    HttpSettings,
    HttpTLS,
    LogSettings,
    Name,
    PositiveDuration,
    Section,
    Subject,
    http_url_checked,
    redacted,
)

ENV_PREFIX = "ALERTING_"
CONFIG_FILE_ENV = "ALERTING_CONFIG_FILE"

# Alertmanager's label names (classic mode): what every matcher and template can name
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
OWN_LABELS = frozenset(
    {"alertname", "cluster", "namespace", "kind", "name", "reason", "scope", "untrusted"}
)

DEFAULT_REASONS = [
    "BackOff",
    "OOMKilling",
    "FailedScheduling",
    "Unhealthy",
    "FailedMount",
    "FailedAttachVolume",
    "FailedCreatePodSandBox",
    "Evicted",
    "NodeNotReady",
    "FailedCreate",
    "ProvisioningFailed",
]


class NatsSettings(configuring.NatsSettings):
    durable: Name = "k8s-event-alerting"
    name: str = "k8s-event-alerting"
    inbox_prefix: Subject = "_INBOX_k8s_event_alerting"

    @field_validator("durable")
    @classmethod
    def _durable(cls, v: str) -> str:
        # deploy/ and the chart write k8s-event-alerting-$(POD_INDEX)
        return configuring.pod_indexed(v)


class AlertmanagerSettings(Section):
    """Where the alerts go: Prometheus Alertmanager's API v2, as Prometheus sends to it."""

    urls: list[str] = Field(
        ["http://127.0.0.1:9093"],
        examples=[["http://alertmanager-0:9093", "http://alertmanager-1:9093"]],
    )
    """Every Alertmanager of the HA cluster (http:// or https://); each gets every alert. No
    user name or password in a URL (it would be a metric label): use `user` and `password`."""
    timeout: PositiveDuration = 10.0
    """Timeout of one request."""
    attempts: int = Field(3, ge=1, le=20)
    """Attempts per Alertmanager and send, with a doubling pause from `retry_backoff`."""
    retry_backoff: PositiveDuration = 0.5
    """The first pause between attempts."""
    hold: PositiveDuration = 10.0
    """When no Alertmanager took an alert, its message is held (nak'd) this long, then
    delivered again."""
    user: str | None = None
    """User name for basic auth. null: none."""
    password: SecretStr | None = None
    """Password for basic auth (needs `user`). Never printed by check-config or logged."""
    bearer_token: SecretStr | None = None
    """A bearer token (not with `user`, nor with `bearer_token_file`). Never printed by
    check-config or logged."""
    bearer_token_file: ExistingFile = None
    """A file holding the bearer token, read on every request (a rotated token is picked up).
    null: none."""
    tls: HttpTLS = HttpTLS()

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one Alertmanager URL is needed")
        instead = "alertmanager.user and alertmanager.password"
        return [http_url_checked(url, instead).rstrip("/") for url in v]

    @model_validator(mode="after")
    def _auth(self) -> AlertmanagerSettings:
        if self.password is not None and not self.user:
            raise ValueError("password needs user")
        if self.user and (self.bearer_token or self.bearer_token_file):
            raise ValueError("basic auth (user) and a bearer token exclude each other")
        if self.bearer_token and self.bearer_token_file:
            raise ValueError("bearer_token and bearer_token_file exclude each other")
        return self


class AlertsSettings(Section):
    """Which Events alert, and how long alerts live (docs/consumers.md: the alerts)."""

    reasons: list[str] = Field(DEFAULT_REASONS, examples=[["BackOff", "OOMKilling"]])
    """Warning Events with one of these reasons alert (exact, case-sensitive); `[]`: every
    Warning Event."""
    resolve_after: PositiveDuration = 900.0
    """An Event alert resolves when its Event has not been seen again for this long."""
    resend_interval: PositiveDuration = 60.0
    """Every alert kept (firing, or lately resolved) is sent again this often, as Prometheus
    does."""
    resolved_retention: PositiveDuration = 900.0
    """A resolved alert is still sent with the others for this long, then forgotten."""
    gap_alert_for: PositiveDuration = 3600.0
    """How long the gap alert fires after the gap was detected."""
    dropped_alert_for: PositiveDuration = 3600.0
    """How long the dropped alert (a message no server of the stream could take) fires after
    the last one."""
    max_clock_skew: PositiveDuration = 30.0
    """A message dated ahead of the time JetStream stored it by more than this is taken as
    written when it was stored (logged `future_dated`), and an `apiserver_reachable` so dated
    resolves nothing. Status events apply in the stream's order, never by their own dates."""
    recover_window: Duration | None = None
    """At start, this much of the stream is read back into the alert state (nothing is sent for
    it), so the resend loop restores what a restarted Alertmanager forgot. null: the longest of
    `resolve_after`, `gap_alert_for` and `dropped_alert_for`; 0: no read-back."""
    labels: dict[str, str] = Field({}, examples=[{"severity": "warning", "team": "platform"}])
    """Static labels added to every alert, e.g. severity or team (not one of the subscriber's
    own label names: alertname, cluster, namespace, kind, name, reason, scope)."""
    extension_labels: list[str] = Field([], examples=[["team", "ownerkind", "ownername"]])
    """Enrichment extensions of the bridge (`enrich`) copied into the labels of
    `KubernetesWarningEvent`, for your routes: each a CloudEvents extension name (a-z 0-9, at
    most 20, here not starting with a digit), not one of the subscriber's own label names nor a
    key of `labels`. An Event without the value has no such label; a value over 256 characters
    is left out. A version that lacks a value the alert shows (a partial enrichment) keeps it;
    a changed value resolves the alert under its old labels and fires it under the new ones.
    `[]`: none."""
    generator_url: str | None = None
    """The alerts' generatorURL, by which the subscriber also knows its own alerts in
    Alertmanager at start. null: `nats://<the stream it reads>/<durable>`."""
    message_bytes: int = Field(MESSAGE_BYTES, ge=64, le=64 * 1024)
    """An Event's message is kept in its alert's `message` annotation up to this many bytes of
    UTF-8 (as events.k8s.io caps a note), cut on a character boundary and ending
    `...[cut: N bytes]` (N: the bytes left out); so is a status event's detail. Every other
    value an alert takes from a message (a name, reason, id) is kept up to 256 bytes, a label
    value with a digest of the whole (`...[cut: N bytes #1a2b3c4d]`)."""
    max_alerts: int = Field(10_000, ge=1)
    """Most Warning Event alerts kept (firing, or lately resolved) in all: beyond, an Event that
    would make a new alert is refused (`alerts_refused_total{why="alerts"}`, the alert
    `KubernetesWarningEventsRefused` with namespace `*`)."""
    max_bytes: int = Field(24 * MIB, ge=64 * 1024)
    """Most bytes of Warning Event alerts kept in all (what their label and annotation values
    take in memory; `why="bytes"`)."""
    max_alerts_per_namespace: int = Field(500, ge=1)
    """Most Warning Event alerts kept of one namespace (of one cluster), so that one namespace
    can not crowd out the others: beyond, its Events that would make a new alert are refused
    (`why="namespace_alerts"`, `KubernetesWarningEventsRefused` of that namespace)."""
    max_bytes_per_namespace: int = Field(1 * MIB, ge=16 * 1024)
    """Most bytes of Warning Event alerts kept of one namespace (`why="namespace_bytes"`); at
    least four alerts of the longest message."""
    max_status_alerts: int = Field(1_000, ge=1)
    """Most alerts of the bridge's status events kept (control plane unreachable, gap, dropped:
    one per cluster and scope); beyond, refused (`why="status_alerts"`)."""

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _LABEL_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)")
            if name in OWN_LABELS:
                raise ValueError(f"{name!r} is set by the subscriber itself")
            if not value:
                raise ValueError(f"label {name!r}: an empty value (Alertmanager drops it)")
        return v

    @field_validator("extension_labels")
    @classmethod
    def _extension_labels(cls, v: list[str]) -> list[str]:
        for name in v:
            if not (EXTENSION_NAME.fullmatch(name) and _LABEL_NAME.fullmatch(name)):
                raise ValueError(
                    f"{name!r} is not an extension name that is a label name too "
                    "(1 to 20 of a-z and 0-9, not starting with a digit)"
                )
            if name in OWN_LABELS:
                raise ValueError(f"{name!r} is set by the subscriber itself")
        if len(set(v)) != len(v):
            raise ValueError("a name is given twice")
        return v

    @model_validator(mode="after")
    def _labels_apart(self) -> AlertsSettings:
        both = sorted(set(self.labels) & set(self.extension_labels))
        if both:
            raise ValueError(
                f"{', '.join(both)}: in both labels and extension_labels (one source a label)"
            )
        return self

    @model_validator(mode="after")
    def _bounds(self) -> AlertsSettings:
        if self.max_alerts_per_namespace > self.max_alerts:
            raise ValueError(
                f"max_alerts_per_namespace ({self.max_alerts_per_namespace}) is above "
                f"max_alerts ({self.max_alerts})"
            )
        if self.max_bytes_per_namespace > self.max_bytes:
            raise ValueError(
                f"max_bytes_per_namespace ({self.max_bytes_per_namespace}) is above "
                f"max_bytes ({self.max_bytes})"
            )
        least = 4 * (self.message_bytes + 2048)
        if self.max_bytes_per_namespace < least:
            raise ValueError(
                f"max_bytes_per_namespace ({self.max_bytes_per_namespace}) holds fewer than "
                f"four alerts of message_bytes {self.message_bytes}: at least {least}"
            )
        return self

    @field_validator("generator_url")
    @classmethod
    def _generator_url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:\S+", v):
            raise ValueError(f"{v!r} is not a URI")
        return v


# a reason as the recorders write one (UpperCamelCase by convention; the API server takes at most
# 128 characters): a name that can be no reason is a typo here, and would never alert
_REASON = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


class DigestsSettings(Section):
    """Alerts from digests, with `nats.reads: digests` (docs/consumers.md: alerting on digests):
    a Warning series of one of `alerts.reasons` fires `KubernetesWarningEventSeries` when its
    occurrences in one window reach its threshold; under it, nothing fires."""

    min_occurrences: int = Field(3, ge=1, le=MAX_NUMBER)
    """The threshold of every reason `reasons` does not name: a series alerts when it happened
    at least this many times in one window (its digest's `occurrences`). 1: every digest of a
    kept reason alerts, as every Event does."""
    reasons: dict[str, int] = Field({}, examples=[{"BackOff": 5, "OOMKilling": 1}])
    """Thresholds of their own, by reason (exact, case-sensitive): reason → the occurrences in
    one window at which its series alerts (a positive number). A reason here must be one of
    `alerts.reasons` (unless that is `[]`): no other alerts at all. `{}`: `min_occurrences`
    for every reason."""
    grace: PositiveDuration = 120.0
    """How late after its window's end a digest may come (the digests program closes a window a
    little after it ends, and this subscriber may lag): a series alert ends at its window's end
    plus one window plus this, so that it stays firing while the next window's digest is on its
    way, and resolves by itself after a window with no digest. Longer: no flapping when digests
    come late; shorter: a storm that stopped resolves sooner."""

    @field_validator("reasons", mode="before")
    @classmethod
    def _counts(cls, v: Any) -> Any:
        # a number, not what pydantic would make one of (true, "5", 5.0)
        if isinstance(v, dict):
            for reason, n in v.items():
                if isinstance(n, bool) or not isinstance(n, int):
                    raise ValueError(f"{reason}: {n!r} is not a positive number of occurrences")
        return v

    @field_validator("reasons")
    @classmethod
    def _reasons(cls, v: dict[str, int]) -> dict[str, int]:
        for reason, n in v.items():
            if not _REASON.fullmatch(reason):
                raise ValueError(
                    f"{reason!r} is not an Event reason (1 to 128 of A-Z a-z 0-9 _ . : -, "
                    "starting with a letter or digit)"
                )
            if not 1 <= n <= MAX_NUMBER:
                raise ValueError(f"{reason}: {n!r} is not a positive number of occurrences")
        return v


class Settings(configuring.SubscriberSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    nats: NatsSettings = NatsSettings()
    """NATS: the bridge's stream, and the durable consumer the subscriber reads it with. Its
    subject filters must let the bridge's status events through (`<prefix>.<cluster>._bridge.>`):
    the control plane and gap alerts come from them (with `match`, `status_events` does)."""
    alertmanager: AlertmanagerSettings = AlertmanagerSettings()
    alerts: AlertsSettings = AlertsSettings()
    digests: DigestsSettings = DigestsSettings()
    http: HttpSettings = HttpSettings()
    """The HTTP server: /healthz (alive), /readyz (200 once the durable consumer is bound and the
    state recovered), /metrics (prefix `k8s_event_alerting_`; docs/consumers.md)."""
    log: LogSettings = LogSettings()

    @model_validator(mode="after")
    def _digest_reasons(self) -> Settings:
        kept = self.alerts.reasons
        unkept = sorted(set(self.digests.reasons) - set(kept)) if kept else []
        if unkept:
            raise ValueError(
                f"digests.reasons: {', '.join(unkept)} not in alerts.reasons: such a series "
                "never alerts (add the reason to alerts.reasons, or set alerts.reasons: [])"
            )
        return self

    @property
    def generator_url(self) -> str:
        n = self.nats
        return self.alerts.generator_url or f"nats://{n.read_stream}/{n.durable}"

    @property
    def recover_window(self) -> float:
        a = self.alerts
        return (
            max(a.resolve_after, a.gap_alert_for, a.dropped_alert_for)
            if a.recover_window is None
            else a.recover_window
        )


def load(path: str | None = None) -> Settings:
    """The settings from ``path`` (or ``ALERTING_CONFIG_FILE``) and the environment."""
    return configuring.load(Settings, ENV_PREFIX, CONFIG_FILE_ENV, path)


__all__ = ["CONFIG_FILE_ENV", "ConfigError", "Settings", "load", "redacted"]
