"""What the subscribers' configurations share: the NATS section (the connection's keys and the
bridge's stream and subjects, ``k8s_event_common.configuring.NatsStream`` as the bridge has
them, plus the durable consumer's), the HTTP and log sections, the TLS section and URL check of
an HTTP client (Alertmanager, an OTLP endpoint), and ``load()``: a YAML file plus
``<PREFIX><SECTION>__<KEY>`` environment variables, every problem one ``ConfigError`` naming the
key (the command lines exit 2 on it). Needs the ``settings`` extra (pydantic-settings with
YAML).

The docstring under each field is its description (``use_attribute_docstrings``), and ``doc()``
in a type says how it reads: docs/configuration.md and config/remediation.yaml are generated
from the models (``python -m tools.configref``)."""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings

from k8s_event_common import configuring as common
from k8s_event_common import subjects as subject_names
from k8s_event_common.configuring import (
    ConfigError,
    Duration,
    ExistingFile,
    LogSettings,
    Name,
    PositiveDuration,
    Section,
    Subject,
    TLSSettings,
    redacted,
)
from k8s_event_common.durations import parse_duration
from k8s_event_common.options import redact_url
from k8s_event_consumer.options import MAX_BATCH_BYTES, ConsumerOptions

__all__ = [
    "ConfigError",
    "Duration",
    "ExistingFile",
    "HttpSettings",
    "HttpTLS",
    "LogSettings",
    "Name",
    "NatsSettings",
    "PositiveDuration",
    "Section",
    "Subject",
    "SubscriberSettings",
    "TLSSettings",
    "http_url_checked",
    "load",
    "parse_duration",
    "redacted",
]


