"""Configuration: a YAML file plus ``BRIDGE_<SECTION>__<KEY>`` environment variables.

Environment variables override the file. Every key, with its default, is documented in
``config/bridge.yaml``. ``load()`` turns every problem into one ``ConfigError`` whose message
names the key and what is wrong; the command line exits 2 on it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
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
    if value is not None and not Path(value).is_file():
        raise ValueError(f"{value}: no such file")
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[
    float, AfterValidator(_require_positive), BeforeValidator(parse_duration)
]
Size = Annotated[int, BeforeValidator(parse_size)]
BufferSize = Annotated[int, AfterValidator(_at_least_64kib), BeforeValidator(parse_size)]
ExistingFile = Annotated[str | None, AfterValidator(_file_exists)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterSettings(_Section):
    name: str | None = None

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
    initial: PositiveDuration = 0.8
    factor: float = Field(2.0, ge=1.0)
    max: PositiveDuration = 30.0
    reset_after: PositiveDuration = 120.0

    @model_validator(mode="after")
    def _order(self) -> BackoffSettings:
        if self.max < self.initial:
            raise ValueError("max must not be below initial")
        return self


class BreakerSettings(_Section):
    failures: int = Field(3, ge=1)
    latency_p95: PositiveDuration = 2.0
    latency_samples: int = Field(20, ge=1, le=1000)


class KubernetesSettings(_Section):
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = []
    field_selector: str = ""
    initial: Literal["all", "new"] = "all"
    page_size: int = Field(500, ge=1, le=10000)
    read_timeout: PositiveDuration = 120.0
    connect_timeout: PositiveDuration = 10.0
    watch_timeout_min: Duration = 300.0
    watch_timeout_max: Duration = 600.0
    event_ttl: PositiveDuration = 3600.0
    backoff: BackoffSettings = BackoffSettings()
    breaker: BreakerSettings = BreakerSettings()

    @model_validator(mode="after")
    def _watch_timeouts(self) -> KubernetesSettings:
        if not 1 <= self.watch_timeout_min <= self.watch_timeout_max:
            raise ValueError("watch_timeout_min must be at least 1s and at most watch_timeout_max")
        return self


class FilterSettings(_Section):
    reasons: list[str] = []
    exclude_reasons: list[str] = []
    types: list[Literal["Normal", "Warning"]] = []
    kinds: list[str] = []
    namespaces: list[str] = []
    exclude_namespaces: list[str] = []
    min_count: int = Field(1, ge=1)
    include_deleted: bool = False


class TLSSettings(_Section):
    ca_file: ExistingFile = None
    cert_file: ExistingFile = None
    key_file: ExistingFile = None

    @model_validator(mode="after")
    def _pair(self) -> TLSSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        return self


class NatsSettings(_Section):
    servers: list[str] = ["nats://127.0.0.1:4222"]
    stream: str = "K8S_EVENTS"
    # the JetStream domain of the server the bridge talks to (a leaf node's own JetStream):
    # its API is $JS.<domain>.API; None: the account's default JetStream
    domain: str | None = None
    subject_prefix: str = "k8s.events"
    create_stream: bool = True
    max_age: PositiveDuration = 7 * 86400.0
    max_bytes: Size = -1
    num_replicas: int = Field(1, ge=1, le=5)
    duplicate_window: PositiveDuration = 7200.0
    ack_timeout: PositiveDuration = 5.0
    max_inflight: int = Field(1024, ge=1, le=65536)
    max_inflight_bytes: BufferSize = 16 * 2**20
    connect_timeout: Duration = 5.0
    name: str = "k8s-event-bridge"
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    nkey_seed_file: ExistingFile = None
    creds_file: ExistingFile = None
    tls: TLSSettings = TLSSettings()

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one server URL is needed")
        for url in v:
            if not re.match(r"^(nats|tls|ws|wss)://", url):
                raise ValueError(f"{url!r} is not a nats://, tls://, ws:// or wss:// URL")
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
        if self.password is not None and not self.user:
            raise ValueError("password needs user")
        return self


class CloudEventsSettings(_Section):
    mode: Literal["structured", "binary"] = "structured"


class CheckpointSettings(_Section):
    bucket: str = "k8s_event_bridge"
    interval: PositiveDuration = 1.0

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", v):
            raise ValueError("a bucket name may hold only A-Z a-z 0-9 _ -")
        return v


class QueueSettings(_Section):
    max_events: int = Field(4096, ge=1)
    max_bytes: BufferSize = 16 * 2**20


class HttpSettings(_Section):
    host: str = "0.0.0.0"
    port: int = Field(8080, ge=0, le=65535)
    unready_after: PositiveDuration = 60.0


class LogSettings(_Section):
    level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(_lower)] = "info"
    format: Literal["json", "text"] = "json"


class LeaderElectionSettings(_Section):
    enabled: bool = False
    lease_name: str = Field("k8s-event-bridge", min_length=1, max_length=253)
    # default: $POD_NAMESPACE, else the service account's namespace in a Pod, else "default"
    namespace: str | None = None
    # default: $POD_NAME, else the host name
    identity: str | None = None
    lease_duration: PositiveDuration = 15.0
    renew_deadline: PositiveDuration = 10.0
    retry_period: PositiveDuration = 2.0

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
    drain_timeout: Duration = 10.0


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BRIDGE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
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
            else (f" (got {value!r})" if not _secret_key(loc) else "")
        )
        lines.append(f"{loc or '<root>'}: {msg}{shown}")
    return "invalid configuration: " + "; ".join(lines)


def _secret_key(loc: str) -> bool:
    return loc.rsplit(".", 1)[-1] in {"password", "token"}


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
