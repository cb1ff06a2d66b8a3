"""Configuration: a YAML file plus ``BRIDGE_<SECTION>__<KEY>`` environment variables.

Environment variables override the file. The docstring under each field is its description:
docs/configuration.md and config/bridge.yaml are generated from this model (``python -m
tools.configref``), every key with its type, default and environment variable. ``load()``
turns every problem into one ``ConfigError`` whose message names the key and what is wrong;
the command line exits 2 on it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal

from annotated_types import doc
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from bridge.errors import ConfigError
from k8s_event_common import configuring as common
from k8s_event_common import options as shared
from k8s_event_common import owners, subjects
from k8s_event_common.configuring import (
    Duration,
    ExistingFile,
    LogSettings,
    Name,
    PositiveDuration,
    Subject,
    TLSSettings,
    redacted,
)
from k8s_event_common.durations import parse_duration
from k8s_event_common.kube import paths

__all__ = [
    "ConfigError",
    "Duration",
    "ExistingFile",
    "LogSettings",
    "PositiveDuration",
    "Settings",
    "TLSSettings",
    "load",
    "parse_duration",
    "parse_size",
    "redacted",
]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(value: Any) -> int:
    """``1048576``, ``"64MiB"``, ``"1GB"`` → bytes; ``-1`` means unlimited."""
    if isinstance(value, bool):
        raise ValueError("a size such as 64MiB or 1GB is expected")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.strip() == "-1":
            return -1
        m = _SIZE.match(value)
        if m:
            unit = (m.group(2) or "b").lower()
            return int(float(m.group(1)) * _SIZE_UNITS[unit])
    raise ValueError(f"{value!r} is not a size such as 64MiB or 1GB")


def _at_least_64kib(value: int) -> int:
    if value < 64 * 1024:
        raise ValueError("must be at least 64KiB")
    return value


def _initial(value: Any) -> str:
    """``kubernetes.initial``: "all", "new", or a maximum age (a duration such as 15m)."""
    if value in ("all", "new"):
        return str(value)
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError):
        raise ValueError(
            f"{value!r} is neither all, new nor a maximum age such as 15m or 2h"
        ) from None
    if seconds <= 0:
        raise ValueError("a maximum age must be longer than 0s (or say new)")
    return str(value).strip()


# How a type reads in the configuration reference (``doc``, which pydantic ignores): what a key
# accepts, where a validator decides it (tools/configref.py shows it next to the key). Durations,
# files and the NATS connection's keys are those of k8s_event_common.configuring.
Size = Annotated[int, BeforeValidator(parse_size), doc("size")]
BufferSize = Annotated[
    int, AfterValidator(_at_least_64kib), BeforeValidator(parse_size), doc("size, >= 64KiB")
]
_Section = common.Section


class ClusterSettings(_Section):
    """The cluster the Events come from."""

    name: str | None = None
    """The cluster's name: the `<cluster>` in the CloudEvent `source`
    (`k8s://<cluster>/namespaces/<ns>`), in the `k8scluster` extension, in the NATS subjects and
    in the checkpoint key. Letters, digits, `-` and `_`. null: the kube-system namespace's uid
    (needs `get` on namespaces/kube-system). Set it to a readable name such as prod-eu-1."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        # The name is a subject token and part of the checkpoint key: kept to the characters
        # that are their own token, so the key reads as the name ("prod.eu" would be escaped).
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", v):
            raise ValueError(
                "must be letters, digits, - and _ (leave it unset to use the kube-system uid)"
            )
        return v


class BackoffSettings(_Section):
    """Back-off between retries after an API error (429, 5xx, refused, 401/403): each delay is
    jittered between the current step and twice it (client-go's jitter 1.0), never above `max`;
    a Retry-After header from the server is a floor, itself never above `max` (a server asking
    for an hour, or for ever, is asked again after `max`)."""

    initial: PositiveDuration = 0.8
    """The first delay."""
    factor: float = Field(2.0, ge=1.0)
    """Multiplier per failed attempt."""
    max: PositiveDuration = 30.0
    """The longest delay; not below `initial`."""
    reset_after: PositiveDuration = 120.0
    """Once the last failure is this old (the connection was healthy in between), the delay
    starts again from `initial`."""

    @model_validator(mode="after")
    def _order(self) -> BackoffSettings:
        if self.max < self.initial:
            raise ValueError("max must not be below initial")
        return self


