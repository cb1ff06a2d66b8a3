"""The image's promises, read from the Dockerfile without Docker: two stages on one selectable
base (``ARG BASE``, the official Python image by default), no frontend fetched (no ``# syntax=``
line), the build stage fetching nothing the lock does not hash, a final stage of wheels alone
installed by the build stage's pip (the base's own removed) and run by a numeric non-root
user, its OCI labels, ENTRYPOINT and CMD as docs/deploy.md says; and the manifests
that run it (deploy/deployment.yaml, deploy/consumers/, the Helm chart rendered) with a
read-only root filesystem, an emptyDir where the programs write and the Dockerfile's user.

The parser is small and says what it does not read: it takes the instructions (keyword and
arguments, continuation lines joined, comment lines dropped), the stages (``FROM image [AS
name]``), exec-form JSON, and the ``KEY=value`` lists of ENV, LABEL and ARG; a heredoc or
another escape character is refused, not misread. tests/node/test_image.py checks the image
built from it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.standins import gotools

GO_TOOLS = ("helm",)  # tests/conftest.py builds it after collection

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
CHART = ROOT / "deploy" / "helm" / "k8s-event-bridge"


# --- the parser -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: RUN, COPY, ...
    args: str  # the rest, continuation lines joined by a space
    line: int  # where it starts, 1-based

    def exec_form(self) -> list[str]:
        """The JSON array of ``ENTRYPOINT ["a", "b"]``; ValueError for the shell form."""
        value = json.loads(self.args)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"line {self.line}: {self.keyword} is not a JSON array of strings")
        return value

    def pairs(self) -> dict[str, str]:
        """``KEY=value`` words (quotes as in a shell) of ENV, LABEL and ARG."""
        out: dict[str, str] = {}
        for word in shlex.split(self.args):
            key, eq, value = word.partition("=")
            if not eq and self.keyword != "ARG":  # ENV KEY value: the legacy form
                raise ValueError(f"line {self.line}: {self.keyword} {self.args!r} is not KEY=value")
            out[key] = value
        return out


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"no {keyword} in the stage FROM {self.base}"
        return found[-1]

    def args(self) -> dict[str, str]:
        """The stage's ARGs with their defaults."""
        out: dict[str, str] = {}
        for i in self.all("ARG"):
            out.update(i.pairs())
        return out

    def labels(self) -> dict[str, str]:
        """The LABELs, ``$NAME`` and ``${NAME}`` of the stage's ARGs replaced by defaults."""
        args = self.args()
        out: dict[str, str] = {}
        for i in self.all("LABEL"):
            for key, value in i.pairs().items():
                out[key] = re.sub(
                    r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), value
                )
        return out

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for i in self.all("ENV"):
            out.update(i.pairs())
        return out


def instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, in order."""
    out: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if re.match(r"#\s*escape\s*=", stripped) and not out and not parts:
            raise ValueError(f"line {n}: another escape character is not read here")
        if not stripped or stripped.startswith("#"):
            continue  # a comment or a blank line, also inside a continuation (Docker drops both)
        if not parts:
            start = n
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        keyword, _, args = " ".join(p for p in parts if p).partition(" ")
        if re.search(r"<<-?\s*['\"]?\w+", args) and keyword.upper() in ("RUN", "COPY"):
            raise ValueError(f"line {start}: a heredoc is not read here")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        parts = []
    if parts:
        raise ValueError(f"line {start}: the last instruction ends in a continuation")
    return out


def global_args(text: str) -> dict[str, str]:
    """The ``ARG``s before the first FROM (what a ``FROM ${NAME}`` may use), with defaults."""
    out: dict[str, str] = {}
    for i in instructions(text):
        if i.keyword == "FROM":
            break
        out.update(i.pairs())
    return out


def stages(text: str) -> list[Stage]:
    """The stages, each from its ``FROM [--platform=...] image [AS name]``."""
    out: list[Stage] = []
    for i in instructions(text):
        if i.keyword == "FROM":
            words = [w for w in i.args.split() if not w.startswith("--")]
            if len(words) == 3 and words[1].upper() == "AS":
                out.append(Stage(words[0], words[2]))
            elif len(words) == 1:
                out.append(Stage(words[0], None))
            else:
                raise ValueError(f"line {i.line}: FROM {i.args!r}")
        elif not out:
            if i.keyword != "ARG":  # only ARG may come before the first FROM
                raise ValueError(f"line {i.line}: {i.keyword} before FROM")
        else:
            out[-1].instructions.append(i)
    return out


# --- what RUN does: its commands, and pip's among them --------------------------------------

_SEPARATORS = {"&&", "||", ";", "|", "&"}
_REDIRECTS = {">", ">>", "<", ">&", "<&"}  # shlex splits 2>&1 into 2, >&, 1


def commands(run: Instruction) -> list[list[str]]:
    """The simple commands of a shell-form RUN: its ``--mount`` flags, redirections and
    leading ``NAME=value`` words left out."""
    lexer = shlex.shlex(run.args, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    while words and words[0].startswith("--"):  # RUN --mount=... --network=...
        words.pop(0)
    out: list[list[str]] = [[]]
    skip = False
    for n, w in enumerate(words):
        if skip:
            skip = False
        elif w in _SEPARATORS:
            out.append([])
        elif w in _REDIRECTS:
            skip = True  # and its target
        elif w.isdigit() and n + 1 < len(words) and words[n + 1] in _REDIRECTS:
            continue  # the 2 of 2>&1
        elif not out[-1] and re.fullmatch(r"\w+=.*", w):
            continue
        else:
            out[-1].append(w)
    return [c for c in out if c]


_PIP_VALUE_OPTIONS = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-w",
    "--wheel-dir",
    "-d",
    "--dest",
    "-f",
    "--find-links",
    "-i",
    "--index-url",
    "--extra-index-url",
    "--python",
    "--only-binary",
    "--no-binary",
    "-t",
    "--target",
    "--prefix",
}


@dataclass
class Pip:
    subcommand: str
    flags: set[str]  # --no-deps, --require-hashes, --only-binary=:all:, ...
    options: dict[str, list[str]]  # -r/--requirement -> the files, ...
    positional: list[str]  # requirements or paths


def pip(command: list[str]) -> Pip | None:
    """The pip command among ``pip ...``, ``/x/bin/pip ...`` and ``python -m pip ...``."""
    if Path(command[0]).name in ("pip", "pip3"):
        rest = command[1:]
    elif len(command) > 2 and command[1:3] == ["-m", "pip"]:
        rest = command[3:]
    else:
        return None
    sub: str | None = None
    flags: set[str] = set()
    options: dict[str, list[str]] = {}
    positional: list[str] = []
    words = iter(rest)
    for w in words:
        name, eq, value = w.partition("=")
        if name in _PIP_VALUE_OPTIONS:
            value = value if eq else next(words)
            key = {"--requirement": "-r", "--wheel-dir": "-w"}.get(name, name)
            options.setdefault(key, []).append(value)
            if name == "--only-binary":
                flags.add(f"--only-binary={value}")
        elif w.startswith("-"):
            flags.add(w)
        elif sub is None:
            sub = w
        else:
            positional.append(w)
    assert sub is not None, f"pip without a subcommand: {command}"
    return Pip(sub, flags, options, positional)


def pips(stage: Stage) -> list[Pip]:
    return [p for run in stage.all("RUN") for c in commands(run) if (p := pip(c))]


# --- what the Dockerfile is checked against -------------------------------------------------


def pyproject(path: str = "pyproject.toml") -> dict[str, Any]:
    return tomllib.loads((ROOT / path).read_text())["project"]


@pytest.fixture(scope="module")
def dockerfile() -> list[Stage]:
    return stages(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def final(dockerfile: list[Stage]) -> Stage:
    return dockerfile[-1]


def user_of(final: Stage) -> tuple[int, int]:
    """The final stage's ``USER uid:gid``, numbers (a Pod's runAsNonRoot can check them)."""
    m = re.fullmatch(r"(\d+):(\d+)", final.last("USER").args)
    assert m, f"USER {final.last('USER').args!r} is not numeric uid:gid"
    return int(m.group(1)), int(m.group(2))


def image_section() -> str:
    """docs/deploy.md's "The image" section."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    m = re.search(r"^## The image\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "docs/deploy.md has no section '## The image'"
    return m.group(1)


