"""The alerting subscriber's configuration: a YAML file plus ``ALERTING_<SECTION>__<KEY>``
environment variables, which override the file (lists and maps as JSON:
``ALERTING_ALERTS__REASONS='["BackOff","OOMKilling"]'``). ``load()`` turns every problem into
one ``ConfigError`` whose message names the key and what is wrong; the command line exits 2 on
it. The keys and their defaults are described in docs/consumers.md (the alerting subscriber);
what the subscribers share (NATS, HTTP, log, the loading) is ``k8s_event_consumer.configuring``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from k8s_event_consumer import configuring
from k8s_event_consumer.configuring import (
    ConfigError,
    ExistingFile,
    HttpSettings,
    LogSettings,
    PositiveDuration,
    Section,
    TLSSettings,
    parse_duration,
)

ENV_PREFIX = "ALERTING_"
CONFIG_FILE_ENV = "ALERTING_CONFIG_FILE"

# Alertmanager's label names (classic mode): what every matcher and template can name
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
OWN_LABELS = frozenset({"alertname", "cluster", "namespace", "kind", "name", "reason", "scope"})

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

Duration = Annotated[float, BeforeValidator(parse_duration)]


class NatsSettings(configuring.NatsSettings):
    durable: str = "k8s-event-alerting"
    name: str = "k8s-event-alerting"


class AlertmanagerSettings(Section):
    # every Alertmanager of the HA cluster: each gets every alert, as Prometheus sends them
    urls: list[str] = ["http://127.0.0.1:9093"]
    timeout: PositiveDuration = 10.0
    # attempts per Alertmanager and send, with a doubling pause from retry_backoff
    attempts: int = Field(3, ge=1, le=20)
    retry_backoff: PositiveDuration = 0.5
    # when no Alertmanager took an alert, its message is held (nak'd) this long, then again
    hold: PositiveDuration = 10.0
    user: str | None = None
    password: SecretStr | None = None
    bearer_token: SecretStr | None = None
    bearer_token_file: ExistingFile = None
    tls: TLSSettings = TLSSettings()

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one Alertmanager URL is needed")
        for url in v:
            if not re.match(r"^https?://[^/\s]+", url):
                raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return [url.rstrip("/") for url in v]

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
    # Warning Events with one of these reasons become alerts; []: every Warning Event
    reasons: list[str] = DEFAULT_REASONS
    # an Event alert resolves when its Event has not been seen again for this long
    resolve_after: PositiveDuration = 900.0
    # firing (and lately resolved) alerts are sent again this often, as Prometheus does
    resend_interval: PositiveDuration = 60.0
    # a resolved alert is still sent with the others for this long, then forgotten
    resolved_retention: PositiveDuration = 900.0
    # how long the gap alert fires after the gap was detected
    gap_alert_for: PositiveDuration = 3600.0
    # at start, this much of the stream is read back into the state (nothing sent) so the
    # resend loop restores what a restarted Alertmanager forgot; null: the longer of
    # resolve_after and gap_alert_for; 0: no read back
    recover_window: Duration | None = None
    # static labels added to every alert (e.g. severity, team)
    labels: dict[str, str] = {}
    # the alerts' generatorURL; the subscriber also knows its own alerts by it at start;
    # default: nats://<stream>/<durable>
    generator_url: str | None = None

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

    @field_validator("generator_url")
    @classmethod
    def _generator_url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:\S+", v):
            raise ValueError(f"{v!r} is not a URI")
        return v


class Settings(configuring.SubscriberSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    nats: NatsSettings = NatsSettings()
    alertmanager: AlertmanagerSettings = AlertmanagerSettings()
    alerts: AlertsSettings = AlertsSettings()
    http: HttpSettings = HttpSettings()
    log: LogSettings = LogSettings()

    @property
    def generator_url(self) -> str:
        return self.alerts.generator_url or f"nats://{self.nats.stream}/{self.nats.durable}"

    @property
    def recover_window(self) -> float:
        a = self.alerts
        return (
            max(a.resolve_after, a.gap_alert_for) if a.recover_window is None else a.recover_window
        )


def load(path: str | None = None) -> Settings:
    """The settings from ``path`` (or ``ALERTING_CONFIG_FILE``) and the environment."""
    return configuring.load(Settings, ENV_PREFIX, CONFIG_FILE_ENV, path)


def redacted(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, every secret shown as ``"***"``."""
    return configuring.redacted(settings)


__all__ = ["ConfigError", "Settings", "load", "redacted"]
