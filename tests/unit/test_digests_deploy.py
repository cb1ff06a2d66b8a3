"""deploy/consumers/digests.yaml runs the digests' program as a StatefulSet of two, each replica
reading the versions stream through a consumer of its own (``k8s-event-digests-<ordinal>``, made
by its ``provision``), with a headless Service, a PodDisruptionBudget and a ServiceAccount that
gets no token; its config is one the program loads; its NATS user may do exactly what that
config uses (and no other user may write digests); and the chart's ``digests.enabled`` makes the
same, whatever the release is called."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_event_consumer import configuring
from k8s_event_consumer.alerting import settings as alerting_settings
from k8s_event_consumer.digests import __main__ as digests_main
from k8s_event_consumer.digests import settings
from k8s_event_consumer.otlp import settings as otlp_settings
from tests.standins import gotools
from tools import natsperms

# the chart's cases run helm: the go-tools tier's, built after collection (tests/conftest.py)
GO_TOOLS = ("helm",)
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "k8s-event-bridge"
USER = "k8s-event-digests"
SUBJECT = "k8s.digests.prod-eu-1.shop.Pod.BackOff"  # a digest's subject


def manifests() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "deploy/consumers/digests.yaml").read_text())
    return {d["kind"]: d for d in docs if d}


def replica_names() -> list[str]:
    sts = manifests()["StatefulSet"]
    return [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]


def env_of(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


def replica_settings(
    text: str, durable: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> settings.Settings:
    """The settings a replica runs with: the ConfigMap's file, and the env Kubernetes gives."""
    f = tmp_path / "digests.yaml"
    f.write_text(text)
    for name in list(os.environ):
        if name.startswith(settings.ENV_PREFIX):
            monkeypatch.delenv(name)
    if durable is not None:
        monkeypatch.setenv("DIGESTS_NATS__DURABLE", durable)
        monkeypatch.setenv("DIGESTS_NATS__NAME", durable)
    return settings.load(str(f))


def config_text() -> str:
    return str(manifests()["ConfigMap"]["data"]["digests.yaml"])


# ----------------------------------------------------------------------------- the manifest


def test_two_replicas_in_a_statefulset_with_its_headless_service_and_a_disruption_budget() -> None:
    m = manifests()
    assert sorted(m) == [
        "ConfigMap", "PodDisruptionBudget", "Service", "ServiceAccount", "StatefulSet",
    ]  # fmt: skip
    sts, svc, pdb = m["StatefulSet"], m["Service"], m["PodDisruptionBudget"]
    spec = sts["spec"]
    assert sts["metadata"]["name"] == "k8s-event-digests"
    assert spec["replicas"] == 2
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == svc["metadata"]["name"] == "k8s-event-digests"
    assert svc["spec"]["clusterIP"] == "None"
    pod_labels = spec["template"]["metadata"]["labels"]
    for selector in (spec["selector"]["matchLabels"], svc["spec"]["selector"],
                     pdb["spec"]["selector"]["matchLabels"]):  # fmt: skip
        assert selector.items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert len({d["metadata"]["namespace"] for d in m.values()}) == 1


