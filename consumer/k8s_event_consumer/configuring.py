"""What the subscribers' configurations share: the NATS section (the connection's keys, from
``k8s_event_common.configuring`` as the bridge has them, plus the durable consumer's), the HTTP
and log sections, and ``load()``: a YAML file plus ``<PREFIX><SECTION>__<KEY>`` environment
variables, every problem one ``ConfigError`` naming the key (the command lines exit 2 on it).
Needs the ``settings`` extra (pydantic-settings with YAML).

The docstring under each field is its description (``use_attribute_docstrings``), and ``doc()``
in a type says how it reads: docs/configuration.md and config/remediation.yaml are generated
from the models (``python -m tools.configref``)."""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from k8s_event_common import configuring as common
from k8s_event_common.configuring import (
    ConfigError,
    Duration,
    ExistingFile,
    LogSettings,
    PositiveDuration,
    Section,
    TLSSettings,
    redacted,
)
from k8s_event_common.durations import parse_duration
from k8s_event_consumer.consuming import ConsumerOptions

__all__ = [
    "ConfigError",
    "Duration",
    "ExistingFile",
    "HttpSettings",
    "LogSettings",
    "NatsSettings",
    "PositiveDuration",
    "Section",
    "SubscriberSettings",
    "TLSSettings",
    "load",
    "parse_duration",
    "redacted",
]


class NatsSettings(common.NatsConnection):
    """NATS: the bridge's stream, and the durable consumer the subscriber reads it with."""

    # each subscriber subclasses this to give ``durable`` and ``name`` its own default (the
    # descriptions here still apply: tools/configref.py looks them up in the class's bases)

    name: str = "k8s-event-consumer"
    inbox_prefix: str = "_INBOX_k8s_event_consumer"
    stream: str = "K8S_EVENTS"
    """The bridge's stream (A-Z a-z 0-9 _ -)."""
    subjects: list[str] = Field(["k8s.events.>"], examples=[["k8s.events.prod-eu-1.>"]])
    """The subject filters of the durable consumer: by default every Event and status event of
    every cluster; `k8s.events.<cluster>.>` for one cluster."""
    durable: str = "k8s-event-consumer"
    """The durable consumer's name (A-Z a-z 0-9 _ -): where the subscriber resumes after a
    restart."""
    start: Literal["all", "new"] = "all"
    """Where a new durable starts: all (the whole stream) or new (only what comes after); an
    existing one keeps its place."""
    ack_wait: PositiveDuration = 30.0
    """JetStream delivers a message again when it is not acked within this."""
    max_ack_pending: int = Field(1000, ge=1)
    """Most messages handed out and not yet acked."""
    batch: int = Field(64, ge=1, le=1000)
    """Messages per fetch."""

    @field_validator("stream", "durable")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", v):
            raise ValueError("may hold only A-Z a-z 0-9 _ -")
        return v

    @field_validator("subjects")
    @classmethod
    def _subjects(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one subject filter is needed")
        for s in v:
            if not re.fullmatch(r"[^\s.]+(\.[^\s.]+)*", s):
                raise ValueError(f"{s!r} is not a NATS subject filter")
        return v

    def consumer_options(self, **overrides: Any) -> ConsumerOptions:
        return ConsumerOptions(
            ack_wait=self.ack_wait,
            max_ack_pending=self.max_ack_pending,
            batch=self.batch,
            **overrides,
        )


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
