"""Configuration: a YAML file plus ``BRIDGE_<SECTION>__<KEY>`` environment variables.

Environment variables override the file. The docstring under each field is its description:
docs/configuration.md and config/bridge.yaml are generated from this model (``python -m
tools.configref``), every key with its type, default and environment variable. ``load()``
turns every problem into one ``ConfigError`` whose message names the key and what is wrong;
the command line exits 2 on it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from annotated_types import doc
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from bridge.errors import ConfigError
from k8s_event_common import options as shared
from k8s_event_common.secrets import never_echo, redact_text

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
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


def parse_duration(value: Any) -> float:
    """``90``, ``"90"``, ``"1.5s"``, ``"500ms"``, ``"1m30s"``, ``"2h"`` → seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration such as 1s, 500ms, 2m or 1h is expected")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for m in _DURATION.finditer(text):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
                pos = m.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"{value!r} is not a duration such as 1s, 500ms, 2m or 1h"
                ) from None
    else:
        raise ValueError("a duration such as 1s, 500ms, 2m or 1h is expected")
    if seconds < 0:
        raise ValueError("a duration can not be negative")
    return seconds


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


def _require_positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _at_least_64kib(value: int) -> int:
    if value < 64 * 1024:
        raise ValueError("must be at least 64KiB")
    return value


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _file_exists(value: str | None) -> str | None:
    # the path is not repeated: a secret pasted here by mistake must not be echoed
    if value is not None and not Path(value).is_file():
        raise ValueError("no such file (the value given is not shown)")
    return value


# How a type reads in the configuration reference (``doc``, which pydantic ignores): what a key
# accepts, where a validator decides it (tools/configref.py shows it next to the key).
Duration = Annotated[float, BeforeValidator(parse_duration), doc("duration")]
PositiveDuration = Annotated[
    float, AfterValidator(_require_positive), BeforeValidator(parse_duration), doc("duration, > 0")
]
Size = Annotated[int, BeforeValidator(parse_size), doc("size")]
BufferSize = Annotated[
    int, AfterValidator(_at_least_64kib), BeforeValidator(parse_size), doc("size, >= 64KiB")
]
ExistingFile = Annotated[str | None, AfterValidator(_file_exists), doc("path of an existing file")]


class _Section(BaseModel):
    # The docstring under each field is its description (FieldInfo.description): the one text
    # docs/configuration.md and config/bridge.yaml are generated from.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


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
        # The name is a subject token and part of the checkpoint key: "prod.eu" would add a
        # subject level, and sanitising it would make "prod.eu" and "prod_eu" collide.
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", v):
            raise ValueError(
                "must be letters, digits, - and _ (leave it unset to use the kube-system uid)"
            )
        return v


class BackoffSettings(_Section):
    """Back-off between retries after an API error (429, 5xx, refused, 401/403): each delay is
    jittered between the current step and twice it (client-go's jitter 1.0), never above `max`;
    a Retry-After header from the server is a floor."""

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
    """Namespaces to watch, one watch (and one checkpoint) per namespace. `[]`: one
    cluster-wide watch of every namespace."""
    field_selector: str = ""
    """Extra server-side field selector for the list and the watch, e.g. `type=Warning` or
    `reason=BackOff` (only `=`, `==` and `!=` exist; no sets). The client-side filter still
    runs. `""`: none (the bridge adds selectors from `filter` when they narrow the stream)."""
    initial: Literal["all", "new"] = "all"
    """What to do on the very first start, when no checkpoint exists. all: publish every Event
    that exists now, then watch; new: skip them, only watch."""
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

    @model_validator(mode="after")
    def _watch_timeouts(self) -> KubernetesSettings:
        if not 1 <= self.watch_timeout_min <= self.watch_timeout_max:
            raise ValueError("watch_timeout_min must be at least 1s and at most watch_timeout_max")
        return self


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


