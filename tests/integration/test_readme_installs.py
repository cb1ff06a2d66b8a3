"""Every ``pip install`` the docs give, run as written: read out of the shell code blocks
(```` ```sh ````) of every markdown file git tracks (README.md, docs/*.md, the packages'
READMEs, ...), each run in a fresh venv of the base Python on a clean copy of the checkout (the
files git tracks, as a fresh clone has them), from its root, with the venv's ``bin`` first on
``PATH`` as an activated venv has it; then ``pip check``, each package of this repository it
names is checked to come from the copy (PEP 610's ``direct_url.json``), and what it installed
is run: ``k8s-event-bridge --version`` and ``check-config`` for the bridge (``.``), ``import
k8s_event_consumer`` for the subscribers' kit (``./consumer``), ``check-config`` of each
subscriber its extras name (``[alerting]``, ``[remediation]``, ``[otlp]``, ``[all]``), ``import
k8s_event_common`` for the shared package, ``k8s-event-bridge-demo --help`` for the simulator.

Each ``pip install`` line is one install of its own, in its own venv; a line with
``--no-deps`` continues the line before it in its block (it takes its dependencies from it:
the lock, then the local packages). An install this test can not run or check, a ``pip
install`` outside a shell block, one in an inline code span that is not one of the blocks'
commands, or one naming a package that requires another of this repository without naming that
one too (no index has it: pip fails, or takes whatever someone else put there under its name),
fails ``test_every_pip_install_in_the_docs_is_run`` naming it. (A ```` ```dockerfile
```` block is the image's install: tests/integration/test_install.py runs that.)

Needs PyPI (pip asks the index as a user's pip does; pip's cache, the user's, is reused for
the files). Each install takes what a real one takes (15-40 s: the index asked, the local
wheels built in isolation, 35 packages unpacked); the docs' eight run two at a time, 2-3
minutes on two busy cores.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SHELLS = {"sh", "bash", "shell", "console", "zsh"}
WORKERS = 2  # installs side by side (they are mostly CPU: resolving, building, unpacking)
PYTHON = Path(sys.base_prefix) / "bin" / "python3"  # the machine's python, not this venv's
IMAGE_BLOCKS = {"dockerfile", "containerfile"}  # the image's install: test_install.py


# --- the commands, read out of the docs -----------------------------------------------------


@dataclass(frozen=True)
class Command:
    doc: str  # the markdown file, relative to the repository
    line: int
    text: str  # as written (backslash-newlines joined), what the shell runs

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text, comments=True)


@dataclass(frozen=True)
class Check:
    """A program of the venv run after the install: its exit status 0, and ``stdout`` (if
    given) printed exactly, or (``config``) a YAML mapping printed."""

    argv: tuple[str, ...]  # argv[0] from the venv's bin
    env: tuple[tuple[str, str], ...] = ()
    stdout: str | None = None
    config: bool = False

    def __str__(self) -> str:
        return " ".join([*(f"{k}={v}" for k, v in self.env), *self.argv])


@dataclass(frozen=True)
class Install:
    """One install as the docs give it: its commands, in order, in one fresh venv, and what
    then runs."""

    commands: tuple[Command, ...]
    checks: tuple[Check, ...]
    packages: tuple[Local, ...]  # the packages of this repository it names

    @property
    def id(self) -> str:
        return f"{self.commands[0].doc}:{self.commands[0].line}"


def tracked(pattern: str = "") -> list[str]:
    argv = ["git", "ls-files", "-z", "--cached", *([pattern] if pattern else [])]
    listed = subprocess.run(argv, cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return [p for p in listed.split("\0") if p and (ROOT / p).is_file()]


def _pip_install_at(words: list[str]) -> int | None:
    """Where ``pip install`` (``pip3``, ``python -m pip``) starts in ``words``, if it does."""
    for i in range(len(words) - 1):
        if re.fullmatch(r"(?:.*/)?pip3?", words[i]) and words[i + 1] == "install":
            return i
        if re.fullmatch(r"(?:.*/)?python3?(?:\.\d+)?", words[i]) and words[i + 1 : i + 4] == [
            "-m",
            "pip",
            "install",
        ]:
            return i
    return None


@dataclass(frozen=True)
class Line:
    n: int  # its number in the file (the first, for lines joined)
    text: str
    block: int | None  # which fenced code block it is in (counted from 0), None outside one
    info: str  # that block's info word ("" for a bare block or outside one)


def lines(markdown: str) -> Iterator[Line]:
    """The markdown's lines but the fences, each with the fenced code block it is in; inside
    a block a backslash-newline joins lines as the shell does."""
    fence, info, block = "", "", -1
    pending: Line | None = None
    for n, text in enumerate(markdown.splitlines(), 1):
        stripped = text.strip()
        if not fence:
            m = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m:
                fence, info, block = m.group(1), m.group(2).lower(), block + 1
            else:
                yield Line(n, text, None, "")
            continue
        if stripped.startswith(fence) and not stripped.strip(fence[0]):
            fence = ""
            continue
        pending = Line(pending.n, f"{pending.text} {stripped}", block, info) if pending else None
        line = pending or Line(n, text, block, info)
        if line.text.endswith("\\"):
            pending = Line(line.n, line.text[:-1].rstrip(), block, info)
        else:
            pending = None
            yield line


# what each local package's install runs: by its distribution name
def _checks(project: str, extras: set[str]) -> list[Check]:
    if project == "k8s-event-bridge":
        return [
            Check(("k8s-event-bridge", "--version"), stdout=f"k8s-event-bridge {VERSION}\n"),
            Check(("k8s-event-bridge", "check-config"), config=True),
        ]
    if project == "k8s-event-bridge-common":
        return [Check(("python", "-c", "import k8s_event_common"))]
    if project == "k8s-event-bridge-sim":
        return [Check(("k8s-event-bridge-demo", "--help"))]
    if project == "k8s-event-bridge-consumer":
        out = [Check(("python", "-c", "import k8s_event_consumer"))]  # the kit: no extra
        if "alerting" in extras:
            out.append(Check(("k8s-event-alerting", "check-config"), config=True))
        if "remediation" in extras:
            env = (("REMEDIATION_KUBERNETES__CLUSTER", "check"),)  # it names no cluster itself
            out.append(Check(("k8s-event-remediation", "check-config"), env, config=True))
        if "otlp" in extras:
            out.append(Check(("k8s-event-otlp", "check-config"), config=True))
        if "digests" in extras:
            out.append(Check(("k8s-event-digests", "check-config"), config=True))
        return out
    raise LookupError(f"{project}: no check known for it (add one here)")


def _extras(pyproject: dict[str, Any], asked: set[str]) -> set[str]:
    """``asked`` and the extras they name of the project itself (``all`` -> ``alerting`` ...)."""
    name = canonicalize_name(pyproject["project"]["name"])
    optional: dict[str, list[str]] = pyproject["project"].get("optional-dependencies", {})
    out, todo = set(), list(asked)
    while todo:
        extra = todo.pop()
        if extra in out:
            continue
        out.add(extra)
        for req in map(Requirement, optional.get(extra, [])):
            if canonicalize_name(req.name) == name:
                todo.extend(req.extras)
    return out


@dataclass(frozen=True)
class Local:
    """A package of this repository a command names: ``'./consumer[alerting]'``."""

    name: str  # canonical, from its pyproject
    path: str  # as written, relative to the repository's root: ".", "./common"
    extras: frozenset[str]  # asked, and those they name
    requires: frozenset[str]  # the canonical names it requires, with those extras

    @classmethod
    def read(cls, path: str, asked: set[str]) -> Local:
        pyproject = tomllib.loads((ROOT / path / "pyproject.toml").read_text())
        project = pyproject["project"]
        extras = _extras(pyproject, asked)
        reqs = list(project.get("dependencies", []))
        for extra in extras:
            reqs += project.get("optional-dependencies", {}).get(extra, [])
        name = canonicalize_name(project["name"])
        requires = {canonicalize_name(Requirement(r).name) for r in reqs} - {name}
        return cls(name, path, frozenset(extras), frozenset(requires))


# the packages of this repository, which no index has: by name, where they are
LOCAL = {
    Local.read(p, set()).name: p
    for p in (".", *(f"./{d.parent.name}" for d in ROOT.glob("*/pyproject.toml")))
}


# pip install's options that take a value (the rest are flags)
_VALUED = {
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--python-version",
    "--platform", "--abi", "--implementation", "--no-binary", "--only-binary", "--src",
    "--upgrade-strategy", "-C", "--config-settings", "--report", "--progress-bar", "--python",
}  # fmt: skip


def named(command: Command) -> list[Local]:
    """The packages of this repository ``command`` installs (``./common``, ``.``,
    ``'./consumer[alerting]'``, ``-e ./sim``); a requirements file (``-r``) names none.
    Anything else is refused (``LookupError``)."""
    words = command.words
    start = _pip_install_at(words)
    assert start is not None
    args = words[words.index("install", start) + 1 :]
    out: list[Local] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word in _VALUED:
            i += 1
            continue
        if word.startswith("-") and word not in ("-e", "--editable"):
            continue
        if word in ("-e", "--editable"):
            word, i = args[i], i + 1
        m = re.fullmatch(r"(\.{1,2}(?:/[^\[]*)?)(?:\[([\w,-]*)\])?", word)
        if not m:
            raise LookupError(f"{word!r}: not a local package of this repository")
        if not (ROOT / m.group(1) / "pyproject.toml").is_file():
            raise LookupError(f"{word!r}: no pyproject.toml at {m.group(1)}")
        asked = {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
        out.append(Local.read(m.group(1), asked))
    return out


@dataclass
class Found:
    installs: list[Install] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "doc:line: what is wrong"


def _install(commands: list[Command], found: Found) -> None:
    """The install ``commands`` give, added to ``found``, or what keeps it from being run: a
    package it can not check, none at all, or a package of this repository required by one
    it names but not named with it (no index has it: pip would fail, or take someone
    else's)."""
    first = commands[0]
    where = f"{first.doc}:{first.line}: {' / '.join(c.text for c in commands)!r}"
    try:
        packages = [p for c in commands for p in named(c)]
        checks = [c for p in packages for c in _checks(p.name, set(p.extras))]
    except LookupError as e:
        found.problems.append(f"{where}: {e}")
        return
    if not checks:
        found.problems.append(
            f"{where} installs nothing this test can run (no local package): not covered"
        )
        return
    names = {p.name for p in packages}
    for p in packages:
        for missing in sorted((p.requires & LOCAL.keys()) - names):
            found.problems.append(
                f"{where}: {p.name} requires {missing}, which is {LOCAL[missing]!r} here and on "
                "no index: name it in the same command"
            )
    found.installs.append(Install(tuple(commands), tuple(checks), tuple(packages)))


PIP_INSTALL = re.compile(r"\bpip3?\s+install\b")


def read_docs(docs: dict[str, str] | None = None) -> Found:
    """Every ``pip install`` of the tracked markdown files (or of ``docs``: name -> text): the
    installs their shell blocks give, and whatever is not covered by them."""
    found = Found()
    inline: list[tuple[str, int, str]] = []
    if docs is None:
        docs = {doc: (ROOT / doc).read_text() for doc in tracked("*.md")}
    for doc, markdown in docs.items():
        groups: dict[int, list[list[Command]]] = {}  # by block: its installs' commands
        for line in lines(markdown):
            where = f"{doc}:{line.n}"
            if line.block is None:
                for span in re.findall(r"`([^`]*)`", line.text):
                    if PIP_INSTALL.search(span) and span.strip() != "pip install":  # a name
                        inline.append((doc, line.n, span))
                if PIP_INSTALL.search(re.sub(r"`[^`]*`", "", line.text)):
                    found.problems.append(
                        f"{where}: 'pip install' in prose, not in a code span or a shell "
                        "block: not covered"
                    )
                continue
            if line.info not in SHELLS:
                if PIP_INSTALL.search(line.text) and line.info not in IMAGE_BLOCKS:
                    found.problems.append(
                        f"{where}: 'pip install' in a ```{line.info} block, not a shell one: "
                        "not covered"
                    )
                continue
            text = re.sub(r"^\$\s+", "", line.text.strip())  # a console prompt
            try:
                words = shlex.split(text, comments=True)
            except ValueError as e:
                found.problems.append(f"{where}: {text!r}: {e}")
                continue
            at = _pip_install_at(words)
            if at is None:
                continue  # another command (a pip install in its comment is no command)
            if at != 0:
                found.problems.append(
                    f"{where}: {text!r}: 'pip install' after another command on the line: "
                    "not covered (give it a line of its own)"
                )
                continue
            block = groups.setdefault(line.block, [])
            command = Command(doc, line.n, text)
            if "--no-deps" not in words:
                block.append([command])
            elif block:
                block[-1].append(command)  # its dependencies: the install before it
            else:
                found.problems.append(
                    f"{where}: {text!r}: --no-deps with no install before it in its block to "
                    "take the dependencies from"
                )
        for block in groups.values():
            for commands in block:
                _install(commands, found)
    commands = {tuple(c.words) for i in found.installs for c in i.commands}
    for doc, n, span in inline:
        if tuple(shlex.split(span, comments=True)) not in commands:
            found.problems.append(
                f"{doc}:{n}: `{span}` is not one of the commands of the docs' shell blocks: "
                "not covered (write it as one of them)"
            )
    return found


DOCS = read_docs()


def test_every_pip_install_in_the_docs_is_run() -> None:
    assert not DOCS.problems, "\n".join(DOCS.problems)
    assert any(i.commands[0].doc == "README.md" for i in DOCS.installs)
    assert {c.argv[0] for i in DOCS.installs for c in i.checks} >= {
        "k8s-event-bridge",
        "k8s-event-alerting",
        "k8s-event-remediation",
        "k8s-event-otlp",
        "k8s-event-digests",
    }


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ("```sh\npip install requests\n```\n", "not a local package"),
        ("```sh\npip install -r requirements/runtime.txt\n```\n", "installs nothing"),
        ("```sh\npip install --no-deps ./common .\n```\n", "--no-deps with no install"),
        ("```\npip install .\n```\n", "not a shell one"),
        ("```text\n$ pip install .\n```\n", "not a shell one"),
        ("```sh\ncd x && pip install .\n```\n", "after another command"),
        ("Run pip install . first.\n", "in prose"),
        ("```sh\npip install ./common .\n```\nor `pip install .`\n", "`pip install .` is not"),
        ("```sh\npip install ./nowhere\n```\n", "no pyproject.toml"),
        ("```sh\npip install .\n```\n", "requires k8s-event-bridge-common, which is './common'"),
        ("```sh\npip install ./common ./sim\n```\n", "requires k8s-event-bridge, which is '.'"),
    ],
)
def test_an_install_it_can_not_run_is_named(doc: str, problem: str) -> None:
    found = read_docs({"doc.md": doc})
    assert any(problem in p for p in found.problems), found.problems