class BreakerSettings(_Section):
    """The circuit breaker in front of the API server (one per scope; docs/delivery.md). It
    opens after `failures` requests in a row failed (5xx, 429, refused, reset, timeout) or when
    the 95th percentile of the last `latency_samples` response times (a list page, a watch
    opened) passes `latency_p95`. While open: no relists (the costly call that piles onto an
    overloaded control plane), and one request per back-off step as a probe (a cheap list of
    one Event, or the watch itself); a probe answered within `latency_p95` closes it. Its
    state: the metric `k8s_event_bridge_apiserver_breaker_state`, /status, and the status events
    `apiserver_degraded` / `apiserver_recovered`."""

    failures: int = Field(3, ge=1)
    """Failed requests in a row that open it."""
    latency_p95: PositiveDuration = 2.0
    """The p95 response time above which it opens."""
    latency_samples: int = Field(20, ge=1, le=1000)
    """How many recent response times the p95 is taken over; at least 5 of them (or all, when
    fewer) before latency can open it."""


class KubernetesSettings(_Section):
    """The API server, and which Events the bridge watches there."""

    kubeconfig: str | None = None
    """Path of a kubeconfig file. null: the in-cluster config (the Pod's service account) when
    running inside a Pod, else the usual kubeconfig rules ($KUBECONFIG, then ~/.kube/config)."""
    context: str | None = None
    """The kubeconfig context to use. null: the kubeconfig's current-context."""
    namespaces: list[str] = Field([], examples=[["default", "kube-system"]])
    """Namespaces to watch, one watch (and one checkpoint) per namespace, each a namespace name
    (a DNS-1123 label). `[]`: one cluster-wide watch of every namespace."""
    field_selector: str = ""
    """Extra server-side field selector for the list and the watch, e.g. `type=Warning` or
    `reason=BackOff` (only `=`, `==` and `!=` exist; no sets). The client-side filter still
    runs. `""`: none (the bridge adds selectors from `filter` when they narrow the stream)."""
    initial: Annotated[
        str, BeforeValidator(_initial), doc("all, new or a duration such as 15m")
    ] = "all"
    """What to do on the very first start, when no checkpoint exists. all: publish every Event
    that exists now, then watch; new: skip them, only watch; a duration such as `15m`: publish
    only the Events that exist now and whose last occurrence (series.lastObservedTime,
    lastTimestamp, eventTime, else creationTimestamp) is newer than that, then watch; the
    `started` status event says how many were skipped and why. A checkpoint always wins."""
    page_size: int = Field(500, ge=1, le=10000)
    """Page size (`limit`) of a list request, in Events."""
    read_timeout: PositiveDuration = 120.0
    """Socket read timeout. A default kube-apiserver sends no bookmarks on Event watches, so a
    scope with nothing new is silent: a watch that sends nothing for this long ends as a normal
    close and is opened again at once from the same resourceVersion (no warning, no status
    event, `watch_restarts{cause="quiet"}`). A dead connection is found sooner, as a failure:
    the watch's socket has TCP keepalive, probing after a quarter of this and giving up after
    half of it. A list or a request that gets no answer for this long is a failure too."""
    connect_timeout: PositiveDuration = 10.0
    """TCP connect timeout to the API server."""
    watch_timeout_min: Duration = 300.0
    """Each watch asks the server to close it after a random timeoutSeconds in
    [watch_timeout_min, watch_timeout_max), then watches again: the shortest (at least 1s)."""
    watch_timeout_max: Duration = 600.0
    """The longest server-side watch timeout; not below watch_timeout_min."""
    event_ttl: PositiveDuration = 3600.0
    """The API server's --event-ttl: how long an Event lives after its last update. Event
    watches are served from etcd without bookmarks, so a quiet scope or a narrow filter falls
    behind etcd's compaction and the next watch gets 410. If the relist then shows no Event
    newer than where the bridge was, that was less than event_ttl ago, the bridge watched the
    scope without a break up to the 410 (so it would have seen a deletion) and deletions are
    not published (`filter.include_deleted` false), nothing can have been missed and no `gap`
    event is published (docs/delivery.md)."""
    backoff: BackoffSettings = BackoffSettings()
    breaker: BreakerSettings = BreakerSettings()

    @property
    def initial_max_age(self) -> float | None:
        """``initial`` as a maximum age in seconds; None for all and new."""
        return None if self.initial in ("all", "new") else parse_duration(self.initial)

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        return _namespace_names(v)

    @model_validator(mode="after")
    def _watch_timeouts(self) -> KubernetesSettings:
        if not 1 <= self.watch_timeout_min <= self.watch_timeout_max:
            raise ValueError("watch_timeout_min must be at least 1s and at most watch_timeout_max")
        return self

    @property
    def scopes(self) -> list[str | None]:
        """What is watched: each namespace, or (None) the whole cluster."""
        return [*self.namespaces] or [None]


