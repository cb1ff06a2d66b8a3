"""Virtual time for tests (kopf's ``looptime``, in a few lines): an event loop whose clock
jumps to its next timer whenever nothing is ready to run, instead of waiting for it.

``@virtual_time`` runs an async test on such a loop; ``LOOP`` is the bridge's ``Clock`` read
from the running loop, so what the code under test measures (deadlines, ages) and what it
waits on (sleeps, timeouts) are the same virtual time. A test that waits 30 s of lookups
takes milliseconds, and its outcome no longer depends on the machine's speed. Only for code
that waits on in-memory fakes: a real socket or thread is not waited for before time jumps.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any

from k8s_event_common.clock import Clock

WALL_AT_ZERO = 1_700_000_000.0


class _Jumping:
    """The loop's selector: polls without waiting; when nothing came and a timer is due in
    ``timeout`` seconds, moves the loop's time there."""

    def __init__(self, selector: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._selector = selector
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._selector.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # no timer at all: only I/O can wake the loop
            return self._selector.select(None)
        self._loop.now += timeout
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self._selector = _Jumping(self._selector, self)  # type: ignore[has-type]

    def time(self) -> float:
        return self.now


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


LOOP = Clock(monotonic=_loop_time, wall=lambda: WALL_AT_ZERO + _loop_time())


def virtual_time(test: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Run the async ``test`` on a ``VirtualTimeLoop`` (a plain test to pytest)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        loop = VirtualTimeLoop()
        try:
            return loop.run_until_complete(test(*args, **kwargs))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    return run
