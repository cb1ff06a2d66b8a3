"""NATS credential files, read and checked before anything is sent: an NKey seed file and a
``.creds`` file (a user JWT and its NKey seed, as ``nsc generate creds`` writes it).

``check_seed_file`` and ``check_creds_file`` raise ``CredentialError`` with a message that
names what is wrong and never a byte of the file: a seed is a private key. They are called
when the settings are loaded (a bad file is a configuration error: exit 2, never a
traceback, and never nats-py's own reader, which loops forever on a seed block without a
JWT block).

``Signer`` answers the server's nonce at each connect from the file as it is then, so a
``.creds`` file replaced on disk (a rotated Secret) is used at the next reconnect; a file
that went bad meanwhile is reported and the last good one is used.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8s_event_common.clock import SYSTEM

# The blocks of a .creds file: "-----BEGIN NATS USER JWT-----" / "------END NATS USER JWT------"
# (nsc writes five dashes before BEGIN and six around END; readers accept any number).
_JWT_BLOCK = "NATS USER JWT"
_SEED_BLOCK = "USER NKEY SEED"
# The first letters of an encoded seed: S, then the kind of key it is for.
_SEED_KINDS = {"SU": "user", "SA": "account", "SO": "operator", "SN": "server", "SC": "cluster"}


class CredentialError(ValueError):
    """A credential file can not be used; the message never holds its content."""


@dataclass(frozen=True)
class UserCreds:
    """A checked ``.creds`` file: the user JWT and the seed it belongs to (neither in the
    repr: the seed is a private key, the JWT a credential)."""

    jwt: str = field(repr=False)
    seed: bytes = field(repr=False)
    public_key: str  # the user's (the JWT's subject)
    name: str  # the JWT's name claim, "" when none
    expires: float | None  # the JWT's exp, seconds since the epoch

    def expired(self, now: float | None = None) -> bool:
        return self.expires is not None and (SYSTEM.wall() if now is None else now) >= self.expires


def _read(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except IsADirectoryError:
        raise CredentialError("is a directory, not a file") from None
    except FileNotFoundError:
        raise CredentialError("no such file") from None
    except OSError as exc:
        raise CredentialError(f"can not be read: {exc.strerror}") from None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise CredentialError("is not a text file (an NKey seed or a .creds file)") from None


def _seed(text: str, where: str) -> tuple[bytes, str]:
    """A user seed and its public key, from ``text`` (the seed alone)."""
    seed = text.strip().encode()
    kind = _SEED_KINDS.get(seed[:2].decode(errors="replace"))
    if not seed.startswith(b"S") or kind is None:
        raise CredentialError(f"{where} is not an NKey seed (a seed starts with SU)")
    if kind != "user":
        raise CredentialError(
            f"{where} is an {kind} seed (S{seed[1:2].decode()}...); a user seed (SU...) is needed"
        )
    import nkeys  # here: PyNaCl costs 2.3 MB, only for those who use NKeys

    try:
        kp = nkeys.from_seed(bytearray(seed))
        public = kp.public_key.decode()
        kp.wipe()
    except Exception:  # nkeys and PyNaCl raise several kinds on a bad seed
        raise CredentialError(
            f"{where} is not a valid NKey seed (bad encoding or checksum)"
        ) from None
    return seed, public


def check_seed_file(path: str) -> tuple[bytes, str]:
    """The user seed in an NKey seed file and its public key (``U...``)."""
    text = _read(path)
    if _SEED_BLOCK in text or _JWT_BLOCK in text:
        raise CredentialError("holds a .creds file (JWT and seed): set it as creds_file")
    return _seed(text, "the file")


def _block(text: str, name: str) -> str | None:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "BEGIN " + name in line:
            for body in lines[i + 1 :]:
                if body.strip() and "END " + name not in body:
                    return body.strip()
                if "END " + name in body:
                    return ""
            return ""
    return None


def _claims(jwt: str) -> dict[str, Any]:
    parts = jwt.split(".")
    if len(parts) != 3:
        raise CredentialError("the user JWT is not a JWT (three dot-separated parts expected)")
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        raise CredentialError("the user JWT does not decode (base64url JSON expected)") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise CredentialError("the user JWT does not decode (JSON objects expected)")
    if not str(header.get("alg", "")).startswith("ed25519"):
        raise CredentialError(f"the JWT is not a NATS JWT (alg {header.get('alg')!r})")
    return claims


def check_creds_file(path: str) -> UserCreds:
    """The user JWT and seed of a ``.creds`` file, checked to belong together."""
    text = _read(path)
    jwt = _block(text, _JWT_BLOCK)
    seed_text = _block(text, _SEED_BLOCK)
    if not jwt:
        bare_seed = seed_text is None and text.strip().startswith("SU")
        raise CredentialError(
            "holds no user JWT (a -----BEGIN NATS USER JWT----- block)"
            + ("; an NKey seed alone goes in nkey_seed_file" if bare_seed else "")
        )
    if not seed_text:
        raise CredentialError("holds no user seed (a -----BEGIN USER NKEY SEED----- block)")
    claims = _claims(jwt)
    nats_claims = claims.get("nats")
    kind = nats_claims.get("type", "user") if isinstance(nats_claims, dict) else "user"
    if kind != "user":
        raise CredentialError(f"the JWT is an {kind} JWT; a user JWT is needed")
    seed, public = _seed(seed_text, "the seed block")
    subject = str(claims.get("sub", ""))
    if subject != public:
        raise CredentialError(
            f"the JWT is for user {subject or '(none)'} but the seed is user {public}'s: "
            "they are from different users"
        )
    exp = claims.get("exp")
    return UserCreds(
        jwt=jwt,
        seed=seed,
        public_key=public,
        name=str(claims.get("name", "")),
        expires=float(exp) if isinstance(exp, int | float) and exp > 0 else None,
    )


Report = Callable[[str], None]  # told, once per new problem, why the file was not used


class Signer:
    """nats-py's ``signature_cb`` and ``user_jwt_cb`` for a ``.creds`` file, read at each
    connect. nats-py asks for the signature first, then the JWT, within one CONNECT: both come
    from the same reading of the file."""

    def __init__(self, path: str, report: Report) -> None:
        self.path = path
        self._report = report
        self.creds = check_creds_file(path)  # raises at start: a config error
        self._problem = ""

    def _fresh(self) -> UserCreds:
        try:
            creds = check_creds_file(self.path)
        except CredentialError as exc:
            if str(exc) != self._problem:
                self._problem = str(exc)
                self._report(str(exc))
            return self.creds  # the last good one: it may still be valid
        self._problem = ""
        self.creds = creds
        return creds

    def sign(self, nonce: str) -> bytes:
        import nkeys

        creds = self._fresh()
        kp = nkeys.from_seed(bytearray(creds.seed))
        try:
            return base64.b64encode(kp.sign(nonce.encode()))
        finally:
            kp.wipe()

    def user_jwt(self) -> bytes:
        return self.creds.jwt.encode()