# --- the parser, on what it must read right -------------------------------------------------


def test_parser_joins_continuations_drops_comments_and_splits_stages() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG BASE=python:3.11-slim\n"
        "FROM --platform=$BUILDPLATFORM python:3.11-slim AS build\n"
        "RUN a \\\n"
        "# a comment inside the continuation\n"
        "\n"
        "    && b --flag 'x y' 2>&1 > /dev/null\n"
        "from scratch\n"
        'LABEL a="one two" b=three\n'
        'ENTRYPOINT ["prog", "--x"]\n'
        "CMD run --config x\n"
    )
    build, last = stages(text)
    assert global_args(text) == {"BASE": "python:3.11-slim"}
    assert (build.base, build.name, last.base, last.name) == (
        "python:3.11-slim",
        "build",
        "scratch",
        None,
    )
    (run,) = build.all("RUN")
    assert (run.line, run.args) == (4, "a && b --flag 'x y' 2>&1 > /dev/null")
    assert commands(run) == [["a"], ["b", "--flag", "x y"]]
    assert last.labels() == {"a": "one two", "b": "three"}
    assert last.last("ENTRYPOINT").exec_form() == ["prog", "--x"]
    with pytest.raises(ValueError):
        last.last("CMD").exec_form()  # the shell form is not exec form


@pytest.mark.parametrize(
    "text",
    [
        "# escape=`\nFROM scratch\n",
        "FROM scratch\nRUN <<EOF\necho hi\nEOF\n",
        "FROM scratch\nRUN a \\\n",
        "RUN a\nFROM scratch\n",
    ],
    ids=["escape", "heredoc", "dangling-continuation", "run-before-from"],
)
def test_parser_refuses_what_it_does_not_read(text: str) -> None:
    with pytest.raises(ValueError):
        stages(text)


def test_pip_commands_are_read_with_their_options() -> None:
    (run,) = stages(
        "FROM x\nRUN A=1 /b/pip wheel --require-hashes -w /w -r r.txt"
        " && python -m pip --python /v/python install --no-index --no-deps /w/*.whl\n"
    )[0].all("RUN")
    first, second = (pip(c) for c in commands(run))
    assert first is not None and second is not None
    assert (first.subcommand, first.flags, first.options) == (
        "wheel",
        {"--require-hashes"},
        {"-w": ["/w"], "-r": ["r.txt"]},
    )
    assert (second.subcommand, second.flags, second.positional) == (
        "install",
        {"--no-index", "--no-deps"},
        ["/w/*.whl"],
    )


# --- the Dockerfile -------------------------------------------------------------------------


def test_two_stages_on_one_selectable_base_the_official_python_by_default(
    dockerfile: list[Stage],
) -> None:
    """Both stages are ``FROM ${BASE}``: the wheels are built for the Python that runs them.
    BASE defaults to the official image users build on; tools/image.py reads the same default
    and builds on a stand-in only where that one cannot be pulled."""
    from tools.image import official_base

    build, final = dockerfile
    assert build.name == "build"
    assert build.base == final.base
    assert re.fullmatch(r"\$\{?BASE\}?", final.base), final.base
    default = global_args(DOCKERFILE.read_text())["BASE"]
    # a digest may pin it (python:3.11-slim@sha256:...)
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]{64})?", default), default
    assert official_base(DOCKERFILE.read_text()) == default
    requires = pyproject()["requires-python"]
    assert requires == ">=3.11", "the base image's Python must satisfy requires-python"
    assert "--build-arg BASE=" in image_section(), "docs/deploy.md does not say how to choose it"


