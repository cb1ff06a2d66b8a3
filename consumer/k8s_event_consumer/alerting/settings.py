"""Configuration: a YAML file plus ``ALERTING_<SECTION>__<KEY>`` environment variables.

Environment variables override the file (lists and maps as JSON:
``ALERTING_ALERTS__REASONS='["BackOff","OOMKilling"]'``). ``load()`` turns every problem into
one ``ConfigError`` whose message names the key and what is wrong; the command line exits 2 on
it. The keys and their defaults are described in docs/consumers.md (the alerting subscriber).
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

ENV_PREFIX = "ALERTING_"
CONFIG_FILE_ENV = "ALERTING_CONFIG_FILE"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
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


class ConfigError(Exception):
    """The configuration is invalid; the message names the key."""


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


def _require_positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be greater than 0")
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
ExistingFile = Annotated[str | None, AfterValidator(_file_exists)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    # what the durable consumer reads: every Event and status event of every cluster by default
    subjects: list[str] = ["k8s.events.>"]
    durable: str = "k8s-event-alerting"
    # where a new durable starts: all (the whole stream) or new (only what comes after)
    start: Literal["all", "new"] = "all"
    name: str = "k8s-event-alerting"
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    nkey_seed_file: ExistingFile = None
    creds_file: ExistingFile = None
    tls: TLSSettings = TLSSettings()
    connect_timeout: PositiveDuration = 5.0
    ack_wait: PositiveDuration = 30.0
    max_ack_pending: int = Field(1000, ge=1)
    batch: int = Field(64, ge=1, le=1000)

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one server URL is needed")
        for url in v:
            if not re.match(r"^(nats|tls|ws|wss)://", url):
                raise ValueError(f"{url!r} is not a nats://, tls://, ws:// or wss:// URL")
        return v

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

    @model_validator(mode="after")
    def _auth(self) -> NatsSettings:
        if self.password is not None and not self.user:
            raise ValueError("password needs user")
        return self


class AlertmanagerSettings(_Section):
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


class AlertsSettings(_Section):
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


class HttpSettings(_Section):
    host: str = "0.0.0.0"
    # /healthz, /readyz, /metrics; null: no HTTP server
    port: int | None = Field(8080, ge=0, le=65535)


class LogSettings(_Section):
    level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(_lower)] = "info"
    format: Literal["json", "text"] = "json"


class Settings(BaseSettings):
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

    @property
    def generator_url(self) -> str:
        return self.alerts.generator_url or f"nats://{self.nats.stream}/{self.nats.durable}"

    @property
    def recover_window(self) -> float:
        a = self.alerts
        return (
            max(a.resolve_after, a.gap_alert_for) if a.recover_window is None else a.recover_window
        )


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


def _secret_key(loc: str) -> bool:
    return loc.rsplit(".", 1)[-1] in {"password", "token", "bearer_token"}


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
            if err["type"] == "extra_forbidden" or isinstance(value, dict) or _secret_key(loc)
            else f" (got {value!r})"
        )
        lines.append(f"{loc or '<root>'}: {msg}{shown}")
    return "invalid configuration: " + "; ".join(lines)


def _check_env_sections(env: dict[str, str]) -> None:
    # pydantic-settings reads only the variables it knows, so a misspelt section
    # (ALERTING_ALERTMANGER__URLS) would be ignored without a word: name it instead.
    sections = set(Settings.model_fields)
    for name in env:
        if not name.startswith(ENV_PREFIX) or name == CONFIG_FILE_ENV:
            continue
        section = name.removeprefix(ENV_PREFIX).split("__", 1)[0].lower()
        if section not in sections:
            raise ConfigError(
                f"invalid configuration: environment variable {name}: unknown section "
                f"{section!r} (known: {', '.join(sorted(sections))})"
            )


def load(path: str | None = None) -> Settings:
    """The settings from ``path`` (or ``ALERTING_CONFIG_FILE``) and the environment."""
    path = path or os.environ.get(CONFIG_FILE_ENV) or None
    data = _read_yaml(path) if path else {}
    _check_env_sections(dict(os.environ))
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(
            f"invalid configuration: {exc}{cause} (lists and maps from the environment are "
            f"JSON, e.g. ALERTING_ALERTS__REASONS='[\"BackOff\"]')"
        ) from exc


def redacted(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, every secret shown as ``"***"``."""
    data = settings.model_dump(mode="json")
    for section, key in (
        ("nats", "password"),
        ("nats", "token"),
        ("alertmanager", "password"),
        ("alertmanager", "bearer_token"),
    ):
        if data[section].get(key) is not None:
            data[section][key] = "***"
    return data
