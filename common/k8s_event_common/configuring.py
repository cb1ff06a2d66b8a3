"""What the bridge's and the subscribers' configurations share: a YAML file plus
``<PREFIX><SECTION>__<KEY>`` environment variables (which override the file; lists and maps as
JSON), the NATS connection's keys (``NatsConnection``) and the bridge's stream and subjects
(``NatsStream``: each program's ``nats`` section is one), the log section, the duration, file,
name and subject types, and ``load()``, which turns every problem into one ``ConfigError``
naming the key and what is wrong (each command line exits 2 on it).

Only settings modules import this one: it needs pydantic-settings with YAML (the ``settings``
extra of this wheel; the bridge requires it, the subscribers' kit does not). Durations are read
by ``k8s_event_common.durations``, which imports nothing of the sort.

The docstring under each field is its description (``use_attribute_docstrings``), and ``doc()``
in a type says how it reads: docs/configuration.md and config/*.yaml are generated from the
models (``python -m tools.configref``). A program's model that only changes a default here
keeps the description written here."""

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
from k8s_event_common import subjects
from k8s_event_common.durations import parse_duration
from k8s_event_common.secrets import SECRET_KEYS, never_echo, redact_text

__all__ = [
    "NAME",
    "SUBJECT_TOKENS",
    "ConfigError",
    "Duration",
    "ExistingFile",
    "FileAndEnvSettings",
    "LogSettings",
    "Name",
    "NatsConnection",
    "NatsStream",
    "PositiveDuration",
    "Section",
    "Subject",
    "TLSSettings",
    "load",
    "parse_duration",
    "redacted",
]

# the name of a stream, a durable, a bucket, a JetStream domain: one token of a subject
NAME = r"[A-Za-z0-9_-]+"
# dot-separated tokens of a subject, without wildcards
SUBJECT_TOKENS = rf"{NAME}(\.{NAME})*"
MAX_SUBJECT_PREFIX = 256  # characters: with the template's tokens a subject stays under 4 KiB


class ConfigError(Exception):
    """The configuration is invalid; the message names the key."""


def require_positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _file_exists(value: str | None) -> str | None:
    # the path is not repeated: a secret pasted here by mistake must not be echoed
    if value is not None and not Path(value).is_file():
        raise ValueError("no such file (the value given is not shown)")
    return value


def _name(value: str) -> str:
    if not re.fullmatch(NAME, value):
        raise ValueError("may hold only A-Z a-z 0-9 _ -")
    return value


def _subject(value: str) -> str:
    if not re.fullmatch(SUBJECT_TOKENS, value):
        raise ValueError("dot-separated tokens of A-Z a-z 0-9 _ - (no wildcards) expected")
    return value


# How a type reads in the configuration reference (``doc``, which pydantic ignores): what a key
# accepts, where a validator decides it (tools/configref.py shows it next to the key).
Duration = Annotated[float, BeforeValidator(parse_duration), doc("duration")]
PositiveDuration = Annotated[
    float, AfterValidator(require_positive), BeforeValidator(parse_duration), doc("duration, > 0")
]
ExistingFile = Annotated[str | None, AfterValidator(_file_exists), doc("path of an existing file")]
# a model that overrides a default of such a field gives the type again (``durable: Name = ...``)
Name = Annotated[str, AfterValidator(_name), doc("string of A-Z a-z 0-9 _ -")]
Subject = Annotated[str, AfterValidator(_subject), doc("dot-separated tokens of A-Z a-z 0-9 _ -")]


class Section(BaseModel):
    # The docstring under each field is its description (FieldInfo.description): the one text
    # docs/configuration.md and config/*.yaml are generated from.
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


