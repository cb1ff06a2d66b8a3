"""NKey seeds and ``.creds`` files made in Python, for the tests of what the programs accept
and refuse before anything reaches a server: each file as nsc writes it (the JWT signed by an
account key, the blocks and their dashes), or broken in one way. A real nats-server in
operator mode gets its material from ``tests/standins/natsauth.py`` (the Go tool) instead."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import nkeys


def seed(prefix: int = nkeys.PREFIX_BYTE_USER) -> bytes:
    """A fresh seed of the kind ``prefix`` says (user by default)."""
    return bytes(nkeys.encode_seed(os.urandom(32), prefix))


def public(seed_: bytes) -> str:
    return bytes(nkeys.from_seed(bytearray(seed_)).public_key).decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def user_jwt(
    subject: str, *, kind: str = "user", expires: float | None = None, name: str = "bridge"
) -> str:
    """A NATS v2 JWT for ``subject``, signed by a fresh account key."""
    account = seed(nkeys.PREFIX_BYTE_ACCOUNT)
    header = {"typ": "JWT", "alg": "ed25519-nkey"}
    claims: dict[str, object] = {
        "jti": _b64(os.urandom(16)),
        "iat": int(time.time()),
        "iss": public(account),
        "name": name,
        "sub": subject,
        "nats": {"type": kind, "version": 2},
    }
    if expires is not None:
        claims["exp"] = int(expires)
    head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    kp = nkeys.from_seed(bytearray(account))
    sig = _b64(kp.sign(head.encode()))
    return f"{head}.{sig}"


def creds_text(jwt: str | None, seed_: bytes | None) -> str:
    """A .creds file's text as nsc writes it, with either block left out when None."""
    parts = []
    if jwt is not None:
        parts.append(
            f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
        )
    if seed_ is not None:
        parts.append(
            f"-----BEGIN USER NKEY SEED-----\n{seed_.decode()}\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n"
        )
    return "".join(parts)


def write_creds(path: Path, *, expires: float | None = None) -> tuple[Path, bytes]:
    """A valid .creds file at ``path``; returns it and its seed."""
    s = seed()
    path.write_text(creds_text(user_jwt(public(s), expires=expires), s))
    return path, s


def write_seed(path: Path, prefix: int = nkeys.PREFIX_BYTE_USER) -> tuple[Path, bytes]:
    s = seed(prefix)
    path.write_bytes(s + b"\n")
    return path, s