def test_no_frontend_is_fetched_to_build_it() -> None:
    """A ``# syntax=`` line makes BuildKit pull a frontend image from a registry; the built-in
    frontend builds ``RUN --mount``."""
    head = DOCKERFILE.read_text().split("\nFROM", 1)[0]
    assert not re.search(r"^#\s*syntax\s*=", head, re.M | re.I)


def test_the_build_stage_fetches_only_what_the_lock_hashes(dockerfile: list[Stage]) -> None:
    """Every pip that may reach an index installs from requirements/*.txt with
    --require-hashes, or only local paths with --no-deps; none builds in an isolated
    environment (which would fetch setuptools unlocked) unless it takes wheels only."""
    build = dockerfile[0]
    seen = pips(build)
    assert seen, "the build stage runs no pip"
    for p in seen:
        if "--no-index" in p.flags:
            continue
        if "--require-hashes" in p.flags:
            assert not p.positional, f"pip {p.subcommand} {p.positional}: outside the lock"
            assert p.options.get("-r"), f"pip {p.subcommand} --require-hashes without -r"
            for req in p.options["-r"]:
                assert re.fullmatch(r"requirements/\w+\.txt", req), req
                assert (ROOT / req).is_file(), f"{req} does not exist"
        else:
            assert "--no-deps" in p.flags, f"pip {p.subcommand} {p.positional} resolves deps"
            assert p.positional and all(a.startswith((".", "/")) for a in p.positional), (
                f"pip {p.subcommand} {p.positional}: not local paths"
            )
        if "--only-binary=:all:" not in p.flags:
            assert "--no-build-isolation" in p.flags, f"pip {p.subcommand} builds in isolation"


def test_the_build_stage_wheels_the_runtime_lock_and_the_three_local_packages(
    dockerfile: list[Stage],
) -> None:
    wheels = [p for p in pips(dockerfile[0]) if p.subcommand == "wheel"]
    locked = [p for p in wheels if p.options.get("-r") == ["requirements/runtime.txt"]]
    local = [p for p in wheels if set(p.positional) == {"./common", ".", "./consumer"}]
    assert locked and "--require-hashes" in locked[0].flags
    assert local and "--no-deps" in local[0].flags
    assert {p.options["-w"][0] for p in locked + local} == {"/wheels"}
    installed = [p for p in pips(dockerfile[0]) if p.subcommand == "install"]
    assert [p.options.get("-r") for p in installed] == [["requirements/build.txt"]]


def test_the_image_never_takes_the_simulator(dockerfile: list[Stage]) -> None:
    """The simulator and the demo (sim/, the k8s-event-bridge-sim distribution) are not the
    product: .dockerignore leaves sim/ out of the context ``COPY . .`` takes, no COPY or ADD
    names it, and no pip builds or installs it."""
    from tests.integration.test_install import ignored, read_dockerignore

    patterns = read_dockerignore((ROOT / ".dockerignore").read_text())
    for path in ("sim/pyproject.toml", "sim/k8s_event_sim/apiserver.py"):
        assert ignored(path, patterns), f"{path} reaches the build context"
    for stage in dockerfile:
        for i in stage.all("COPY") + stage.all("ADD"):
            named = [w for w in shlex.split(i.args) if "sim" in Path(w).parts]
            assert not named, f"line {i.line}: {i.keyword} {i.args}"
        for p in pips(stage):
            named = [a for a in p.positional if "sim" in Path(a).parts or "-sim" in a]
            assert not named, f"pip {p.subcommand} {named}"