def test_it_runs_the_program_with_the_configmaps_file_and_gets_no_token() -> None:
    m = manifests()
    pod = m["StatefulSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["k8s-event-digests"]
    path = container["args"][container["args"].index("--config") + 1]
    assert container["args"][0] == "run"
    [mount] = [v for v in container["volumeMounts"] if v["name"] == "config"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == m["ConfigMap"]["metadata"]["name"]
    assert path == f"{mount['mountPath']}/digests.yaml"
    assert "digests.yaml" in m["ConfigMap"]["data"]
    # NATS only: no API token, on the Pods or the account
    assert pod["serviceAccountName"] == m["ServiceAccount"]["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    assert m["ServiceAccount"]["automountServiceAccountToken"] is False
    assert not [v for v in pod["volumes"] if "projected" in v or "secret" in v]
    # its metrics where the Service and the probes look: the config's http.port
    port = yaml.safe_load(config_text())["http"]["port"]
    assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert m["Service"]["spec"]["ports"][0]["targetPort"] == "http"


def test_each_replicas_consumer_is_named_after_its_ordinal() -> None:
    """k8s-event-digests-<the Pod's index label>: the names its provision makes and the
    permissions allow, the same for the chart's whatever its release is called."""
    env = env_of(manifests()["StatefulSet"])
    assert env["POD_INDEX"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    durable = env["DIGESTS_NATS__DURABLE"]["value"]
    assert durable == "k8s-event-digests-$(POD_INDEX)"
    assert [durable.replace("$(POD_INDEX)", str(i)) for i in (0, 1)] == replica_names()
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["DIGESTS_NATS__NAME"]["value"] == "$(POD_NAME)"
    # Kubernetes expands $(VAR) only from variables listed before it
    names = list(env)
    assert names.index("POD_INDEX") < names.index("DIGESTS_NATS__DURABLE")
    assert names.index("POD_NAME") < names.index("DIGESTS_NATS__NAME")
    # the ConfigMap names no consumer: it would be the same for both
    assert "durable" not in yaml.safe_load(config_text())["nats"]


def test_the_nats_password_comes_from_the_secret_the_manifest_names() -> None:
    env = env_of(manifests()["StatefulSet"])
    assert env["DIGESTS_NATS__PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "k8s-event-digests", "key": "nats-password", "optional": True}
    }
    assert "password" not in yaml.safe_load(config_text())["nats"]


def test_the_config_passes_check_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``k8s-event-digests check-config`` on the ConfigMap's file, as replica 0 runs it."""
    replica_settings(config_text(), None, monkeypatch, tmp_path)  # the env cleared
    monkeypatch.setenv("DIGESTS_NATS__DURABLE", replica_names()[0])
    path = tmp_path / "digests.yaml"
    assert digests_main.main(["check-config", "--config", str(path)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["nats"]["durable"] == replica_names()[0]
    assert shown["nats"]["user"] == USER


@pytest.mark.parametrize("durable", replica_names())
def test_each_replica_loads_the_config_with_its_own_consumer(
    durable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = replica_settings(config_text(), durable, monkeypatch, tmp_path)
    assert cfg.nats.durable == durable
    assert cfg.nats.user == USER
    assert cfg.nats.reads == "events"
    assert (cfg.nats.stream, cfg.nats.digest_stream) == ("K8S_EVENTS", "K8S_DIGESTS")
    assert cfg.nats.digest_prefix == "k8s.digests"
    assert cfg.digests.window == 300.0


# ----------------------------------------------------------------------------- NATS


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` one or more at the end."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def test_the_nats_user_may_do_exactly_what_the_manifests_config_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Publish its digests; the versions stream's info and a message get (the sequence of a
    time); for each consumer it reads through (one per replica, and the default one, for a run
    by hand) its info, a reset (where it reads from) and the next messages; the digests'
    stream's info and a message get (the frontier); its own inbox. No create, update or
    delete of a consumer: provision makes them with an operator's credentials."""
    cfg = replica_settings(config_text(), None, monkeypatch, tmp_path)
    n = cfg.nats
    consumers = [n.durable, *replica_names()]  # the default (no env), then each replica's
    assert n.durable == USER
    expected = {
        f"{n.digest_prefix}.>",
        f"$JS.API.STREAM.INFO.{n.stream}",
        f"$JS.API.STREAM.MSG.GET.{n.stream}",
        f"$JS.API.STREAM.INFO.{n.digest_stream}",
        f"$JS.API.STREAM.MSG.GET.{n.digest_stream}",
        *(
            f"$JS.API.CONSUMER.{verb}.{n.stream}.{name}"
            for name in consumers
            for verb in ("INFO", "RESET", "MSG.NEXT")
        ),
    }
    assert n.user == USER
    user = natsperms.load()[USER]
    assert set(user["publish"]["allow"]) == expected
    assert user["subscribe"] == {"allow": [f"{n.inbox_prefix}.>"]}
    assert user.get("allow_responses", False) is False
    # a missing pod index ("k8s-event-digests-") is no consumer it may read
    assert not [s for s in user["publish"]["allow"] if s.endswith(f"{USER}-")]


def test_no_other_nats_user_may_write_digests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = replica_settings(config_text(), None, monkeypatch, tmp_path)
    subject = f"{cfg.nats.digest_prefix}.prod-eu-1.shop.Pod.BackOff"
    assert subject == SUBJECT
    writers = [
        program
        for program, perms in natsperms.load().items()
        if any(_matches(p, subject) for p in perms["publish"]["allow"])
    ]
    assert writers == [USER]


# ----------------------------------------------------------------------------- the chart


def helm_template(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(gotools.ensure("helm")), "template", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, done.stderr
    return done


def chart(release: str = "k8s-event-bridge", namespace: str = "k8s-event-bridge",
          *sets: str) -> list[dict[str, Any]]:  # fmt: skip
    done = helm_template(release, str(CHART), "--namespace", namespace, *sets)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def named(objects: list[dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects if o["metadata"]["name"] == name}


@pytest.mark.processes
def test_the_chart_makes_no_digests_by_default() -> None:
    names = {o["metadata"]["name"] for o in chart()}
    assert not [n for n in names if "digests" in n]


@pytest.mark.processes
@pytest.mark.parametrize(("release", "namespace"), [("k8s-event-bridge", "k8s-event-bridge"),
                                                    ("other", "ops")])  # fmt: skip
def test_the_chart_makes_the_manifests_objects_with_the_same_consumers(
    release: str, namespace: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``digests.enabled``: the objects of digests.yaml named <fullname>-digests, the same
    consumers per replica whatever the release is called, a config that loads to the
    manifest's settings."""
    objects = chart(release, namespace, "--set", "digests.enabled=true")
    fullname = (
        "k8s-event-bridge" if release == "k8s-event-bridge" else f"{release}-k8s-event-bridge"
    )
    ours = named(objects, f"{fullname}-digests")
    assert sorted(ours) == sorted(manifests())
    sts = ours["StatefulSet"]
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["serviceName"] == ours["Service"]["metadata"]["name"]
    assert ours["Service"]["spec"]["clusterIP"] == "None"
    assert ours["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    pod = sts["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == ours["ServiceAccount"]["metadata"]["name"]
    assert ours["ServiceAccount"]["automountServiceAccountToken"] is False
    env, theirs = env_of(sts), env_of(manifests()["StatefulSet"])
    for name in ("POD_NAME", "POD_INDEX", "DIGESTS_NATS__DURABLE", "DIGESTS_NATS__NAME"):
        assert env[name] == theirs[name], name
    assert list(env).index("POD_INDEX") < list(env).index("DIGESTS_NATS__DURABLE")
    assert env["DIGESTS_NATS__PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{fullname}-digests", "key": "nats-password", "optional": True,
    }  # fmt: skip
    [container] = pod["containers"]
    assert (container["command"], container["args"]) == (
        ["k8s-event-digests"], ["run", "--config", "/etc/k8s-event-digests/digests.yaml"],
    )  # fmt: skip
    labels = sts["spec"]["template"]["metadata"]["labels"]
    bridge = named(objects, fullname)
    assert not bridge["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # the config: the bridge's NATS, no subject filter, and the manifest's settings
    text = ours["ConfigMap"]["data"]["digests.yaml"]
    config = yaml.safe_load(text)
    bridge_config = yaml.safe_load(bridge["ConfigMap"]["data"]["bridge.yaml"])
    assert config["nats"]["servers"] == bridge_config["nats"]["servers"]
    assert "subjects" not in config["nats"] and "durable" not in config["nats"]
    rendered = replica_settings(text, replica_names()[0], monkeypatch, tmp_path)
    shipped = replica_settings(config_text(), replica_names()[0], monkeypatch, tmp_path)
    assert configuring.redacted(rendered) == configuring.redacted(shipped)


@pytest.mark.processes
def test_the_chart_takes_the_bridges_streams_for_the_digests() -> None:
    objects = chart(
        "k8s-event-bridge", "k8s-event-bridge", "--set", "digests.enabled=true",
        "--set", "config.nats.stream=EVENTS_B", "--set", "config.nats.digest_stream=DIGESTS_B",
        "--set", "digests.config.nats.digest_stream=null",
    )  # fmt: skip
    config = yaml.safe_load(
        named(objects, "k8s-event-bridge-digests")["ConfigMap"]["data"]["digests.yaml"]
    )
    assert (config["nats"]["stream"], config["nats"]["digest_stream"]) == ("EVENTS_B", "DIGESTS_B")


@pytest.mark.processes
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["--set", "digests.config.nats.durable=one-for-both"], "names its consumer after its Pod"),
        (["--set", "digests.config.nats.password=x"], "digests.nats.existingSecret"),
        (["--set", "digests.config.digests.windw=5m"], "'windw' not allowed"),
        (["--set", "digests.config.nats.reads=digests"], "/digests/config/nats/reads"),
    ],
    ids=["one-consumer", "plain-password", "misspelt-key", "reads-digests"],
)
def test_a_bad_digests_value_is_refused_naming_it(sets: list[str], message: str) -> None:
    done = helm_template(
        "k8s-event-bridge", str(CHART), "--set", "digests.enabled=true", *sets, check=False
    )
    assert done.returncode != 0, done.stdout
    assert message in done.stderr


@pytest.mark.processes
def test_a_subscriber_reading_digests_in_the_chart_gets_its_digests_durables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``alerting.config.nats.reads: digests``: the digests' durables the permissions name
    (k8s-event-alerting-digests-<ordinal>), no subject filter (the subscriber refuses one),
    one generatorURL on the digests' stream; ``otlp.config.nats.reads: digests`` likewise gets
    no subject filter."""
    objects = chart(
        "k8s-event-bridge", "k8s-event-bridge",
        "--set", "alerting.enabled=true", "--set", "alerting.config.nats.reads=digests",
        "--set", "otlp.enabled=true", "--set", "otlp.config.nats.reads=digests",
        "--set", "otlp.config.nats.durable=k8s-event-otlp-digests",
    )  # fmt: skip
    alerting = named(objects, "k8s-event-bridge-alerting")
    env = env_of(alerting["StatefulSet"])
    assert env["ALERTING_NATS__DURABLE"]["value"] == "k8s-event-alerting-digests-$(POD_INDEX)"
    allowed = set(natsperms.load()["k8s-event-alerting"]["publish"]["allow"])
    for i in (0, 1):
        assert f"$JS.API.CONSUMER.MSG.NEXT.K8S_DIGESTS.k8s-event-alerting-digests-{i}" in allowed
    config = yaml.safe_load(alerting["ConfigMap"]["data"]["alerting.yaml"])
    assert "subjects" not in config["nats"]
    assert config["alerts"]["generator_url"] == "nats://K8S_DIGESTS/k8s-event-bridge-alerting"
    otlp = yaml.safe_load(named(objects, "k8s-event-bridge-otlp")["ConfigMap"]["data"]["otlp.yaml"])
    assert "subjects" not in otlp["nats"]
    # both load in their programs' settings, reading the digests' stream
    for name, load, text, durable in (
        (
            "alerting",
            alerting_settings.load,
            yaml.safe_dump(config),
            "k8s-event-alerting-digests-0",
        ),
        ("otlp", otlp_settings.load, yaml.safe_dump(otlp), "k8s-event-otlp-digests"),
    ):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        monkeypatch.setenv(f"{name.upper()}_NATS__DURABLE", durable)
        cfg = load(str(path))
        assert (cfg.nats.reads, cfg.nats.read_stream) == ("digests", "K8S_DIGESTS")