class NatsConnection(Section):
    """How a program reaches NATS and authenticates: the keys of its ``nats`` section that
    ``k8s_event_common.connecting`` takes (``options()``). Each program's section is a
    ``NatsStream``, with its own keys (the stream's sizes, a durable consumer) and its own
    defaults for ``name`` and ``inbox_prefix``."""

    servers: list[str] = Field(
        ["nats://127.0.0.1:4222"], examples=[["nats://nats-0:4222", "nats://nats-1:4222"]]
    )
    """NATS server URLs (nats://, tls://, ws://, wss://); at least one. The connection is
    tried until NATS answers, then reconnects forever, failing over between them. No user
    name, password or token in a URL (they would be printed wherever the server is named): use
    `user`, `password`, `token`."""
    name: str = "k8s-event"
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
    inbox_prefix: Subject = "_INBOX_k8s_event"
    """The prefix of the program's reply subjects (JetStream API answers, publish acks,
    fetches): give each program its own, so that a permission on `<inbox_prefix>.>` lets it
    read its own replies and nobody else's (docs/deploy.md)."""
    ping_interval: PositiveDuration = 5.0
    """How often the program pings the server. A connection is stale (left for another
    server) once `max_outstanding_pings` pings went unanswered, or nothing at all was read
    from the server for `ping_interval * (max_outstanding_pings + 1)` (15s by default)."""
    max_outstanding_pings: int = Field(2, ge=1, le=10)
    """Unanswered pings after which the connection is stale."""
    connect_timeout: PositiveDuration = 5.0
    """Timeout of one connect attempt to a NATS server."""
    tls: TLSSettings = TLSSettings()
    """TLS to NATS: wanted when a server URL is tls:// or wss://, or `ca_file`, `cert_file` or
    `handshake_first` is set. Then no byte of a credential, nor of a message, goes to a
    server over a connection that is not TLS."""

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        return shared.servers_checked(v)

    @model_validator(mode="after")
    def _auth(self) -> NatsConnection:
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
        )