def test_the_docs_are_read_as_installs() -> None:
    doc = (
        "```sh\n"
        "$ pip install --require-hashes \\\n"
        "    -r requirements/runtime.txt   # the lock\n"
        "pip install --no-deps ./common .  # then\n"
        "pip install ./common './consumer[all]'\n"
        "echo done  # a pip install in a comment is no command\n"
        "```\n"
    )
    found = read_docs({"doc.md": doc})
    assert not found.problems
    locked, consumer = found.installs
    assert [(c.line, c.words[-1]) for c in locked.commands] == [
        (2, "requirements/runtime.txt"),
        (4, "."),
    ]
    assert {c.argv[0] for c in locked.checks} == {"python", "k8s-event-bridge"}
    assert {str(c) for c in consumer.checks} == {
        "python -c import k8s_event_common",
        "python -c import k8s_event_consumer",
        "k8s-event-alerting check-config",
        "REMEDIATION_KUBERNETES__CLUSTER=check k8s-event-remediation check-config",
        "k8s-event-otlp check-config",
        "k8s-event-digests check-config",
    }


# --- the installs, run ----------------------------------------------------------------------

# what reaches the index (the machine's own settings); the rest of PIP_* changes what is
# installed (a find-links directory could hold a wheel no index has) and is left out
PIP_KEPT = {
    "PIP_CERT", "PIP_CLIENT_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",
    "PIP_PROXY", "PIP_TIMEOUT", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES", "PIP_CACHE_DIR",
    "PIP_DISABLE_PIP_VERSION_CHECK",
}  # fmt: skip


