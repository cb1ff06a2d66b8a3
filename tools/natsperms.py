"""deploy/nats/nats-server.conf, made from deploy/nats/permissions.json.

``permissions.json`` is the one source of each program's NATS permissions (docs/deploy.md: "NATS:
least privilege per program" says why each subject is there). From it come:

- ``nats-server.conf``, a fragment an operator includes in the server's configuration;
- ``accounts.json``, the same accounts, exports and imports for operator mode (JWTs: what
  ``e2e/natsauth`` signs, and what docs/deploy.md's ``nsc`` commands make).

The accounts (docs/deploy.md, "One account per program"): ``KUBE_EVENTS`` has JetStream and
owns the stream, the buckets, the durables and the dead-letter stream; no program's user lives
there (the operator's own does). Each program's user lives in an account of its own without
JetStream (``KUBE_EVENTS_BRIDGE``, ``KUBE_EVENTS_ALERTING``, ...), where every subject it may
publish is a service imported from ``KUBE_EVENTS`` (exported to that account alone).
nats-server checks a publish's subject against the permissions but not its reply subject;
through a service import, though, the reply is mapped to a private subject of the exporting
account and the answer comes back to the importing account. So no reply subject a program names
can make JetStream answer into the stream, a bucket or another program's durable: the answer
lands in the program's own account, which stores nothing, or goes on through one of its own
imports, where it could publish anyway. A pull request (``$JS.API.CONSUMER.MSG.NEXT...``) is
answered by many messages: its export's responses are a stream; every other one answers once.

Digests (issue 41): only ``k8s-event-digests`` may publish ``k8s.digests.>`` (the K8S_DIGESTS
stream, in ``KUBE_EVENTS`` like the rest). It reads the versions stream through consumers its
``provision`` made (``k8s-event-digests``, ``-0``, ``-1``: one per replica, as the alerting
subscriber's durables) and moves one to the sequence it starts from with
``$JS.API.CONSUMER.RESET``: it may not create a consumer, since a consumer's config names its
``deliver_subject``, and JetStream would push the versions stream from ``KUBE_EVENTS`` into any
other stream there (the dead-letter stream, a bucket), whatever the permissions say.

``python -m tools.natsperms`` writes both files; ``--check`` names each that is stale and exits
1 (``make lint``; tests/integration/test_nats_permissions.py runs the check too).
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
ACCOUNTS = REPO / "deploy" / "nats" / "accounts.json"
COMMAND = "python -m tools.natsperms"

ACCOUNT = "KUBE_EVENTS"  # the owner: JetStream, the stream, every bucket and durable; no program
BRIDGE = "k8s-event-bridge"
PROGRAMS = (
    BRIDGE,
    "k8s-event-alerting",
    "k8s-event-remediation",
    "k8s-event-otlp",
    "k8s-event-digests",
)
# a pull request's answer is the messages it asked for: many answers to one request
STREAM_RESPONSES = "$JS.API.CONSUMER.MSG.NEXT."
# Imported by every program's account though no program's user may publish it: in an
# account without JetStream on a server with JetStream, nats-server answers every $JS.API
# request itself ("JetStream not enabled for account", racing the imported answer) unless the
# account imports $JS.API.INFO (server/jetstream.go, enableJetStreamInfoServiceImportOnly).
SHADOW = "$JS.API.INFO"

HEADER = f"""\
# Made by `{COMMAND}` from deploy/nats/permissions.json: edit that file, not this one.
#
# The NATS side of k8s-event-bridge with least privilege (docs/deploy.md, "NATS: least
# privilege per program"): the account {ACCOUNT} with JetStream, which owns the stream, the
# buckets and the durables (add the operator's own user to its empty list of users), and one
# account per program with its one user, allowed exactly the subjects that program uses, each
# of them a service imported from {ACCOUNT} (exported to that account alone): an answer
# JetStream sends to a program comes back into the program's account, whatever reply subject
# it named, and lands in the stream or a bucket only where the program may write itself.
# Include it in the server's configuration, which enables JetStream itself (a `jetstream {{...}}`
# block):
#
#   include ./k8s-event-bridge.conf      # a path relative to the including file
#
# Each password comes from an environment variable of nats-server (the server refuses to
# start while one is unset); the programs take theirs as BRIDGE_NATS__PASSWORD,
# ALERTING_NATS__PASSWORD, REMEDIATION_NATS__PASSWORD, OTLP_NATS__PASSWORD and
# DIGESTS_NATS__PASSWORD (with
# `nats.user` set to the user name). Every program sets its own `nats.inbox_prefix` (the
# defaults are what the permissions name); a changed stream, bucket, durable, subject prefix,
# dead-letter stream or subject, or inbox prefix needs its subjects changed in permissions.json.
"""


def password_variable(program: str) -> str:
    """The environment variable nats-server reads the program's password from."""
    return program.upper().replace("-", "_") + "_NATS_PASSWORD"