class NatsStream(NatsConnection):
    """The ``nats`` section of every program: the connection, and the bridge's stream and
    subjects, which the bridge publishes to and its subscribers read (so each must name the
    same: one declaration, one description, one check)."""

    stream: Name = "K8S_EVENTS"
    """The JetStream stream the bridge publishes its CloudEvents to, and its subscribers read."""
    subject_prefix: Subject = "k8s.events"
    """The bridge's subject prefix: Events go to `<prefix>.` and `subject_template` filled in
    (by default `<prefix>.<cluster>.<namespace>.<kind>.<reason>`), status events to
    `<prefix>.<cluster>._bridge.<what>`. A subscriber's is its bridge's (its `match` and its
    check of the stream's subjects build on it). At most 256 characters."""
    subject_template: str = subjects.DEFAULT_TEMPLATE
    """What follows `<prefix>.` in an Event's subject: dot-separated tokens, each a literal
    (A-Z a-z 0-9 _ -, not starting with `_`) or one `{placeholder}`: `{cluster}`,
    `{namespace}`, `{kind}` (involvedObject.kind), `{reason}`, `{type}`, or the extension name
    of one of the bridge's `enrich` values, e.g. `{cluster}.{team}.{namespace}.{kind}.{reason}`.
    Each value is made one token, distinct values distinct tokens (A-Z a-z 0-9 _ - starting
    with a letter or digit as it is, any other escaped: `pay.ments` is `_pay__ments`); a
    missing one is `_`. The first token is `{cluster}`; the second a literal, `{namespace}` or
    a label (status events live at `<prefix>.<cluster>._bridge.<what>`, which no value's token
    is). A subscriber's is the one of every bridge whose Events it reads (its `match` builds
    on it)."""

    digest_stream: Name = "K8S_DIGESTS"
    """The JetStream stream of the digests (one CloudEvent per series of Events per window,
    made by `k8s-event-digests` from `stream`): where that program writes them, where a
    subscriber with `reads: digests` and `k8s-event-bridge tail --digests` read them."""
    digest_prefix: Subject = "k8s.digests"
    """The digests' subject prefix: a digest goes to
    `<prefix>.<cluster>.<namespace>.<kind>.<reason>`, each value one token as in an Event's
    subject. Not under `subject_prefix`: the two streams' subjects never meet. At most 256
    characters."""

    @field_validator("subject_prefix", "digest_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if len(v) > MAX_SUBJECT_PREFIX:
            raise ValueError(
                f"at most {MAX_SUBJECT_PREFIX} characters (a subject must stay under 4 KiB)"
            )
        return v

    @field_validator("subject_template")
    @classmethod
    def _template(cls, v: str) -> str:
        tokens = subjects.parse_template(v)  # a ValueError naming the token
        if tokens[0] != (True, "cluster") or len(tokens) < 2:
            raise ValueError("must start with {cluster}. and go on")
        return v

    @model_validator(mode="after")
    def _apart(self) -> NatsStream:
        a, b = self.subject_prefix, self.digest_prefix
        if a == b or a.startswith(b + ".") or b.startswith(a + "."):
            raise ValueError(
                f"digest_prefix {b!r} and subject_prefix {a!r} overlap: the digests' subjects "
                "and the Events' must never meet (two streams can not share a subject)"
            )
        if self.stream == self.digest_stream:
            raise ValueError(f"digest_stream {self.digest_stream!r} is the Events' stream")
        return self


class LogSettings(Section):
    """Logs: one line per event, on stderr."""

    level: Annotated[
        Literal["debug", "info", "warning", "error"],
        BeforeValidator(lower),
        doc("one of debug|info|warning|error (any case)"),
    ] = "info"
    """The lowest level logged, of the program's own loggers: the libraries' (kubernetes_asyncio,
    aiohttp, nats-py, asyncio, ...) stay at warning (at debug they would log response bodies)."""
    format: Literal["json", "text"] = "json"
    """json: one JSON object per line; text: for a person at a terminal."""


class FileAndEnvSettings(BaseSettings):
    """A program's settings: the YAML file (given to the model as its arguments), overridden by
    the environment. Each program sets its ``model_config`` (env prefix) and sections."""

    # a program's own model_config (its env_prefix) is merged with this one
    model_config = SettingsConfigDict(
        env_nested_delimiter="__", extra="forbid", frozen=True, use_attribute_docstrings=True
    )

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
    """The sections of a YAML configuration file ({} for an empty one)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path}: no such file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        # from None: the YAML error's text quotes the source line (a password, say)
        raise ConfigError(f"config file {path}: not valid YAML: {yaml_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path}: not UTF-8 text (byte {exc.start} can not be decoded)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of sections")
    return data


# What PyYAML quotes of the document in its messages: an alias, anchor or tag name, a token
# (a single character, or a token kind such as '<scalar>' is kept).
_QUOTED = re.compile(r"'([^']*)'")


def _quoted(m: re.Match[str]) -> str:
    text = m.group(1)
    return m.group(0) if len(text) <= 2 or re.fullmatch(r"<[a-z ]+>", text) else "'...'"


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where (line, column) and what is wrong, never the text of the line: PyYAML's own
    message shows the source line under a caret, and the line may hold a password."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__
    parts: list[str] = []
    if exc.context:
        where = _mark(exc.context_mark)
        parts.append(_QUOTED.sub(_quoted, exc.context) + (f" ({where})" if where else ""))
    if exc.problem:
        where = _mark(exc.problem_mark)
        parts.append(_QUOTED.sub(_quoted, exc.problem) + (f" at {where}" if where else ""))
    return ": ".join(parts) or type(exc).__name__


def _mark(mark: Any) -> str:
    if mark is None:
        return ""
    return f"line {mark.line + 1}, column {mark.column + 1}"


def describe(exc: ValidationError) -> str:
    """Every problem pydantic found, one per key, no secret shown."""
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
    # (BRIDGE_NAT__SERVERS) would be ignored without a word: name it instead.
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


def load(
    settings_cls: type[S], prefix: str, file_env: str, path: str | None, *, env_example: str
) -> S:
    """The settings from ``path`` (or ``$<file_env>``) and the environment. ``env_example``
    shows how a list is written in a variable, for the message when one is not JSON."""
    path = path or os.environ.get(file_env) or None
    data = read_yaml(path) if path else {}
    check_env_sections(settings_cls, prefix, file_env, dict(os.environ))
    try:
        return settings_cls(**data)
    except ValidationError as exc:
        raise ConfigError(describe(exc)) from exc
    except SettingsError as exc:
        # e.g. BRIDGE_FILTER__REASONS=BackOff: lists and maps from the environment are JSON
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(
            f"invalid configuration: {exc}{cause} (lists from the environment are JSON, as "
            f"are maps, e.g. {env_example})"
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
