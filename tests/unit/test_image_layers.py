"""tools/imagelayers.py, on archives made here as ``docker save`` writes them: the layers
applied with their whiteouts, what must not be in an image, what is a secret (by name, by
content, in the config)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from tools.imagelayers import Entry, apply_layer, config_secrets, scan, secrets_in, unwanted


def _member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info


def _layer(paths: list[str]) -> list[tarfile.TarInfo]:
    return [_member(p.rstrip("/"), tarfile.DIRTYPE if p.endswith("/") else tarfile.REGTYPE)
            for p in paths]  # fmt: skip


def test_a_layer_s_whiteouts_remove_what_lower_layers_wrote() -> None:
    files: dict[str, Entry] = {}
    lower = ["usr/", "usr/bin/", "usr/bin/pip", "usr/lib/", "usr/lib/a/", "usr/lib/a/x",
             "etc/", "etc/keep", "etc/old/", "etc/old/y"]  # fmt: skip
    apply_layer(files, 0, _layer(lower))
    apply_layer(
        files,
        1,
        _layer(["usr/bin/.wh.pip", "usr/lib/.wh.a", "etc/old/", "etc/old/.wh..wh..opq",
                "etc/old/z", "./opt/venv/"]),
    )  # fmt: skip
    assert sorted(files) == [
        "etc", "etc/keep", "etc/old", "etc/old/z", "opt/venv", "usr", "usr/bin", "usr/lib"
    ]  # fmt: skip
    assert files["etc/old/z"].layer == 1 and files["etc/keep"].layer == 0
    assert files["opt/venv"].type == "dir"


def test_a_path_written_again_above_a_whiteout_stays() -> None:
    files: dict[str, Entry] = {}
    apply_layer(files, 0, _layer(["bin/tool"]))
    apply_layer(files, 1, _layer(["bin/.wh.tool", "bin/tool"]))
    assert files["bin/tool"].layer == 1


@pytest.mark.parametrize(
    ("path", "what"),
    [
        ("usr/bin/gcc", "compiler"),
        ("usr/bin/x86_64-linux-gnu-gcc-12", "compiler"),
        ("usr/bin/cc", "compiler"),
        ("usr/bin/c++", "compiler"),
        ("usr/lib/gcc/x86_64-linux-gnu/12/cc1", "compiler"),
        ("usr/bin/ld.gold", "compiler"),
        ("usr/local/bin/pip3.11", "pip"),
        ("usr/local/lib/python3.11/site-packages/pip/__init__.py", "pip"),
        ("usr/local/lib/python3.11/site-packages/pip-24.0.dist-info/RECORD", "pip"),
        ("usr/share/python-wheels/pip-23.0.1-py3-none-any.whl", "pip"),
        ("usr/lib/python3.11/ensurepip/__init__.py", "pip"),
        ("opt/venv/lib/python3.11/site-packages/k8s_event_sim/apiserver.py", "simulator"),
        ("opt/venv/lib/python3.11/site-packages/k8s_event_bridge_sim-0.1.0.dist-info/METADATA",
         "simulator"),
        ("opt/venv/lib/python3.11/site-packages/tests/conftest.py", "tests"),
        ("tests/unit/test_x.py", "tests"),
        ("opt/app/tests/e2e/conftest.py", "tests"),
        ("opt/app/.git/HEAD", "git"),
        ("src/pyproject.toml", "build context"),
    ],
)  # fmt: skip
def test_what_must_not_be_in_the_image_is_found(path: str, what: str) -> None:
    assert unwanted({path: Entry(0, "file", 1, 0o644)}) == {what: [path]}


@pytest.mark.parametrize(
    "path",
    [
        "usr/bin/ld.so",  # the dynamic loader, not a linker
        "usr/bin/python3.11",
        "usr/bin/perl",
        "opt/venv/bin/k8s-event-bridge",
        "opt/venv/lib/python3.11/site-packages/pydantic/v1/config.py",
        "opt/venv/lib/python3.11/site-packages/bridge/core/pipeline.py",
        "usr/lib/python3.11/venv/__init__.py",
        "usr/share/doc/libgcc-s1/copyright",
    ],
)
def test_what_belongs_in_the_image_is_not_found(path: str) -> None:
    assert unwanted({path: Entry(0, "file", 1, 0o644)}) == {}


_KEY = b"-----BEGIN OPENSSH PRIVATE KEY-----\n" + b"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" * 2
_SEED = b"SUAM" + b"A" * 54


@pytest.mark.parametrize(
    ("path", "data", "expected"),
    [
        ("root/.ssh/id_ed25519", None, ["a credentials file by its name"]),
        ("home/x/.netrc", b"", ["a credentials file by its name"]),
        ("etc/nats/bridge.creds", b"", ["a credentials file by its name"]),
        ("root/.docker/config.json", b"{}", ["a credentials file by its name"]),
        ("src/key.pem", _KEY, ["private key"]),
        ("opt/app/seed.txt", b"seed: " + _SEED + b"\n", ["NATS seed"]),
        ("opt/app/env", b"AWS=AKIAABCDEFGHIJKLMNOP\n", ["AWS access key"]),
        ("opt/app/env", b"t=ghp_" + b"a1" * 18, ["GitHub token"]),
        ("root/.config/x", b"pypi-AgE" + b"x" * 60, ["PyPI token"]),
        ("etc/shadow", b"root:$y$j9T$abc$def:19000:0:99999:7:::\n", ["a password hash"]),
        # not secrets: locked accounts, the words alone, a key inside a shared library
        ("etc/shadow", b"root:*:19000:0:99999:7:::\nnonroot:!:19000::::::\n", []),
        ("opt/venv/lib/credentials.py", b'"-----BEGIN NATS USER JWT-----" password=', []),
        ("usr/lib/libgnutls.so.30", b"\x7fELF\x02\x01" + _KEY, []),
    ],
)
def test_secrets_are_found_by_name_and_by_content(
    path: str, data: bytes | None, expected: list[str]
) -> None:
    assert secrets_in(path, data) == expected


def test_secrets_in_the_config_are_found_in_env_and_in_build_arguments() -> None:
    config = {
        "config": {"Env": ["PATH=/usr/bin", "NATS_PASSWORD=hunter2", "EMPTY_TOKEN="]},
        "history": [
            {"created_by": "ARG VERSION=0.1.0"},
            {"created_by": "RUN |2 VERSION=0.1.0 GITHUB_TOKEN=abc /bin/sh -c make"},
        ],
    }
    assert config_secrets(config) == [
        "NATS_PASSWORD=hunter2",
        "RUN |2 VERSION=0.1.0 GITHUB_TOKEN=abc /bin/sh -c make",
    ]


def _tar(entries: dict[str, bytes | None]) -> bytes:
    """A tar of files (bytes) and directories (None), in order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in entries.items():
            info = _member(name, tarfile.DIRTYPE if data is None else tarfile.REGTYPE,
                           len(data or b""))  # fmt: skip
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def test_an_archive_is_read_as_docker_save_writes_it(tmp_path: Path) -> None:
    """manifest.json names the config and the layers, bottom first; a secret removed by a
    later layer is still found in its own."""
    layers = {
        "a/layer.tar": _tar({"usr/": None, "usr/bin/": None, "usr/bin/pip": b"#!",
                             "root/": None, "root/.netrc": b"machine x"}),
        "b/layer.tar": _tar({"usr/bin/.wh.pip": b"", "root/.wh..netrc": b"",
                             "opt/": None, "opt/venv/": None, "opt/venv/app.py": b"print()"}),
    }  # fmt: skip
    config = {"config": {"User": "65532:65532", "Env": []}, "history": []}
    outer = {
        "manifest.json": json.dumps(
            [{"Config": "c.json", "RepoTags": ["x:t"], "Layers": list(layers)}]
        ).encode(),
        "c.json": json.dumps(config).encode(),
        **layers,
    }
    archive = tmp_path / "x.tar"
    archive.write_bytes(_tar(outer))
    result = scan(archive)
    assert result.config == config
    assert result.layers == list(layers)
    assert sorted(result.files) == ["opt", "opt/venv", "opt/venv/app.py", "root", "usr", "usr/bin"]
    assert result.secrets == [(0, "root/.netrc", "a credentials file by its name")]
    assert "pip" in unwanted(result.written[0]) and unwanted(result.files) == {}