class FilterSettings(_Section):
    """Which Events are published: only those that pass every condition. In each list, `[]`
    means no condition; names are matched exactly (case-sensitive)."""

    reasons: list[str] = Field([], examples=[["BackOff", "OOMKilling"]])
    """Publish only Events with one of these reasons, e.g. [BackOff, OOMKilling, FailedMount]."""
    exclude_reasons: list[str] = Field([], examples=[["Pulled", "Created", "Started"]])
    """Never publish Events with one of these reasons."""
    types: list[Literal["Normal", "Warning"]] = Field([], examples=[["Warning"]])
    """Publish only Events of these types."""
    kinds: list[str] = Field([], examples=[["Pod", "Node"]])
    """Publish only Events whose involvedObject.kind is one of these, e.g. [Pod, Node]."""
    namespaces: list[str] = Field([], examples=[["prod"]])
    """Publish only Events from these namespaces (the watch still covers
    `kubernetes.namespaces`)."""
    exclude_namespaces: list[str] = Field([], examples=[["kube-system"]])
    """Never publish Events from these namespaces."""
    min_count: int = Field(1, ge=1)
    """Publish only Events seen at least this many times (series.count, else count)."""
    include_deleted: bool = False
    """Also publish DELETED Events (an Event expiring at the end of its TTL). false: ADDED and
    MODIFIED only."""


class NatsSettings(common.NatsStream):
    """NATS: the servers, the JetStream stream the CloudEvents go to (created by the bridge
    unless told not to), and how the bridge authenticates."""

    # the connection's keys (servers ... tls) and the stream's name and subjects are the
    # subscribers' too, described once in k8s_event_common.configuring.NatsStream; here only
    # the bridge's defaults and its own keys
    name: str = "k8s-event-bridge"
    inbox_prefix: Subject = "_INBOX_k8s_event_bridge"
    connect_timeout: Duration = 5.0  # 0 is let through, as it always was
    domain: Name | None = None
    """The JetStream domain to use: the stream and the checkpoint bucket are then made and used
    through $JS.<domain>.API, that domain's JetStream and no other (with a domain nobody
    serves, the bridge waits, not ready, rather than fall back). A leaf node with its own
    JetStream answers the plain API itself, so in the topology of docs/deploy.md this pins the
    target rather than changes it. null: the JetStream the server answers with (the account's
    default)."""
    create_stream: bool = True
    """Create the stream with its one shape (docs/deploy.md, "Provisioning") when it is missing,
    also when it was deleted while the bridge runs, where the credentials may (the shipped NATS
    permissions do not: provision it first, `k8s-event-bridge provision`). An existing stream
    or checkpoint bucket whose config differs in any key stops the bridge, each difference
    named; it is never changed. false: it must exist already."""
    max_age: PositiveDuration = 7 * 86400.0
    """Stream retention: messages older than this are removed (the stream must have it). Not
    shorter than `duplicate_window`."""
    max_bytes: Size = -1
    """Stream size limit (the stream must have it); -1: unlimited."""
    num_replicas: int = Field(1, ge=1, le=5)
    """Stream replicas (the stream must have them); also the checkpoint KV bucket's."""
    duplicate_window: PositiveDuration = 7200.0
    """JetStream's duplicate window: a message with a Nats-Msg-Id seen within it is dropped.
    Make it longer than the longest restart or outage you expect (an Event's TTL is 1h by
    default); not longer than `max_age`."""
    ack_timeout: PositiveDuration = 5.0
    """How long to wait for JetStream's ack of one publish before publishing it again with the
    same Nats-Msg-Id."""
    max_inflight: int = Field(1024, ge=1, le=65536)
    """Most publishes awaiting an ack at once."""
    max_inflight_bytes: BufferSize = 4 * 2**20
    """Most bytes of publishes awaiting an ack at once (one message more may go, so that a
    message larger than the rest of the room is never stuck). With the queue's bounds it caps
    what a JetStream that stops acking can make the bridge hold: each of these bytes may be
    held three times while a connection stalls (docs/performance.md, the worst case)."""

    @field_validator("max_bytes")
    @classmethod
    def _max_bytes(cls, v: int) -> int:
        if v != -1 and v <= 0:
            raise ValueError("must be -1 (unlimited) or a positive size")
        return v

    @model_validator(mode="after")
    def _window_within_age(self) -> NatsSettings:
        if self.duplicate_window > self.max_age:
            raise ValueError(
                "duplicate_window must not be longer than max_age (JetStream refuses it)"
            )
        return self

    def options(self) -> shared.NatsOptions:
        """The shared connection's options (secrets included: never print them)."""
        # every subject is sanitised by bridge.core.subjects
        return dataclasses.replace(super().options(), skip_subject_validation=True)


