"""The Go command-line tools some tests run: ``promtool`` (the alert rules' tests,
deploy/monitoring/) and ``helm`` (deploy/helm/), built by ``e2e/build-go-tool.sh`` from the Go
module proxy and cached outside the repo, keyed by their versions in ``e2e/versions.env``.

A test module names what it needs in ``GO_TOOLS = ("promtool",)``; tests/conftest.py builds
those right after collection (outside pytest-timeout's per-test limit) and a test gets the path
from :func:`ensure`. A failed build fails those tests with its message, never a skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.alertmanager import cache_root

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "e2e" / "build-go-tool.sh"
VERSIONS_FILE = REPO / "e2e" / "versions.env"
VERSION_KEYS = {"promtool": "PROMETHEUS_VERSION", "helm": "HELM_VERSION"}
CHECK_ARGS = {"promtool": ["--version"], "helm": ["version", "--short"]}


class ToolError(RuntimeError):
    """A tool could not be built or does not run."""


def version(tool: str) -> str:
    key = VERSION_KEYS[tool]
    for line in VERSIONS_FILE.read_text().splitlines():
        name, _, value = line.strip().partition("=")
        if name == key:
            return value.strip().strip("\"'")
    raise ToolError(f"{key} is not set in {VERSIONS_FILE}")


def binary_path(tool: str) -> Path:
    return cache_root() / "controlplane" / f"{tool}-{version(tool)}" / "bin" / tool


def _runs(tool: str, binary: Path) -> bool:
    try:
        done = subprocess.run(
            [str(binary), *CHECK_ARGS[tool]], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


_built: dict[str, Path | ToolError] = {}  # this process's one attempt per tool


def ensure(tool: str) -> Path:
    """The tool's binary, built when it is missing (promtool about 3 minutes cold, helm about
    3). One attempt per process: a failed build fails every later call at once with the same
    error."""
    if tool not in _built:
        try:
            _built[tool] = _ensure(tool)
        except ToolError as exc:
            _built[tool] = exc
    found = _built[tool]
    if isinstance(found, ToolError):
        raise found
    return found


def _ensure(tool: str) -> Path:
    binary = binary_path(tool)
    if _runs(tool, binary):
        return binary
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), tool],
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    if done.returncode != 0:
        raise ToolError(
            f"{BUILD_SCRIPT.name} {tool} exited {done.returncode}:\n{done.stderr[-4000:]}"
        )
    built = Path(done.stdout.strip().splitlines()[-1]) / tool
    if not _runs(tool, built):
        raise ToolError(f"{built} was built but does not run {' '.join(CHECK_ARGS[tool])}")
    return built
