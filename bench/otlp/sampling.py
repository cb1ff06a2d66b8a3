"""CPU and memory of each path's processes, read from /proc as k8s_event_sim.programs reads them:
utime + stime (``cpu_seconds``) and VmRSS / VmHWM (``memory_kb``) of every process, sampled
every ``interval`` seconds.

A process of a path may be killed and started again (a new pid) during the run: every pid ever
registered counts, with the CPU and high-water mark of its last sample. The run samples a
process once more right before it kills it (:meth:`Sampler.last`), so a SIGKILL loses none of
its CPU. A path's RSS at a moment is the sum of its processes' VmRSS in one sample; its peak is
the highest such sum, its steady RSS the median of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from dataclasses import dataclass, field
from typing import Any

from k8s_event_sim.programs import cpu_seconds, memory_kb


@dataclass
class Proc:
    path: str
    role: str  # "bridge", "nats-server", "k8s-event-otlp", "otelcol", ...
    pid: int
    cpu: float = 0.0
    rss_kb: int = 0
    hwm_kb: int = 0
    alive: bool = True


@dataclass
class Sampler:
    interval: float = 0.5
    procs: list[Proc] = field(default_factory=list)  # every process ever registered
    rss: dict[str, list[int]] = field(default_factory=dict)  # path -> summed VmRSS, kB
    _task: asyncio.Task[None] | None = None

    def register(self, path: str, role: str, pid: int) -> None:
        proc = Proc(path, role, pid)
        self.procs.append(proc)
        self.rss.setdefault(path, [])
        self._read(proc)

    def last(self, pid: int) -> None:
        """Sample ``pid`` once more (it is about to be killed); it counts as gone after."""
        for proc in self.procs:
            if proc.pid == pid and proc.alive:
                self._read(proc)
                proc.alive = False

    def _read(self, proc: Proc) -> None:
        try:
            cpu = cpu_seconds(proc.pid)
            mem = memory_kb(proc.pid)
        except (OSError, ValueError, IndexError):  # gone
            proc.alive = False
            return
        if "VmRSS" not in mem:  # a zombie: its CPU is final, its memory gone
            proc.cpu = max(proc.cpu, cpu)
            proc.alive = False
            return
        proc.cpu = max(proc.cpu, cpu)
        proc.rss_kb = mem["VmRSS"]
        proc.hwm_kb = max(proc.hwm_kb, mem.get("VmHWM", 0), mem["VmRSS"])

    def sample(self) -> None:
        sums: dict[str, int] = dict.fromkeys(self.rss, 0)
        for proc in self.procs:
            if proc.alive:
                self._read(proc)
                if proc.alive:
                    sums[proc.path] += proc.rss_kb
        for path, kb in sums.items():
            self.rss[path].append(kb)

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sampling")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()

    def summary(self, path: str) -> dict[str, Any]:
        """CPU seconds (all of the path's processes, every pid), per role; peak and steady
        (median) of the summed RSS, MB; each role's highest VmHWM, MB."""
        procs = [p for p in self.procs if p.path == path]
        roles: dict[str, dict[str, Any]] = {}
        for p in procs:
            r = roles.setdefault(p.role, {"processes": 0, "cpu_s": 0.0, "peak_rss_mb": 0.0})
            r["processes"] += 1
            r["cpu_s"] = round(r["cpu_s"] + p.cpu, 2)
            r["peak_rss_mb"] = round(max(r["peak_rss_mb"], p.hwm_kb / 1000), 1)
        series = [kb for kb in self.rss.get(path, []) if kb > 0]
        return {
            "cpu_s": round(sum(p.cpu for p in procs), 2),
            "peak_rss_mb": round(max(series, default=0) / 1000, 1),
            "steady_rss_mb": round(statistics.median(series) / 1000, 1) if series else 0.0,
            "samples": len(series),
            "processes": roles,
        }
