"""The programs of this repository as real child processes: the one runner of the tests, the
benchmark and the soak.

``ChildProcess`` runs one program on its config file (``run --config FILE``), its output in a
log file (JSON lines), and reads it from outside: its HTTP port (``http.port`` of its config),
``wait_ready`` (until ``/readyz`` answers 200, failing at once with the log's tail when it
exits), ``signal``, ``wait_exit``, ``stop`` (SIGTERM, SIGKILL after a timeout), ``kill``,
``logs``, ``log_events``, ``metrics``/``metric`` (its own series of ``/metrics``), ``cpu`` and
``memory`` (``/proc``). ``BridgeProcess`` is k8s-event-bridge, ``ConsumerProcess`` a subscriber
of k8s_event_consumer by its module (k8s-event-alerting, k8s-event-remediation,
k8s-event-otlp); ``Bridges`` the bridges a fixture starts, killed at its end. Their configs:
``k8s_event_sim.configs``.

The environment variable ``BENCH_PYSPY`` (the benchmark's profiling, docs/performance.md) runs
the program under ``py-spy record``; the pid measured is then py-spy's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import aiohttp
import msgspec
import yaml

from k8s_event_sim.waiting import NotMet, eventually

__all__ = [
    "BridgeProcess",
    "Bridges",
    "ChildProcess",
    "ConsumerProcess",
    "cpu_seconds",
    "memory_kb",
    "parse_metrics",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")
PROFILE_ENV = "BENCH_PYSPY"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (``/proc/<pid>/stat``)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rfind(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in kB (``/proc/<pid>/status``)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    return out


def parse_metrics(text: str, prefix: str = "k8s_event_bridge_") -> dict[str, float]:
    """Prometheus text → {name{labels}: value}, only the series of ``prefix`` (the bridge's
    unless told), named without it."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            key, _, value = line.rpartition(" ")
            out[key[len(prefix) :]] = float(value)
    return out


@dataclass
class ChildProcess:
    """A program of this repository as a real child process: its log file (JSON lines), its
    HTTP endpoints (``http.port`` of its config), signals.

    Each request opens a connection of its own (3 s at most), unless ``keep_session``: then
    one session is kept for every request (5 s each) until ``stop``, or ``session`` is the
    caller's, used as given (what the benchmark and the soak measure)."""

    config: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    # run in the child before it starts (tests/hostile_http.py's nofile_1024: a container's limit)
    preexec_fn: Callable[[], None] | None = None
    keep_session: bool = False
    session: aiohttp.ClientSession | None = None
    started_at: float = 0.0  # time.monotonic() at the last start
    ready_after: float | None = None  # seconds from that start to /readyz 200
    what = "process"

    @property
    def prefix(self) -> str:
        """Its metrics' prefix."""
        return ""

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Self:
        cmd = self.command()
        profile = os.environ.get(PROFILE_ENV)
        if profile:
            # profiling only: the pid measured is then py-spy's, the figures meaningless
            out = f"{profile}.{time.strftime('%H%M%S')}.txt"
            cmd = ["py-spy", "record", "-r", "250", "-f", "raw", "-o", out, "--", *cmd]
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=log,
                env={**os.environ, **self.env},
                preexec_fn=self.preexec_fn,
            )
        self.ready_after = None
        return self

    @property
    def port(self) -> int:
        return int(yaml.safe_load(self.config.read_text())["http"]["port"])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        if self.session is None and self.keep_session:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        if self.session is not None:
            async with self.session.get(url) as r:
                return r.status, await r.text()
        async with (
            aiohttp.ClientSession() as s,
            s.get(url, timeout=aiohttp.ClientTimeout(total=3)) as r,
        ):
            return r.status, await r.text()

    async def wait_ready(self, timeout: float = 20.0, interval: float = 0.1) -> float:
        """Until ``/readyz`` answers 200; the seconds from the start to that answer
        (``ready_after``). AssertionError with the log's tail when the process exits first or
        is not ready in ``timeout`` seconds."""

        async def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.what} exited {self.proc.returncode}:\n{self.logs()[-3000:]}"
                )
            status, _ = await self.get("/readyz")
            return status == 200

        try:
            await eventually(ready, timeout, interval, retry_on=(TimeoutError, aiohttp.ClientError))
        except NotMet:
            raise AssertionError(
                f"{self.what} not ready in {timeout}s:\n{self.logs()[-3000:]}"
            ) from None
        self.ready_after = time.monotonic() - self.started_at
        return self.ready_after

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def wait_exit(self, timeout: float = 30.0) -> int:
        """Its exit status; AssertionError (after a SIGKILL) when it has not exited in
        ``timeout`` seconds."""
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

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (the program drains) and wait; SIGKILL on timeout. Closes the kept session.
        Its exit status (None when it never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if os.environ.get(PROFILE_ENV):
                # the program is py-spy's child: stop it, py-spy then writes its profile
                with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:  # noqa: ASYNC230
                    kids = f.read().split()
                for kid in kids:
                    os.kill(int(kid), signal.SIGTERM)
            else:
                self.proc.send_signal(signal.SIGTERM)
            proc = self.proc
            with contextlib.suppress(NotMet):  # killed below
                await eventually(lambda: proc.poll() is not None, timeout, 0.05)
            self.kill()
        if self.session is not None:
            await self.session.close()
            self.session = None
        return self.proc.returncode

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

    async def metrics(self) -> dict[str, float]:
        """Its own series of ``/metrics`` (``prefix``), named without the prefix."""
        _, text = await self.get("/metrics")
        return parse_metrics(text, self.prefix)

    async def metric(self, name: str, labels: str = "") -> float:
        """The sum of the samples of its metric ``name`` (without the prefix; a counter with or
        without ``_total``) whose labels hold ``labels``. A metric it does not expose fails:
        a renamed or misspelt one must not read as 0."""
        _, text = await self.get("/metrics")
        family = f"{self.prefix}{name}".removesuffix("_total")
        if f"# TYPE {family} " not in text and f"# TYPE {family}_total " not in text:
            raise AssertionError(f"the {self.what} exposes no metric {family}")
        total = 0.0
        for ln in text.splitlines():
            if ln.startswith(f"{self.prefix}{name}") and labels in ln:
                base = ln.split(" ")[0].split("{")[0]
                if base in (f"{self.prefix}{name}", f"{self.prefix}{name}_total"):
                    total += float(ln.rsplit(" ", 1)[1])
        return total

    def cpu(self) -> float:
        """Its CPU seconds so far (utime + stime)."""
        return cpu_seconds(self.pid)

    def memory(self) -> dict[str, int]:
        """Its VmRSS and VmHWM in kB."""
        return memory_kb(self.pid)


@dataclass
class BridgeProcess(ChildProcess):
    """``k8s-event-bridge run --config FILE`` as a real child process."""

    prelude: str = ""  # Python run before the CLI in the child (e.g. to move fixed paths)
    what = "bridge"

    @property
    def prefix(self) -> str:
        return "k8s_event_bridge_"

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


@dataclass
class ConsumerProcess(ChildProcess):
    """``python -m <module> run --config FILE``: a subscriber of k8s_event_consumer (the
    alerting subscriber, the remediation worker, the OTLP subscriber) as a real child process."""

    module: str = "k8s_event_consumer.remediation"
    what = "subscriber"

    @property
    def prefix(self) -> str:
        """``k8s_event_<program>_``: k8s_event_alerting_, k8s_event_remediation_, ..."""
        return f"k8s_event_{self.module.rsplit('.', 1)[1]}_"

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module, "run", "--config", str(self.config)]


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