class NatsSettings(common.NatsStream):
    """NATS: the bridge's stream, and the durable consumer the subscriber reads it with."""

    # each subscriber subclasses this to give ``durable`` and ``name`` its own default (the
    # descriptions here still apply: tools/configref.py looks them up in the class's bases);
    # the connection, the stream and its subjects are the bridge's keys (NatsStream)

    name: str = "k8s-event-consumer"
    inbox_prefix: Subject = "_INBOX_k8s_event_consumer"
    subjects: list[str] = Field(["k8s.events.>"], examples=[["k8s.events.prod-eu-1.>"]])
    """The subject filters of the durable consumer: by default every Event and status event of
    every cluster; `k8s.events.<cluster>.>` for one cluster. Not with `match`."""
    match: dict[str, str] = Field({}, examples=[{"team": "payments"}])
    """One slice of the Events by one subject filter, built from `subject_template`: its
    placeholders (`cluster`, `namespace`, `kind`, `reason`, `type`, an enrichment extension such
    as `team`) → the value to take. `{team: payments}` with the template above reads
    `k8s.events.*.payments.*.*.*`. Each value is made a token as the bridge makes it; `""`
    takes the Events without that value. A name the template does not hold is an error. Not
    with `subjects`. `{}`: `subjects` decides."""
    status_events: bool = True
    """With `match`: also read the bridge's status events (`<prefix>.<cluster>._bridge.*`, of
    the matched cluster or of every one), which the alerting subscriber's control plane, gap
    and dropped alerts come from. false: the matched Events only."""
    reads: Literal["events", "digests"] = "events"
    """What the durable reads: `events`, every version of every Event the bridge published
    (the stream `stream`, with `subjects` or `match`); `digests`, one digest per series per
    window (the stream `digest_stream`, all of `<digest_prefix>.>`, made by
    `k8s-event-digests`). A subscriber reading both runs twice, with a durable each."""
    durable: Name = "k8s-event-consumer"
    """The durable consumer's name: where the subscriber resumes after a restart."""
    start: Literal["all", "new"] = "all"
    """Where a new durable starts: all (the whole stream) or new (only what comes after); an
    existing one keeps its place."""
    ack_wait: PositiveDuration = 30.0
    """JetStream delivers a message again when it is not acked within this."""
    max_ack_pending: int = Field(1000, ge=1)
    """Most messages handed out and not yet acked."""
    batch: int = Field(64, ge=1, le=1000)
    """Messages per fetch."""
    max_batch_bytes: int = Field(MAX_BATCH_BYTES, ge=64 * 1024)
    """Most bytes one fetch brings (as JetStream counts a message: subject, headers, body): what
    the subscriber holds of the stream at once, before its handler ran, whatever the messages'
    sizes. Raised to the server's `max_payload` plus 8 KiB when lower (the largest message must
    still come). Small messages come `batch` at a time either way."""

    @field_validator("subjects")
    @classmethod
    def _subjects(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one subject filter is needed")
        for s in v:
            if not re.fullmatch(r"[^\s.]+(\.[^\s.]+)*", s):
                raise ValueError(f"{s!r} is not a NATS subject filter")
        return v

    @field_validator("match")
    @classmethod
    def _match(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if "*" in value or ">" in value:
                raise ValueError(
                    f"{name}: {value!r} is a wildcard; leave {name} out to take every value"
                )
        return v

    @model_validator(mode="after")
    def _slice(self) -> NatsSettings:
        if self.reads == "digests":
            for key in ("match", "subjects"):
                if key in self.model_fields_set:
                    raise ValueError(
                        f"{key} and reads: digests exclude each other: a digests' durable "
                        f"reads all of {self.digest_prefix}.>"
                    )
            return self
        if not self.match:
            return self
        if "subjects" in self.model_fields_set:
            raise ValueError("subjects and match exclude each other: match builds the filter")
        holds = set(subject_names.placeholders(self.subject_template))
        for name in self.match:
            if name not in holds:
                raise ValueError(
                    f"match.{name}: not a placeholder of subject_template "
                    f"{self.subject_template!r} (it holds {', '.join(sorted(holds))})"
                )
        events, *status = self.filters
        for other in status:
            if _overlap(events, other):
                raise ValueError(
                    f"match: {events} takes some of the status events ({other}) and not all: "
                    "JetStream refuses overlapping filters; set status_events: false"
                )
        return self

    @property
    def filters(self) -> list[str]:
        """The durable consumer's subject filters: `subjects`, or with `match` its one filter
        (and the status events' when `status_events`, unless that one takes them already);
        with `reads: digests`, every digest."""
        if self.reads == "digests":
            return [f"{self.digest_prefix}.>"]
        if not self.match:
            return list(self.subjects)
        events = subject_names.subject_filter(
            self.subject_prefix, self.subject_template, **self.match
        )
        if not self.status_events:
            return [events]
        status = subject_names.status_filter(self.subject_prefix, self.match.get("cluster"))
        if _covers(events, status):
            return [events]
        return [events, status]

    @property
    def read_stream(self) -> str:
        """The stream the durable reads: `stream`, or with `reads: digests` `digest_stream`."""
        return self.digest_stream if self.reads == "digests" else self.stream

    @property
    def read_prefix(self) -> str:
        """The read stream's subject prefix."""
        return self.digest_prefix if self.reads == "digests" else self.subject_prefix

    def consumer_options(self, **overrides: Any) -> ConsumerOptions:
        return ConsumerOptions(
            ack_wait=self.ack_wait,
            max_ack_pending=self.max_ack_pending,
            batch=self.batch,
            max_batch_bytes=self.max_batch_bytes,
            **overrides,
        )


def pod_indexed(name: str) -> str:
    """A consumer's name that the manifests write as ``<name>-$(POD_INDEX)``, one per replica:
    a missing index (a cluster without the apps.kubernetes.io/pod-index label) would put both
    replicas on one consumer, each then reading half of the messages. ``ValueError`` for a
    name ending in ``-``."""
    if name.endswith("-"):
        raise ValueError(
            f"{name!r} ends in '-': an empty $(POD_INDEX)? (the label "
            "apps.kubernetes.io/pod-index needs Kubernetes 1.28+)"
        )
    return name


def _covers(a: str, b: str) -> bool:
    """Every subject filter ``b`` takes, ``a`` takes (filters of ``*`` and literals only)."""
    ta, tb = a.split("."), b.split(".")
    return len(ta) == len(tb) and all(x == "*" or x == y for x, y in zip(ta, tb, strict=True))


def _overlap(a: str, b: str) -> bool:
    """Some subject both filters take (filters of ``*`` and literals only)."""
    ta, tb = a.split("."), b.split(".")
    return len(ta) == len(tb) and all(x == y or "*" in (x, y) for x, y in zip(ta, tb, strict=True))


class HttpTLS(TLSSettings):
    """HTTPS with a private CA, or mutual TLS: used when `ca_file` or `cert_file` is set
    (https:// URLs are otherwise verified with the system's CAs)."""

    handshake_first: bool = False
    """Not used: an https:// connection is TLS from its first byte (the key is the NATS
    section's, `nats.tls.handshake_first`)."""


def http_url_checked(url: str, instead: str) -> str:
    """An http:// or https:// URL with no user name or password in it (it would be logged and
    a metric label): else a ``ValueError`` showing it redacted, and what to set ``instead``."""
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"{redact_url(url)!r} is not an http:// or https:// URL")
    if "@" in urlsplit(url).netloc:
        raise ValueError(
            f"{redact_url(url)!r} holds a user name or password: set {instead} (from a "
            "Secret) instead"
        )
    return url


class HttpSettings(Section):
    """The HTTP server: /healthz, /readyz and /metrics."""

    host: str = "0.0.0.0"
    """The address to listen on. 0.0.0.0: every IPv4 interface (`::` for IPv6)."""
    port: int | None = Field(8080, ge=0, le=65535)
    """The port to listen on (0 picks a free port). null: no HTTP server."""


class SubscriberSettings(common.FileAndEnvSettings):
    """A subscriber's settings: each sets its ``model_config`` (env prefix) and sections."""


S = TypeVar("S", bound=BaseSettings)


def load(settings_cls: type[S], prefix: str, file_env: str, path: str | None = None) -> S:
    """The settings from ``path`` (or ``$<file_env>``) and the environment."""
    return common.load(
        settings_cls,
        prefix,
        file_env,
        path,
        env_example=f"{prefix}NATS__SUBJECTS='[\"k8s.events.>\"]'",
    )
