"""The bridge as a real child process, read from outside: /proc, /readyz and /metrics."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from k8s_event_sim.waiting import NotMet, eventually

CLK_TCK = os.sysconf("SC_CLK_TCK")
PREFIX = "k8s_event_bridge_"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (``/proc/<pid>/stat``)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rfind(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in kB (``/proc/<pid>/status``)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {name{labels}: value}, only the bridge's own series."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(PREFIX):
            key, _, value = line.rpartition(" ")
            out[key[len(PREFIX) :]] = float(value)
    return out


def histogram(metrics: dict[str, float], name: str) -> list[tuple[float, float]]:
    """Cumulative buckets [(upper bound, count)], +Inf last."""
    buckets = []
    head = f'{name}_bucket{{le="'
    for key, value in metrics.items():
        if key.startswith(head):
            le = key[len(head) : -2]
            buckets.append((float("inf") if le == "+Inf" else float(le), value))
    return sorted(buckets)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Like PromQL's histogram_quantile: linear interpolation inside the bucket that holds the
    quantile (0 is the lower bound of the first bucket); in the +Inf bucket, the last bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


@dataclass
class BridgeProc:
    """``python -m bridge run --config FILE``."""

    config: Path
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_after: float | None = None
    session: aiohttp.ClientSession | None = None
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""  # hash of bridge/'s sources when it was started

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> BridgeProc:
        with open(self.log_path, "ab") as log:
            self.started_at = time.monotonic()
            cmd = [sys.executable, "-m", "bridge", "run", "--config", str(self.config)]
            profile = os.environ.get("BENCH_PYSPY")
            if profile:
                # profiling only: the pid measured is then py-spy's, the figures meaningless
                out = f"{profile}.{time.strftime('%H%M%S')}.txt"
                cmd = ["py-spy", "record", "-r", "250", "-f", "raw", "-o", out, "--", *cmd]
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=log,
                env={**os.environ, **self.env},
            )
        self.ready_after = None
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    async def _session(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        return self.session

    async def get(self, path: str) -> tuple[int, str]:
        s = await self._session()
        async with s.get(f"http://127.0.0.1:{self.port}{path}") as r:
            return r.status, await r.text()

    async def wait_ready(self, timeout: float = 30.0, poll: float = 0.01) -> float:
        """Poll /readyz until 200; return seconds from process start to that answer."""

        async def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"bridge exited:\n{self.logs_tail()}")
            status, _ = await self.get("/readyz")
            return status == 200

        try:
            await eventually(ready, timeout, poll)
        except NotMet:
            raise RuntimeError(f"bridge not ready in {timeout}s:\n{self.logs_tail()}") from None
        self.ready_after = time.monotonic() - self.started_at
        return self.ready_after

    async def metrics(self) -> dict[str, float]:
        _, text = await self.get("/metrics")
        return parse_metrics(text)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def memory(self) -> dict[str, int]:
        return memory_kb(self.pid)

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the bridge drains and saves its checkpoint) and wait; SIGKILL on timeout."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if os.environ.get("BENCH_PYSPY"):
                # the bridge is py-spy's child: stop it, py-spy then writes its profile
                with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:  # noqa: ASYNC230
                    kids = f.read().split()
                for kid in kids:
                    os.kill(int(kid), signal.SIGTERM)
            else:
                self.proc.send_signal(signal.SIGTERM)
            proc = self.proc
            with contextlib.suppress(NotMet):  # killed below
                await eventually(lambda: proc.poll() is not None, timeout, 0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        if self.session is not None:
            await self.session.close()
            self.session = None
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def defaults_config(
    path: Path,
    cluster: str,
    nats_url: str,
    kubeconfig: Path,
    port: int,
    sections: dict[str, Any] | None = None,
    **kubernetes: Any,
) -> Path:
    """Write the config of a bridge with every key at its default but where it connects,
    its cluster name, ``log.level: warning``, the ``kubernetes`` keys and the other
    ``sections`` given."""
    cfg: dict[str, Any] = {
        "cluster": {"name": cluster},
        "kubernetes": {"kubeconfig": str(kubeconfig), **kubernetes},
        "nats": {"servers": [nats_url]},
        "http": {"host": "127.0.0.1", "port": port},
        "log": {"level": "warning", "format": "json"},
    }
    for section, keys in (sections or {}).items():
        cfg[section] = {**cfg.get(section, {}), **keys}
    path.write_text(yaml.safe_dump(cfg))
    return path


def describe_exit(code: Any) -> str:
    return "exit 0" if code == 0 else f"exit {code}"
