"""The remediation worker's configuration: a YAML file plus ``REMEDIATION_<SECTION>__<KEY>``
environment variables. The docstring under each field is its description: docs/configuration.md
and config/remediation.yaml (every key with its default) are generated from this model
(``python -m tools.configref``)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from k8s_event_consumer import configuring
from k8s_event_consumer.configuring import (
    ExistingFile,
    HttpSettings,
    LogSettings,
    Name,
    PositiveDuration,
    Section,
    Subject,
)

# the longest name part of memory.annotation: the key's name part is at most 63, and a
# container name cut to fit keeps "." + some of it + "-" + an 8-hex hash (rules.annotation_key)
MAX_BASE_NAME = 52
ENV_PREFIX = "REMEDIATION_"
CONFIG_FILE_ENV = "REMEDIATION_CONFIG_FILE"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


class NatsSettings(configuring.NatsSettings):
    durable: Name = "k8s-event-remediation"
    name: str = "k8s-event-remediation"
    inbox_prefix: Subject = "_INBOX_k8s_event_remediation"
    seen_bucket: Name = "k8s_event_remediation"
    """The KV bucket keeping the CloudEvent ids handled, across restarts and replicas (a
    redelivery is not acted on twice)."""


class KubernetesSettings(Section):
    """The API server the worker acts on."""

    cluster: str = Field(min_length=1, examples=["prod-eu-1"])
    """The cluster the worker acts on, the bridge's `cluster.name`: only Events whose k8scluster
    is this are acted on (one stream may carry many clusters)."""
    kubeconfig: ExistingFile = None
    """A kubeconfig file. null: in a Pod its service account, else $KUBECONFIG or
    ~/.kube/config."""
    context: str | None = None
    """The kubeconfig context to use. null: the kubeconfig's current-context."""
    request_timeout: PositiveDuration = 10.0
    """Each API request gives up after this long (the API server may be down: the message is
    then held)."""
    event_ttl: PositiveDuration = 3600.0
    """The API server's `--event-ttl`. An Event a message names that the API server does not
    have is `stale` when the message says it was last seen longer ago than this (deleted by its
    TTL meanwhile), else `untrusted` (it never was there)."""


class RestartSettings(Section):
    """Delete a crash-looping Pod (its controller makes a new one)."""

    enabled: bool = True
    """Delete crash-looping Pods."""
    reasons: list[str] = ["BackOff"]
    """Warning Events on a Pod with one of these reasons count."""
    min_count: int = Field(5, ge=1)
    """The Event's count (series-aware) at which the Pod is deleted."""
    only_controlled: bool = True
    """Only Pods that a controller (ReplicaSet, StatefulSet, ...) will recreate: a controller
    that claims the Pod itself (its selector selects the Pod, docs/consumers.md), not one the
    Pod's ownerReference merely names (that is refused, `owner_unproven`)."""


class MemorySettings(Section):
    """A container that was OOMKilled: annotate its owner (Deployment, StatefulSet, DaemonSet)
    with a suggested memory limit, `<annotation>.<container>`; a person or a policy applies it.
    An Event this applies to never also deletes the Pod (that would not help)."""

    enabled: bool = True
    """Suggest memory limits."""
    reasons: list[str] = ["BackOff", "OOMKilling"]
    """Warning Events on a Pod with one of these reasons count, when one of its containers was
    last terminated OOMKilled (as the API server has the Pod, not as the message says)."""
    factor: float = Field(1.5, gt=1.0, le=10.0)
    """The suggestion: the container's memory limit (else its request) times this, rounded up
    to a MiB."""
    annotation: str = "remediation.k8s-event-bridge.io/suggested-memory-limit"
    """The annotation key (prefix/name, the name at most 52 characters) the suggestion is
    written under, `.<container>` appended; a container name that would make the key's name
    part longer than 63 is cut and ends in a hash of the whole name (`.<cut>_<8 hex>`)."""

    @field_validator("annotation")
    @classmethod
    def _annotation(cls, v: str) -> str:
        if not _QUALIFIED_NAME.fullmatch(v) or len(v.rsplit("/", 1)[-1]) > 63:
            raise ValueError(f"{v!r} is not an annotation key (prefix/name)")
        if len(v.rsplit("/", 1)[-1]) > MAX_BASE_NAME:
            raise ValueError(
                f"{v!r}: its name part is over {MAX_BASE_NAME} characters, leaving no room for "
                "the container's name (the key's name part is at most 63)"
            )
        return v


class NamespaceSettings(Section):
    """Where the worker may act. Its RBAC should grant exactly the allowed namespaces
    (RoleBindings, deploy/consumers/remediation-rbac.yaml); a message about a Pod elsewhere is
    `untrusted` (`namespace_denied`) and never acted on."""

    allow: list[str] = []
    """The namespaces the worker may act in. []: every namespace not denied."""
    deny: list[str] = ["kube-system", "kube-public", "kube-node-lease"]
    """Never acted in, even when allowed. The worker's own namespace (`$POD_NAMESPACE`, else
    its service account's) is always denied as well: it never acts on itself nor on the
    bridge."""

    @field_validator("allow", "deny")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _DNS_LABEL.fullmatch(name) or len(name) > 63:
                raise ValueError(f"{name!r} is not a namespace name (a DNS-1123 label)")
        return v


class RemediationSettings(Section):
    """What the worker does, and how carefully."""

    dry_run: bool = True
    """true: every action is sent with dryRun=All (the API server checks it under the worker's
    RBAC and changes nothing) and recorded as a RemediationDryRun Event."""
    rate_limit: PositiveDuration = 600.0
    """At most one action per object in this time."""
    hold: PositiveDuration = 10.0
    """While the API server can not be reached, a message is held and delivered again after
    this."""
    namespaces: NamespaceSettings = NamespaceSettings()
    component: str = "k8s-event-remediation"
    """The reportingComponent (and source.component) of the Events the worker writes."""
    restart: RestartSettings = RestartSettings()
    memory: MemorySettings = MemorySettings()


class Settings(configuring.SubscriberSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    kubernetes: KubernetesSettings
    nats: NatsSettings = NatsSettings()
    remediation: RemediationSettings = RemediationSettings()
    http: HttpSettings = HttpSettings()
    """The HTTP server: /healthz (alive), /readyz (200 once the durable consumer is bound, also
    while the API server is down), /metrics (prefix `k8s_event_remediation_`:
    `actions_total{action,result}`, `held_total`, `events_total{result}`,
    `untrusted_total{why}`, `owner_unproven_total{why}`, `messages_total{result}`)."""
    log: LogSettings = LogSettings()


def load(path: str | None = None) -> Settings:
    return configuring.load(Settings, ENV_PREFIX, CONFIG_FILE_ENV, path)
