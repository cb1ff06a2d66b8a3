"""Helpers for running the real bridge process against the simulated API server and a real
nats-server, and for reading back what reached the stream. The small helpers every tier
shares (``eventually``, ``free_port``, ``write_kubeconfig``, the Event ``Workload``) are in
tests/support.py; they are re-exported here for the tests that import them from here."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import yaml

from k8s_event_sim.apiserver import SimApiServer
from tests.support import NotMet, Workload, eventually, free_port, write_kubeconfig

__all__ = [  # what the tests import from here (some of it from tests/support.py)
    "BridgeProcess",
    "Bridges",
    "ChildProcess",
    "ConsumerProcess",
    "Writer",
    "all_of",
    "bridge_config",
    "checkpoint",
    "count_at_least",
    "deep_merge",
    "event_ids",
    "eventually",
    "free_port",
    "logged",
    "metric_at_least",
    "readyz",
    "status_events",
    "stream_messages",
    "subscriber_config",
    "watch_requests",
    "write_kubeconfig",
]


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def bridge_config(tmp: Path, nats_url: str, kubeconfig: Path, **sections: Any) -> Path:
    """A config with test-sized intervals; ``sections`` override per key."""
    cfg: dict[str, Any] = {
        "cluster": {"name": "test"},
        "kubernetes": {
            "kubeconfig": str(kubeconfig),
            "read_timeout": "5s",
            "connect_timeout": "2s",
            "backoff": {"initial": "50ms", "max": "1s", "reset_after": "30s"},
        },
        "nats": {"servers": [nats_url], "ack_timeout": "1s"},
        "checkpoint": {"interval": "100ms"},
        "http": {"host": "127.0.0.1", "port": free_port(), "unready_after": "2s"},
        "log": {"level": "debug", "format": "json"},
        "shutdown": {"drain_timeout": "10s"},
    }
    cfg = deep_merge(cfg, sections)
    path = tmp / f"bridge-{random.randrange(1 << 30)}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


# the subscribers' modules and the prefixes of their environment variables
SUBSCRIBERS = {
    "k8s_event_consumer.alerting": "ALERTING_",
    "k8s_event_consumer.remediation": "REMEDIATION_",
    "k8s_event_consumer.otlp": "OTLP_",
}


def subscriber_config(
    tmp: Path, module: str, nats: dict[str, Any], kubeconfig: Path, **sections: Any
) -> Path:
    """A subscriber's config (``module`` of ``SUBSCRIBERS``) with test-sized settings: its own
    HTTP port, debug logs, the remediation worker on ``kubeconfig`` for cluster "test";
    ``sections`` override per key."""
    cfg: dict[str, Any] = {
        "nats": nats,
        "http": {"host": "127.0.0.1", "port": free_port()},
        "log": {"level": "debug", "format": "json"},
    }
    if module.endswith(".remediation"):
        cfg["kubernetes"] = {"kubeconfig": str(kubeconfig), "cluster": "test"}
    cfg = deep_merge(cfg, sections)
    path = tmp / f"{module.rsplit('.', 1)[1]}-{random.randrange(1 << 30)}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@dataclass
class ChildProcess:
    """A service of this repository as a real child process: its log file (JSON lines), its
    HTTP endpoints (``http.port`` of its config), signals."""

    config: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    # run in the child before it starts (tests/hostile_http.py's nofile_1024: a container's limit)
    preexec_fn: Callable[[], None] | None = None
    what = "process"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Any:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=log,
                env={**os.environ, **self.env},
                preexec_fn=self.preexec_fn,
            )
        return self

    @property
    def port(self) -> int:
        return int(yaml.safe_load(self.config.read_text())["http"]["port"])

    async def get(self, path: str) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as s,
            s.get(
                f"http://127.0.0.1:{self.port}{path}", timeout=aiohttp.ClientTimeout(total=3)
            ) as r,
        ):
            return r.status, await r.text()

    async def wait_ready(self, timeout: float = 20.0) -> None:
        async def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.what} exited {self.proc.returncode}:\n{self.logs()[-3000:]}"
                )
            status, _ = await self.get("/readyz")
            return status == 200

        try:
            await eventually(ready, timeout, retry_on=(TimeoutError, aiohttp.ClientError))
        except NotMet:
            raise AssertionError(
                f"{self.what} not ready in {timeout}s:\n{self.logs()[-3000:]}"
            ) from None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        proc = self.proc
        try:
            await eventually(lambda: proc.poll() is not None, timeout, 0.05)
        except NotMet:
            proc.kill()
            raise AssertionError(
                f"{self.what} did not exit in {timeout}s:\n{self.logs()[-3000:]}"
            ) from None
        return proc.returncode

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Its JSON log lines (``event``: only those of that event)."""
        out = []
        for ln in self.logs().splitlines():
            if ln.startswith("{"):
                try:
                    doc = msgspec.json.decode(ln)
                except msgspec.DecodeError:
                    continue
                if event is None or doc.get("event") == event:
                    out.append(doc)
        return out


