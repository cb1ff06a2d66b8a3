"""The install as the Dockerfile does it, without Docker: from the build context
(.dockerignore applied), the locked build tools in a build venv, the runtime lock's files as
wheels (each checked against its hash), the bridge's and the subscribers' wheels built with
--no-deps, then all of them, and only them, into a clean venv with no index and no pip. The
programs in it then answer ``--version`` and ``check-config`` with their defaults.

Needs PyPI or pip's cache for the locked files (a cold cache downloads about 30 MB; a warm
run takes about a minute). tests/unit/test_dockerfile.py checks that the Dockerfile runs
these same steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from tests.unit.test_lock import TARGETS, lock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# --- the build context ----------------------------------------------------------------------


def _pattern(text: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match, and ``**`` for any number of
    directories) as a regex on a path relative to the context, without a leading slash."""
    out = ""
    i = 0
    text = text.strip("/")
    while i < len(text):
        if text.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif text.startswith("**", i):
            out, i = out + ".*", i + 2
        elif text[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif text[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(text[i]), i + 1
    return re.compile(out)


def ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether .dockerignore leaves ``path`` out: the last pattern matching it or one of its
    parent directories decides (``!`` takes back)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    out = False
    for negated, pattern in patterns:
        if any(pattern.fullmatch(p) for p in prefixes):
            out = not negated
    return out


def read_dockerignore(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            out.append((negated, _pattern(line.removeprefix("!").strip())))
    return out


def build_context(dest: Path, dockerignore: bool = True) -> Path:
    """What ``docker build .`` sends from this work tree: its files (tracked or not, less
    what .gitignore leaves out) that .dockerignore does not exclude (all of them with
    ``dockerignore=False``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    patterns = read_dockerignore((ROOT / ".dockerignore").read_text()) if dockerignore else []
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file() and not ignored(rel, patterns):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.parametrize(
    ("path", "left_out"),
    [
        (".git/HEAD", True),
        ("tests/unit/test_lock.py", True),
        ("bridge/__pycache__/cli.cpython-311.pyc", True),
        ("consumer/k8s_event_consumer/__pycache__/x.pyc", True),
        ("k8s_event_bridge.egg-info/PKG-INFO", True),
        ("consumer/k8s_event_bridge_consumer.egg-info/PKG-INFO", False),  # `*.egg-info`: root
        ("build/lib/bridge/cli.py", True),
        ("bridge/cli.py", False),
        ("requirements/runtime.txt", False),
        ("LICENSE", False),
        ("consumer/LICENSE", False),
        ("README.md", False),
        ("sim/k8s_event_sim/apiserver.py", True),  # the simulator (k8s-event-bridge-sim)
        ("sim/pyproject.toml", True),
    ],
)
def test_dockerignore_is_read_as_docker_reads_it(path: str, left_out: bool) -> None:
    patterns = read_dockerignore((ROOT / ".dockerignore").read_text())
    assert ignored(path, patterns) is left_out


# --- the install ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheels: Path
    build_log: str  # what building the three local wheels printed (pip -v)


def _env(**extra: str) -> dict[str, str]:
    """This environment without what changes a build or a program: no venv, bytecode written
    (setuptools warns when it may not), no BRIDGE_/ALERTING_/REMEDIATION_/OTLP_ settings."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
        and not k.startswith(("BRIDGE_", "ALERTING_", "REMEDIATION_", "OTLP_"))
    }
    return {**keep, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def _run(*argv: object, cwd: Path | None = None, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    src = build_context(root / "src")
    build, wheels, venv = root / "build", root / "wheels", root / "venv"
    python = Path(sys.base_prefix) / "bin" / "python3"  # the base image's python
    # the build stage
    _run(python, "-m", "venv", build)
    pip = build / "bin" / "pip"
    _run(
        pip,
        "install",
        "--only-binary=:all:",
        "--require-hashes",
        "-r",
        src / "requirements/build.txt",
    )
    _run(pip, "wheel", "--require-hashes", "--no-build-isolation", "--wheel-dir", wheels,
         "-r", src / "requirements/runtime.txt")  # fmt: skip
    log = _run(pip, "wheel", "-v", "--no-deps", "--no-build-isolation", "--wheel-dir", wheels,
               src / "common", src, src / "consumer", cwd=src)  # fmt: skip
    # the final stage: those wheels alone, no index
    _run(python, "-m", "venv", "--without-pip", venv)
    _run(build / "bin" / "python", "-m", "pip", "--python", venv / "bin" / "python", "install",
         "--no-index", "--no-deps", *sorted(wheels.glob("*.whl")))  # fmt: skip
    _run(build / "bin" / "python", "-m", "pip", "--python", venv / "bin" / "python", "check")
    return Installed(venv, wheels, log)


def test_the_local_wheels_build_without_a_warning(installed: Installed) -> None:
    assert "Created wheel for k8s-event-bridge:" in installed.build_log
    assert "Created wheel for k8s-event-bridge-consumer:" in installed.build_log
    assert "Created wheel for k8s-event-bridge-common:" in installed.build_log
    warnings = [line for line in installed.build_log.splitlines() if "warn" in line.lower()]
    assert not warnings, "\n".join(warnings)


def test_the_bridge_wheel_holds_the_bridge_alone(tmp_path: Path) -> None:
    """Built from the whole work tree (the simulator's sim/ beside it, no .dockerignore):
    the bridge's package and its metadata, no simulator, no demo."""
    src = build_context(tmp_path / "src", dockerignore=False)
    assert (src / "sim" / "k8s_event_sim" / "apiserver.py").is_file()
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", tmp_path / "wheels", src, cwd=src)  # fmt: skip
    (wheel,) = (tmp_path / "wheels").glob("k8s_event_bridge-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert {n.split("/")[0] for n in names} == {"bridge", f"k8s_event_bridge-{VERSION}.dist-info"}
    assert "bridge/cli.py" in names
    simulated = [
        n
        for n in names
        if {"sim", "k8s_event_sim"} & set(n.split("/")) or n.endswith(("/demo.py", "/apiserver.py"))
    ]
    assert not simulated, simulated


@pytest.mark.parametrize(
    "name", ["k8s_event_bridge", "k8s_event_bridge_consumer", "k8s_event_bridge_common"]
)
def test_each_wheel_carries_its_license_as_spdx(installed: Installed, name: str) -> None:
    (wheel,) = installed.wheels.glob(f"{name}-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"{name}-{VERSION}.dist-info/METADATA").decode()
        licence = z.read(f"{name}-{VERSION}.dist-info/licenses/LICENSE").decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert "License-File: LICENSE" in meta.splitlines()
    assert not re.search(r"^License: ", meta, re.M)  # the deprecated field
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence


def test_the_venv_holds_the_runtime_lock_and_the_three_packages_alone(installed: Installed) -> None:
    listed = _run(
        sys.executable, "-m", "pip", "--python", installed.venv / "bin" / "python",
        "list", "--format", "json",
    )  # fmt: skip
    have = {(p["name"].lower().replace("_", "-"), p["version"]) for p in json.loads(listed)}
    locked = {(p.name, str(p.version)) for p in lock("runtime.txt") if p.applies(TARGETS["x86_64"])}
    ours = {
        ("k8s-event-bridge", VERSION),
        ("k8s-event-bridge-consumer", VERSION),
        ("k8s-event-bridge-common", VERSION),
    }
    assert have == locked | ours


def test_the_bridge_prints_its_package_version(installed: Installed, tmp_path: Path) -> None:
    out = subprocess.run(
        [installed.venv / "bin" / "k8s-event-bridge", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stdout) == (0, f"k8s-event-bridge {VERSION}\n"), out.stderr


@pytest.mark.parametrize(
    ("program", "env"),
    [
        ("k8s-event-bridge", {}),
        ("k8s-event-alerting", {}),
        ("k8s-event-remediation", {"REMEDIATION_KUBERNETES__CLUSTER": "check"}),
        ("k8s-event-otlp", {}),
        ("k8s-event-digests", {}),
    ],
)
def test_each_program_checks_its_default_config(
    installed: Installed, tmp_path: Path, program: str, env: dict[str, str]
) -> None:
    out = subprocess.run(
        [installed.venv / "bin" / program, "check-config"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # as in the image: WORKDIR /tmp, no config file there
        env=_env(**env),
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert isinstance(yaml.safe_load(out.stdout), dict), out.stdout


def test_the_wheels_need_no_compiler(installed: Installed) -> None:
    """The build stage has none: every wheel was downloaded (manylinux) or is pure Python;
    one pip built here from C would be tagged plain linux_x86_64."""
    built = [w.name for w in installed.wheels.glob("*.whl")]
    assert all("-none-any.whl" in w or "manylinux" in w for w in built), built


GLIBC = ("2014", "_2_17", "_2_28", "_2_31", "_2_34", "_2_36")  # python:3.11-slim: 2.36 or newer


def _kinds(arch: str, dest: Path) -> dict[str, str]:
    """What pip takes of the runtime lock for CPython 3.11 on Linux ``arch``, per project:
    ``sdist``, ``pure`` (a py3-none-any wheel) or ``binary``; each file checked against its
    hash. (pip evaluates the lock's markers for this machine: see the assertion below.)"""
    platforms = [w for v in GLIBC for w in ("--platform", f"manylinux{v}_{arch}")]
    _run(
        sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", *platforms,
        "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
        "--dest", dest, "-r", ROOT / "requirements" / "runtime.txt",
    )  # fmt: skip
    out = {}
    for f in dest.iterdir():
        if f.name.endswith(".whl"):
            name = f.name.split("-")[0]
            out[canonicalize_name(name)] = "pure" if f.name.endswith("-none-any.whl") else "binary"
        else:
            out[canonicalize_name(f.name.rsplit("-", 1)[0])] = "sdist"
    return out


def test_the_arm64_image_gets_a_binary_wheel_wherever_the_amd64_one_does(tmp_path: Path) -> None:
    assert all(p.marker is None or "PyPy" in str(p.marker) for p in lock("runtime.txt")), (
        "a marker that may differ between amd64 and arm64: check it by hand"
    )
    amd64 = _kinds("x86_64", tmp_path / "amd64")
    arm64 = _kinds("aarch64", tmp_path / "arm64")
    assert "binary" in amd64.values()
    assert arm64 == amd64
