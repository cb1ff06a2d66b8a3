"""The Go programs some tests run besides the control plane: ``promtool`` (the alert rules'
tests, deploy/monitoring/) and ``helm`` (deploy/helm/), built by ``e2e/build-go-tool.sh``, and
``alertmanager`` (the alerting subscriber's tests), built by ``e2e/build-alertmanager.sh``, and
``otelcol`` (an OpenTelemetry Collector for the OTLP subscriber's tests, otelcol.py), built
by ``e2e/build-otelcol.sh``: from the Go module proxy, cached outside the repo, keyed by their
versions in ``e2e/versions.env``.
``natsauth`` (NATS operator-mode JWTs, natsauth.py) is this repo's own e2e/natsauth, and
``goref`` (the benchmark's Go reference pipeline, bench/run.py) its bench/goref, both built by
``e2e/build-go-tool.sh`` too, keyed by a hash of their source.

A test module names what it needs in ``GO_TOOLS = ("promtool",)``; tests/conftest.py builds
those right after collection (outside pytest-timeout's per-test limit) and a test gets the path
from :func:`ensure`. A failed build fails those tests with its message, never a skip.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO / "e2e" / "versions.env"
VERSION_KEYS = {
    "promtool": "PROMETHEUS_VERSION",
    "helm": "HELM_VERSION",
    "alertmanager": "ALERTMANAGER_VERSION",
    "otelcol": "OTELCOL_VERSION",
}
# the tools built from a module of this repo: their source files, hashed for the version
SOURCES = {
    "natsauth": (REPO / "e2e" / "natsauth", ("go.mod", "go.sum", "main.go")),
    "goref": (REPO / "bench" / "goref", ("go.mod", "go.sum", "main.go")),
}
CHECK_ARGS = {
    "promtool": ["--version"],
    "helm": ["version", "--short"],
    "alertmanager": ["--version"],
    "otelcol": ["components"],
    "natsauth": ["version"],
    "goref": ["--version"],
}
# the build command of each (stdout's last line: the bin directory)
BUILDS = {
    "promtool": ["e2e/build-go-tool.sh", "promtool"],
    "helm": ["e2e/build-go-tool.sh", "helm"],
    "alertmanager": ["e2e/build-alertmanager.sh"],
    "otelcol": ["e2e/build-otelcol.sh"],
    "natsauth": ["e2e/build-go-tool.sh", "natsauth"],
    "goref": ["e2e/build-go-tool.sh", "goref"],
}


class ToolError(RuntimeError):
    """A tool could not be built or does not run."""


def cache_root() -> Path:
    """The same root as the build scripts and e2e/build-control-plane.sh."""
    if os.environ.get("K8S_EVENT_BRIDGE_CACHE"):
        return Path(os.environ["K8S_EVENT_BRIDGE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "k8s-event-bridge"


def source_hash(tool: str) -> str:
    """What e2e/build-go-tool.sh keys a tool of this repo by: the first 16 hex digits of the
    sha256 of ``sha256sum <files>``'s output (each file's hash, two spaces, its name)."""
    directory, files = SOURCES[tool]
    listing = "".join(
        f"{hashlib.sha256((directory / name).read_bytes()).hexdigest()}  {name}\n" for name in files
    )
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def version(tool: str) -> str:
    if tool in SOURCES:
        return source_hash(tool)
    key = VERSION_KEYS[tool]
    for line in VERSIONS_FILE.read_text().splitlines():
        name, _, value = line.strip().partition("=")
        if name == key:
            return value.strip().strip("\"'")
    raise ToolError(f"{key} is not set in {VERSIONS_FILE}")


def go_missing() -> bool:
    """Whether no ``go`` is there to build with (the build scripts also look in
    /usr/local/go/bin)."""
    return shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK)


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
    """The tool's binary, built when it is missing (cold: promtool about 5 minutes, otelcol 6,
    helm 2.5, alertmanager 1 or 2, natsauth 10 to 15 seconds, goref 15 to 25). One attempt per
    process: a failed build fails every later call at once with the same error."""
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
    script, *args = BUILDS[tool]
    done = subprocess.run(
        ["bash", str(REPO / script), *args],
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    if done.returncode != 0:
        raise ToolError(
            f"{' '.join(BUILDS[tool])} exited {done.returncode}:\n{done.stderr[-4000:]}"
        )
    built = Path(done.stdout.strip().splitlines()[-1]) / tool
    if not _runs(tool, built):
        raise ToolError(f"{built} was built but does not run {' '.join(CHECK_ARGS[tool])}")
    return built
