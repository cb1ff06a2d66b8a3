"""The digests' program's configuration: a YAML file plus ``DIGESTS_<SECTION>__<KEY>``
environment variables, which override the file. ``load()`` turns every problem into one
``ConfigError`` naming the key; the command line exits 2 on it. The docstring under each field
is its description (docs/configuration.md is generated from this model, ``python -m
tools.configref``); what the subscribers share (NATS, HTTP, log, the loading) is
``k8s_event_consumer.configuring``.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from k8s_event_consumer import configuring
from k8s_event_consumer.configuring import (
    ConfigError,
    Duration,
    HttpSettings,
    LogSettings,
    Name,
    PositiveDuration,
    Section,
    Subject,
    redacted,
)

ENV_PREFIX = "DIGESTS_"
CONFIG_FILE_ENV = "DIGESTS_CONFIG_FILE"


class NatsSettings(configuring.NatsSettings):
    durable: Name = "k8s-event-digests"
    """The consumer it reads the Events' stream through (pull, no acks, every subject), made
    by `k8s-event-digests provision`; one per replica (`k8s-event-digests-0`, `-1`: deploy/
    and the chart write `k8s-event-digests-$(POD_INDEX)`). The program moves it to where it
    reads from (`CONSUMER.RESET`); the shipped user may create none (where the credentials
    allow, it makes its own when missing). Its place is the last digest stored."""
    name: str = "k8s-event-digests"
    inbox_prefix: Subject = "_INBOX_k8s_event_digests"

    @field_validator("durable")
    @classmethod
    def _durable(cls, v: str) -> str:
        # deploy/ and the chart write k8s-event-digests-$(POD_INDEX)
        return configuring.pod_indexed(v)


class DigestSettings(Section):
    """The digests: one per series (an involved object and a reason) per window of the
    Events' stream, in the stream `nats.digest_stream`
    (docs/design.md#digests-one-per-series-per-window)."""

    window: PositiveDuration = 300.0
    """The length of a window, in whole seconds (windows start at multiples of it since the
    Unix epoch, in the time the Events' stream stored each message). Changing it changes
    every digest from then on: purge the digests' stream and let them be written again."""
    grace: Duration = 5.0
    """How long past a window's end, by the NATS server's clock, the window is closed when
    no message of a later one came: the clocks of a NATS cluster's servers are taken to
    agree within it."""
    idle: PositiveDuration = 7200.0
    """A series (and an Event uid in it) quiet this long in the stream's time is forgotten.
    At least the recorders' longest quiet within a series: the Event TTL of the API server
    (1h by default) and the new broadcaster's refresh (30m)."""
    max_series: int = Field(20000, ge=1)
    """The most series held. At the cap the least recently seen series not in the open
    window is forgotten (`series_forgotten_total`, log `series_forgotten`); when every one
    is in the open window, a new one's versions go to the window's overflow digest
    (`series.overflow: true`, `overflow_versions_total`)."""
    max_age: Duration = 30 * 86400.0
    """How long the digests' stream keeps a digest (0: until purged); its `provision` makes
    it so."""
    max_bytes: int = -1
    """The most bytes the digests' stream keeps (-1: no limit); the oldest go first."""
    replicas: int = Field(1, ge=1, le=5)
    """The digests' stream's replicas."""


class Settings(configuring.SubscriberSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    nats: NatsSettings = NatsSettings()
    """NATS: the bridge's stream, read whole and in order, and the digests' stream, written.
    Replicas need no coordination: each writes the same digests, and a digest is stored once
    (docs/design.md#digests-one-per-series-per-window)."""
    digests: DigestSettings = DigestSettings()
    http: HttpSettings = HttpSettings()
    """The HTTP server: /healthz (alive), /readyz (200 once it read where the
    digests stored end), /metrics (prefix `k8s_event_digests_`; docs/consumers.md)."""
    log: LogSettings = LogSettings()


def load(path: str | None = None) -> Settings:
    """The settings from ``path`` (or ``DIGESTS_CONFIG_FILE``) and the environment."""
    settings = configuring.load(Settings, ENV_PREFIX, CONFIG_FILE_ENV, path)
    w = settings.digests.window
    if w != int(w):
        raise ConfigError(f"digests.window: {w:g}s is not a whole number of seconds")
    if settings.digests.idle < w:
        raise ConfigError(
            f"digests.idle ({settings.digests.idle:g}s) is under digests.window ({w:g}s): "
            "an Event would be forgotten within a window and its bumps not counted"
        )
    if settings.nats.reads != "events":
        raise ConfigError("nats.reads: the digests are made from the Events (events)")
    return settings


__all__ = ["CONFIG_FILE_ENV", "ConfigError", "Settings", "load", "redacted"]
