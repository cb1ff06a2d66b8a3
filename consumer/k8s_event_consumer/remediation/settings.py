"""The remediation worker's configuration: a YAML file plus ``REMEDIATION_<SECTION>__<KEY>``
environment variables (docs/consumers.md lists every key; config/remediation.yaml has each with
its default)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from k8s_event_consumer import configuring
from k8s_event_consumer.configuring import (
    ExistingFile,
    HttpSettings,
    LogSettings,
    PositiveDuration,
    Section,
)

ENV_PREFIX = "REMEDIATION_"
CONFIG_FILE_ENV = "REMEDIATION_CONFIG_FILE"
_QUALIFIED_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


class NatsSettings(configuring.NatsSettings):
    durable: str = "k8s-event-remediation"
    name: str = "k8s-event-remediation"
    # ids handled, kept in this KV bucket across restarts (a redelivery is not acted on twice)
    seen_bucket: str = "k8s_event_remediation"


class KubernetesSettings(Section):
    # the cluster the worker acts on: only Events whose k8scluster is this (the bridge's
    # cluster.name); required, a stream may carry many clusters
    cluster: str = Field(min_length=1)
    # none: in a Pod its service account, else KUBECONFIG / ~/.kube/config
    kubeconfig: ExistingFile = None
    context: str | None = None
    # each API request gives up after this long (the API server may be down)
    request_timeout: PositiveDuration = 10.0


class RestartSettings(Section):
    """Delete a crash-looping Pod (its controller makes a new one)."""

    enabled: bool = True
    reasons: list[str] = ["BackOff"]
    # the Event's count (series-aware) at which the Pod is deleted
    min_count: int = Field(5, ge=1)
    # only Pods that a controller (ReplicaSet, StatefulSet, ...) will recreate
    only_controlled: bool = True


class MemorySettings(Section):
    """A container that was OOMKilled: annotate its owner (Deployment, StatefulSet, DaemonSet)
    with a suggested memory limit; a person or a policy applies it."""

    enabled: bool = True
    reasons: list[str] = ["BackOff", "OOMKilling"]
    # the suggestion: the container's limit (else request) times this, rounded up to a MiB
    factor: float = Field(1.5, gt=1.0, le=10.0)
    annotation: str = "remediation.k8s-event-bridge.io/suggested-memory-limit"

    @field_validator("annotation")
    @classmethod
    def _annotation(cls, v: str) -> str:
        if not _QUALIFIED_NAME.fullmatch(v) or len(v.rsplit("/", 1)[-1]) > 63:
            raise ValueError(f"{v!r} is not an annotation key (prefix/name)")
        return v


class RemediationSettings(Section):
    # dry run: every action is sent with dryRun=All (the API server checks it, changes
    # nothing) and recorded as a RemediationDryRun Event
    dry_run: bool = True
    # at most one action per object in this time
    rate_limit: PositiveDuration = 600.0
    # while the API server can not be reached, a message is held (redelivered) after this
    hold: PositiveDuration = 10.0
    # the reportingComponent of the Events the worker writes
    component: str = "k8s-event-remediation"
    restart: RestartSettings = RestartSettings()
    memory: MemorySettings = MemorySettings()


class Settings(configuring.SubscriberSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    kubernetes: KubernetesSettings
    nats: NatsSettings = NatsSettings()
    remediation: RemediationSettings = RemediationSettings()
    http: HttpSettings = HttpSettings()
    log: LogSettings = LogSettings()


def load(path: str | None = None) -> Settings:
    return configuring.load(Settings, ENV_PREFIX, CONFIG_FILE_ENV, path)
