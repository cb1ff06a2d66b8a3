"""The NATS connection's options, and the checks each program's settings run on them when
loaded: no secret in a server URL, credential files that can be used, TLS files that load.
No nats-py here: a settings module imports this without the client."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from k8s_event_common.credentials import CredentialError, check_creds_file, check_seed_file

SCHEMES = ("nats://", "tls://", "ws://", "wss://")

__all__ = [
    "CredentialError",
    "NatsOptions",
    "auth_checked",
    "creds_file_checked",
    "redact_url",
    "seed_file_checked",
    "servers_checked",
    "url_problem",
]


@dataclass(frozen=True)
class NatsOptions:
    """How to reach NATS; each program fills it from its settings."""

    servers: list[str] = field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    name: str | None = None  # the connection's name, shown by the server (connz, logs)
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_handshake_first: bool = False
    connect_timeout: float = 5.0
    inbox_prefix: str = "_INBOX"
    ping_interval: float = 5.0
    max_outstanding_pings: int = 2
    reconnect_time_wait: float = 1.0
    dont_randomize: bool = False  # try the servers in the order given (nats-py shuffles them)
    skip_subject_validation: bool = False

    @property
    def wants_tls(self) -> bool:
        return bool(
            self.tls_ca_file
            or self.tls_cert_file
            or self.tls_handshake_first
            or any(s.startswith(("tls://", "wss://")) for s in self.servers)
        )

    @property
    def stale_after(self) -> float:
        """Seconds of silence from the server after which the connection is stale."""
        return self.ping_interval * (self.max_outstanding_pings + 1)


def redact_url(url: str) -> str:
    """``url`` with any user name, password or token in it shown as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<not a URL>"
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"***@{host}").geturl()


def url_problem(url: str) -> str | None:
    """What is wrong with one server URL, never showing a secret in it; None when fine."""
    if not url.startswith(SCHEMES):
        return f"{redact_url(url)!r} is not a nats://, tls://, ws:// or wss:// URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return f"{redact_url(url)!r} is not a valid URL"
    if "@" in parts.netloc:
        return (
            f"{redact_url(url)!r} holds a user name, password or token: it would be printed "
            "wherever the server is named; set user and password (or token) instead, from a "
            "Secret"
        )
    if not parts.hostname:
        return f"{url!r} has no host"
    return None


def servers_checked(value: list[str]) -> list[str]:
    """A settings validator for ``servers``: at least one, each a usable URL without a secret
    in it. Raises ``ValueError`` naming the (redacted) URL."""
    if not value:
        raise ValueError("at least one server URL is needed")
    for url in value:
        problem = url_problem(url)
        if problem:
            raise ValueError(problem)
    return value


def seed_file_checked(value: str | None) -> str | None:
    """A settings validator for ``nkey_seed_file``: a readable user seed. The message never
    shows the path given, nor a byte of the file (a seed pasted here must not be echoed)."""
    if value is not None:
        check_seed_file(value)
    return value


def creds_file_checked(value: str | None) -> str | None:
    """A settings validator for ``creds_file``: a readable ``.creds`` file with a user JWT and
    the seed that belongs to it."""
    if value is not None:
        check_creds_file(value)
    return value


def auth_checked(opts: NatsOptions) -> None:
    """The checks across keys: one kind of credential file, a password with a user. Raises
    ``ValueError`` naming the keys. (Whether the TLS files load is checked when the
    connection is made: ``connecting.tls_context``.)"""
    if opts.creds_file and opts.nkey_seed_file:
        raise ValueError(
            "creds_file and nkey_seed_file are both set: a .creds file holds the seed already; "
            "set one"
        )
    if opts.password is not None and not opts.user:
        raise ValueError("password needs user")
