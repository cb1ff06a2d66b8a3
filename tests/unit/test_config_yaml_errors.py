"""A configuration file that is not valid YAML, with a password on the broken line: each
program's real command line exits 2 saying where (file, line, column) and what is wrong, and
never the line's text. PyYAML's own message quotes the line under a caret (and an alias, anchor
or tag name in its words): that is what an attacker reading the logs of a failed rollout got."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k8s_event_common.configuring import ConfigError, read_yaml, yaml_problem

SECRET = "Sentinel-Yaml-Pw-6b0e"

# each breaks YAML on the line holding the secret, in a different part of PyYAML
BROKEN = {
    "mapping-value": f"nats:\n  user: svc\n  password: {SECRET}: 9f1\n",
    "open-quote": f'nats:\n  user: svc\n  password: "{SECRET}\n  token: x\n',
    "undefined-alias": f"nats:\n  user: svc\n  password: *{SECRET}\n",
    "unknown-tag": f"nats:\n  user: svc\n  password: !{SECRET} x\n",
    "tab-indent": f"nats:\n  user: svc\n\tpassword: {SECRET}\n",
    "bad-escape": f'nats:\n  user: svc\n  password: "{SECRET}\\q"\n',
}
WHERE = {
    "mapping-value": "line 3",
    "open-quote": "line 3",
    "undefined-alias": "line 3",
    "unknown-tag": "line 3",
    "tab-indent": "line 3",
    "bad-escape": "line 3",
}
PROGRAMS = (
    "k8s-event-bridge",
    "k8s-event-alerting",
    "k8s-event-remediation",
    "k8s-event-otlp",
    "k8s-event-digests",
)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_yaml_error_says_where_and_what_never_the_text(tmp_path: Path, case: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BROKEN[case])
    with pytest.raises(yaml.YAMLError) as raw:
        yaml.safe_load(BROKEN[case])
    assert SECRET[:12] in str(raw.value) or case == "bad-escape"  # what PyYAML would print
    with pytest.raises(ConfigError) as caught:
        read_yaml(str(path))
    text = str(caught.value)
    assert SECRET[:8] not in text, text
    assert str(path) in text and WHERE[case] in text and "column" in text, text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: [1, 2\nb: 3\n", "expected ',' or ']', but got ':' at line 2, column 2"),
        ("a: b\n- c\n", "expected <block end>, but found '-' at line 2, column 1"),
        ('a: "x\\q"\n', "found unknown escape character 'q' at line 1, column 7"),
        ("a: *longer_alias\n", "found undefined alias '...' at line 1, column 4"),
    ],
)
def test_what_is_wrong_keeps_punctuation_and_hides_names(text: str, said: str) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load(text)
    assert said in yaml_problem(caught.value)


def test_a_file_that_is_not_utf8_is_said_without_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"nats:\n  password: " + SECRET.encode() + b"\xff\n")
    with pytest.raises(ConfigError, match="not UTF-8") as caught:
        read_yaml(str(path))
    assert SECRET[:8] not in str(caught.value)


@pytest.mark.processes  # runs the four programs (tests/unit/conftest.py)
@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_each_program_exits_2_without_the_line(tmp_path: Path, program: str, command: str) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BRIDGE_", "ALERTING_", "REMEDIATION_", "OTLP_"))
    }
    exe = Path(sys.executable).parent / program
    for case, text in BROKEN.items():
        path = tmp_path / f"{case}.yaml"
        path.write_text(text)
        done = subprocess.run(
            [str(exe), command, "--config", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 2, (case, out)
        assert SECRET[:8] not in out, (case, out)
        assert str(path) in out and WHERE[case] in out, (case, out)