def account_of(program: str) -> str:
    """The account of the program's user: ``KUBE_EVENTS_<NAME>`` (``k8s-event-alerting``:
    ``KUBE_EVENTS_ALERTING``, the bridge's ``KUBE_EVENTS_BRIDGE``)."""
    return ACCOUNT + "_" + program.removeprefix("k8s-event-").upper().replace("-", "_")


def load(path: Path = PERMISSIONS) -> dict[str, dict[str, Any]]:
    doc: dict[str, dict[str, Any]] = json.loads(path.read_text())
    if sorted(doc) != sorted(PROGRAMS):
        raise ValueError(f"{path}: the programs are {sorted(PROGRAMS)}, not {sorted(doc)}")
    for program, perms in doc.items():
        if perms.get("publish", {}).get("deny"):
            raise ValueError(f"{path}: {program}: a program's publish permissions allow only")
    return doc


def accounts(permissions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The accounts, in the shape of ``accounts.json``: for each, its users (program names),
    whether it has JetStream, and its exports or imports. A program's account imports each
    subject its user may publish, and ``SHADOW``, as a service of ``KUBE_EVENTS`` (which has no
    program's user); ``KUBE_EVENTS`` exports each such subject to exactly the accounts that
    import it."""
    exports: dict[str, list[str]] = {}
    out: dict[str, Any] = {ACCOUNT: {"jetstream": True, "users": [], "exports": [], "imports": []}}
    for program in PROGRAMS:
        name = account_of(program)
        subjects = [SHADOW, *permissions[program].get("publish", {}).get("allow", [])]
        out[name] = {
            "jetstream": False,
            "users": [program],
            "exports": [],
            "imports": [{"service": s, "account": ACCOUNT} for s in subjects],
        }
        for s in subjects:
            exports.setdefault(s, []).append(name)
    out[ACCOUNT]["exports"] = [
        {
            "service": s,
            "response_type": "stream" if s.startswith(STREAM_RESPONSES) else "singleton",
            "accounts": importers,
        }
        for s, importers in exports.items()
    ]
    return out


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + ln if ln else ln for ln in text.splitlines())


def _user(program: str, permissions: dict[str, Any]) -> str:
    perms = json.dumps(permissions, indent=2)
    return (
        "{\n"
        f'  "user": "{program}",\n'
        f'  "password": ${password_variable(program)},\n'
        f'  "permissions": {perms.replace(chr(10), chr(10) + "  ")}\n'
        "}"
    )


def conf(permissions: dict[str, dict[str, Any]]) -> str:
    """The fragment: JSON in nats-server's syntax, except each password, a ``$VARIABLE``."""
    blocks = []
    for name, account in accounts(permissions).items():
        users = ",\n".join(_user(p, permissions[p]) for p in account["users"])
        lines = [f'"{name}": {{']
        if account["jetstream"]:
            lines.append('  "jetstream": "enabled",')
        lines.append('  "users": [')
        if users:
            lines.append(_indent(users, 4))
        if account["exports"]:
            lines.append("  ],")
            exports = account["exports"]  # service, response_type, accounts
            lines.append('  "exports": ' + _indent(json.dumps(exports, indent=2), 2).lstrip())
        else:
            lines.append("  ],")
            imports = [
                {"service": {"account": i["account"], "subject": i["service"]}}
                for i in account["imports"]
            ]
            lines.append('  "imports": ' + _indent(json.dumps(imports, indent=2), 2).lstrip())
        lines.append("}")
        blocks.append(_indent("\n".join(lines), 2))
    return HEADER + "accounts: {\n" + ",\n".join(blocks) + "\n}\n"


ACCOUNTS_NOTE = (
    f"Made by `{COMMAND}` from permissions.json: the accounts of nats-server.conf, for operator"
    " mode (docs/deploy.md, 'NATS in operator mode'). Each program's account imports every"
    f" subject its user may publish as a service of {ACCOUNT}, which exports it to that account"
    " alone; a pull request's answers are a stream, every other answer a singleton."
)


def accounts_json(permissions: dict[str, dict[str, Any]]) -> str:
    doc = {"note": ACCOUNTS_NOTE, "owner": ACCOUNT, "accounts": accounts(permissions)}
    return json.dumps(doc, indent=2) + "\n"


def wanted() -> dict[Path, str]:
    permissions = load()
    return {CONF: conf(permissions), ACCOUNTS: accounts_json(permissions)}


def stale() -> list[str]:
    return [
        str(p.relative_to(REPO))
        for p, text in wanted().items()
        if not p.exists() or p.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a made file is stale")
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