def test_the_final_stage_installs_the_wheels_alone_with_no_build_tools(final: Stage) -> None:
    assert not final.all("COPY") and not final.all("ADD"), "only the wheels come in"
    mounts = [i.args for i in final.all("RUN") if "--mount=" in i.args]
    assert any("from=build" in m and "source=/wheels" in m for m in mounts)
    # the build stage's venv is mounted: its pip installs, and stays in no layer
    assert any("from=build" in m and "source=/build," in m for m in mounts)
    words = [w for run in final.all("RUN") for c in commands(run) for w in c]
    for tool in ("apt-get", "apt", "apk", "dnf", "yum", "gcc", "cc", "make", "git", "curl"):
        assert tool not in words, f"{tool} in the final stage"
    pip_commands = [c for run in final.all("RUN") for c in commands(run) if pip(c) is not None]
    assert pip_commands and all(c[0] == "/build/bin/pip" for c in pip_commands), pip_commands
    seen = pips(final)
    assert [p.subcommand for p in seen] == ["install", "check"]
    install = seen[0]
    assert {"--no-index", "--no-deps"} <= install.flags
    assert install.positional == ["/wheels/*.whl"]
    assert install.options["--python"] == ["/opt/venv/bin/python"]
    # the venv it runs from has no pip and no setuptools
    venvs = [c for run in final.all("RUN") for c in commands(run) if c[1:3] == ["-m", "venv"]]
    assert venvs and all("--without-pip" in c for c in venvs)
    assert final.env()["PATH"].startswith("/opt/venv/bin:")
    assert not [k for k in final.env() if k.startswith("PIP_")], "pip's settings, and no pip"


def test_the_final_stage_removes_the_base_s_pip_and_proves_it_gone(final: Stage) -> None:
    """The official base ships pip, setuptools and wheel in /usr/local; ensurepip bundles pip
    wheels (Debian's in /usr/share/python-wheels). The last RUN removes them all, then fails
    the build if ``import pip`` works in either Python."""
    run = [c for i in final.all("RUN") for c in commands(i)]
    removed = {w for c in run if c[:2] == ["rm", "-rf"] for w in c[2:]}
    for path in (
        "/usr/local/bin/pip",
        "/usr/local/lib/python3.*/site-packages/*",
        "/usr/local/lib/python3.*/ensurepip",
        "/usr/lib/python3.*/ensurepip",
        "/usr/share/python-wheels",
    ):
        assert path in removed, f"{path} is not removed"
    for python in ("/usr/local/bin/python", "/opt/venv/bin/python"):
        assert ["!", python, "-c", "import pip"] in run, f"{python} is not checked for pip"


def test_the_image_runs_as_a_numeric_non_root_user(final: Stage) -> None:
    uid, gid = user_of(final)
    assert uid != 0 and gid != 0
    users = final.all("USER")
    last_run = max(i.line for i in final.all("RUN"))
    assert users[-1].line > last_run, "a RUN after USER would need root"
    m = re.search(r"runs as user (\d+)", image_section())
    assert m and int(m.group(1)) == uid, "docs/deploy.md names another user"


def test_the_image_suits_a_read_only_root_filesystem(final: Stage) -> None:
    env = final.env()
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"  # the .pyc files are written at install
    assert final.last("WORKDIR").args == "/tmp"  # an emptyDir in the manifests (below)
    assert not final.all("VOLUME")


def test_the_build_smoke_checks_each_program_s_config(final: Stage) -> None:
    run = [c for i in final.all("RUN") for c in commands(i)]
    for program in (
        "k8s-event-bridge",
        "k8s-event-remediation",
        "k8s-event-alerting",
        "k8s-event-otlp",
        "k8s-event-digests",
    ):
        assert [program, "check-config"] in run, f"{program} check-config is not run"


def test_oci_labels_say_what_pyproject_says(final: Stage) -> None:
    labels = final.labels()
    bridge, consumer = pyproject(), pyproject("consumer/pyproject.toml")
    common = pyproject("common/pyproject.toml")
    oci = "org.opencontainers.image."
    assert labels[oci + "title"] == bridge["name"]
    assert labels[oci + "description"]
    assert re.fullmatch(r"https://[\w.-]+/\S+", labels[oci + "source"])
    assert labels[oci + "licenses"] == bridge["license"] == consumer["license"] == common["license"]
    assert labels[oci + "version"] == bridge["version"] == consumer["version"] == common["version"]
    # the build fails unless the wheels are that version
    checks = [c for i in final.all("RUN") for c in commands(i) if '"$VERSION"' in i.args]
    assert any("-c" in c and "$VERSION" in c for c in checks)


