"""A real Prometheus Alertmanager for the alerting subscriber's tests, and a webhook receiver.

The binary comes from ``e2e/build-alertmanager.sh`` (built once from the Go module proxy and
cached outside the repo, keyed by ``ALERTMANAGER_VERSION`` in ``e2e/versions.env``);
:func:`ensure_alertmanager` builds it when it is missing.

:class:`Alertmanager` runs it on a free loopback port with its own ``--storage.path``, no
gossip (``--cluster.listen-address=`` empty) and one route: every alert its own group
(``group_by: ['...']``) to the :class:`Webhook` receiver of the test process, with
``send_resolved`` and short ``group_wait`` / ``group_interval``, so each alert's firing and
resolved notifications arrive within a second or two.

What the API shows (v0.35.0, ``api/v2/api.go``): ``GET /api/v2/alerts`` lists the alerts in
memory whose ``endsAt`` is not past, filtered by ``active`` / ``silenced`` / ``inhibited`` /
``unprocessed`` and label matchers (``filter``); a resolved alert is never listed (it stays in
memory until the next GC, unseen). Resolution is therefore seen by an alert leaving that list
and by the webhook's ``resolved`` notification. Alertmanager keeps alerts in memory only: a
restart forgets them (silences and the notification log are on disk).
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from tests.standins import gotools
from tests.support import eventually, free_port


class AlertmanagerError(RuntimeError):
    """Alertmanager could not be built, started or read."""


def binary_path() -> Path:
    return gotools.binary_path("alertmanager")


def ensure_alertmanager() -> Path:
    """The alertmanager binary, built with e2e/build-alertmanager.sh when it is missing
    (tests/standins/gotools.py: one attempt per process, a failed build fails every later call)."""
    try:
        return gotools.ensure("alertmanager")
    except gotools.ToolError as exc:
        raise AlertmanagerError(str(exc)) from exc


@dataclass
class Notification:
    """One webhook POST: a group's ``status`` and its ``alerts`` (each with status and labels)."""

    status: str
    alerts: list[dict[str, Any]]
    body: dict[str, Any]


class Webhook:
    """A webhook receiver in the test process: records every notification Alertmanager sends."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> Webhook:
        app = web.Application()
        app.router.add_post("/", self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _receive(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.notifications.append(Notification(body["status"], body["alerts"], body))
        return web.Response(text="ok")

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every alert of every notification so far (``status``: firing or resolved only)."""
        return [
            a
            for n in self.notifications
            for a in n.alerts
            if status is None or a["status"] == status
        ]

    def resolved(self, **labels: str) -> list[dict[str, Any]]:
        """The resolved notifications of alerts carrying ``labels``."""
        return [a for a in self.alerts("resolved") if _has(a["labels"], labels)]

    def firing(self, **labels: str) -> list[dict[str, Any]]:
        return [a for a in self.alerts("firing") if _has(a["labels"], labels)]


def _has(have: dict[str, str], want: dict[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


def config(
    webhook_url: str,
    *,
    group_wait: str = "500ms",
    group_interval: str = "1s",
    repeat_interval: str = "1h",
) -> dict[str, Any]:
    """Every alert its own group, to the webhook, resolved notifications included."""
    return {
        "route": {
            "receiver": "webhook",
            "group_by": ["..."],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
        },
        "receivers": [
            {
                "name": "webhook",
                "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
            }
        ],
    }


@dataclass
class Alertmanager:
    """``alertmanager`` as a real child process on a free port of ``host`` (loopback unless told:
    the node tier's Pods reach it on the host's address)."""

    workdir: Path
    webhook_url: str
    binary: Path = field(default_factory=ensure_alertmanager)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    config_overrides: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "alertmanager.log"

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def start(self, timeout: float = 20.0) -> Alertmanager:
        """Start (or start again: same port, same storage) and wait for ``/-/ready``."""
        self.launch()
        await self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the process (``start`` also waits until it is ready)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "alertmanager.yml"
        cfg.write_text(yaml.safe_dump({**config(self.webhook_url), **self.config_overrides}))
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    f"--config.file={cfg}",
                    f"--storage.path={self.workdir / 'data'}",
                    f"--web.listen-address={self.host}:{self.port}",
                    "--cluster.listen-address=",  # no gossip: one instance, no peers
                    "--log.level=debug",
                ],
                stdout=log,
                stderr=log,
            )

    async def wait_ready(self, timeout: float = 20.0) -> None:
        """Until ``/-/ready`` answers 200; AlertmanagerError with the log's tail if the process
        exits first or is not ready in ``timeout`` seconds."""
        async with aiohttp.ClientSession() as s:

            async def ready() -> bool:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise AlertmanagerError(
                        f"alertmanager exited {self.proc.returncode}:\n{self.logs()[-3000:]}"
                    )
                async with s.get(
                    f"{self.url}/-/ready", timeout=aiohttp.ClientTimeout(total=2)
                ) as r:
                    return r.status == 200

            await eventually(
                ready,
                timeout,
                what="alertmanager ready",
                retry_on=(TimeoutError, aiohttp.ClientError),
                error=lambda message: AlertmanagerError(f"{message}:\n{self.logs()[-3000:]}"),
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it (SIGTERM: a clean stop; SIGKILL: a crash) and wait for the exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    async def alerts(
        self,
        *,
        active: bool = True,
        silenced: bool = True,
        inhibited: bool = True,
        unprocessed: bool = True,
        filters: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts not resolved (the API never lists a resolved
        one), narrowed by state and by label matchers such as ``'alertname="X"'``."""
        params: list[tuple[str, str]] = [
            ("active", str(active).lower()),
            ("silenced", str(silenced).lower()),
            ("inhibited", str(inhibited).lower()),
            ("unprocessed", str(unprocessed).lower()),
        ]
        params += [("filter", f) for f in filters]
        async with (
            aiohttp.ClientSession() as s,
            s.get(
                f"{self.url}/api/v2/alerts",
                params=params,
                timeout=aiohttp.ClientTimeout(total=5),
            ) as r,
        ):
            text = await r.text()
            if r.status != 200:
                raise AlertmanagerError(f"GET /api/v2/alerts: {r.status} {text}")
            alerts: list[dict[str, Any]] = json.loads(text)
            return alerts

    async def post(self, alerts: list[dict[str, Any]]) -> None:
        """``POST /api/v2/alerts`` (for checking the server itself)."""
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                f"{self.url}/api/v2/alerts", json=alerts, timeout=aiohttp.ClientTimeout(total=5)
            ) as r,
        ):
            if r.status != 200:
                raise AlertmanagerError(f"POST /api/v2/alerts: {r.status} {await r.text()}")
