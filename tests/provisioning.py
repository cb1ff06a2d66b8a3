"""Provisioning as an operator does it before the programs start (docs/deploy.md): the stream
and the buckets by ``k8s-event-bridge provision``, each subscriber's durable (and the OTLP
subscriber's dead-letter stream) by its own ``provision`` command, all with the operator's NATS
credentials (the programs' own users may create none of them under
deploy/nats/permissions.json)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

BRIDGE = str(Path(sys.executable).parent / "k8s-event-bridge")
ENV_PREFIX = {
    "k8s_event_consumer.remediation": "REMEDIATION_",
    "k8s_event_consumer.alerting": "ALERTING_",
    "k8s_event_consumer.otlp": "OTLP_",
    "k8s_event_consumer.digests": "DIGESTS_",
}


def _run(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        cmd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{cmd} exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stderr


def _auth(prefix: str, servers: list[str], user: str | None, password: str | None,
          creds_file: str | None) -> dict[str, str]:  # fmt: skip
    env = {f"{prefix}NATS__SERVERS": json.dumps(servers)}
    if user is not None:
        env[f"{prefix}NATS__USER"] = user
        env[f"{prefix}NATS__PASSWORD"] = password or ""
    if creds_file is not None:
        env[f"{prefix}NATS__CREDS_FILE"] = creds_file
    # an operator's connection: not the program's inbox prefix
    env[f"{prefix}NATS__INBOX_PREFIX"] = "_INBOX"
    return env


async def bridge(
    servers: list[str],
    *,
    user: str | None = None,
    password: str | None = None,
    creds_file: str | None = None,
    args: tuple[str, ...] = (),
) -> str:
    """``k8s-event-bridge provision`` with the operator's credentials; its log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env = {**env, **_auth("BRIDGE_", servers, user, password, creds_file)}
    return await asyncio.to_thread(_run, [BRIDGE, "provision", *args], env)


async def subscriber(
    module: str,
    config: Path,
    servers: list[str],
    *,
    user: str | None = None,
    password: str | None = None,
    creds_file: str | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """``python -m <module> provision --config FILE``: the subscriber's durable (and its
    bucket, or its dead-letter stream) from its own configuration, on the operator's
    credentials (from the environment, which wins over the file); its log."""
    prefix = ENV_PREFIX[module]
    full = {**(env or {}), **_auth(prefix, servers, user, password, creds_file)}
    cmd = [sys.executable, "-m", module, "provision", "--config", str(config)]
    return await asyncio.to_thread(_run, cmd, full)
