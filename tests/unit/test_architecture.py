"""The import contracts of pyproject.toml (`make lint` runs them): kept by the tree as it is,
broken by each kind of import they exist to keep out."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # lint-imports runs as a child process

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the four packages and their contracts, to break (on PYTHONPATH, they come
    before the editable installs)."""
    for package in (
        "bridge",
        "consumer/k8s_event_consumer",
        "common/k8s_event_common",
        "sim/k8s_event_sim",
    ):
        shutil.copytree(
            ROOT / package,
            tmp_path / Path(package).name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    out = lint_imports(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("runtime/intake.py", "import nats", "Only bridge.jetstream imports nats-py"),
        ("core/converting.py", "import nats.js", "Only bridge.jetstream imports nats-py"),
        ("app.py", "import kubernetes_asyncio", "Only bridge.kube reaches kubernetes_asyncio"),
        (
            "kube/client.py",
            "import kubernetes_asyncio",
            "Only bridge.kube reaches kubernetes_asyncio",
        ),
        (
            "runtime/leading.py",
            "from k8s_event_common.kube import connection",
            "Only bridge.kube reaches kubernetes_asyncio",
        ),
        ("jetstream/streams.py", "import aiohttp", "aiohttp: its client in bridge.kube"),
        ("runtime/watching.py", "from bridge.kube import client", "Layers:"),
        ("runtime/pipeline.py", "from bridge.jetstream import publishing", "Layers:"),
        ("kube/client.py", "from bridge.jetstream import streams", "Layers:"),
        ("core/progress.py", "from bridge.runtime import health", "Layers:"),
        ("core/filtering.py", "from bridge import logs", "bridge.core is pure"),
        ("app.py", "from k8s_event_sim import natsserver", "never import k8s_event_sim"),
        ("cli.py", "import k8s_event_sim.demo", "never import k8s_event_sim"),
    ],
)
def test_an_import_across_a_boundary_breaks_a_contract(
    tree: Path, module: str, line: str, contract: str
) -> None:
    path = tree / "bridge" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    out = lint_imports(tree)
    assert out.returncode != 0
    broken = out.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, out.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the subscribers' wheel does not depend on the bridge's: an import would fail there
        (
            "k8s_event_consumer/events.py",
            "from bridge.core import subjects",
            "The subscribers never import the bridge",
        ),
        (
            "k8s_event_consumer/alerting/settings.py",
            "from bridge import settings",
            "The subscribers never import the bridge",
        ),
        (
            "k8s_event_common/cloudevents.py",
            "import bridge.errors",
            "What both share (k8s_event_common) imports neither",
        ),
        (
            "k8s_event_common/logformat.py",
            "from k8s_event_consumer import logs",
            "What both share (k8s_event_common) imports neither",
        ),
        (
            "k8s_event_consumer/events.py",
            "from k8s_event_sim import workload",
            "never import k8s_event_sim",
        ),
        (
            "k8s_event_common/connecting.py",
            "from k8s_event_sim.natsserver import NatsServer",
            "never import k8s_event_sim",
        ),
        (
            "k8s_event_consumer/events.py",
            "from k8s_event_common import configuring",
            "The subscribers' kit needs no settings library",
        ),
        # one Kubernetes boundary: the worker's client can not grow a connection of its own
        (
            "k8s_event_consumer/remediation/kube.py",
            "from kubernetes_asyncio import client",
            "The worker reaches kubernetes_asyncio only through the shared connection",
        ),
        (
            "k8s_event_consumer/remediation/worker.py",
            "from k8s_event_common.kube.connection import Connection",
            "The worker reaches kubernetes_asyncio only through the shared connection",
        ),
        (
            "k8s_event_common/kube/connection.py",
            "import kubernetes_asyncio.client.models",
            "only k8s_event_common.kube.lean imports kubernetes_asyncio",
        ),
        (
            "k8s_event_common/kube/errors.py",
            "import aiohttp",
            "The shared Kubernetes error tree and paths import no client",
        ),
    ],
)
def test_an_import_between_the_wheels_breaks_a_contract(
    tree: Path, module: str, line: str, contract: str
) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    out = lint_imports(tree)
    assert out.returncode != 0
    broken = out.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, out.stdout