def _namespace_names(v: list[str]) -> list[str]:
    """Namespaces the bridge puts in an API path: each a DNS-1123 label
    (``k8s_event_common.kube.paths``, the rule the path is built by)."""
    for name in v:
        problem = paths.namespace_problem(name)
        if problem:
            raise ValueError(problem)
    return v


# Kubernetes label and annotation keys: [prefix/]name, the prefix a DNS subdomain.
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# CloudEvents 1.0 extension names: lower-case ASCII letters and digits, at most 20 (the spec's
# SHOULD, kept as a MUST so that every SDK and binding takes them).
_EXTENSION = re.compile(r"[a-z0-9]{1,20}")
# the CloudEvents context attributes and the bridge's own extensions: never an enrichment's
# (k8s_event_common.cloudevents' CORE_ATTRIBUTES | BRIDGE_ATTRIBUTES, which the subscribers
# read by, imports the cloudevents SDK: the bridge's runtime does not; a test holds them equal)
RESERVED_ATTRIBUTES = frozenset(
    {
        "specversion", "id", "source", "type", "subject", "time", "datacontenttype",
        "dataschema", "data", "data_base64", "k8scluster", "k8snamespace", "k8skind",
        "k8sname", "k8sreason", "k8scount", "k8senriched", "k8senrichmissing", "k8suntrusted",
    }
)  # fmt: skip
# the template's own placeholders
TEMPLATE_FIELDS = subjects.FIELDS


def _label_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if not _QUALIFIED_NAME.fullmatch(name) or (
        slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))
    ):
        raise ValueError(f"{key!r} is not a Kubernetes label or annotation key ([prefix/]name)")
    return key


def _extension(name: str) -> str:
    if not _EXTENSION.fullmatch(name):
        raise ValueError(f"{name!r} is not a CloudEvents extension name (1 to 20 of a-z and 0-9)")
    if name in RESERVED_ATTRIBUTES or name in TEMPLATE_FIELDS:
        raise ValueError(f"{name!r} is a CloudEvents or bridge attribute already")
    return name


def _mapping(v: dict[str, str]) -> dict[str, str]:
    for key, ext in v.items():
        try:
            _label_key(key)
            _extension(ext)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    return v


KeyToExtension = Annotated[
    dict[str, str],
    AfterValidator(_mapping),
    doc("map: label/annotation key → extension name (a-z 0-9, ≤ 20)"),
]
ExtensionName = Annotated[
    str | None,
    AfterValidator(lambda v: v if v is None else _extension(v)),
    doc("extension name (a-z 0-9, ≤ 20)"),
]


class NamespaceEnrichment(_Section):
    """What an Event gets from its namespace (kept current by a list and watch of Namespaces:
    needs list and watch on namespaces; only the keys named here are held)."""

    labels: KeyToExtension = Field({}, examples=[{"team": "team"}])
    """Namespace label → the CloudEvent extension it becomes, e.g. `{team: team}`."""
    annotations: KeyToExtension = Field({}, examples=[{"example.com/oncall": "oncall"}])
    """Namespace annotation → the CloudEvent extension it becomes (values over 1 KiB are left
    out, marked `namespace:oversized`)."""