class TLSSettings(_Section):
    """TLS to NATS: wanted when a server URL is tls:// or wss://, or `ca_file`, `cert_file` or
    `handshake_first` is set. Then no byte of a credential, nor of an Event, goes to a server
    over a connection that is not TLS."""

    ca_file: ExistingFile = None
    """CA bundle (PEM) to verify the server with. null: the system's CAs."""
    cert_file: ExistingFile = None
    """Client certificate (PEM) for mutual TLS; `cert_file` and `key_file` go together."""
    key_file: ExistingFile = None
    """Client private key (PEM) for mutual TLS."""
    handshake_first: bool = False
    """TLS from the first byte (nats-server `tls { handshake_first: true }`). false: the
    server's plaintext INFO comes first, and a server that does not require TLS there is
    refused before anything is sent (log `nats_tls_refused`), then the next one is tried."""

    @model_validator(mode="after")
    def _pair(self) -> TLSSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        return self


class NatsSettings(_Section):
    """NATS: the servers, the JetStream stream the CloudEvents go to (created by the bridge
    unless told not to), and how the bridge authenticates."""

    servers: list[str] = Field(
        ["nats://127.0.0.1:4222"], examples=[["nats://nats-0:4222", "nats://nats-1:4222"]]
    )
    """NATS server URLs (nats://, tls://, ws://, wss://); at least one. The connection is
    retried forever and fails over between them. No user name, password or token in a URL
    (they would be printed wherever the server is named): use `user`, `password`, `token`."""
    stream: str = "K8S_EVENTS"
    """The JetStream stream the CloudEvents go to (A-Z a-z 0-9 _ -)."""
    domain: str | None = None
    """The JetStream domain to use (A-Z a-z 0-9 _ -): the stream and the checkpoint bucket are
    then made and used through $JS.<domain>.API, that domain's JetStream and no other (with a
    domain nobody serves, the bridge waits, not ready, rather than fall back). A leaf node with
    its own JetStream answers the plain API itself, so in the topology of docs/deploy.md this
    pins the target rather than changes it. null: the JetStream the server answers with (the
    account's default)."""
    subject_prefix: str = "k8s.events"
    """Subject prefix: Events go to `<prefix>.<cluster>.<namespace>.<kind>.<reason>`, status
    events to `<prefix>.<cluster>._bridge.<what>`. Dot-separated tokens of A-Z a-z 0-9 _ -,
    no wildcards."""
    create_stream: bool = True
    """Create the stream (subjects `<prefix>.>`, file storage) when it is missing, also when it
    was deleted while the bridge runs. An existing stream whose config differs is reported,
    never changed (one that does not take `<prefix>.>` stops the bridge). false: it must exist
    already."""
    max_age: PositiveDuration = 7 * 86400.0
    """Stream retention when the bridge creates it: messages older than this are removed. Not
    shorter than `duplicate_window`."""
    max_bytes: Size = -1
    """Stream size limit when the bridge creates it; -1: unlimited."""
    num_replicas: int = Field(1, ge=1, le=5)
    """Stream replicas when the bridge creates it; also used for the checkpoint KV bucket."""
    duplicate_window: PositiveDuration = 7200.0
    """JetStream's duplicate window: a message with a Nats-Msg-Id seen within it is dropped.
    Make it longer than the longest restart or outage you expect (an Event's TTL is 1h by
    default); not longer than `max_age`."""
    ack_timeout: PositiveDuration = 5.0
    """How long to wait for JetStream's ack of one publish before publishing it again with the
    same Nats-Msg-Id."""
    max_inflight: int = Field(1024, ge=1, le=65536)
    """Most publishes awaiting an ack at once."""
    max_inflight_bytes: BufferSize = 16 * 2**20
    """Most bytes of publishes awaiting an ack at once (one message more may go, so that a
    message larger than the rest of the room is never stuck). With the queue's bounds it caps
    what a JetStream that stops acking can make the bridge hold."""
    connect_timeout: Duration = 5.0
    """Timeout of one connect attempt to a NATS server."""
    name: str = "k8s-event-bridge"
    """The client connection's name, shown by the NATS server (connz, logs)."""
    user: str | None = None
    """User name for user/password auth. null: none."""
    password: SecretStr | None = None
    """Password for user/password auth (needs `user`). Never printed by check-config or
    logged; prefer the environment (from a Kubernetes Secret) to writing it here."""
    token: SecretStr | None = None
    """Token auth. Never printed by check-config or logged."""
    nkey_seed_file: Annotated[
        str | None, AfterValidator(shared.seed_file_checked), doc("path of a user NKey seed file")
    ] = None
    """An NKey seed file (NKey auth): a user seed (SU...), checked at start. null: none."""
    creds_file: Annotated[
        str | None, AfterValidator(shared.creds_file_checked), doc("path of a .creds file")
    ] = None
    """A .creds file (operator mode: a user JWT and its NKey seed), checked at start (both
    blocks, a user JWT, the seed of that user) and read again at each connect, so a file
    replaced on disk (a rotated Secret) is used at the next reconnect. Not with
    `nkey_seed_file`. null: none."""
    inbox_prefix: str = "_INBOX_k8s_event_bridge"
    """The prefix of the bridge's reply subjects (JetStream API answers, publish acks): give
    each program its own, so that a permission on `<inbox_prefix>.>` lets it read its own
    replies and nobody else's (docs/deploy.md)."""
    ping_interval: PositiveDuration = 5.0
    """How often the bridge pings the server. A connection is stale (left for another server)
    once `max_outstanding_pings` pings went unanswered, or nothing at all was read from the
    server for `ping_interval * (max_outstanding_pings + 1)` (15s by default)."""
    max_outstanding_pings: int = Field(2, ge=1, le=10)
    """Unanswered pings after which the connection is stale."""
    tls: TLSSettings = TLSSettings()

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        return shared.servers_checked(v)

    @field_validator("inbox_prefix")
    @classmethod
    def _inbox(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*", v):
            raise ValueError("dot-separated tokens of A-Z a-z 0-9 _ - (no wildcards) expected")
        return v

    @field_validator("stream")
    @classmethod
    def _stream(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", v):
            raise ValueError("a stream name may hold only A-Z a-z 0-9 _ -")
        return v

    @field_validator("domain")
    @classmethod
    def _domain(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", v):
            raise ValueError("a JetStream domain may hold only A-Z a-z 0-9 _ -")
        return v

    @field_validator("subject_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*", v):
            raise ValueError("dot-separated tokens of A-Z a-z 0-9 _ - (no wildcards) expected")
        return v

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
        try:
            shared.auth_checked(self.options())
        except shared.CredentialError as exc:
            raise ValueError(str(exc)) from None
        return self

    def options(self) -> shared.NatsOptions:
        """The shared connection's options (secrets included: never print them)."""
        tls = self.tls
        return shared.NatsOptions(
            servers=list(self.servers),
            name=self.name,
            user=self.user,
            password=self.password.get_secret_value() if self.password else None,
            token=self.token.get_secret_value() if self.token else None,
            creds_file=self.creds_file,
            nkey_seed_file=self.nkey_seed_file,
            tls_ca_file=tls.ca_file,
            tls_cert_file=tls.cert_file,
            tls_key_file=tls.key_file,
            tls_handshake_first=tls.handshake_first,
            connect_timeout=self.connect_timeout,
            inbox_prefix=self.inbox_prefix,
            ping_interval=self.ping_interval,
            max_outstanding_pings=self.max_outstanding_pings,
            skip_subject_validation=True,  # every subject is sanitised by bridge.core.subjects
        )


class CloudEventsSettings(_Section):
    """How a CloudEvent is written into a NATS message."""

    mode: Literal["structured", "binary"] = "structured"
    """structured: the body is the JSON CloudEvent, header Content-Type:
    application/cloudevents+json. binary: the attributes in ce-* headers (percent-encoded), the
    body is the Event (data)."""


class CheckpointSettings(_Section):
    """How far each watch got, kept in JetStream KV: where the bridge resumes after a
    restart."""

    bucket: str = "k8s_event_bridge"
    """The KV bucket holding the resourceVersion to resume from, one key per cluster and watch
    scope (A-Z a-z 0-9 _ -). Created when missing."""
    interval: PositiveDuration = 1.0
    """Write a checkpoint at most this often (only when it moved), and once more on stop."""

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", v):
            raise ValueError("a bucket name may hold only A-Z a-z 0-9 _ -")
        return v


class QueueSettings(_Section):
    """The bounded queue between the watcher and the publisher. When it is full, the watcher
    stops reading (back-pressure); nothing is dropped."""

    max_events: int = Field(4096, ge=1)
    """Most Events held."""
    max_bytes: BufferSize = 16 * 2**20
    """Most bytes held (one Event larger than this is still let into an empty queue)."""


class HttpSettings(_Section):
    """The HTTP server: /healthz, /readyz, /metrics and /status."""

    host: str = "0.0.0.0"
    """The address to listen on. 0.0.0.0: every IPv4 interface (`::` for IPv6)."""
    port: int = Field(8080, ge=0, le=65535)
    """The port to listen on (0 picks a free port)."""
    unready_after: PositiveDuration = 60.0
    """/readyz answers 503 once a watch or NATS has been unhealthy for longer than this, or a
    publish has waited this long for its ack; shorter blips do not flap readiness."""


class LogSettings(_Section):
    """Logs: one line per event, on stderr."""

    level: Annotated[
        Literal["debug", "info", "warning", "error"],
        BeforeValidator(_lower),
        doc("one of debug|info|warning|error (any case)"),
    ] = "info"
    """The lowest level logged."""
    format: Literal["json", "text"] = "json"
    """json: one JSON object per line; text: for a person at a terminal."""


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
    """The Lease's name."""
    namespace: str | None = None
    """The Lease's namespace. null: $POD_NAMESPACE, else the service account's namespace in a
    Pod, else "default"."""
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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BRIDGE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

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

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win: the environment overrides the YAML file (passed as init).
        return (env_settings, init_settings)


def _read_yaml(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path}: no such file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of sections")
    return data


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"] if not isinstance(x, int))
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        else:
            msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = (
            ""
            if err["type"] == "extra_forbidden" or isinstance(value, dict)
            else (f" (got {value!r})" if not never_echo(loc) else "")
        )
        lines.append(f"{loc or '<root>'}: {msg}{shown}")
    return redact_text("invalid configuration: " + "; ".join(lines))


def _check_env_sections(env: dict[str, str]) -> None:
    # pydantic-settings reads only the variables it knows, so a misspelt section
    # (BRIDGE_NAT__SERVERS) would be ignored without a word: name it instead.
    sections = set(Settings.model_fields)
    for name in env:
        if not name.startswith("BRIDGE_") or name == "BRIDGE_CONFIG_FILE":
            continue
        section = name.removeprefix("BRIDGE_").split("__", 1)[0].lower()
        if section not in sections:
            raise ConfigError(
                f"invalid configuration: environment variable {name}: unknown section "
                f"{section!r} (known: {', '.join(sorted(sections))})"
            )


def load(path: str | None = None) -> Settings:
    """Load the settings from ``path`` (or ``BRIDGE_CONFIG_FILE``) and the environment."""
    path = path or os.environ.get("BRIDGE_CONFIG_FILE") or None
    data = _read_yaml(path) if path else {}
    _check_env_sections(dict(os.environ))
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
    except SettingsError as exc:
        # e.g. BRIDGE_FILTER__REASONS=BackOff: lists and maps from the environment are JSON
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(
            f"invalid configuration: {exc}{cause} (lists from the environment are JSON, "
            f"e.g. BRIDGE_FILTER__REASONS='[\"BackOff\"]')"
        ) from exc


def redacted(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, with every secret shown as ``"***"``."""
    data = settings.model_dump(mode="json")
    nats = data["nats"]
    for key in ("password", "token"):
        if nats.get(key) is not None:
            nats[key] = "***"
    return data
