"""The OTLP subscriber's configuration: a YAML file plus ``OTLP_<SECTION>__<KEY>`` environment
variables, which override the file (maps as JSON: ``OTLP_OTLP__HEADERS='{"Authorization":
"Bearer ..."}'``). ``load()`` turns every problem into one ``ConfigError`` naming the key; the
command line exits 2 on it. The docstring under each field is its description
(docs/configuration.md is generated from this model, ``python -m tools.configref``); what the
subscribers share (NATS, HTTP, log, the loading) is ``k8s_event_consumer.configuring``.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from k8s_event_consumer import configuring
from k8s_event_consumer.configuring import (
    ConfigError,
    Duration,
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
from k8s_event_consumer.otlp import sizing

ENV_PREFIX = "OTLP_"
MIN_ACK_WAIT = 1.0  # seconds
CONFIG_FILE_ENV = "OTLP_CONFIG_FILE"
_HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")  # an HTTP field name (RFC 9110 token)
_FIELD_VALUE = re.compile(r"[\t \x21-\x7e\x80-\xff]*")  # RFC 9110 field-value (with obs-text)


class NatsSettings(configuring.NatsSettings):
    durable: Name = "k8s-event-otlp"
    name: str = "k8s-event-otlp"
    inbox_prefix: Subject = "_INBOX_k8s_event_otlp"
    batch: int = Field(512, ge=1, le=1000)
    """Most records per export request: the messages fetched and held together (one batch is
    in hand at a time)."""
    max_ack_pending: int = Field(1000, ge=1)
    """Most messages handed out and not yet acked (at least `batch`)."""


class DeadLetterSettings(Section):
    """Where a record the endpoint refused for good goes: its message, unchanged, with the
    endpoint's status and reason in headers (`K8s-Event-Otlp-Status`,
    `K8s-Event-Otlp-Reason`), stored by JetStream in the dead-letter stream."""

    stream: Name = "K8S_EVENTS_DEAD"
    """The dead-letter stream; `k8s-event-otlp provision` makes it."""
    subject: Subject = "k8s.dead.otlp"
    """The subject dead letters are published on: one of the stream's, outside the bridge's
    `nats.subject_prefix`."""
    max_age: Duration = 14 * 86400.0
    """How long a dead letter is kept (0: until purged)."""


class OtlpSettings(Section):
    """The OTLP endpoint: OTLP/HTTP with protobuf, as an OpenTelemetry Collector's `otlp`
    receiver (or any backend speaking OTLP) takes it."""

    endpoint: str = Field("http://127.0.0.1:4318", examples=["https://otel-collector:4318"])
    """The endpoint's base URL (http:// or https://); the logs path is added unless the URL
    ends in it already."""
    logs_path: str = "/v1/logs"
    """The logs path under `endpoint`."""
    headers: dict[str, SecretStr] = Field({}, examples=[{"Authorization": "Bearer ..."}])
    """Headers every request carries (a token for a backend). Never printed by check-config or
    logged."""
    compression: Literal["gzip", "none"] = "gzip"
    """How request bodies are compressed."""
    timeout: PositiveDuration = 10.0
    """Timeout of one request: no answer within it counts as unavailable (sent again)."""
    max_request_bytes: int = Field(4 * 1024 * 1024, ge=sizing.FLOOR)
    """The most bytes of a request (protobuf, before compression): a larger one is split
    before it is sent. Set it at or under what the endpoint takes: an OpenTelemetry
    Collector's `max_request_body_size` (20 MiB by default) limits the compressed body **and**
    the decompressed one (v0.139.0: its confighttp reads the decompressed body through the same
    limit), so gzip does not help: set this to the collector's `max_request_body_size` or
    less. An endpoint that refuses a request as too large (a 413, or a 400 that says so, as
    the collector does) makes the subscriber send smaller ones, halving down to what passes,
    and keep that limit (metric `request_bytes_limit`, log `request_limit_lowered`), raising
    it again slowly; a record alone larger than the endpoint takes goes to the dead letters.
    It also bounds the batch in hand (the memory: docs/performance.md)."""
    flush_interval: PositiveDuration = 1.0
    """After the first message of a batch, how long more are gathered before it is sent."""
    backoff_initial: PositiveDuration = 1.0
    """The first wait before an unavailable endpoint is tried again; it doubles up to
    `backoff_max`. An answer's `Retry-After` is honoured instead."""
    backoff_max: PositiveDuration = 30.0
    """The longest wait between tries (without `Retry-After`)."""
    resource_attributes: dict[str, str] = Field(
        {}, examples=[{"k8s.cluster.uid": "9f1c...", "deployment.environment.name": "prod"}]
    )
    """Resource attributes every record gets (they override the mapped ones of the same
    name): what the stream does not say, such as `k8s.cluster.uid`."""
    tls: HttpTLS = HttpTLS()

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        parts = urlsplit(http_url_checked(v, "otlp.headers"))
        if parts.query or parts.fragment or v.endswith(("?", "#")):
            # a key in a query would be logged and written into every dead letter
            raise ValueError(
                "holds a query or a fragment: put a key in otlp.headers (from a Secret)"
            )
        return v.rstrip("/")

    @field_validator("logs_path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with /")
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name, value in v.items():
            if not _HEADER.fullmatch(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if name.lower() in ("content-type", "content-encoding", "content-length"):
                raise ValueError(f"{name}: set by the subscriber itself")
            if not _FIELD_VALUE.fullmatch(value.get_secret_value()):
                raise ValueError(
                    f"{name}: its value holds a control character (only visible characters, "
                    "spaces and tabs)"
                )
        return v

    @field_validator("resource_attributes")
    @classmethod
    def _resource(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not name or name != name.strip():
                raise ValueError(f"{name!r} is not an attribute name")
        return v

    @property
    def url(self) -> str:
        if self.endpoint.endswith(self.logs_path):
            return self.endpoint
        return self.endpoint + self.logs_path


class Settings(configuring.SubscriberSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    nats: NatsSettings = NatsSettings()
    """NATS: the bridge's stream, and the durable consumer the subscriber reads it with. Its
    replicas share the durable: each message goes to one of them."""
    otlp: OtlpSettings = OtlpSettings()
    dead_letter: DeadLetterSettings = DeadLetterSettings()
    http: HttpSettings = HttpSettings()
    """The HTTP server: /healthz (alive), /readyz (200 once the durable consumer is bound),
    /metrics (prefix `k8s_event_otlp_`; docs/consumers.md)."""
    log: LogSettings = LogSettings()


def load(path: str | None = None) -> Settings:
    """The settings from ``path`` (or ``OTLP_CONFIG_FILE``) and the environment."""
    settings = configuring.load(Settings, ENV_PREFIX, CONFIG_FILE_ENV, path)
    if settings.nats.max_ack_pending < settings.nats.batch:
        raise ConfigError(
            f"nats.max_ack_pending ({settings.nats.max_ack_pending}) is below nats.batch "
            f"({settings.nats.batch}): a batch could never fill"
        )
    if settings.otlp.backoff_max < settings.otlp.backoff_initial:
        raise ConfigError("otlp.backoff_max is below otlp.backoff_initial")
    if settings.nats.ack_wait < MIN_ACK_WAIT:
        raise ConfigError(f"nats.ack_wait: at least {MIN_ACK_WAIT:g}s (a batch in hand is kept "
                          "from redelivery by marking it in progress within it)")  # fmt: skip
    if settings.otlp.flush_interval * 3 >= settings.nats.ack_wait:
        raise ConfigError(
            f"otlp.flush_interval ({settings.otlp.flush_interval:g}s) must be under a third of "
            f"nats.ack_wait ({settings.nats.ack_wait:g}s): the first messages of a batch wait "
            "that long before they are marked in progress, and would go to another replica"
        )
    subject = settings.dead_letter.subject
    n = settings.nats
    # neither the Event stream's nor the digests' (a program reading either may share the
    # dead-letter stream with the other: docs/consumers.md, "Shipping digests")
    for what, prefix in (("Event stream", n.subject_prefix), ("digests stream", n.digest_prefix)):
        filters = n.filters if prefix == n.read_prefix else []
        if subject.startswith(prefix + ".") or any(_takes(f, subject) for f in filters):
            raise ConfigError(
                f"dead_letter.subject {subject!r} is one of the {what}'s (under {prefix!r}): "
                "JetStream would refuse the dead-letter stream"
            )
    return settings


def _takes(pattern: str, subject: str) -> bool:
    """Whether the subject filter ``pattern`` takes ``subject`` (``*`` one token, ``>`` the
    rest)."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


__all__ = [
    "CONFIG_FILE_ENV",
    "ConfigError",
    "HttpSettings",
    "LogSettings",
    "Settings",
    "load",
    "redacted",
]
