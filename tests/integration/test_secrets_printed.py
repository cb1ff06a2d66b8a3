"""Sentinel secrets, and every byte the programs put out: none of them may appear anywhere. The
bridge and the subscribers run (debug logs) with a sentinel NATS password, the alerting
subscriber also with a sentinel Alertmanager password, the OTLP subscriber with a sentinel
token in its endpoint's headers, against a real nats-server; a wrong sentinel password on the
way (nats_auth_failed); check-config; and the configurations that are refused (a URL holding a
secret, a seed pasted where its file's path belongs). Read: stdout, stderr, the logs,
/healthz, /readyz, /metrics, /status."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from k8s_event_sim.natsserver import NatsServer
from tests.creds import seed
from tests.integration.harness import (
    SUBSCRIBERS,
    BridgeProcess,
    ConsumerProcess,
    Writer,
    bridge_config,
    eventually,
    subscriber_config,
)

pytestmark = pytest.mark.integration

NATS_PASSWORD = "SentinelNatsPw8d2f"
WRONG_PASSWORD = "SentinelWrongPw41aa"
AM_PASSWORD = "SentinelAmPw77c3"
URL_PASSWORD = "SentinelUrlPw19b0"
OTLP_TOKEN = "SentinelOtlpTok5e21"
PASTED_SEED = seed().decode()
SENTINELS = [NATS_PASSWORD, WRONG_PASSWORD, AM_PASSWORD, URL_PASSWORD, OTLP_TOKEN, PASTED_SEED]
OTLP_HEADERS = f'{{"Authorization": "Bearer {OTLP_TOKEN}"}}'  # OTLP_OTLP__HEADERS, as JSON


def leaked(text: str) -> list[str]:
    return [s for s in SENTINELS if s in text]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BRIDGE_", "ALERTING_", "REMEDIATION_", "OTLP_"))
    }
    return {**env, **extra}


async def _endpoints(p: Any, paths: tuple[str, ...]) -> str:
    out = []
    for path in paths:
        try:
            status, body = await p.get(path)
        except Exception as exc:  # an endpoint a program lacks: its error text is output too
            out.append(f"{path}: {exc}")
            continue
        out.append(f"{path} {status}\n{body}")
    return "\n".join(out)


async def test_no_sentinel_secret_appears_in_any_output(
    tmp_path: Path, sim: Any, kubeconfig: Path
) -> None:
    server = NatsServer(
        store_dir=str(tmp_path / "nats"), args=["--user", "svc", "--pass", NATS_PASSWORD]
    ).start()
    outputs: list[str] = []
    procs: list[Any] = []
    try:
        nats = {"servers": [server.url], "user": "svc"}
        # the bridge: first with a wrong password (refused, said), then the right one
        wrong = BridgeProcess(
            bridge_config(tmp_path, server.url, kubeconfig, nats=nats),
            tmp_path / "bridge-wrong.log",
            env={"BRIDGE_NATS__PASSWORD": WRONG_PASSWORD},
        ).start()
        procs.append(wrong)

        async def auth_failed() -> bool:
            return bool(wrong.log_events("nats_auth_failed"))

        await eventually(auth_failed, timeout=20)
        outputs.append(await _endpoints(wrong, ("/healthz", "/readyz", "/metrics", "/status")))
        wrong.kill()
        bridge = BridgeProcess(
            bridge_config(tmp_path, server.url, kubeconfig, nats=nats),
            tmp_path / "bridge.log",
            env={"BRIDGE_NATS__PASSWORD": NATS_PASSWORD},
        ).start()
        procs.append(bridge)
        await bridge.wait_ready(timeout=30)
        w = Writer(sim)
        await w.write(20)

        async def published() -> bool:
            return await bridge.metric("events_published") >= 20

        await eventually(published, timeout=30)
        # the subscribers, on the stream the bridge made
        subscribers = []
        for module, prefix in SUBSCRIBERS.items():
            extra: dict[str, Any] = {}
            env = {f"{prefix}NATS__PASSWORD": NATS_PASSWORD}
            if prefix == "ALERTING_":
                extra = {"alertmanager": {"urls": ["http://127.0.0.1:9"], "user": "am"}}
                env["ALERTING_ALERTMANAGER__PASSWORD"] = AM_PASSWORD
            if prefix == "OTLP_":  # no endpoint answers: it starts all the same
                extra = {"otlp": {"endpoint": "http://127.0.0.1:9"}}
                env["OTLP_OTLP__HEADERS"] = OTLP_HEADERS
            path = subscriber_config(tmp_path, module, nats, kubeconfig, **extra)
            p = ConsumerProcess(path, tmp_path / f"{module}.log", env=env, module=module).start()
            procs.append(p)
            subscribers.append((p, path, f"k8s-event-{module.rsplit('.', 1)[1]}", env))
        for p, *_ in subscribers:
            await p.wait_ready(timeout=30)
        for p in procs[1:]:
            outputs.append(await _endpoints(p, ("/healthz", "/readyz", "/metrics", "/status")))
        # check-config of each, with the same secrets
        cmds = [
            (
                ["k8s-event-bridge", "check-config", "--config", str(bridge.config)],
                {"BRIDGE_NATS__PASSWORD": NATS_PASSWORD},
            ),
            *(
                ([prog, "check-config", "--config", str(path)], env)
                for _, path, prog, env in subscribers
            ),
        ]
        # what is refused: a URL holding a secret, a seed pasted in place of a path
        for prog, prefix in (
            ("k8s-event-bridge", "BRIDGE_"),
            ("k8s-event-alerting", "ALERTING_"),
            ("k8s-event-remediation", "REMEDIATION_"),
            ("k8s-event-otlp", "OTLP_"),
        ):
            extra_env = {"REMEDIATION_KUBERNETES__CLUSTER": "x"} if prefix == "REMEDIATION_" else {}
            cmds.append(
                (
                    [prog, "check-config"],
                    {
                        f"{prefix}NATS__SERVERS": f'["nats://svc:{URL_PASSWORD}@127.0.0.1:4222"]',
                        **extra_env,
                    },
                )
            )
            cmds.append(
                ([prog, "run"], {f"{prefix}NATS__NKEY_SEED_FILE": PASTED_SEED, **extra_env})
            )
        cmds.append(
            (
                ["k8s-event-alerting", "check-config"],
                {"ALERTING_ALERTMANAGER__URLS": f'["http://am:{AM_PASSWORD}@127.0.0.1:9093"]'},
            )
        )
        cmds.append(
            (
                ["k8s-event-otlp", "check-config"],
                {"OTLP_OTLP__ENDPOINT": f"https://otel:{URL_PASSWORD}@127.0.0.1:4318"},
            )
        )
        refused = 0
        for argv, env in cmds:
            exe = Path(sys.executable).parent / argv[0]
            done = await asyncio.to_thread(
                subprocess.run,
                [str(exe), *argv[1:]],
                capture_output=True,
                text=True,
                env=_clean_env(**env),
                timeout=60,
                check=False,
            )
            refused += done.returncode == 2
            outputs.append(f"$ {' '.join(argv)} -> {done.returncode}\n{done.stdout}{done.stderr}")
        assert refused == 10, "\n".join(outputs[-12:])
    finally:
        for p in procs:
            p.kill()
            outputs.append(p.logs())
        server.cleanup()
    everything = "\n".join(outputs)
    assert "nats_auth_failed" in everything and "invalid configuration" in everything
    assert not leaked(everything), [line for line in everything.splitlines() if leaked(line)][:5]