def test_the_image_tag_in_the_manifests_and_the_chart_is_the_version() -> None:
    version = pyproject()["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    for path in [ROOT / "deploy" / "deployment.yaml", *(ROOT / "deploy" / "consumers").glob("*")]:
        for image in re.findall(r"image:\s*(\S+)", path.read_text()):
            assert image.rsplit(":", 1)[1] == version, f"{path.name}: {image}"


def test_entrypoint_and_cmd_are_exec_form_and_as_documented(final: Stage) -> None:
    entrypoint = final.last("ENTRYPOINT").exec_form()
    cmd = final.last("CMD").exec_form()
    assert entrypoint == ["k8s-event-bridge"]
    assert entrypoint[0] in pyproject()["scripts"]
    docs = image_section()
    documented = {k: json.loads(v) for k, v in re.findall(r"`(ENTRYPOINT|CMD) (\[[^`]*\])`", docs)}
    assert documented == {"ENTRYPOINT": entrypoint, "CMD": cmd}


# --- the manifests that run the image -------------------------------------------------------


def _deployments(docs: list[Any]) -> list[dict[str, Any]]:
    """The workloads that run the image: Deployments and StatefulSets (the alerting pair)."""
    return [
        d for d in docs if isinstance(d, dict) and d.get("kind") in ("Deployment", "StatefulSet")
    ]


def _from_file(path: Path) -> list[dict[str, Any]]:
    return _deployments(list(yaml.safe_load_all(path.read_text())))


def _helm_rendered() -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(gotools.ensure("helm")), "template", "k8s-event-bridge", str(CHART)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return _deployments(list(yaml.safe_load_all(done.stdout)))


MANIFESTS = [
    pytest.param(lambda: _from_file(ROOT / "deploy" / "deployment.yaml"), id="deployment.yaml"),
    *(
        pytest.param(lambda p=p: _from_file(p), id=f"consumers/{p.name}")
        for p in sorted((ROOT / "deploy" / "consumers").glob("*.yaml"))
        if _from_file(p)
    ),
    pytest.param(_helm_rendered, id="helm-chart", marks=pytest.mark.processes),
]


@pytest.mark.parametrize("load", MANIFESTS)
def test_manifests_run_the_image_read_only_as_its_user_with_a_writable_tmp(
    load: Any, final: Stage
) -> None:
    uid, gid = user_of(final)
    workdir = final.last("WORKDIR").args
    deployments = load()
    assert deployments
    for d in deployments:
        pod = d["spec"]["template"]["spec"]
        context = pod.get("securityContext", {})
        assert (context.get("runAsUser"), context.get("runAsGroup")) == (uid, gid)
        assert context.get("runAsNonRoot") is True
        empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        for c in pod["containers"]:
            where = f"{d['metadata']['name']}/{c['name']}"
            assert c.get("securityContext", {}).get("readOnlyRootFilesystem") is True, where
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert mounts.get(workdir) in empty_dirs, f"{where}: no emptyDir on {workdir}"


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(lambda: _from_file(ROOT / "deploy" / "deployment.yaml"), id="kustomize"),
        pytest.param(_helm_rendered, id="helm-chart", marks=pytest.mark.processes),
    ],
)
def test_the_bridge_deployment_runs_the_entrypoint_with_the_cmd(load: Any, final: Stage) -> None:
    (bridge,) = [
        c
        for d in load()
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "bridge"
    ]
    assert "command" not in bridge, "the ENTRYPOINT runs"
    assert bridge["args"] == final.last("CMD").exec_form()
