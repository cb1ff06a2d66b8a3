"""The lock files in requirements/ (`make lock`) against the pyprojects, offline: every
requirement, with its extras, locked at a version its specifier allows, on the machines the
locks serve (CI: Linux x86_64, CPython 3.11; the image: python:3.11-slim on amd64 and arm64);
what the image runs locked in the test set at the same versions and hashes; every entry pinned
with ``==`` and hashed, so pip checks every file it installs.

Which lock holds what: runtime.txt the image's (the bridge's dependencies and consumer[all]);
test.txt CI's (those plus the bridge's test extra and the simulator's, sim/, dependencies);
build.txt what builds the wheels
([build-system] requires). The bench extra is not locked: `make bench` installs it on top.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"

TARGETS = {
    machine: {
        "implementation_name": "cpython",
        "implementation_version": "3.11.14",
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": "3.11.14",
        "python_version": "3.11",
        "sys_platform": "linux",
    }
    for machine in ("x86_64", "aarch64")
}
UNLOCKED_EXTRAS = {"bench"}  # `make bench` installs it on top of the locked venv


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: Version
    marker: Marker | None
    hashes: frozenset[str]
    line: int

    def applies(self, env: dict[str, str]) -> bool:
        return self.marker is None or self.marker.evaluate(env)


def read_lock(text: str) -> list[Pin]:
    """The entries of a ``pip install -r`` file written by ``uv pip compile
    --generate-hashes``: ``name==version [; marker]`` with its ``--hash`` options. Anything
    else (an index, a path, an unpinned requirement) is refused."""
    out: list[Pin] = []
    entry: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # uv's header and "# via" lines
        if not entry:
            start = n
        entry.append(line.removesuffix("\\").strip())
        if line.endswith("\\"):
            continue
        words = " ".join(entry).split(" --hash=")
        entry = []
        req = Requirement(words[0])
        (spec,) = req.specifier  # one, and it must be ==
        if spec.operator != "==" or req.url or req.extras:
            raise ValueError(f"line {start}: {words[0]!r} is not name==version")
        hashes = frozenset(words[1:])
        if not hashes or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes):
            raise ValueError(f"line {start}: {req.name} has no sha256 hash")
        out.append(
            Pin(canonicalize_name(req.name), Version(spec.version), req.marker, hashes, start)
        )
    return out


def lock(name: str) -> list[Pin]:
    return read_lock((LOCKS / name).read_text())


def pinned(pins: list[Pin], name: str, env: dict[str, str]) -> Pin | None:
    found = [p for p in pins if p.name == canonicalize_name(name) and p.applies(env)]
    assert len(found) <= 1, f"{name} is locked twice for {env['platform_machine']}"
    return found[0] if found else None


def project(path: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / path).read_text())


def requirements(path: str, extras: set[str]) -> list[tuple[str, Requirement]]:
    """A pyproject's dependencies and those of ``extras``, an extra naming the project itself
    (``pkg[a,b]``) followed; each with where it comes from."""
    p = project(path)["project"]
    name = canonicalize_name(p["name"])
    out: list[tuple[str, Requirement]] = [
        (f"{p['name']} dependencies", Requirement(r)) for r in p.get("dependencies", [])
    ]
    todo, done = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        for r in p["optional-dependencies"][extra]:
            req = Requirement(r)
            if canonicalize_name(req.name) == name:
                todo.extend(req.extras)
            else:
                out.append((f"{p['name']}[{extra}]", req))
    return out


# The packages of this repository: built from the checkout (--no-deps), never locked.
LOCAL = {
    "k8s-event-bridge",
    "k8s-event-bridge-consumer",
    "k8s-event-bridge-common",
    "k8s-event-bridge-sim",
}
RUNTIME = [
    (where, req)
    for where, req in (
        *requirements("pyproject.toml", set()),
        *requirements("consumer/pyproject.toml", {"all"}),
        *requirements("common/pyproject.toml", set()),
    )
    if canonicalize_name(req.name) not in LOCAL
]
TEST = [
    *RUNTIME,
    *(
        (where, req)
        for where, req in (
            *requirements("pyproject.toml", {"test"}),
            *requirements("sim/pyproject.toml", set()),
        )
        if canonicalize_name(req.name) not in LOCAL
    ),
]
BUILD = [
    (f"{path} [build-system]", Requirement(r))
    for path in (
        "pyproject.toml",
        "consumer/pyproject.toml",
        "common/pyproject.toml",
        "sim/pyproject.toml",
    )
    for r in project(path)["build-system"]["requires"]
]


def extra_requirements(pin: Pin, extra: str, env: dict[str, str]) -> list[Requirement]:
    """What ``name[extra]`` adds, from the metadata of the locked version as installed here
    (the venv is installed from the lock: `make`)."""
    dist = metadata.distribution(pin.name)
    assert Version(dist.version) == pin.version, (
        f"{pin.name} {dist.version} is installed, the lock says {pin.version}: run make"
    )
    out = []
    for r in dist.requires or []:
        req = Requirement(r)
        if req.marker and req.marker.evaluate({**env, "extra": extra}):
            if not req.marker.evaluate({**env, "extra": ""}):
                out.append(req)
    return out


def stale(pins: list[Pin], wanted: list[tuple[str, Requirement]], env: dict[str, str]) -> list[str]:
    """What the lock does not satisfy of ``wanted`` in ``env``, as one line each."""
    problems = []
    todo = [(where, req, "") for where, req in wanted]  # "": not an extra's requirement
    while todo:
        where, req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({**env, "extra": extra}):
            continue
        pin = pinned(pins, req.name, env)
        if pin is None:
            problems.append(f"{req.name}{req.specifier} ({where}) is not locked")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req.name}{req.specifier} ({where}) is locked at {pin.version}")
        elif not extra:
            for name in sorted(req.extras):
                for sub in extra_requirements(pin, name, env):
                    todo.append((f"{where}, {req.name}[{name}]", sub, name))
    return sorted(problems)


@pytest.mark.parametrize("machine", sorted(TARGETS))
@pytest.mark.parametrize(
    ("name", "wanted"),
    [("runtime.txt", RUNTIME), ("test.txt", TEST), ("build.txt", BUILD)],
    ids=["runtime", "test", "build"],
)
def test_lock_satisfies_every_requirement_of_the_pyprojects(
    name: str, wanted: list[tuple[str, Requirement]], machine: str
) -> None:
    problems = stale(lock(name), wanted, TARGETS[machine])
    assert not problems, f"requirements/{name} is stale (make lock):\n" + "\n".join(problems)


def test_ci_tests_the_versions_the_image_runs() -> None:
    test = {(p.name, str(p.marker)): p for p in lock("test.txt")}
    for p in lock("runtime.txt"):
        q = test.get((p.name, str(p.marker)))
        assert q is not None, f"{p.name} is in runtime.txt, not in test.txt"
        assert (q.version, q.hashes) == (p.version, p.hashes), p.name


def test_the_fast_paths_run_on_the_exact_versions_locked() -> None:
    """bridge.jetstream.fastpath, k8s_event_common.kube.lean and k8s_event_common.connecting lean on
    these libraries' internals: the lock holds one version of each, inside pyproject's
    range."""
    env = TARGETS["x86_64"]
    for name in ("nats-py", "kubernetes-asyncio"):
        (pin,) = [p for p in lock("runtime.txt") if p.name == name]
        assert pin.marker is None
        same = pinned(lock("test.txt"), name, env)
        assert same is not None and (same.version, same.hashes) == (pin.version, pin.hashes)


def test_a_pyproject_asking_for_what_the_lock_lacks_makes_it_stale() -> None:
    """Each requirement counts: asking for a version above the locked one, for a package not
    locked, or for an extra whose requirement is not locked, is named."""
    env = TARGETS["x86_64"]
    pins = lock("test.txt")
    assert not stale(pins, TEST, env)
    for where, req in TEST:
        if req.marker and not req.marker.evaluate({**env, "extra": ""}):
            continue
        moved = Requirement(f"{req.name}>{pinned(pins, req.name, env).version}")
        assert stale(pins, [(where, moved)], env), f"{moved} passes"
    assert stale(pins, [("x", Requirement("not-a-locked-package"))], env)
    # an extra's requirements count: nats-py[nkeys] needs nkeys
    without_nkeys = [p for p in pins if p.name != "nkeys"]
    assert stale(without_nkeys, [("x", Requirement("nats-py[nkeys]"))], env) == [
        "nkeys (x, nats-py[nkeys]) is not locked"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "aiohttp>=3.14 \\\n    --hash=sha256:" + "0" * 64 + "\n",
        "aiohttp==3.14.5\n",
        "--find-links ./wheels\naiohttp==3.14.5 --hash=sha256:" + "0" * 64,
        "-e .\n",
    ],
    ids=["unpinned", "no-hash", "an-option", "a-path"],
)
def test_a_lock_line_that_is_not_pinned_and_hashed_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        read_lock(text)


def test_the_unlocked_extras_are_only_those_named() -> None:
    extras = set(project("pyproject.toml")["project"]["optional-dependencies"])
    assert extras - {"test"} == UNLOCKED_EXTRAS


def test_the_local_packages_depend_on_each_other_by_exact_version_and_are_not_locked() -> None:
    """The bridge and the subscribers take the shared package (common/) at its own version,
    the simulator (sim/) the bridge at its own, from the checkout: neither lock file names
    them."""
    common = project("common/pyproject.toml")["project"]
    for path in ("pyproject.toml", "consumer/pyproject.toml"):
        deps = [Requirement(r) for r in project(path)["project"]["dependencies"]]
        (req,) = [r for r in deps if canonicalize_name(r.name) == "k8s-event-bridge-common"]
        assert str(req.specifier) == f"=={common['version']}", path
    bridge = project("pyproject.toml")["project"]
    deps = [Requirement(r) for r in project("sim/pyproject.toml")["project"]["dependencies"]]
    (req,) = [r for r in deps if canonicalize_name(r.name) == "k8s-event-bridge"]
    assert str(req.specifier) == f"=={bridge['version']}"
    for name in ("runtime.txt", "test.txt"):
        assert not LOCAL & {p.name for p in lock(name)}, name