def _env(venv: Path | None = None, **extra: str) -> dict[str, str]:
    """This environment as a user's shell has it: no venv but ``venv`` (activated), bytecode
    written, no settings of the programs, no pip option but those that reach the index."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONHOME")
        and not k.startswith(("BRIDGE_", "ALERTING_", "REMEDIATION_", "OTLP_"))
        and (not k.startswith("PIP_") or k in PIP_KEPT)
    }
    if venv is not None:
        # pip's byte-compiling of what it installs (kubernetes_asyncio: ~1,000 modules) is
        # left out: it fails no install, and the programs run compile what they import
        keep["PIP_NO_COMPILE"] = "1"
        keep["VIRTUAL_ENV"] = str(venv)
        keep["PATH"] = f"{venv / 'bin'}{os.pathsep}{keep.get('PATH', '')}"
    return {**keep, **extra}


def clean_copy(dest: Path) -> Path:
    """The files git tracks, as a fresh clone has them (no venv, no build, no egg-info)."""
    for rel in tracked():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


@dataclass(frozen=True)
class Ran:
    install: Install
    log: str  # every step with what it printed
    failed: str | None  # the first step that failed, or None
    seconds: float


# where pip took a package from (PEP 610: a local directory's file URL; none from an index)
FROM = (
    "import importlib.metadata as m, json; d = m.distribution({name!r}).read_text("
    "'direct_url.json'); print(json.loads(d)['url'] if d else 'an index')"
)


def run(install: Install, root: Path) -> Ran:
    started = time.monotonic()
    log: list[str] = []

    def step(what: str, argv: list[str], cwd: Path, env: dict[str, str]) -> str | None:
        t = time.monotonic()
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        took = time.monotonic() - t
        out = f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        log.append(f"$ {what}  # exit {done.returncode}, {took:.1f} s\n{out}")
        return done.stdout if done.returncode == 0 else None

    def ran(failed: str | None) -> Ran:
        shutil.rmtree(root, ignore_errors=True)  # a venv is ~100 MB
        return Ran(install, "\n".join(log), failed, time.monotonic() - started)

    src, venv, elsewhere = clean_copy(root / "src"), root / "venv", root / "run"
    elsewhere.mkdir()
    if step("python3 -m venv venv", [str(PYTHON), "-m", "venv", str(venv)], root, _env()) is None:
        return ran("python3 -m venv")
    for c in install.commands:
        if step(c.text, ["bash", "-c", c.text], src, _env(venv)) is None:
            return ran(c.text)
    if step("pip check", [str(venv / "bin" / "pip"), "check"], src, _env(venv)) is None:
        return ran("pip check")
    for p in install.packages:  # each from this checkout, none from an index
        url = (src / p.path).resolve().as_uri()
        argv = [str(venv / "bin" / "python"), "-c", FROM.format(name=p.name)]
        out = step(f"where {p.name} comes from", argv, elsewhere, _env())
        if out != url + "\n":
            return ran(f"{p.name} installed from {out!r}, not {url}")
    for check in install.checks:
        argv = [str(venv / "bin" / check.argv[0]), *check.argv[1:]]
        out = step(str(check), argv, elsewhere, _env(None, **dict(check.env)))
        if out is None:
            return ran(str(check))
        if check.stdout is not None and out != check.stdout:
            return ran(f"{check}: printed {out!r}, not {check.stdout!r}")
        if check.config and not isinstance(yaml.safe_load(out), dict):
            return ran(f"{check}: printed no configuration")
    return ran(None)


def _asked(item: pytest.Item) -> Install | None:
    """The install a collected test runs, if it runs one."""
    callspec = getattr(item, "callspec", None)
    install = callspec.params.get("install") if callspec is not None else None
    return install if isinstance(install, Install) else None


@pytest.fixture(scope="module")
def ran(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Ran]]]:
    """The installs this session's tests ask for, started side by side (WORKERS at a time)."""
    wanted = {i.id for i in map(_asked, request.session.items) if i is not None}
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {
            i.id: pool.submit(run, i, tmp_path_factory.mktemp("install"))
            for i in DOCS.installs
            if i.id in wanted
        }
        yield futures
        for f in futures.values():
            f.cancel()


@pytest.mark.parametrize("install", DOCS.installs, ids=lambda i: i.id)
def test_the_install_works_as_written(install: Install, ran: dict[str, Future[Ran]]) -> None:
    result = ran[install.id].result()
    if result.failed is not None:
        commands = "\n".join(f"{c.doc}:{c.line}: {c.text}" for c in install.commands)
        pytest.fail(f"{commands}\nfailed at: {result.failed}\n\n{result.log}", pytrace=False)
    steps = 2 + len(install.commands) + len(install.packages) + len(install.checks)
    assert result.log.count("# exit 0,") == steps
