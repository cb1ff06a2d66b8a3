"""What a saved image holds, read from its ``docker save`` archive without Docker: the files of
the image (its layers applied in order, whiteouts honoured), what each layer wrote, the secrets
of every layer (a file a later layer removes is still in its own), and what the image must not
hold (a compiler, pip, the simulator, the tests, a git repository, the build context).

    scan(archive) -> Scan        unwanted(scan.files) -> {what: [paths]}
    config_secrets(scan.config)  secrets in the environment and the recorded build arguments

tests/node/test_image.py reads the image tools/image.py builds with it.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class Entry:
    """One path of the image's filesystem, from the layer that last wrote it."""

    layer: int
    type: str  # file, dir, symlink, hardlink, other
    size: int
    mode: int
    link: str = ""


@dataclass
class Scan:
    config: dict[str, Any]  # the image's config (``config``: User, Entrypoint, Cmd, Labels)
    files: dict[str, Entry]  # the image's filesystem: path (no leading "/") -> entry
    layers: list[str]  # the layers' names in the archive, bottom first
    secrets: list[tuple[int, str, str]] = field(default_factory=list)  # (layer, path, what)
    written: list[dict[str, Entry]] = field(default_factory=list)  # what each layer wrote
    id: str = ""  # the image's id: sha256 of its config, as the engine names it


