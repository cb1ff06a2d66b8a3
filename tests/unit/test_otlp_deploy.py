"""deploy/consumers/otlp.yaml runs the OTLP subscriber as two replicas of a Deployment on one
durable (JetStream hands each message to one of them), with a PodDisruptionBudget and a
ServiceAccount that mounts no token; its secrets come from a Secret; and the NATS user of
deploy/nats/permissions.json may do exactly what the manifest's config makes it do: its durable,
the two streams' configurations, its dead-letter subject, its inbox."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_event_consumer.otlp import settings
from tools import natsperms

ROOT = Path(__file__).resolve().parents[2]
USER = "k8s-event-otlp"


def manifests() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "deploy/consumers/otlp.yaml").read_text())
    return {d["kind"]: d for d in docs}


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = manifests()["Deployment"]["spec"]["template"]["spec"]
    return spec


def env() -> dict[str, dict[str, Any]]:
    (container,) = pod()["containers"]
    return {e["name"]: e for e in container["env"]}


def pod_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> settings.Settings:
    """The settings a replica runs with: the ConfigMap's file, the env Kubernetes gives (the
    Secret's keys as the Pod would get them)."""
    f = tmp_path / "otlp.yaml"
    f.write_text(manifests()["ConfigMap"]["data"]["otlp.yaml"])
    for name in list(os.environ):
        if name.startswith("OTLP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTLP_NATS__NAME", "k8s-event-otlp-7d9f-abcde")
    monkeypatch.setenv("OTLP_NATS__PASSWORD", "from-the-secret")
    monkeypatch.setenv("OTLP_OTLP__HEADERS", '{"Authorization": "Bearer from-the-secret"}')
    return settings.load(str(f))


def test_two_replicas_of_a_deployment_a_disruption_budget_and_a_service_account() -> None:
    m = manifests()
    assert sorted(m) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "ServiceAccount"]
    deployment, pdb, sa = m["Deployment"], m["PodDisruptionBudget"], m["ServiceAccount"]
    assert deployment["metadata"]["name"] == sa["metadata"]["name"] == USER
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod_labels = spec["template"]["metadata"]["labels"]
    for selector in (spec["selector"]["matchLabels"], pdb["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= pod_labels.items()
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1}
    assert "minAvailable" not in pdb["spec"]
    assert len({d["metadata"]["namespace"] for d in m.values()}) == 1
    assert pod()["serviceAccountName"] == USER


def test_no_kubernetes_api_token_at_all() -> None:
    """It talks to NATS and the OTLP endpoint only: no token mounted, by Kubernetes or by a
    projected volume, on its Pods or on any Pod of its ServiceAccount."""
    assert manifests()["ServiceAccount"]["automountServiceAccountToken"] is False
    p = pod()
    assert p["automountServiceAccountToken"] is False
    assert not [v for v in p["volumes"] if "projected" in v or "secret" in v]


def test_the_container_runs_the_subscriber_locked_down_with_probes() -> None:
    (c,) = pod()["containers"]
    assert c["command"] == ["k8s-event-otlp"]
    assert c["args"] == ["run", "--config", "/etc/k8s-event-otlp/otlp.yaml"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    context = pod()["securityContext"]
    assert context["runAsUser"] == 65532 and context["runAsNonRoot"] is True
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


@pytest.mark.parametrize(
    ("variable", "key"),
    [("OTLP_NATS__PASSWORD", "nats-password"), ("OTLP_OTLP__HEADERS", "otlp-headers")],
)
def test_each_secret_comes_from_the_secret_optional(variable: str, key: str) -> None:
    assert env()[variable] == {
        "name": variable,
        "valueFrom": {"secretKeyRef": {"name": USER, "key": key, "optional": True}},
    }


def test_the_replicas_share_one_durable_and_take_their_secrets_from_the_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No per-Pod durable (unlike the alerting pair): each message goes to one replica. The
    connection is named after the Pod ($(POD_NAME) listed before it); the headers, JSON in the
    Secret, load as the endpoint's headers."""
    names = list(env())
    assert names.index("POD_NAME") < names.index("OTLP_NATS__NAME")
    assert env()["OTLP_NATS__NAME"]["value"] == "$(POD_NAME)"
    assert "OTLP_NATS__DURABLE" not in env()
    cfg = pod_settings(monkeypatch, tmp_path)
    assert cfg.nats.durable == USER
    assert cfg.nats.user == USER
    assert cfg.otlp.headers["Authorization"].get_secret_value() == "Bearer from-the-secret"
    config = yaml.safe_load(manifests()["ConfigMap"]["data"]["otlp.yaml"])
    assert "password" not in config["nats"] and "headers" not in config["otlp"]


def test_the_nats_user_may_do_exactly_what_the_manifests_config_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its durable (info, fetch, ack), the event stream's and the dead-letter stream's
    configurations, its dead-letter subject, its inbox: and nothing that creates, changes or
    deletes a stream or a consumer (the operator provisions both: docs/deploy.md)."""
    cfg = pod_settings(monkeypatch, tmp_path)
    stream, durable = cfg.nats.stream, cfg.nats.durable
    user = natsperms.load()[USER]
    assert sorted(user["publish"]["allow"]) == sorted(
        [
            f"$JS.API.STREAM.INFO.{stream}",
            f"$JS.API.CONSUMER.INFO.{stream}.{durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
            f"$JS.API.STREAM.INFO.{cfg.dead_letter.stream}",
            cfg.dead_letter.subject,
            # deploy/consumers/otlp-digests.yaml: the same user reads the digests' stream
            f"$JS.API.STREAM.INFO.{cfg.nats.digest_stream}",
            f"$JS.API.CONSUMER.INFO.{cfg.nats.digest_stream}.{durable}-digests",
            f"$JS.API.CONSUMER.MSG.NEXT.{cfg.nats.digest_stream}.{durable}-digests",
            f"$JS.ACK.{cfg.nats.digest_stream}.{durable}-digests.>",
        ]
    )
    assert user["subscribe"] == {"allow": [f"{cfg.nats.inbox_prefix}.>"]}
    assert user["allow_responses"] is False
    for subject in user["publish"]["allow"]:
        assert not subject.startswith(f"{cfg.nats.subject_prefix}."), subject
        for verb in ("CREATE", "UPDATE", "DELETE", "PURGE"):
            assert f".{verb}." not in subject, subject