class ObjectEnrichment(_Section):
    """What an Event gets from its involved object and the object's top controller, read with
    `get` (cached; needs get on each of `kinds`)."""

    labels: KeyToExtension = Field({}, examples=[{"app.kubernetes.io/name": "app"}])
    """Label of the involved object → the CloudEvent extension it becomes."""
    owner_kind: ExtensionName = None
    """The extension holding the kind of the object's top controller, found through the
    controller ownerReferences (Pod → ReplicaSet → Deployment), each counted only when its owner
    claims the child (docs/design.md, "Who owns what"); the object itself when it has no
    controller; the farthest owner proven, marked `owner:unproven`, when a link is not. null:
    not added."""
    owner_name: ExtensionName = None
    """The extension holding the top controller's name. null: not added."""
    kinds: list[str] = Field(
        ["Pod", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"],
    )
    """The kinds the bridge reads (involved objects and owners on the way up); the deploy/
    RBAC and the chart grant get on exactly these. An owner of another kind is not read, so not
    proven: the walk stops below it (`owner:unproven`); an Event about another kind is published
    without the object's values (marked `object:kind`). Known: Pod, Node, Service,
    ReplicationController, PersistentVolumeClaim, ReplicaSet, Deployment, StatefulSet,
    DaemonSet, Job, CronJob."""

    cluster_namespaces: list[str] = ["default"]
    """An Event about a cluster-scoped object (a Node) gets that object's values only when the
    Event is in one of these namespaces: where the kubelet and the node controllers write theirs
    (`default`), and whoever may create Events there is trusted with a Node's name. Elsewhere
    (a tenant's namespace, where the tenant may write an Event about any Node) it is published
    without them, marked `object:scope`. []: never. It narrows the one rule (docs/design.md,
    "The tenant's word": such a reference is trusted only from `default` and `kube-system`),
    never widens it."""

    @field_validator("cluster_namespaces")
    @classmethod
    def _cluster_namespaces(cls, v: list[str]) -> list[str]:
        return _namespace_names(v)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: list[str]) -> list[str]:
        # the one table of kinds both programs read
        unknown = [k for k in v if k not in owners.KINDS]
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not a kind the bridge can read "
                f"(known: {', '.join(owners.KINDS)})"
            )
        return v


class EnrichSettings(_Section):
    """Enrichment: values from the Event's namespace and involved object added as CloudEvent
    extensions (usable in `nats.subject_template`). The Event in `data` is never changed. A
    lookup that fails, times out or is refused never holds an Event: it is published without
    that value, and `k8senriched: partial` with `k8senrichmissing` (e.g. `object:timeout`)
    says what is missing; with everything found, `k8senriched: complete`. Nothing configured
    here: no lookups, neither extension."""

    namespace: NamespaceEnrichment = NamespaceEnrichment()
    object: ObjectEnrichment = ObjectEnrichment()
    lookup_timeout: PositiveDuration = 2.0
    """The longest an Event waits for its lookups (counted from when it was read); after it,
    the Event is published without what did not come (`object:timeout`)."""
    max_inflight: int = Field(8, ge=1, le=256)
    """Most object reads in flight at once (one per object however many Events wait on it)."""
    cache_entries: int = Field(10000, ge=1)
    """Most objects the lookup cache holds (least recently used ones go first)."""
    cache_bytes: Size = 4 * 2**20
    """Most bytes the lookup cache holds (its names and values, as counted by the bridge)."""
    cache_ttl: PositiveDuration = 300.0
    """How long a looked-up object's values are used before it is read again (a missing
    object's: a tenth of this)."""
    max_pending: int = Field(1024, ge=1)
    """Most Events held waiting for their lookups (in order); when full, the watch waits."""
    tenant_tokens: list[str] = []
    """The extensions whose value the tenant writes (an object label, `owner_kind`,
    `owner_name`: whoever may create Pods or workloads in a namespace chooses them) that
    `nats.subject_template` may still use as a token, knowingly: a tenant can then put its
    Events under another value's subjects. A template using such an extension not listed here is
    refused at load. Namespace labels and annotations need no opt-in (whoever may edit Namespaces
    writes them)."""

    @property
    def tenant_written(self) -> list[str]:
        """The extensions whose value the tenant writes (docs/enrichment.md#who-writes-what)."""
        o = self.object
        return [*o.labels.values(), *filter(None, (o.owner_kind, o.owner_name))]

    @property
    def extensions(self) -> dict[str, str]:
        """Every extension it adds → where its value comes from (for the template check)."""
        out: dict[str, str] = {}
        for ext in self.namespace.labels.values():
            out[ext] = "label"
        for ext in self.object.labels.values():
            out[ext] = "label"
        for ext in self.namespace.annotations.values():
            out[ext] = "annotation"
        if self.object.owner_kind:
            out[self.object.owner_kind] = "owner"
        if self.object.owner_name:
            out[self.object.owner_name] = "owner"
        return out

    @property
    def enabled(self) -> bool:
        return bool(self.extensions)

    @property
    def reads_objects(self) -> bool:
        o = self.object
        return bool(o.labels or o.owner_kind or o.owner_name)

    @model_validator(mode="after")
    def _unique(self) -> EnrichSettings:
        names = [
            *self.namespace.labels.values(),
            *self.namespace.annotations.values(),
            *self.object.labels.values(),
            *filter(None, (self.object.owner_kind, self.object.owner_name)),
        ]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"extension {', '.join(twice)} is given more than one source")
        return self


