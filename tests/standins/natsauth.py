"""NATS in operator mode (decentralised auth: JWTs signed by NKeys) for the tests, made by
``natsauth`` (e2e/natsauth, built by tests/standins/gotools.py) and served by a real nats-server.

    op = Operator(tmp_path / "op").setup()      # operator, accounts SYS and APP (JetStream)
    creds = op.user("bridge", expires=5)        # tmp_path/op/bridge.creds
    op = Operator(d).setup(ACCOUNTS)            # and deploy/nats/accounts.json's accounts
    creds = op.user("k8s-event-otlp", account="KUBE_EVENTS_OTLP")
    server = op.start()                         # nats-server -c <operator-mode config>
    await op.revoke("bridge")                   # the server drops bridge's connections

A test module that uses it sets ``GO_TOOLS = ("natsauth",)`` so that tests/conftest.py builds
the tool before the first test.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import nats

from k8s_event_sim.natsserver import NatsServer, free_port
from tests.standins import gotools

# the full resolver's subject for a pushed account JWT (nsc push, `nats server request`)
CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"


class NatsAuthError(RuntimeError):
    """natsauth failed, or the server refused an account JWT."""


class Operator:
    """An operator's material in ``directory`` (see e2e/natsauth/main.go for the files) and at
    most one nats-server that trusts it."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.server: NatsServer | None = None

    @property
    def sys_creds(self) -> Path:
        """User ``sys`` of the system account: for $SYS requests."""
        return self.dir / "sys.creds"

    def run(self, *args: str) -> str:
        """``natsauth ARGS``; its stdout."""
        done = subprocess.run(
            [str(gotools.ensure("natsauth")), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise NatsAuthError(
                f"natsauth {' '.join(args)} exited {done.returncode}: {done.stderr}"
            )
        return done.stdout

    def setup(self, accounts: Path | None = None) -> Operator:
        """``natsauth init``: the operator, SYS with user sys, APP with JetStream; and the
        accounts of ``accounts`` (deploy/nats/accounts.json's shape), with their exports and
        imports."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run("init", str(self.dir), *(["--accounts", str(accounts)] if accounts else []))
        return self

    def user(
        self,
        name: str,
        expires: float | str | None = None,
        program: str | None = None,
        permissions_file: Path | str | None = None,
        account: str | None = None,
    ) -> Path:
        """A user of ``account`` (APP unless told): its .creds file. ``expires``: seconds (or a
        Go duration, "5s") until its JWT expires; ``program`` and ``permissions_file``: its
        permissions, the entry ``program`` of that JSON file (deploy/nats/permissions.json's
        shape)."""
        args = ["user", str(self.dir), name]
        if account is not None:
            args += ["--account", account]
        if expires is not None:
            args += ["--expires", expires if isinstance(expires, str) else f"{expires}s"]
        if program is not None or permissions_file is not None:
            args += ["--permissions", str(permissions_file), "--program", str(program)]
        self.run(*args)
        return self.dir / f"{name}.creds"

    def public_key(self, name: str) -> str:
        """The user's public key (``U...``): the subject of the JWT in its .creds."""
        return str(self.claims(name)["sub"])

    def claims(self, name: str) -> dict[str, Any]:
        """The claims of the user JWT in ``name``.creds (decoded, not verified)."""
        text = (self.dir / f"{name}.creds").read_text()
        token = text.split("-----BEGIN NATS USER JWT-----")[1].split("------END")[0].strip()
        payload = token.split(".")[1]
        claims: dict[str, Any] = json.loads(
            base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        )
        return claims

    def nkey(self, name: str) -> tuple[Path, str]:
        """A plain NKey user (no JWT, no operator): its seed file and public key."""
        public = self.run("nkey", str(self.dir), name).strip()
        return self.dir / f"{name}.nk", public

    def config(self, port: int, store_dir: Path | str) -> str:
        """A complete nats-server config: loopback ``port``, JetStream in ``store_dir``,
        operator mode with the full resolver (resolver.conf, inlined: the text stands alone,
        wherever it is written)."""
        resolver = (self.dir / "resolver.conf").read_text()
        return (
            f"listen: 127.0.0.1:{port}\n"
            f"jetstream: {{ store_dir: {json.dumps(str(store_dir))} }}\n"
            f"{resolver}"
        )

    def start(self) -> NatsServer:
        """A nats-server with ``config``; stopped by ``stop``."""
        port = free_port()
        store = self.dir / "nats"
        path = self.dir / "nats-server.conf"
        path.write_text(self.config(port, store))
        self.server = NatsServer(str(store), port, config=path).start()
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    async def push(self, account_jwt: str) -> dict[str, object]:
        """Send an account JWT to the running server as an operator does
        (``$SYS.REQ.CLAIMS.UPDATE`` as user sys); the server's answer once it took it."""
        if self.server is None:
            raise NatsAuthError("no server: start() first")
        nc = await nats.connect(
            self.server.url, user_credentials=str(self.sys_creds), allow_reconnect=False
        )
        try:
            msg = await nc.request(CLAIMS_UPDATE, account_jwt.encode(), timeout=5)
        finally:
            await nc.close()
        answer = json.loads(msg.data)
        data = answer.get("data") or {}
        if answer.get("error") or data.get("code") != 200:
            raise NatsAuthError(f"{CLAIMS_UPDATE} refused: {answer}")
        return dict(answer)

    async def revoke(self, name: str) -> None:
        """Revoke user ``name`` (every JWT of its key issued until now) and push its account's
        new JWT; returns once the server took it (it has dropped the user's connections then)."""
        account_jwt = self.run("revoke", str(self.dir), name).strip()
        await self.push(account_jwt)
