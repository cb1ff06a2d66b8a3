"""What the subscribers' configurations share: a YAML file plus ``<PREFIX><SECTION>__<KEY>``
environment variables (which override the file; lists and maps as JSON), the NATS, HTTP and
log sections, durations, and ``load()``, which turns every problem into one ``ConfigError``
naming the key and what is wrong (the command lines exit 2 on it). Needs the ``settings``
extra (pydantic-settings with YAML).

The docstring under each field is its description (``use_attribute_docstrings``), and ``doc()``
in a type says how it reads: docs/configuration.md and config/remediation.yaml are generated
from the models (``python -m tools.configref``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

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

from k8s_event_common import options as shared
from k8s_event_common.secrets import SECRET_KEYS, never_echo, redact_text
from k8s_event_consumer.connecting import NatsOptions
from k8s_event_consumer.consuming import ConsumerOptions

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


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
    # the path is not repeated: a secret pasted here by mistake must not be echoed
    if value is not None and not Path(value).is_file():
        raise ValueError("no such file (the value given is not shown)")
    return value


Duration = Annotated[float, BeforeValidator(parse_duration), doc("duration")]
PositiveDuration = Annotated[
    float, AfterValidator(_require_positive), BeforeValidator(parse_duration), doc("duration, > 0")
]
ExistingFile = Annotated[str | None, AfterValidator(_file_exists), doc("path of an existing file")]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class TLSSettings(Section):
    """TLS: a private CA, and a client certificate for mutual TLS."""

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


class NatsSettings(Section):
    """NATS: the bridge's stream, and the durable consumer the subscriber reads it with."""

    # each subscriber subclasses this to give ``durable`` and ``name`` its own default (the
    # descriptions here still apply: tools/configref.py looks them up in the class's bases)

    servers: list[str] = Field(
        ["nats://127.0.0.1:4222"], examples=[["nats://nats-0:4222", "nats://nats-1:4222"]]
    )
    """NATS server URLs (nats://, tls://, ws://, wss://); at least one. The first connect is
    tried until NATS answers, then the connection reconnects forever. No user name, password
    or token in a URL (they would be printed wherever the server is named): use `user`,
    `password`, `token`."""
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
    name: str = "k8s-event-consumer"
    """The connection's name, shown by the NATS server (connz, logs)."""
    user: str | None = None
    """User name for user/password auth. null: none."""
    password: SecretStr | None = None
    """Password for user/password auth (needs `user`). Never printed by check-config or
    logged."""
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
    inbox_prefix: str = "_INBOX_k8s_event_consumer"
    """The prefix of the subscriber's reply subjects (JetStream API answers, fetches): give
    each program its own, so that a permission on `<inbox_prefix>.>` lets it read its own
    replies and nobody else's (docs/deploy.md)."""
    ping_interval: PositiveDuration = 5.0
    """How often the subscriber pings the server. A connection is stale (left for another
    server) once `max_outstanding_pings` pings went unanswered, or nothing at all was read
    from the server for `ping_interval * (max_outstanding_pings + 1)` (15s by default)."""
    max_outstanding_pings: int = Field(2, ge=1, le=10)
    """Unanswered pings after which the connection is stale."""
    tls: TLSSettings = TLSSettings()
    """TLS to NATS: wanted when a server URL is tls:// or wss://, or `ca_file`, `cert_file` or
    `handshake_first` is set. Then no byte of a credential, nor of a message, goes to a
    server over a connection that is not TLS."""
    connect_timeout: PositiveDuration = 5.0
    """Timeout of one connect attempt to a NATS server."""
    ack_wait: PositiveDuration = 30.0
    """JetStream delivers a message again when it is not acked within this."""
    max_ack_pending: int = Field(1000, ge=1)
    """Most messages handed out and not yet acked."""
    batch: int = Field(64, ge=1, le=1000)
    """Messages per fetch."""

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
        try:
            shared.auth_checked(self.options())
        except shared.CredentialError as exc:
            raise ValueError(str(exc)) from None
        return self

    def options(self) -> NatsOptions:
        """The shared connection's options (secrets included: never print them)."""
        return NatsOptions(
            servers=list(self.servers),
            name=self.name,
            user=self.user,
            password=self.password.get_secret_value() if self.password else None,
            token=self.token.get_secret_value() if self.token else None,
            creds_file=self.creds_file,
            nkey_seed_file=self.nkey_seed_file,
            tls_ca_file=self.tls.ca_file,
            tls_cert_file=self.tls.cert_file,
            tls_key_file=self.tls.key_file,
            tls_handshake_first=self.tls.handshake_first,
            connect_timeout=self.connect_timeout,
            inbox_prefix=self.inbox_prefix,
            ping_interval=self.ping_interval,
            max_outstanding_pings=self.max_outstanding_pings,
        )

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


class LogSettings(Section):
    """Logs: one line per event, on stderr."""

    level: Annotated[
        Literal["debug", "info", "warning", "error"],
        BeforeValidator(_lower),
        doc("one of debug|info|warning|error (any case)"),
    ] = "info"
    """The lowest level logged."""
    format: Literal["json", "text"] = "json"
    """json: one JSON object per line; text: for a person at a terminal."""


class SubscriberSettings(BaseSettings):
    """A subscriber's settings: each sets its ``model_config`` (env prefix) and sections."""

    # a subscriber's own model_config (its env prefix) is merged with this one
    model_config = SettingsConfigDict(use_attribute_docstrings=True)

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


def read_yaml(path: str) -> dict[str, Any]:
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


def describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"] if not isinstance(x, int))
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required"
        else:
            msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = (
            ""
            if err["type"] in ("extra_forbidden", "missing")
            or isinstance(value, dict)
            or never_echo(loc)
            else f" (got {value!r})"
        )
        lines.append(f"{loc or '<root>'}: {msg}{shown}")
    return redact_text("invalid configuration: " + "; ".join(lines))


def check_env_sections(
    settings_cls: type[BaseSettings], prefix: str, file_env: str, env: dict[str, str]
) -> None:
    # pydantic-settings reads only the variables it knows, so a misspelt section
    # (ALERTING_ALERTMANGER__URLS) would be ignored without a word: name it instead.
    sections = set(settings_cls.model_fields)
    for name in env:
        if not name.startswith(prefix) or name == file_env:
            continue
        section = name.removeprefix(prefix).split("__", 1)[0].lower()
        if section not in sections:
            raise ConfigError(
                f"invalid configuration: environment variable {name}: unknown section "
                f"{section!r} (known: {', '.join(sorted(sections))})"
            )


S = TypeVar("S", bound=BaseSettings)


def load(settings_cls: type[S], prefix: str, file_env: str, path: str | None = None) -> S:
    """The settings from ``path`` (or ``$<file_env>``) and the environment."""
    path = path or os.environ.get(file_env) or None
    data = read_yaml(path) if path else {}
    check_env_sections(settings_cls, prefix, file_env, dict(os.environ))
    try:
        return settings_cls(**data)
    except ValidationError as exc:
        raise ConfigError(describe(exc)) from exc
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(
            f"invalid configuration: {exc}{cause} (lists and maps from the environment are "
            f"JSON, e.g. {prefix}NATS__SUBJECTS='[\"k8s.events.>\"]')"
        ) from exc


def redacted(settings: BaseSettings) -> dict[str, Any]:
    """The effective settings as plain data, every secret shown as ``"***"``."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: ("***" if k in SECRET_KEYS and v is not None else walk(v))
                for k, v in node.items()
            }
        return node

    out: dict[str, Any] = walk(settings.model_dump(mode="json"))
    return out
