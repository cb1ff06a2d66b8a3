"""A kubelet's restarts, for the run's processes: one that exits is started again ``delay`` seconds
later, as a kubelet restarts the container of a Pod (restartPolicy Always), for as long as the
run watches it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.otlp import log


@dataclass
class Kubelet:
    """Starts a process again ``delay`` seconds after it exits, like a kubelet the container of
    a Pod (restartPolicy Always), for as long as it is watched; ``restarts`` says who and why."""

    delay: float
    watched: dict[
        str, tuple[Callable[[], bool], Callable[[], Awaitable[None]], Callable[[], str]]
    ] = field(default_factory=dict)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def watch(
        self,
        name: str,
        running: Callable[[], bool],
        start: Callable[[], Awaitable[None]],
        exit_code: Callable[[], str] = lambda: "",
    ) -> None:
        self.watched[name] = (running, start, exit_code)

    def forget(self, name: str) -> None:
        self.watched.pop(name, None)

    async def _run(self) -> None:
        restarting: dict[str, asyncio.Task[None]] = {}
        try:
            while True:
                for name, (running, _, _) in list(self.watched.items()):
                    if name not in restarting and not running():
                        restarting[name] = asyncio.create_task(self._restart(name))
                for name, task in list(restarting.items()):
                    if task.done():
                        del restarting[name]
                        task.result()  # a start that failed ends the run
                await asyncio.sleep(0.2)
        finally:
            for task in restarting.values():
                task.cancel()

    async def _restart(self, name: str) -> None:
        exited = time.time()
        code = self.watched[name][2]()
        await asyncio.sleep(self.delay)
        if name not in self.watched:  # gone for good meanwhile
            return
        await self.watched[name][1]()
        self.restarts.append({"process": name, "exit": code, "exited_at": exited})
        log(f"kubelet: {name} exited ({code}), started again")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="kubelet")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def running(pid: int) -> bool:
    """Whether ``pid`` is on a CPU or ready to be (state R in /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] == "R"


def exit_of(proc: Any) -> str:
    """How a process of ``proc`` (a ChildProcess or a Collector) ended."""
    p = getattr(proc, "proc", None)
    if p is None:  # a Collector forgets its process once it stopped or killed it
        return "killed by the run"
    rc = p.poll()
    return "running" if rc is None else f"exit {rc}"