class CloudEventsSettings(_Section):
    """How a CloudEvent is written into a NATS message."""

    mode: Literal["structured", "binary"] = "structured"
    """structured: the body is the JSON CloudEvent, header Content-Type:
    application/cloudevents+json. binary: the attributes in ce-* headers (percent-encoded), the
    body is the Event (data)."""


class CheckpointSettings(_Section):
    """How far each watch got, kept in JetStream KV: where the bridge resumes after a
    restart."""

    bucket: Name = "k8s_event_bridge"
    """The KV bucket holding the resourceVersion to resume from, one key per cluster and watch
    scope. Created when missing."""
    interval: PositiveDuration = 1.0
    """Write a checkpoint at most this often (only when it moved), and once more on stop."""


class QueueSettings(_Section):
    """The bounded queue between the watcher and the publisher. When it is full, the watcher
    stops reading (back-pressure); nothing is dropped."""

    max_events: int = Field(4096, ge=1)
    """Most Events held."""
    max_bytes: BufferSize = 8 * 2**20
    """Most bytes held (one Event larger than this is still let into an empty queue). With
    `nats.max_inflight_bytes` it sets the bridge's worst case of memory
    (docs/performance.md)."""


class HttpSettings(_Section):
    """The HTTP server: /healthz, /readyz, /metrics and /status."""

    host: str = "0.0.0.0"
    """The address to listen on. 0.0.0.0: every IPv4 interface (`::` for IPv6)."""
    port: int = Field(8080, ge=0, le=65535)
    """The port to listen on (0 picks a free port)."""
    unready_after: PositiveDuration = 60.0
    """/readyz answers 503 once a watch or NATS has been unhealthy for longer than this, or a
    publish has waited this long for its ack; shorter blips do not flap readiness."""


