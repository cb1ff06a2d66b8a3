"""The unit tier is pure code and fakes; ``make quick`` runs it without the tests marked
``processes`` (``pytest -m "not processes"``).

A unit test that starts a child process (``subprocess``, ``asyncio``'s subprocesses, a fork,
``os.system``: a program of this repo, a Go tool such as helm, the fuzzer) is marked
``@pytest.mark.processes``; an unmarked one that tries fails at that call, naming the marker,
so none slips into the fast loop. ``make unit`` and CI run both.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


class StartsAProcess(AssertionError):
    """An unmarked unit test tried to start a child process."""


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StartsAProcess(
            f"this unit test starts a child process ({what}): mark it "
            "@pytest.mark.processes (make quick leaves those out) or move it to tests/integration"
        )

    return refuse


@pytest.fixture(autouse=True)
def _no_child_process_unless_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    if request.node.get_closest_marker("processes") is None:
        # subprocess.run/Popen and asyncio.create_subprocess_* all go through _execute_child
        monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("subprocess"))
        for name in ("fork", "system", "posix_spawn", "posix_spawnp", "forkpty"):
            if hasattr(os, name):
                monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
    yield
