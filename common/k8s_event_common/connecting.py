"""The one NATS connection of the bridge and the subscribers: auth, TLS, redaction, stale
detection. Neither program trusts the other end of the socket:

- **No credential in clear.** When TLS is wanted (a ``tls://`` or ``wss://`` URL, a CA, a
  client certificate), CONNECT, which carries the password, token or signed nonce, is only
  ever written on a socket that has a TLS session: decided on the socket in use (the TCP
  stream's or the WebSocket's ``ssl_object``), never on the URL. nats-py upgrades to TLS only
  when the server's plaintext INFO asks for it, and aiohttp follows a redirect of the
  WebSocket upgrade (a ``wss://`` endpoint answering ``307 Location: http://...`` ends on a
  plaintext socket); either way the connection is refused before CONNECT
  (``nats_tls_refused``, with ``tls`` the socket's state and ``redirected_to`` where a
  redirect led) and the next server is tried. ``tls_handshake_first`` makes the TLS handshake
  the first bytes on the wire (nats-server ``tls { handshake_first: true }``).
- **Credentials only to the servers configured.** A NATS server never redirects a WebSocket
  upgrade: a redirected one gets no CONNECT, TLS or not (``nats_redirect_refused``). Each
  refusal is counted (``refusals()``, exported by each program as
  ``..._nats_refused_total{reason}``).
- **No secret printed.** A server URL with a user name or password in it is a configuration
  error (``url_problem``): the secret would be in every log line that names the server. Log
  lines name servers by host and port only.
- **Bad credentials refused at start** (``credentials``), and a ``.creds`` file read again at
  each connect (a rotated Secret is used at the next reconnect).
- **An auth error while connected reconnects** (as the Go client does) instead of closing the
  client for good, which nats-py does on any ``-ERR`` but a stale connection: a revoked or
  expired user keeps trying, and is let in again once its credentials are replaced.
- **A hung server is left within seconds.** nats-py pings every ``ping_interval``; a watchdog
  here counts the connection stale once nothing at all was read from the server (no PONG, no
  message) for ``ping_interval * (max_outstanding_pings + 1)``, whatever nats-py's ping task is
  doing (it can block behind a full socket), logs ``nats_stale`` and aborts the socket; nats-py's
  own ping check, one ping later, is the backstop. Either way the transport
  is never waited on for more than ``CLOSE_DEADLINE``: a socket with unsent data to a peer that
  reads nothing never finishes closing, and nats-py's reconnect waits for that before it tries
  another server (nats-io/nats.py#671).

The last three need nats-py's private parts (``PRIVATE_USES``, checked by ``problems()`` before
they are installed, as in nats-py 2.16; the dependency is pinned to that minor version). When
one is missing: the TLS guard can not be done without, so a connection that wants TLS without
``tls_handshake_first`` is refused (``TLSGuardUnavailable``); the others are skipped with one
warning (``nats_guard_off``) and the connection works as plain nats-py does.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS

from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.credentials import CredentialError, Signer, check_seed_file
from k8s_event_common.options import NatsOptions

# The longest wait for a closing transport before its socket is aborted.
CLOSE_DEADLINE = 2.0

# The connections refused before CONNECT in this process, by reason ("tls": the socket in use
# has no TLS session and TLS is wanted; "redirect": the WebSocket upgrade was redirected).
_refusals: dict[str, int] = {"tls": 0, "redirect": 0}

# The watchdogs running (the event loop holds tasks weakly): each keeps its connection alive
# until the client is closed, also when the caller kept only the client.
_watchdogs: set[asyncio.Task[None]] = set()

__all__ = [
    "CLOSE_DEADLINE",
    "PRIVATE_USES",
    "Connection",
    "CredentialError",
    "NatsOptions",
    "Private",
    "RedirectRefused",
    "Refused",
    "TLSGuardUnavailable",
    "TLSRefused",
    "problems",
    "refusals",
    "tls_context",
]


def refusals() -> dict[str, int]:
    """How many connections this process refused before CONNECT, by reason."""
    return dict(_refusals)


class Refused(nats.errors.Error):
    """A connection refused before CONNECT: nothing of the credentials was sent."""

    def __init__(self, server: str, why: str) -> None:
        super().__init__(f"nats: {server}: {why}; refused before CONNECT")
        self.server = server

    def __str__(self) -> str:
        return str(self.args[0])


class TLSRefused(Refused):
    """TLS is wanted and the socket in use has no TLS session."""

    def __init__(self, server: str, why: str = "the server did not require TLS") -> None:
        super().__init__(server, why)


class RedirectRefused(Refused):
    """The WebSocket upgrade was redirected: the credentials go only to the servers configured."""


class TLSGuardUnavailable(RuntimeError):
    """This nats-py lacks what refusing a plaintext server needs."""


def tls_context(opts: NatsOptions) -> ssl.SSLContext | None:
    """The client TLS context, or None when TLS is not wanted. Raises ``CredentialError``
    naming the file that can not be used."""
    if not opts.wants_tls:
        return None
    return client_tls_context(opts.tls_ca_file, opts.tls_cert_file, opts.tls_key_file)


def client_tls_context(
    ca_file: str | None, cert_file: str | None, key_file: str | None, *, where: str = "tls"
) -> ssl.SSLContext:
    """A client's TLS context: the system's CAs or ``ca_file``, and the client certificate of
    mutual TLS when both files are given; NATS's and the subscribers' HTTP clients'. Raises
    ``CredentialError`` naming the file (under ``where``, the settings' section) that can not
    be used."""
    try:
        ctx = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise CredentialError(
            f"{where}.ca_file: not a CA bundle (PEM): {_ssl_reason(exc)}"
        ) from None
    if cert_file and key_file:
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise CredentialError(
                f"{where}.cert_file/{where}.key_file: not a certificate and its key (PEM): "
                f"{_ssl_reason(exc)}"
            ) from None
    return ctx


def _ssl_reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__)


# --- the private parts of nats-py the guards use ---


@dataclass(frozen=True)
class Private:
    """One private part of nats-py: a method with these parameters (after self; ``coroutine``
    says whether it is one), or an attribute holding a value of one of these types; of the
    ``Client`` or, for the bridge's fast path, of a ``Subscription``."""

    name: str
    params: tuple[str, ...] | None = None
    coroutine: bool = True
    types: tuple[type, ...] = ()
    owner: str = "Client"


# What the guards use of nats-py's Client, as in nats-py 2.16.
PRIVATE_USES = (
    Private("_connect_command", params=(), coroutine=False),  # builds CONNECT: the TLS guard
    Private("_process_err", params=("err_msg",)),  # a -ERR from the server: the auth guard
    Private("_transport", types=(object,)),  # read / close / wait_closed: the stale guard
    Private("_current_server", types=(object,)),  # the server being connected to
    Private("_connect_to_server", params=("s",)),  # opens the socket: the stale guard goes on
)


def problems(nc: Any, uses: tuple[Private, ...] = PRIVATE_USES, sub: Any = None) -> list[str]:
    """What this nats-py client (and ``sub``, for the parts of a Subscription) lacks of
    ``uses``; empty when every part is as tested."""
    out: list[str] = []
    for p in uses:
        obj = nc if p.owner == "Client" else sub
        where = f"{p.owner}.{p.name}"
        if not hasattr(obj, p.name):
            out.append(f"{where} is missing")
            continue
        value = getattr(obj, p.name)
        if p.params is None:
            if p.types and not isinstance(value, p.types):
                out.append(f"{where} is a {type(value).__name__}")
            continue
        if not callable(value):
            out.append(f"{where} is not a method")
            continue
        if inspect.iscoroutinefunction(value) != p.coroutine:
            out.append(f"{where} is {'not ' if p.coroutine else ''}a coroutine function")
            continue
        have = tuple(inspect.signature(value).parameters)
        if have != p.params:
            out.append(f"{where}({', '.join(have)}) is not ({', '.join(p.params)})")
    return out


def _is_auth_error(text: str) -> bool:
    t = text.lower()
    return "authorization violation" in t or "authentication" in t


def _server_text(text: str) -> str:
    """The server's words in a -ERR, without nats-py's prefix and quotes."""
    t = text.strip()
    t = t.removeprefix("nats: ").strip()
    return t.strip("'").strip()


class Connection:
    """A nats-py client with the guards above, reporting through one logger."""

    def __init__(
        self,
        opts: NatsOptions,
        *,
        logger: str,
        on_state: Callable[[bool], None] = lambda up: None,
        on_reconnected: Callable[[], Awaitable[None]] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.opts = opts
        self.clock = clock
        self.log = logging.getLogger(logger)
        self._on_state = on_state
        self._on_reconnected = on_reconnected
        self._tls = tls_context(opts)
        self._signer: Signer | None = None
        self._seed: str | None = None
        if opts.creds_file:
            self._signer = Signer(opts.creds_file, self._creds_problem)
        elif opts.nkey_seed_file:
            seed, _ = check_seed_file(opts.nkey_seed_file)
            self._seed = seed.decode()
        self.nc = NATS()
        self._last_heard = self.clock.monotonic()
        self._sampled: dict[str, float] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._guarded_transport: Any = None
        missing = problems(self.nc)
        if missing and opts.wants_tls and not opts.tls_handshake_first:
            raise TLSGuardUnavailable(
                "this nats-py lacks what refusing a server that does not require TLS needs ("
                + "; ".join(missing)
                + "): set tls.handshake_first (nats-server tls { handshake_first: true }) or "
                "install the tested nats-py"
            )
        self._guards = not missing
        if missing:
            self._emit(
                logging.WARNING,
                "nats_guard_off",
                reason="; ".join(missing),
                action="plain nats-py: no stale watchdog, auth errors close the client",
            )
        else:
            self._install_client_guards()

    # --- logging ---

    def _emit(self, level: int, event: str, **fields: Any) -> None:
        if self.log.isEnabledFor(level):
            self.log.log(level, event, extra={"fields": fields})

    def _sampled_emit(self, key: str, interval: float, level: int, event: str, **f: Any) -> None:
        now = self.clock.monotonic()
        last = self._sampled.get(key)
        if last is None or now - last >= interval:
            self._sampled[key] = now
            self._emit(level, event, **f)

    def _creds_problem(self, problem: str) -> None:
        self._emit(
            logging.ERROR,
            "nats_credentials_invalid",
            key="creds_file",
            problem=problem,
            action="the last good credentials are used until the file is fixed",
        )

    def server(self) -> str:
        """The server connected (or being connected) to, as host:port."""
        url = self.nc.connected_url
        if url is None:
            current = getattr(self.nc, "_current_server", None)
            url = getattr(current, "uri", None)
        return str(url.hostname or "") + (f":{url.port}" if url and url.port else "") if url else ""

    def auth_failed(self, reason: str) -> None:
        fields: dict[str, Any] = {"server": self.server(), "reason": reason}
        if self._signer is not None and self._signer.creds.expired(self.clock.wall()):
            expires = self._signer.creds.expires
            assert expires is not None
            fields["credentials_expired_at"] = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)
            )
        fields["hint"] = "check nats.user/password, token, nkey_seed_file, creds_file"
        self._sampled_emit(f"auth:{reason}", 60, logging.ERROR, "nats_auth_failed", **fields)

    # --- guards ---

    def _install_client_guards(self) -> None:
        nc: Any = self.nc
        build_connect = nc._connect_command
        process_err = nc._process_err

        def connect_command() -> bytes:
            # CONNECT (with every credential) only on the socket of a server configured, and
            # only on a TLS session when TLS is wanted: read from the socket, not the URL
            self._refuse_unless_safe()
            cmd: bytes = build_connect()
            return cmd

        async def process_err_guarded(err_msg: str) -> None:
            text = _server_text(err_msg)
            if _is_auth_error(text) and nc.is_connected:
                # nats-py would close the client for good; reconnect, as the Go client does
                self.auth_failed(text)
                await nc.force_reconnect()
                return
            await process_err(err_msg)

        connect_to_server = nc._connect_to_server

        async def connect_to_server_guarded(s: Any) -> None:
            # the transport exists from here on (nats-py keeps it for the client's life): a
            # TLS handshake a server never answers must not hang the close that follows either
            await connect_to_server(s)
            self._guard_transport()

        nc._connect_command = connect_command
        nc._process_err = process_err_guarded
        nc._connect_to_server = connect_to_server_guarded

    def _socket(self) -> tuple[str, bool, str | None]:
        """The transport in use (``tcp``, ``websocket``, or ``unknown``), whether its socket has
        a TLS session (False when it can not be told: refused, never assumed), and where a
        redirect of the WebSocket upgrade led (``scheme://host:port``), if one did."""
        transport: Any = getattr(self.nc, "_transport", None)
        writer = getattr(transport, "_io_writer", None)  # nats-py's TcpTransport
        if writer is not None:
            return "tcp", writer.get_extra_info("ssl_object") is not None, None
        ws = getattr(transport, "_ws", None)  # nats-py's WebSocketTransport: aiohttp's response
        if ws is None or not callable(getattr(ws, "get_extra_info", None)):
            return "unknown", False, None
        tls = ws.get_extra_info("ssl_object") is not None
        response: Any = getattr(ws, "_response", None)
        history = getattr(response, "history", None)
        redirected: str | None = None
        if history is None:
            redirected = "unknown (the upgrade's response can not be read)"
        elif history:
            url = response.url  # the URL the upgrade ended on (aiohttp's yarl.URL)
            redirected = f"{url.scheme}://{url.host}:{url.port}"
        return "websocket", tls, redirected

    def _tls_in_place(self) -> bool:
        return self._socket()[1]

    def _refuse_unless_safe(self) -> None:
        """Raise ``TLSRefused`` (TLS wanted, the socket has none) or ``RedirectRefused`` (the
        upgrade was redirected), logged and counted, before any byte of CONNECT."""
        transport, tls, redirected = self._socket()
        server = self.server()
        fields: dict[str, Any] = {"server": server, "transport": transport, "tls": tls}
        if redirected is not None:
            fields["redirected_to"] = redirected
        if self.opts.wants_tls and not tls:
            why = (
                f"the WebSocket upgrade was redirected to {redirected}, a socket without TLS"
                if redirected
                else "the socket has no TLS session (the server did not require TLS)"
            )
            _refusals["tls"] += 1
            self._sampled_emit(
                f"tls:{server}:{redirected}",
                60,
                logging.ERROR,
                "nats_tls_refused",
                **fields,
                reason=f"TLS is wanted and {why}; nothing was sent",
                action="trying the next server",
            )
            raise TLSRefused(server, why)
        if redirected is not None:
            why = f"the WebSocket upgrade was redirected to {redirected}"
            _refusals["redirect"] += 1
            self._sampled_emit(
                f"redirect:{server}:{redirected}",
                60,
                logging.ERROR,
                "nats_redirect_refused",
                **fields,
                reason=f"{why} (a NATS server never redirects; credentials go only to the "
                "servers configured); nothing was sent",
                action="trying the next server; configure the endpoint itself if it is yours",
            )
            raise RedirectRefused(server, why)

    def _guard_transport(self) -> None:
        """Once per transport (nats-py keeps one for the client's life): note each read, and
        never wait on a closing socket for longer than ``CLOSE_DEADLINE``."""
        transport: Any = getattr(self.nc, "_transport", None)
        if transport is None or transport is self._guarded_transport:
            return
        self._guarded_transport = transport
        read = transport.read
        wait_closed = transport.wait_closed

        async def read_noted(buffer_size: int) -> bytes:
            data: bytes = await read(buffer_size)
            if data:
                self._last_heard = self.clock.monotonic()
            return data

        async def wait_closed_bounded() -> None:
            try:
                await self.clock.wait_for(wait_closed(), CLOSE_DEADLINE)
            except TimeoutError:
                self._abort(transport)

        transport.read = read_noted
        transport.wait_closed = wait_closed_bounded

    @staticmethod
    def _abort(transport: Any) -> None:
        for name in ("_io_writer", "_bare_io_writer"):
            writer = getattr(transport, name, None)
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        if getattr(transport, "_io_writer", None) is None:
            with contextlib.suppress(Exception):
                transport.close()

    async def _watch(self) -> None:
        """Count the connection stale after ``stale_after`` seconds without a byte read."""
        stale_after = self.opts.stale_after
        tick = min(1.0, stale_after / 5)
        while not self.nc.is_closed:
            await self.clock.sleep(tick)
            now = self.clock.monotonic()
            if not self.nc.is_connected:
                self._last_heard = now
                continue
            silent = now - self._last_heard
            if silent > stale_after:
                self._emit(
                    logging.WARNING,
                    "nats_stale",
                    server=self.server(),
                    silent_seconds=round(silent, 1),
                    action="the socket is aborted, another server is tried",
                )
                self._last_heard = now
                self._abort(getattr(self.nc, "_transport", None))

    # --- nats-py's callbacks ---

    async def _error_cb(self, exc: Exception) -> None:
        if isinstance(exc, Refused):
            return  # said by the guard
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, nats.errors.AuthorizationError) or _is_auth_error(str(exc)):
            self.auth_failed(_server_text(str(exc)) or "Authorization Violation")
            return
        if "permissions violation" in str(exc).lower():
            # one key for all subjects: a key per subject would grow with every Event subject
            self._sampled_emit(
                "perm",
                60,
                logging.WARNING,
                "nats_permission_denied",
                error=_server_text(str(exc)),
            )
            return
        self._sampled_emit(
            f"err:{type(exc).__name__}", 30, logging.WARNING, "nats_error", error=text
        )

    async def _disconnected_cb(self) -> None:
        self._on_state(False)
        self._emit(logging.WARNING, "nats_disconnected")

    async def _reconnected_cb(self) -> None:
        self._last_heard = self.clock.monotonic()
        self._guard_transport()
        self._on_state(True)
        self._emit(logging.INFO, "nats_reconnected", server=self.server(), tls=self._tls_in_place())
        if self._on_reconnected is not None:
            await self._on_reconnected()

    async def _closed_cb(self) -> None:
        self._on_state(False)

    def kwargs(self) -> dict[str, Any]:
        """The arguments of nats-py's ``connect`` (secrets included: never log them)."""
        o = self.opts
        kw: dict[str, Any] = {
            "servers": list(o.servers),
            "name": o.name,
            "connect_timeout": o.connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,  # nats-py's 60 closes the client for good
            "reconnect_time_wait": o.reconnect_time_wait,
            "dont_randomize": o.dont_randomize,
            "ping_interval": o.ping_interval,
            # nats-py's own check one ping later: a backstop to the watchdog, which says why
            "max_outstanding_pings": o.max_outstanding_pings + 1,
            "inbox_prefix": o.inbox_prefix,
            "skip_subject_validation": o.skip_subject_validation,
            "error_cb": self._error_cb,
            "disconnected_cb": self._disconnected_cb,
            "reconnected_cb": self._reconnected_cb,
            "closed_cb": self._closed_cb,
        }
        if self._tls is not None:
            kw["tls"] = self._tls
            kw["tls_handshake_first"] = o.tls_handshake_first
        if o.user:
            kw["user"] = o.user
        if o.password is not None:
            kw["password"] = o.password
        if o.token is not None:
            kw["token"] = o.token
        if self._signer is not None:
            kw["signature_cb"] = self._signer.sign
            kw["user_jwt_cb"] = self._signer.user_jwt
        elif self._seed is not None:
            kw["nkeys_seed_str"] = self._seed
        return kw

    async def connect(self) -> NATS:
        """Connect (nats-py tries the servers in turn until one takes it, for ever), then
        keep the connection watched. Cancel to give up."""
        kw = self.kwargs()
        if self._signer is not None:
            # nats-py sends a signature only when it thinks auth is configured
            self.nc._auth_configured = True
        try:
            await self.nc.connect(**kw)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.clock.wait_for(self.nc.close(), CLOSE_DEADLINE)
            raise
        self._last_heard = self.clock.monotonic()
        if self._guards:
            self._watchdog = asyncio.create_task(self._watch(), name="nats-watchdog")
            _watchdogs.add(self._watchdog)
            self._watchdog.add_done_callback(_watchdogs.discard)
        self._on_state(True)
        self._emit(logging.INFO, "nats_connected", server=self.server(), tls=self._tls_in_place())
        return self.nc

    async def close(self) -> None:
        """Close, waiting at most a few seconds: a server that went away must not hold up the
        exit."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.clock.wait_for(self.nc.close(), 2 * CLOSE_DEADLINE)
