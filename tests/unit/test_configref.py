"""The configuration reference (tools/configref.py): docs/configuration.md and the config/
examples generated from the settings models, up to date, every key described, each type as a
person reads it, every default written so that it reads back as the same value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_settings import BaseSettings

from bridge import settings as bridge_settings
from k8s_event_consumer import configuring
from tests.config_keys import doc_keys, model_keys, reference_keys
from tools import configref
from tools.configref import ALERTING, BRIDGE, PROGRAMS, REMEDIATION, Program

REPO = Path(__file__).resolve().parents[2]
REGENERATE = f"run `{configref.COMMAND}`"


def test_the_generated_files_are_up_to_date() -> None:
    stale = configref.stale(REPO)
    assert not stale, f"{', '.join(stale)} out of date with the settings models: {REGENERATE}"


@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_the_command_finds_the_repository_up_to_date_whatever_the_hash_seed() -> None:
    """``python -m tools.configref --check`` as CI runs it; another hash seed changes nothing
    (the output is deterministic)."""
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        env = {k: v for k, v in env.items() if not k.startswith(("BRIDGE_", "ALERTING_"))}
        proc = subprocess.run(
            [sys.executable, "-m", "tools.configref", "--check"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr


def test_check_names_each_stale_file_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert configref.main(["--root", str(tmp_path)]) == 0
    assert configref.main(["--check", "--root", str(tmp_path)]) == 0
    capsys.readouterr()
    (tmp_path / "config" / "bridge.yaml").write_text("cluster: {name: null}\n")
    (tmp_path / "docs" / "configuration.md").unlink()

    assert configref.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"config/bridge.yaml is out of date: {REGENERATE}" in err
    assert f"docs/configuration.md is out of date: {REGENERATE}" in err
    assert "remediation.yaml" not in err

    assert configref.main(["--root", str(tmp_path)]) == 0
    assert "wrote config/bridge.yaml" in capsys.readouterr().out
    assert configref.main(["--check", "--root", str(tmp_path)]) == 0


def _required_only(program: Program) -> dict[str, Any]:
    """The smallest config the program takes: each required key with its example."""
    doc: dict[str, Any] = {}
    for section in configref.reference(program.settings).walk():
        for key in section.keys():
            if key.default is None:
                node = doc
                for name in key.path[:-1]:
                    node = node.setdefault(name, {})
                node[key.path[-1]] = yaml.safe_load(key.example or "")
    return doc


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.command)
def test_each_programs_yaml_loads_as_its_defaults_with_every_key(program: Program) -> None:
    """Also the alerting subscriber's, which no file in config/ holds."""
    doc = yaml.safe_load(configref.render_yaml(program))
    loaded = program.settings(**doc)
    assert loaded.model_dump() == program.settings(**_required_only(program)).model_dump()
    assert model_keys(loaded) == doc_keys(doc)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.command)
def test_the_reference_names_every_key_of_each_program(program: Program) -> None:
    markdown = (REPO / configref.DOCS).read_text(encoding="utf-8")
    assert reference_keys(markdown, program.command) == model_keys(
        program.settings(**_required_only(program))
    )


def _key(program: Program, dotted: str) -> configref.Key:
    for section in configref.reference(program.settings).walk():
        for key in section.keys():
            if key.dotted == dotted:
                return key
    raise AssertionError(f"{dotted}: no such key")


@pytest.mark.parametrize(
    ("program", "dotted", "type_"),
    [
        (BRIDGE, "kubernetes.page_size", "integer, 1..10000"),
        (BRIDGE, "kubernetes.initial", "all, new or a duration such as 15m"),
        (BRIDGE, "kubernetes.read_timeout", "duration, > 0"),
        (BRIDGE, "kubernetes.watch_timeout_min", "duration"),
        (BRIDGE, "kubernetes.backoff.factor", "number, >= 1"),
        (BRIDGE, "filter.reasons", "list of strings"),
        (BRIDGE, "filter.types", "list of Normal|Warning"),
        (BRIDGE, "filter.include_deleted", "boolean"),
        (BRIDGE, "nats.max_bytes", "size"),
        (BRIDGE, "nats.max_inflight_bytes", "size, >= 64KiB"),
        (BRIDGE, "nats.password", "secret string, or null"),
        (BRIDGE, "nats.tls.ca_file", "path of an existing file, or null"),
        (BRIDGE, "leader_election.lease_name", "string, 1..253 characters"),
        (BRIDGE, "log.level", "one of debug|info|warning|error (any case)"),
        (ALERTING, "alerts.labels", "map of string to string"),
        (ALERTING, "alerts.recover_window", "duration, or null"),
        (ALERTING, "http.port", "integer, 0..65535, or null"),
        (REMEDIATION, "kubernetes.cluster", "string, not empty"),
        (REMEDIATION, "remediation.memory.factor", "number, > 1, <= 10"),
    ],
)
def test_each_type_reads_as_a_person_reads_it(program: Program, dotted: str, type_: str) -> None:
    assert _key(program, dotted).type == type_


