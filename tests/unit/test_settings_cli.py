"""Configuration: YAML + environment, and clear errors with exit code 2."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bridge import cli, settings
from bridge.errors import ConfigError
from tests.config_keys import doc_keys, model_keys


def run_cli(*args, env=None):
    import os

    e = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args], capture_output=True, text=True, env=e, timeout=60
    )


@pytest.mark.parametrize(
    ("yaml_text", "env", "names"),
    [
        ("nats: {servers: []}\n", {}, "nats.servers"),
        ("nats: {servers: ['http://x']}\n", {}, "nats.servers"),
        ("filter: {min_count: 0}\n", {}, "filter.min_count"),
        ("filter: {typez: [Warning]}\n", {}, "filter.typez: unknown key"),
        ("filter: {types: [Critical]}\n", {}, "filter.types"),
        ("kubernetes: {initial: sometimes}\n", {}, "kubernetes.initial"),
        ("checkpoint: {interval: soon}\n", {}, "checkpoint.interval"),
        ("cloudevents: {mode: xml}\n", {}, "cloudevents.mode"),
        ("bogus: {}\n", {}, "bogus: unknown key"),
        ("- a list\n", {}, "top level must be a mapping"),
        ("nats: {servers: [\n", {}, "not valid YAML"),
        ("", {"BRIDGE_NATS__ACK_TIMEOUT": "fast"}, "nats.ack_timeout"),
        ("", {"BRIDGE_NAT__SERVERS": '["nats://x:1"]'}, "BRIDGE_NAT__SERVERS"),
        ("", {"BRIDGE_FILTER__REASONS": "BackOff"}, "filter"),
        ("nats: {tls: {cert_file: /c.pem}}\n", {}, "nats.tls"),
        ("nats: {creds_file: /nonexistent.creds}\n", {}, "nats.creds_file"),
        ("nats: {max_age: 1h}\n", {}, "duplicate_window must not be longer than max_age"),
        ("nats: {max_bytes: -7}\n", {}, "nats.max_bytes"),
        ("nats: {password: x}\n", {}, "password needs user"),
        ("checkpoint: {interval: 0s}\n", {}, "checkpoint.interval"),
        ("kubernetes: {backoff: {initial: 1s, max: 100ms}}\n", {}, "kubernetes.backoff"),
        ("cluster: {name: prod.eu}\n", {}, "cluster.name"),
        ("cluster: {name: ''}\n", {}, "cluster.name"),
        ("", {"BRIDGE_KUBERNETES__NAMESPACES": "default"}, "lists from the environment are JSON"),
        # an object label (the tenant writes it) as a routing token, without the opt-in
        (
            "enrich: {object: {labels: {app: app}}}\n"
            "nats: {subject_template: '{cluster}.{namespace}.{app}.{reason}'}\n",
            {},
            "{app} is a value the tenant writes",
        ),
        (
            "enrich: {object: {owner_name: owner}}\n"
            "nats: {subject_template: '{cluster}.{namespace}.{owner}.{reason}'}\n",
            {},
            "enrich.tenant_tokens",
        ),
        ("enrich: {tenant_tokens: [team]}\n", {}, "enrich.tenant_tokens: team"),
        ("enrich: {object: {cluster_namespaces: [Default]}}\n", {}, "cluster_namespaces"),
        # what goes in an API path: refused, not sent (tests/unit/test_kube_paths.py)
        ("kubernetes: {namespaces: ['../kube-system']}\n", {}, "kubernetes.namespaces"),
        ("leader_election: {lease_name: 'a%2Fb'}\n", {}, "leader_election.lease_name"),
        ("leader_election: {namespace: '..'}\n", {}, "leader_election.namespace"),
    ],
)
@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_bad_config_exits_2_and_names_the_key(tmp_path, yaml_text, env, names):
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml_text)
    for command in ("check-config", "run"):
        proc = run_cli(command, "--config", str(path), env=env)
        assert proc.returncode == 2, proc.stderr
        assert names in proc.stderr


@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_missing_config_file_that_was_asked_for_exits_2(tmp_path):
    proc = run_cli("run", "--config", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and "nope.yaml: no such file" in proc.stderr
    proc = run_cli("check-config", env={"BRIDGE_CONFIG_FILE": str(tmp_path / "gone.yaml")})
    assert proc.returncode == 2 and "gone.yaml" in proc.stderr


def test_environment_overrides_the_file(tmp_path, monkeypatch):
    path = tmp_path / "bridge.yaml"
    path.write_text("nats: {stream: FROM_FILE, subject_prefix: a.b}\nfilter: {reasons: [X]}\n")
    monkeypatch.setenv("BRIDGE_NATS__STREAM", "FROM_ENV")
    monkeypatch.setenv("BRIDGE_FILTER__REASONS", '["BackOff","OOMKilling"]')
    s = settings.load(str(path))
    assert s.nats.stream == "FROM_ENV"
    assert s.nats.subject_prefix == "a.b"  # the rest of the section stays
    assert s.filter.reasons == ["BackOff", "OOMKilling"]


def test_config_file_from_environment_variable(tmp_path, monkeypatch):
    path = tmp_path / "b.yaml"
    path.write_text("cluster: {name: from-env-file}\n")
    monkeypatch.setenv("BRIDGE_CONFIG_FILE", str(path))
    assert settings.load().cluster.name == "from-env-file"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        (3, 3.0),
        ("2.5", 2.5),
    ],
)
def test_durations(text, seconds):
    assert settings.parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"), [("64MiB", 64 * 2**20), ("1GB", 10**9), (100, 100), ("-1", -1)]
)
def test_sizes(text, size):
    assert settings.parse_size(text) == size


def test_secrets_never_printed(tmp_path, capsys):
    path = tmp_path / "bridge.yaml"
    path.write_text("nats: {password: hunter2, token: s3cr3t, user: bob}\n")
    assert cli.main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "s3cr3t" not in out
    doc = yaml.safe_load(out)
    assert doc["nats"]["password"] == "***" and doc["nats"]["user"] == "bob"


def test_secret_not_echoed_in_errors(tmp_path):
    path = tmp_path / "bridge.yaml"
    path.write_text("nats: {password: {nested: hunter2}}\n")
    with pytest.raises(ConfigError) as err:
        settings.load(str(path))
    assert "hunter2" not in str(err.value) and "nats.password" in str(err.value)


def test_example_config_documents_every_key():
    """config/bridge.yaml holds every key with its default value."""
    doc = yaml.safe_load(Path(__file__).parents[2].joinpath("config/bridge.yaml").read_text())
    assert settings.Settings(**doc).model_dump() == settings.Settings().model_dump()

    assert model_keys(settings.Settings()) == doc_keys(doc)


def test_log_level_is_case_insensitive(monkeypatch):
    monkeypatch.setenv("BRIDGE_LOG__LEVEL", "INFO")
    assert settings.load().log.level == "info"


REPO = Path(__file__).parents[2]


def _configmap_config() -> str:
    doc = yaml.safe_load(REPO.joinpath("deploy/configmap.yaml").read_text())
    return doc["data"]["bridge.yaml"]


def _helm_values_config() -> str:
    # what templates/configmap.yaml renders: .Values.config plus leader_election written from
    # .Values.leaderElection (lease name "" is the release's full name)
    values = yaml.safe_load(REPO.joinpath("deploy/helm/k8s-event-bridge/values.yaml").read_text())
    le = values["leaderElection"]
    assert "leader_election" not in values["config"]
    config = {
        **values["config"],
        "leader_election": {
            "enabled": le["enabled"],
            "lease_name": le["leaseName"] or "k8s-event-bridge",
            "lease_duration": le["leaseDuration"],
            "renew_deadline": le["renewDeadline"],
            "retry_period": le["retryPeriod"],
        },
    }
    return yaml.safe_dump(config)


@pytest.mark.parametrize("shipped", [_configmap_config, _helm_values_config])
@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_shipped_deploy_config_passes_check_config_with_leader_election(tmp_path, shipped):
    """deploy/ and the chart run two replicas: their config must turn leader election on."""
    path = tmp_path / "bridge.yaml"
    path.write_text(shipped())
    proc = run_cli("check-config", "--config", str(path))
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["leader_election"]["enabled"] is True


def test_version_names_the_installed_package(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"k8s-event-bridge {version('k8s-event-bridge')}\n"


def test_the_demo_left_the_bridge_and_its_command_says_where(capsys):
    from bridge import cli

    assert cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "make demo" in err and "k8s-event-bridge-demo" in err