@dataclass
class BridgeProcess(ChildProcess):
    """``python -m bridge run --config FILE`` as a real child process."""

    prelude: str = ""  # Python run before the CLI in the child (e.g. to move fixed paths)
    what = "bridge"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-c",
            f"{self.prelude}\nimport sys\nfrom bridge.cli import main\n"
            "sys.exit(main(sys.argv[1:]))",
            "run",
            "--config",
            str(self.config),
        ]

    def start(self) -> BridgeProcess:
        super().start()
        return self

    async def metric(self, name: str, labels: str = "") -> float:
        _, text = await self.get("/metrics")
        family = f"k8s_event_bridge_{name}".removesuffix("_total")
        if f"# TYPE {family} " not in text and f"# TYPE {family}_total " not in text:
            # a renamed or misspelt metric must fail the test, not read as 0
            raise AssertionError(f"the bridge exposes no metric {family}")
        total = 0.0
        for ln in text.splitlines():
            if (
                ln.startswith(f"k8s_event_bridge_{name}")
                and labels in ln
                and not ln.startswith("#")
            ):
                key = ln.split(" ")[0]
                base = key.split("{")[0]
                if base in (f"k8s_event_bridge_{name}", f"k8s_event_bridge_{name}_total"):
                    total += float(ln.rsplit(" ", 1)[1])
        return total


@dataclass
class ConsumerProcess(ChildProcess):
    """``python -m <module> run --config FILE``: a subscriber of k8s_event_consumer (the
    alerting subscriber, the remediation worker) as a real child process."""

    module: str = "k8s_event_consumer.remediation"
    what = "subscriber"

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module, "run", "--config", str(self.config)]

    def start(self) -> ConsumerProcess:
        super().start()
        return self


class Bridges:
    """Bridge processes a fixture starts (logs ``<log_dir>/bridge-<n>.log``), killed by
    ``kill_all`` at its end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[BridgeProcess] = []

    def start(self, config: Path, **kwargs: Any) -> BridgeProcess:
        log = self.log_dir / f"bridge-{len(self.procs)}.log"
        p = BridgeProcess(config, log, **kwargs).start()
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            p.kill()


class Writer(Workload):
    """The workload (k8s_event_sim.workload) as the integration tests write it: to the
    simulated API server, seed 1 and 500 operations a second unless told otherwise."""

    def __init__(self, sim: SimApiServer, seed: int = 1, rate: float | None = 500.0) -> None:
        super().__init__(sim, seed, rate=rate)


async def stream_messages(
    nats_url: str,
    stream: str = "K8S_EVENTS",
    subject: str = "k8s.events.>",
    *,
    headers_only: bool = False,
) -> list[tuple[str, dict[str, str], bytes]]:
    """Every message in the stream: (subject, headers, body; empty with ``headers_only``)."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        out = []
        if info.state.messages:
            sub = await js.subscribe(
                subject, stream=stream, ordered_consumer=True, headers_only=headers_only
            )
            while True:
                try:
                    m = await sub.next_msg(timeout=1.0)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                out.append((m.subject, dict(m.headers or {}), m.data))
                if len(out) >= info.state.messages:
                    break
            await sub.unsubscribe()
        return out
    finally:
        await nc.close()


async def event_ids(nats_url: str) -> list[str]:
    """The Nats-Msg-Id of every Event message (status events left out)."""
    messages = await stream_messages(nats_url, headers_only=True)
    return [h["Nats-Msg-Id"] for s, h, _ in messages if "._bridge." not in s]


async def status_events(nats_url: str, what: str) -> list[dict[str, Any]]:
    return [
        msgspec.json.decode(b)
        for s, _, b in await stream_messages(nats_url)
        if s.endswith(f"._bridge.{what}")
    ]


async def outage_ended(nats_url: str) -> bool:
    """The bridge told the API server unreachable, and its last word on reachability (in stream
    order) is ``apiserver_reachable``: the scope's first answer in a process is told too, so
    ``apiserver_reachable`` alone proves no outage ended."""
    told = [
        s.rsplit(".", 1)[1]
        for s, _, _ in await stream_messages(nats_url, headers_only=True)
        if s.endswith(("._bridge.apiserver_unreachable", "._bridge.apiserver_reachable"))
    ]
    return "apiserver_unreachable" in told and told[-1] == "apiserver_reachable"


async def checkpoint(
    nats_url: str, key: str = "test.all", bucket: str = "k8s_event_bridge"
) -> int | None:
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().key_value(bucket)
        try:
            e = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return int(msgspec.json.decode(e.value)["resourceVersion"])
    finally:
        await nc.close()


def watch_requests(sim: SimApiServer) -> list[Any]:
    """The watch requests the simulated API server saw (kubernetes_asyncio sends ``True``)."""
    return [r for r in sim.requests if r.query.get("watch", "").lower() in ("true", "1")]


async def all_of(url: str, ids: list[str], timeout: float = 40) -> list[str]:
    """Wait until the stream holds at least as many Event messages as ``ids``; return them."""

    async def check() -> list[str] | None:
        have = await event_ids(url)
        return have if len(have) >= len(ids) else None

    result: list[str] = await eventually(check, timeout=timeout)
    return result


async def count_at_least(url: str, n: int) -> bool:
    return len(await event_ids(url)) >= n


async def logged(bridge: BridgeProcess, event: str) -> bool:
    return any(e.get("event") == event for e in bridge.log_events())


async def metric_at_least(bridge: BridgeProcess, name: str, n: float) -> bool:
    return await bridge.metric(name) >= n


async def readyz(bridge: BridgeProcess, code: int, word: str = "") -> bool:
    status, text = await bridge.get("/readyz")
    return status == code and word in text