@pytest.mark.parametrize(
    ("program", "dotted", "default", "env"),
    [
        (BRIDGE, "kubernetes.backoff.initial", "800ms", "BRIDGE_KUBERNETES__BACKOFF__INITIAL"),
        (BRIDGE, "nats.max_age", "7d", "BRIDGE_NATS__MAX_AGE"),
        (BRIDGE, "nats.max_inflight_bytes", "4MiB", "BRIDGE_NATS__MAX_INFLIGHT_BYTES"),
        (BRIDGE, "nats.max_bytes", "-1", "BRIDGE_NATS__MAX_BYTES"),
        (BRIDGE, "kubernetes.field_selector", '""', "BRIDGE_KUBERNETES__FIELD_SELECTOR"),
        (BRIDGE, "nats.servers", '["nats://127.0.0.1:4222"]', "BRIDGE_NATS__SERVERS"),
        (BRIDGE, "cluster.name", "null", "BRIDGE_CLUSTER__NAME"),
        (ALERTING, "alertmanager.retry_backoff", "500ms", "ALERTING_ALERTMANAGER__RETRY_BACKOFF"),
        (ALERTING, "nats.durable", "k8s-event-alerting", "ALERTING_NATS__DURABLE"),
        (REMEDIATION, "remediation.rate_limit", "10m", "REMEDIATION_REMEDIATION__RATE_LIMIT"),
        (REMEDIATION, "kubernetes.cluster", None, "REMEDIATION_KUBERNETES__CLUSTER"),
    ],
)
def test_each_default_and_variable_as_written(
    program: Program, dotted: str, default: str | None, env: str
) -> None:
    key = _key(program, dotted)
    assert (key.default, key.env) == (default, env)


def test_a_subclass_that_only_changes_a_default_keeps_its_bases_description() -> None:
    key = _key(ALERTING, "nats.durable")
    assert key.default == "k8s-event-alerting"
    assert "where the subscriber resumes after a restart" in " ".join(key.description.split())


def test_a_secret_is_marked_and_its_default_not_shown() -> None:
    markdown = (REPO / configref.DOCS).read_text(encoding="utf-8")
    rows = [line for line in markdown.splitlines() if line.startswith("| `nats.password` |")]
    assert len(rows) == len(PROGRAMS)
    for row in rows:
        assert row.split(" | ")[1:3] == ["secret string, or null", "—"]


def test_a_required_key_is_marked_in_the_docs_and_has_its_example_in_the_yaml() -> None:
    markdown = (REPO / configref.DOCS).read_text(encoding="utf-8")
    assert "| `kubernetes.cluster` | string, not empty | **required** |" in markdown
    yaml_text = configref.render_yaml(REMEDIATION)
    assert "# REQUIRED (example value); string, not empty;" in yaml_text
    assert yaml.safe_load(yaml_text)["kubernetes"]["cluster"] == "prod-eu-1"


def test_a_list_shows_its_variable_as_json() -> None:
    assert _key(BRIDGE, "filter.reasons").env_value == '["BackOff","OOMKilling"]'
    assert 'BRIDGE_FILTER__REASONS=\'["BackOff","OOMKilling"]\'' in configref.render_yaml(BRIDGE)


# A default is read back as the YAML files hold it: through yaml.safe_load, then the settings.


@given(st.integers(min_value=0, max_value=10**12).map(lambda ms: ms / 1000))
def test_a_duration_of_whole_milliseconds_reads_back_the_same(seconds: float) -> None:
    value = yaml.safe_load(configref.format_duration(seconds))
    assert bridge_settings.parse_duration(value) == seconds
    assert configuring.parse_duration(value) == seconds


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_any_duration_reads_back_the_same(seconds: float) -> None:
    value = yaml.safe_load(configref.format_duration(seconds))
    assert bridge_settings.parse_duration(value) == seconds


@given(st.integers(min_value=1, max_value=2**60) | st.just(-1))
def test_a_size_reads_back_the_same(size: int) -> None:
    assert bridge_settings.parse_size(yaml.safe_load(configref.format_size(size))) == size


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.8, "800ms"), (90, "90s"), (120, "2m"), (7200, "2h"), (7 * 86400, "7d"), (0, "0s")],
)
def test_a_duration_is_written_in_its_largest_whole_unit(seconds: float, text: str) -> None:
    assert configref.format_duration(seconds) == text


# -- what the generator refuses ---------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class _Bare(_Section):
    documented: int = 1
    """Here."""
    bare: int = 2


class _Undescribed(_Section):
    odd: Annotated[float, BeforeValidator(float)] = 1.0
    """A number a validator reads: how does it read?"""


class _Unreadable(_Section):
    pair: tuple[int, int] = (1, 2)
    """A pair."""


class _BareTop(BaseSettings):
    bare: _Bare = _Bare()


class _OddTop(BaseSettings):
    odd: _Undescribed = _Undescribed()


class _PairTop(BaseSettings):
    pair: _Unreadable = _Unreadable()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (_BareTop, r"bare\.bare: no description; write a docstring under the field"),
        (_OddTop, r"odd\.odd: a validator decides what it accepts: .*annotated_types\.doc"),
        (_PairTop, r"pair\.pair: the type tuple\[int, int\] has no reading"),
    ],
)
def test_a_key_the_reference_can_not_describe_is_refused(
    settings: type[BaseSettings], message: str
) -> None:
    with pytest.raises(configref.Undocumented, match=message):
        configref.reference(settings)