def _entry_type(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "other"


def apply_layer(files: dict[str, Entry], index: int, members: list[tarfile.TarInfo]) -> None:
    """Lay one layer over ``files`` as a union filesystem does: ``.wh.NAME`` removes NAME (and
    what is below it), ``.wh..wh..opq`` empties its directory of the lower layers' entries."""
    for m in members:
        path = m.name.removeprefix("./").strip("/")
        parent, _, base = path.rpartition("/")
        prefix = f"{parent}/" if parent else ""
        if base == ".wh..wh..opq":
            for p in [p for p in files if p.startswith(prefix) and files[p].layer < index]:
                del files[p]
        elif base.startswith(".wh."):
            gone = prefix + base.removeprefix(".wh.")
            for p in [p for p in files if p == gone or p.startswith(gone + "/")]:
                del files[p]
    for m in members:
        path = m.name.removeprefix("./").strip("/")
        base = path.rpartition("/")[2]
        if path and not base.startswith(".wh."):
            files[path] = Entry(index, _entry_type(m), m.size, m.mode, m.linkname)


# What no layer may hold. A name alone says it for these files:
SECRET_NAMES = re.compile(
    r"(^|/)(id_(rsa|dsa|ecdsa|ed25519)|\.netrc|\.pypirc|\.git-credentials|\.npmrc|"
    r"\.docker/config\.json|\.aws/credentials|\.kube/config|[^/]+\.creds|[^/]+\.nk)$"
)
# and in a file's bytes, these (key material, not the words alone). A shared library or
# program (ELF) is not read: libgnutls carries the private key of its own self-test.
SECRET_CONTENT: tuple[tuple[str, re.Pattern[bytes]], ...] = (
    ("private key", re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40}")),
    ("NATS seed", re.compile(rb"S[UOAN][A-Z2-7]{56}(?![A-Z2-7])")),
    ("AWS access key", re.compile(rb"(AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])")),
    ("GitHub token", re.compile(rb"gh[pousr]_[A-Za-z0-9]{36}")),
    ("PyPI token", re.compile(rb"pypi-AgE[A-Za-z0-9_-]{50}")),
)
# and a password hash among the accounts (a locked account has ! or *)
PASSWORD_FILES = re.compile(r"^etc/g?shadow-?$")
PASSWORD_HASH = re.compile(rb"^[^:\n]+:\$[^:\n]+:", re.M)
CONTENT_LIMIT = 8 << 20  # bytes: larger files (shared libraries) are not read
SECRET_SETTING = re.compile(r"\b\w*(PASSWORD|TOKEN|SECRET|CREDENTIALS?|API_?KEY)\w*=\S", re.I)


def secrets_in(path: str, data: bytes | None) -> list[str]:
    """What in ``path`` (and its bytes, when read) is a secret."""
    found = ["a credentials file by its name"] if SECRET_NAMES.search(path) else []
    if data is not None and not data.startswith(b"\x7fELF"):
        found += [what for what, pattern in SECRET_CONTENT if pattern.search(data)]
        if PASSWORD_FILES.search(path) and PASSWORD_HASH.search(data):
            found.append("a password hash")
    return found


def config_secrets(config: dict[str, Any]) -> list[str]:
    """Secrets in the image's config: an environment variable, or a build argument recorded
    in the history (``|2 NAME=value /bin/sh -c ...``), named like one and set."""
    settings = list(config.get("config", {}).get("Env") or [])
    settings += [h.get("created_by", "") for h in config.get("history", [])]
    return [s for s in settings if SECRET_SETTING.search(s)]


def _outer(archive: Path) -> tuple[bytes, list[str]]:
    with tarfile.open(archive) as tar:
        manifest = json.load(_member(tar, "manifest.json"))[0]
        config = _member(tar, manifest["Config"]).read()
    return config, list(manifest["Layers"])


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    f = tar.extractfile(name)
    if f is None:
        raise ValueError(f"{name} is not a file in the archive")
    return f


def scan(archive: Path) -> Scan:
    """Read a ``docker save`` archive: the config, the image's filesystem, and every secret
    of every layer (a file removed by a later layer is still in its own)."""
    config, names = _outer(archive)
    result = Scan(json.loads(config), {}, names, id=f"sha256:{hashlib.sha256(config).hexdigest()}")
    with tarfile.open(archive) as outer:
        for index, name in enumerate(names):
            with tarfile.open(fileobj=_member(outer, name), mode="r:*") as layer:
                members = []
                for m in layer:
                    members.append(m)
                    path = m.name.removeprefix("./")
                    data = None
                    if m.isreg() and m.size <= CONTENT_LIMIT:
                        f = layer.extractfile(m)
                        data = f.read() if f else None
                    for what in secrets_in(path, data):
                        result.secrets.append((index, path, what))
            apply_layer(result.files, index, members)
            own: dict[str, Entry] = {}
            apply_layer(own, index, members)
            result.written.append(own)
    return result


_COMPILER = re.compile(
    r"(^|/)s?bin/([\w-]+-)?(gcc|g\+\+|cc|c\+\+|cpp|clang|clang\+\+|tcc|as|ld|ld\.(bfd|gold|lld)|rustc|go)"
    r"(-[\d.]+)?$|(^|/)cc1(plus)?$"
)
_PIP = re.compile(
    r"(^|/)(site|dist)-packages/pip(/|-[^/]*\.dist-info(/|$)|$)|(^|/)bin/pip[\d.]*$|"
    r"(^|/)pip-[^/]*\.whl$|(^|/)ensurepip/"
)
_SIMULATOR = re.compile(r"(^|/)(k8s_event_sim|k8s_event_bridge_sim-[^/]*\.dist-info)(/|$)")
_TESTS = re.compile(r"^tests/|(site|dist)-packages/tests/|(^|/)tests/(unit|integration|e2e|node)/")
_CONTEXT = re.compile(r"^src/")  # the build stage's WORKDIR: the checkout
_GIT = re.compile(r"(^|/)\.git(/|$)")


def unwanted(files: dict[str, Entry]) -> dict[str, list[str]]:
    """What the image must not hold, found among its files: a compiler, pip, the simulator,
    the tests, a git repository, the build stage's copy of the checkout."""
    checks = {
        "compiler": _COMPILER,
        "pip": _PIP,
        "simulator": _SIMULATOR,
        "tests": _TESTS,
        "git": _GIT,
        "build context": _CONTEXT,
    }
    out: dict[str, list[str]] = {}
    for what, pattern in checks.items():
        hits = sorted(p for p in files if pattern.search(p))
        if hits:
            out[what] = hits
    return out
