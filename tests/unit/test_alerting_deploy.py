"""deploy/consumers/alerting.yaml runs the alerting subscriber as Prometheus runs in HA pairs: a
StatefulSet of two, each replica with a durable of its own (its Pod's name), a headless Service
governing it, a PodDisruptionBudget; the NATS user may use exactly those durables; and both
replicas, configured as the manifest configures them, send the same alerts (Alertmanager keeps
one per label set, and the earliest startsAt)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.core.converting import Converter
from k8s_event_consumer.alerting import settings
from k8s_event_consumer.alerting.alerts import Alert, State, Stored, rfc3339
from k8s_event_consumer.alerting.running import rules
from k8s_event_consumer.events import decode
from tools import natsperms

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def manifests() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "deploy/consumers/alerting.yaml").read_text())
    return {d["kind"]: d for d in docs}


def replica_names() -> list[str]:
    sts = manifests()["StatefulSet"]
    return [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]


def test_two_replicas_in_a_statefulset_with_its_headless_service_and_a_disruption_budget() -> None:
    m = manifests()
    assert sorted(m) == ["ConfigMap", "PodDisruptionBudget", "Service", "StatefulSet"]
    sts, svc, pdb = m["StatefulSet"], m["Service"], m["PodDisruptionBudget"]
    spec = sts["spec"]
    assert sts["metadata"]["name"] == "k8s-event-alerting"
    assert spec["replicas"] == 2
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == svc["metadata"]["name"] == "k8s-event-alerting"
    assert svc["spec"]["clusterIP"] == "None"
    pod_labels = spec["template"]["metadata"]["labels"]
    for selector in (spec["selector"]["matchLabels"], svc["spec"]["selector"],
                     pdb["spec"]["selector"]["matchLabels"]):  # fmt: skip
        assert selector.items() <= pod_labels.items()
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1}
    assert "minAvailable" not in pdb["spec"]  # one of the two, never both
    assert len({d["metadata"]["namespace"] for d in m.values()}) == 1


def test_each_replicas_durable_is_named_after_its_ordinal() -> None:
    """k8s-event-alerting-<the Pod's index label>: the same names as the Pods of deploy/'s
    StatefulSet, and the same for the chart's, whatever its release is called."""
    [container] = manifests()["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    env = [e["name"] for e in container["env"]]
    by_name = {e["name"]: e for e in container["env"]}
    assert by_name["POD_INDEX"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    durable = by_name["ALERTING_NATS__DURABLE"]["value"]
    assert durable == "k8s-event-alerting-$(POD_INDEX)"
    assert [durable.replace("$(POD_INDEX)", str(i)) for i in (0, 1)] == replica_names()
    assert by_name["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert by_name["ALERTING_NATS__NAME"]["value"] == "$(POD_NAME)"
    # Kubernetes expands $(VAR) only from variables listed before it
    assert env.index("POD_INDEX") < env.index("ALERTING_NATS__DURABLE")
    assert env.index("POD_NAME") < env.index("ALERTING_NATS__NAME")


def test_a_missing_pod_index_is_refused_not_a_shared_durable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a cluster without the index label $(POD_INDEX) is empty: both replicas would share
    k8s-event-alerting-, each seeing half of the messages. The subscriber refuses it."""
    from k8s_event_consumer.configuring import ConfigError

    with pytest.raises(ConfigError, match="pod-index"):
        replica_settings("k8s-event-alerting-", monkeypatch, tmp_path)
    # the ConfigMap names no durable of its own: it would be the same for both
    config = yaml.safe_load(manifests()["ConfigMap"]["data"]["alerting.yaml"])
    assert "durable" not in config["nats"]


def replica_settings(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The settings a replica runs with: the ConfigMap's file, and the env Kubernetes gives."""
    f = tmp_path / "alerting.yaml"
    f.write_text(manifests()["ConfigMap"]["data"]["alerting.yaml"])
    monkeypatch.setenv("ALERTING_NATS__DURABLE", name)
    monkeypatch.setenv("ALERTING_NATS__NAME", name)
    return settings.load(str(f))


def outage(state: State) -> list[Alert]:
    conv = Converter("prod-eu-1", "k8s.events", "structured")
    out: list[Alert] = []
    for seq, (what, at) in enumerate(
        [("apiserver_unreachable", T0), ("apiserver_reachable", T0 + timedelta(minutes=3))], 1
    ):
        msg = conv.status(what, f"{what}/{seq}", {"scope": "*", "at": rfc3339(at)}, rfc3339(at))
        s = decode(msg.subject, msg.headers, msg.payload).status
        stored = Stored(seq, at + timedelta(milliseconds=seq))
        out += state.unreachable(s, stored) if seq == 1 else state.reachable(s, stored)  # type: ignore[arg-type]
    return out


def test_both_replicas_send_the_same_alerts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No label, annotation, start or generatorURL of a replica's own: Alertmanager holds
    one alert, and a restarted replica takes back (by generatorURL) what the other sent."""
    sent = []
    for i, name in enumerate(replica_names()):
        cfg = replica_settings(name, monkeypatch, tmp_path)
        assert cfg.nats.durable == name
        clock = T0 + timedelta(minutes=5 + 30 * i)  # each reads at its own time
        sent.append(outage(State(rules(cfg), lambda c=clock: c)))
    assert len(sent) == 2 and sent[0] == sent[1]
    assert sent[0][0].generator_url == "nats://K8S_EVENTS/k8s-event-alerting"
    assert sent[0][1].ends_at == T0 + timedelta(minutes=3)


def alerting_permissions() -> set[str]:
    user = natsperms.load()["k8s-event-alerting"]
    return set(user["publish"]["allow"])


@pytest.mark.parametrize("durable", ["k8s-event-alerting", *replica_names()])
def test_the_nats_user_may_use_each_replicas_durable_and_its_read_back(durable: str) -> None:
    """NATS wildcards match whole tokens: ``k8s-event-alerting.>`` is not
    ``k8s-event-alerting-0``, so each durable is named (and the default one, which a config
    without the StatefulSet's env still uses). The read-back at start gets messages one by one
    (no consumer); no consumer may be created: the durables are provisioned (docs/deploy.md),
    and a create subject would let its holder make a push consumer delivering into any inbox."""
    allowed = alerting_permissions()
    assert {
        f"$JS.API.CONSUMER.INFO.K8S_EVENTS.{durable}",
        f"$JS.API.CONSUMER.MSG.NEXT.K8S_EVENTS.{durable}",
        f"$JS.ACK.K8S_EVENTS.{durable}.>",
        "$JS.API.STREAM.MSG.GET.K8S_EVENTS",
    } <= allowed
    assert not [s for s in allowed if ".CREATE." in s or ".UPDATE." in s]


def test_the_nats_user_may_use_no_other_consumer() -> None:
    """Least privilege still: every consumer subject names one of these durables."""
    names = {"k8s-event-alerting", *replica_names()}
    # deploy/consumers/alerting-digests.yaml: the same user, its durables on the digests
    names |= {"k8s-event-alerting-digests", "k8s-event-alerting-digests-0",
              "k8s-event-alerting-digests-1"}  # fmt: skip
    for subject in alerting_permissions():
        if subject.startswith(("$JS.API.CONSUMER.", "$JS.ACK.")):
            consumer = subject.removesuffix(".>").split(".")[-1]
            assert consumer in names, subject