class LeaderElectionSettings(_Section):
    """Two or more replicas: one leads (watches and publishes), the others stand by warm (NATS
    connected, stream and checkpoint bucket checked, /readyz 200, role "standby" in /status)
    and take over from the checkpoint when the leader's Lease (coordination.k8s.io/v1) is
    released or expires. Needs get, create and update on leases in `namespace` (deploy/ grants
    it). The timings are client-go's defaults; rules: lease_duration > renew_deadline > 1.2 x
    retry_period."""

    enabled: bool = False
    """Elect a leader through a Lease. false: one replica, no Lease."""
    lease_name: str = Field("k8s-event-bridge", min_length=1, max_length=253)
    """The Lease's name (a DNS-1123 subdomain)."""
    namespace: str | None = None
    """The Lease's namespace (a DNS-1123 label). null: $POD_NAMESPACE, else the service
    account's namespace in a Pod, else "default"."""
    identity: str | None = None
    """This replica's name in the Lease; it must differ between replicas. null: $POD_NAME
    (deploy/ sets it from the Pod), else the host name."""
    lease_duration: PositiveDuration = 15.0
    """A standby takes the Lease once it has seen it unrenewed this long (whole seconds, at
    least 1s)."""
    renew_deadline: PositiveDuration = 10.0
    """The leader stops at once (nothing more published, the checkpoint not written again) once
    no renewal succeeded for this long, so it is gone before anyone may take over."""
    retry_period: PositiveDuration = 2.0
    """How often the leader renews the Lease, and a standby tries to take it (jittered: every 1
    to 2.2 retry periods)."""

    @field_validator("lease_name")
    @classmethod
    def _lease_name(cls, v: str) -> str:
        problem = paths.name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        return v if v is None else _namespace_names([v])[0]

    @model_validator(mode="after")
    def _order(self) -> LeaderElectionSettings:
        # client-go's checks: the leader gives up before anyone may take over, and has room
        # for more than one attempt to renew before it does
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be longer than renew_deadline")
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise ValueError("renew_deadline must be longer than 1.2 x retry_period")
        if self.lease_duration < 1:
            raise ValueError("lease_duration must be at least 1s (the Lease counts whole seconds)")
        return self


class ShutdownSettings(_Section):
    """What the bridge does on SIGTERM."""

    drain_timeout: Duration = 10.0
    """Wait at most this long for in-flight acks before writing the checkpoint and exiting.
    Keep it below the Pod's terminationGracePeriodSeconds."""


class Settings(common.FileAndEnvSettings):
    model_config = SettingsConfigDict(env_prefix="BRIDGE_")

    cluster: ClusterSettings = ClusterSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    filter: FilterSettings = FilterSettings()
    nats: NatsSettings = NatsSettings()
    cloudevents: CloudEventsSettings = CloudEventsSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    queue: QueueSettings = QueueSettings()
    http: HttpSettings = HttpSettings()
    log: LogSettings = LogSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    leader_election: LeaderElectionSettings = LeaderElectionSettings()
    enrich: EnrichSettings = EnrichSettings()

    @model_validator(mode="after")
    def _template(self) -> Settings:
        # its grammar and its {cluster} first are NatsStream's; here what the enrichment adds
        tokens = subjects.parse_template(self.nats.subject_template)
        sources = self.enrich.extensions
        for placeholder, name in tokens:
            if placeholder and name not in TEMPLATE_FIELDS and name not in sources:
                raise ValueError(
                    f"nats.subject_template: {{{name}}} is neither one of "
                    f"{', '.join(TEMPLATE_FIELDS)} nor an extension named in enrich"
                )
        second_placeholder, second = tokens[1]
        if second_placeholder and not (second == "namespace" or sources.get(second) == "label"):
            raise ValueError(
                f"nats.subject_template: the second token {{{second}}} may start with _ and "
                "meet the status events' _bridge; put {namespace}, a label or a literal there"
            )
        return self

    @model_validator(mode="after")
    def _tenant_tokens(self) -> Settings:
        tokens = subjects.parse_template(self.nats.subject_template)
        unknown = set(self.enrich.tenant_tokens) - set(self.enrich.tenant_written)
        if unknown:
            raise ValueError(
                f"enrich.tenant_tokens: {', '.join(sorted(unknown))} is not an extension of "
                "enrich.object (its labels, owner_kind, owner_name)"
            )
        tenant = set(self.enrich.tenant_written) - set(self.enrich.tenant_tokens)
        for placeholder, name in tokens:
            if placeholder and name in tenant:
                raise ValueError(
                    f"nats.subject_template: {{{name}}} is a value the tenant writes (an object "
                    "label or owner of enrich.object): a tenant could put its Events under "
                    f"another {name}'s subjects; list {name} in enrich.tenant_tokens to route on "
                    "it knowingly"
                )
        return self


def load(path: str | None = None) -> Settings:
    """Load the settings from ``path`` (or ``BRIDGE_CONFIG_FILE``) and the environment."""
    try:
        return common.load(
            Settings,
            "BRIDGE_",
            "BRIDGE_CONFIG_FILE",
            path,
            env_example="BRIDGE_FILTER__REASONS='[\"BackOff\"]'",
        )
    except common.ConfigError as exc:
        raise ConfigError(str(exc)) from exc
