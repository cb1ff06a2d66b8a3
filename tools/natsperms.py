"""deploy/nats/nats-server.conf, made from deploy/nats/permissions.json.

``permissions.json`` is the one source of each program's NATS permissions (docs/deploy.md: "NATS:
least privilege per program" says why each subject is there); operator-mode user JWTs are made
from it too. ``nats-server.conf`` is a fragment an operator includes in the server's
configuration: one account with JetStream and a user per program, each with its permissions
as in the JSON, its password from an environment variable of the server.

``python -m tools.natsperms`` writes the fragment; ``--check`` names it when it is stale and
exits 1 (``make lint``; tests/integration/test_nats_permissions.py runs the check too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PERMISSIONS = REPO / "deploy" / "nats" / "permissions.json"
CONF = REPO / "deploy" / "nats" / "nats-server.conf"
COMMAND = "python -m tools.natsperms"

ACCOUNT = "KUBE_EVENTS"
PROGRAMS = ("k8s-event-bridge", "k8s-event-alerting", "k8s-event-remediation", "k8s-event-otlp")

HEADER = f"""\
# Made by `{COMMAND}` from deploy/nats/permissions.json: edit that file, not this one.
#
# The NATS side of k8s-event-bridge with least privilege (docs/deploy.md, "NATS: least
# privilege per program"): the account {ACCOUNT} with JetStream, and one user per program,
# allowed exactly the subjects that program uses. Include it in the server's configuration,
# which enables JetStream itself (a `jetstream {{...}}` block):
#
#   include ./k8s-event-bridge.conf      # a path relative to the including file
#
# Each password comes from an environment variable of nats-server (the server refuses to
# start while one is unset); the programs take theirs as BRIDGE_NATS__PASSWORD,
# ALERTING_NATS__PASSWORD, REMEDIATION_NATS__PASSWORD and OTLP_NATS__PASSWORD (with
# `nats.user` set to the user name). Every program sets its own `nats.inbox_prefix` (the
# defaults are what the permissions name); a changed stream, bucket, durable, subject prefix,
# dead-letter stream or subject, or inbox prefix needs its subjects changed in permissions.json.
"""


def password_variable(program: str) -> str:
    """The environment variable nats-server reads the program's password from."""
    return program.upper().replace("-", "_") + "_NATS_PASSWORD"


def load(path: Path = PERMISSIONS) -> dict[str, dict[str, Any]]:
    doc: dict[str, dict[str, Any]] = json.loads(path.read_text())
    if sorted(doc) != sorted(PROGRAMS):
        raise ValueError(f"{path}: the programs are {sorted(PROGRAMS)}, not {sorted(doc)}")
    return doc


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + ln if ln else ln for ln in text.splitlines())


def conf(permissions: dict[str, dict[str, Any]]) -> str:
    """The fragment: JSON in nats-server's syntax, except each password, a ``$VARIABLE``."""
    users = []
    for program in PROGRAMS:
        perms = json.dumps(permissions[program], indent=2)
        users.append(
            "{\n"
            f'  "user": "{program}",\n'
            f'  "password": ${password_variable(program)},\n'
            f'  "permissions": {perms.replace(chr(10), chr(10) + "  ")}\n'
            "}"
        )
    body = ",\n".join(users)
    return (
        HEADER
        + "accounts: {\n"
        + f'  "{ACCOUNT}": {{\n'
        + '    "jetstream": "enabled",\n'
        + '    "users": [\n'
        + _indent(body, 6)
        + "\n    ]\n  }\n}\n"
    )


def wanted() -> dict[Path, str]:
    return {CONF: conf(load())}


def stale() -> list[str]:
    return [
        str(p.relative_to(REPO))
        for p, text in wanted().items()
        if not p.exists() or p.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the fragment is stale")
    args = parser.parse_args(argv)
    if args.check:
        out = stale()
        for name in out:
            print(f"{name} is out of date with deploy/nats/permissions.json: run `{COMMAND}`")
        return 1 if out else 0
    for path, text in wanted().items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
