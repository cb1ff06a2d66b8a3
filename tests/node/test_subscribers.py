"""deploy/consumers/ on a real node, from the same image, next to deploy/'s bridge, as
docs/consumers.md ("Running them") and docs/deploy.md (their NATS users, "Provisioning") say:
``kubectl apply -k`` of an overlay that edits what the base says to edit (``CHANGE ME``: NATS,
Alertmanager, the cluster's name) and nothing else, the durables provisioned with the operator's
credentials, the passwords in the Secrets the manifests name.

- the alerting pair (a StatefulSet of two, each on its own durable, no API token), the
  remediation worker (its RBAC, its ValidatingAdmissionPolicy, its projected token) and the
  digests' pair (a StatefulSet of two, each on the consumer its provision made, no API token)
  get Ready;
- the alerting pair sends the Warnings the cluster wrote (tests/node/installs.py
  ``cluster_events``) to a real Alertmanager on the host, both replicas;
- the worker, with ``dry_run: false`` (the base's own switch, which it says to turn), acts on a
  real workload: it deletes the Pod of the image that crash-loops, and annotates the Deployment
  whose container the kernel OOM-killed under its memory limit, each recorded as an Event, while
  its own token is refused what the policy refuses.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.node.workloads import (
    CONSUMERS,
    CRASH_LOOP,
    NAMESPACE,
    OOM,
    OOM_LIMIT_MIB,
    TOKEN_VOLUME,
    UNSCHEDULABLE,
    Api,
    ClusterEvents,
    Deployed,
    config_of,
    container_status,
    eventually_sync,
    http_get,
    image_parts,
    log_lines,
    metric,
    overlay,
    pods,
    ready,
    secret,
)
from tests.standins.alertmanager import Alertmanager

pytest_plugins = ["tests.node.installs"]

ALERTING = "k8s-event-alerting"
REMEDIATION = "k8s-event-remediation"
DIGESTS = "k8s-event-digests"
ANNOTATION = "remediation.k8s-event-bridge.io/suggested-memory-limit"


@dataclass
class Subscribers:
    node: Any
    deployed: Deployed
    alertmanager: Alertmanager
    overlay: Path

    def alerts(self, *filters: str) -> list[dict[str, Any]]:
        return asyncio.run(self.alertmanager.alerts(filters=filters))

    def alerting_pods(self) -> list[dict[str, Any]]:
        return pods(self.node, NAMESPACE, f"app.kubernetes.io/name={ALERTING}")

    def digests_pods(self) -> list[dict[str, Any]]:
        return pods(self.node, NAMESPACE, f"app.kubernetes.io/name={DIGESTS}")

    def remediation_pod(self) -> dict[str, Any]:
        (pod,) = pods(self.node, NAMESPACE, f"app.kubernetes.io/name={REMEDIATION}")
        return pod


@pytest.fixture(scope="module")
def subscribers(
    node: Any,
    deployed: Deployed,
    cluster_events: ClusterEvents,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Subscribers]:
    """The overlay's edits, each what a comment of the base marks ``CHANGE ME`` or docs say:

    - ``images``: the image the node has (deploy/consumers' kustomization: "set the image like
      deploy/'s");
    - alerting.yaml: ``nats.servers`` (the NATS on the host's address), ``alertmanager.urls``
      (the Alertmanager on the host's address);
    - remediation.yaml: ``nats.servers``; ``kubernetes.cluster`` and ``nats.subjects``: deploy/'s
      ``cluster.name`` (the base names ``prod-eu-1``, deploy/'s config ``my-cluster``: "the
      bridge's cluster.name"); ``remediation.dry_run: false`` (the base: "dry_run is true until
      you set it false here"). Its namespaces stay ``[default]``, as does its RoleBinding, so
      the workloads it acts on run in ``default``;
    - digests.yaml: ``nats.servers``.
    """
    work = tmp_path_factory.mktemp("subscribers")
    nats = deployed.nats
    am = Alertmanager(work / "alertmanager", "http://127.0.0.1:9/", host=node.host)
    asyncio.run(am.start())
    alerting = config_of(CONSUMERS / "alerting.yaml", "ConfigMap", ALERTING, "alerting.yaml")
    alerting["nats"]["servers"] = [nats.url]
    alerting["alertmanager"]["urls"] = [am.url]
    remediation = config_of(
        CONSUMERS / "remediation.yaml", "ConfigMap", REMEDIATION, "remediation.yaml"
    )
    remediation["nats"]["servers"] = [nats.url]
    remediation["kubernetes"]["cluster"] = deployed.cluster
    remediation["nats"]["subjects"] = [f"k8s.events.{deployed.cluster}.*.Pod.>"]
    remediation["remediation"]["dry_run"] = False
    digests = config_of(CONSUMERS / "digests.yaml", "ConfigMap", DIGESTS, "digests.yaml")
    digests["nats"]["servers"] = [nats.url]
    name, tag = image_parts(node.image)
    generated = [
        {"name": n, "namespace": NAMESPACE, "behavior": "replace", "files": [f]}
        for n, f in (
            (ALERTING, "alerting.yaml"),
            (REMEDIATION, "remediation.yaml"),
            (DIGESTS, "digests.yaml"),
        )
    ]
    path = overlay(
        work / "overlay",
        CONSUMERS,
        {
            "images": [
                {"name": "images.example.com/k8s-event-bridge", "newName": name, "newTag": tag}
            ],
            "configMapGenerator": generated,
        },
        {
            "alerting.yaml": yaml.safe_dump(alerting, sort_keys=False),
            "remediation.yaml": yaml.safe_dump(remediation, sort_keys=False),
            "digests.yaml": yaml.safe_dump(digests, sort_keys=False),
        },
    )
    try:
        # provisioning as docs/deploy.md shows it: each durable from the subscriber's config
        for f in ("alerting.yaml", "remediation.yaml", "digests.yaml"):
            (work / f).write_text((path / f).read_text())
        nats.provision_subscriber("k8s_event_consumer.remediation", work / "remediation.yaml")
        for i in (0, 1):
            nats.provision_subscriber(
                "k8s_event_consumer.alerting",
                work / "alerting.yaml",
                env={"ALERTING_NATS__DURABLE": f"{ALERTING}-{i}"},
            )
        for i in (0, 1):  # the digests' stream, and one consumer per replica
            nats.provision_subscriber(
                "k8s_event_consumer.digests",
                work / "digests.yaml",
                env={"DIGESTS_NATS__DURABLE": f"{DIGESTS}-{i}"},
            )
        secret(node, NAMESPACE, ALERTING, nats_password=nats.passwords[ALERTING])
        secret(node, NAMESPACE, DIGESTS, nats_password=nats.passwords[DIGESTS])
        secret(node, NAMESPACE, f"{REMEDIATION}-nats", password=nats.passwords[REMEDIATION])
        node.kubectl("apply", "-k", str(path))
        for what in (f"statefulset/{ALERTING}", f"deploy/{REMEDIATION}", f"statefulset/{DIGESTS}"):
            node.kubectl(
                "-n", NAMESPACE, "rollout", "status", what, "--timeout=240s", timeout=260
            )  # fmt: skip
        yield Subscribers(node, deployed, am, path)
    finally:
        node.kubectl("delete", "-k", str(path), "--ignore-not-found", "--wait=true",
                     timeout=240, check=False)  # fmt: skip
        am.stop()


def test_the_subscribers_run_from_the_bridges_image_and_get_ready(
    subscribers: Subscribers,
) -> None:
    s = subscribers
    alerting = s.alerting_pods()
    assert [p["metadata"]["name"] for p in alerting] == [f"{ALERTING}-0", f"{ALERTING}-1"]
    worker = s.remediation_pod()
    digests = s.digests_pods()
    assert [p["metadata"]["name"] for p in digests] == [f"{DIGESTS}-0", f"{DIGESTS}-1"]
    for p in [*alerting, worker, *digests]:
        assert ready(p), p["metadata"]["name"]
        (c,) = p["spec"]["containers"]
        assert c["image"] == s.node.image
        assert http_get(p, "/readyz")[0] == 200
        assert not [v for v in p["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    for p in [*alerting, *digests]:  # NATS (and Alertmanager) only: no API token at all
        assert not [v for v in p["spec"]["volumes"] if "projected" in v], p["metadata"]["name"]
    (token,) = [
        src["serviceAccountToken"]
        for v in worker["spec"]["volumes"]
        if v["name"] == TOKEN_VOLUME
        for src in v["projected"]["sources"]
        if "serviceAccountToken" in src
    ]
    assert token["expirationSeconds"] == 600
    for durable in (f"{ALERTING}-0", f"{ALERTING}-1", REMEDIATION, f"{DIGESTS}-0", f"{DIGESTS}-1"):
        info = s.deployed.nats.consumer_info(durable)
        assert info.config.durable_name == durable


def test_the_alerting_pair_sends_the_clusters_warnings_to_alertmanager(
    subscribers: Subscribers,
) -> None:
    s = subscribers
    cluster = s.deployed.cluster
    base = ['alertname="KubernetesWarningEvent"', f'cluster="{cluster}"', 'namespace="default"']

    def alerted() -> bool:
        backoff = s.alerts(*base, 'reason="BackOff"', f'name=~"{CRASH_LOOP}-.*"')
        scheduling = s.alerts(*base, 'reason="FailedScheduling"', f'name="{UNSCHEDULABLE}"')
        return bool(backoff and scheduling)

    eventually_sync(alerted, 120, 2, what="BackOff and FailedScheduling alerts in Alertmanager")
    # both replicas sent them (each reads the whole stream through its own durable)
    for p in s.alerting_pods():
        code, text = http_get(p, "/metrics")
        assert code == 200
        sent = metric(text, "k8s_event_alerting_sends_total", result="ok")
        assert sent > 0, (p["metadata"]["name"], sent)


def _as_worker(s: Subscribers, method: str, path: str) -> tuple[int, str]:
    """A request with a token of the worker's ServiceAccount (a TokenRequest, as the kubelet
    makes for its Pod)."""
    token = s.node.kubectl("-n", NAMESPACE, "create", "token", REMEDIATION).strip()
    api = Api(Path(s.node.kubeconfig))
    req = urllib.request.Request(
        f"{api.url}{path}", method=method, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(req, context=api.ssl_context(admin=False), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _records(node: Any, reason: str) -> list[dict[str, Any]]:
    return [e for e in node.events("default") if e["reason"] == reason]


def test_the_worker_deletes_the_crash_looping_pod_under_its_policy(
    subscribers: Subscribers, cluster_events: ClusterEvents
) -> None:
    """The restart rule (``BackOff`` counted 5 times, the container in CrashLoopBackOff with 5
    restarts, the Pod's Deployment proven) deletes the Pod; its Deployment makes a new one."""
    s = subscribers

    def deleted() -> list[dict[str, Any]]:
        return [
            e for e in _records(s.node, "RemediationPodDeleted")
            if e["involvedObject"].get("name", "").startswith(f"{CRASH_LOOP}-")
        ]  # fmt: skip

    (record, *_) = eventually_sync(deleted, 480, 5, what="the crash-looping Pod deleted")
    assert record.get("reportingComponent") == REMEDIATION, record
    # the record is written first, then the Pod deleted (its uid as the precondition)
    uid = record["involvedObject"]["uid"]
    eventually_sync(
        lambda: all(p["metadata"]["uid"] != uid for p in cluster_events.pods_of(CRASH_LOOP)),
        60, 1, what=f"the Pod {uid} gone",
    )  # fmt: skip
    log = s.node.pod_logs(NAMESPACE, s.remediation_pod()["metadata"]["name"])
    acted = [
        line for line in log_lines(log)
        if line.get("event") == "acted" and line.get("action") == "delete_pod"
    ]  # fmt: skip
    assert acted and acted[0]["dry_run"] is False, acted
    # the same identity may not delete a Pod that is not crash-looping: the policy refuses
    code, body = _as_worker(s, "DELETE", f"/api/v1/namespaces/default/pods/{UNSCHEDULABLE}")
    assert code == 403, body
    assert "CrashLoopBackOff" in json.loads(body)["message"], body
    assert s.node.pod("default", UNSCHEDULABLE)["metadata"]["name"] == UNSCHEDULABLE


def test_the_worker_annotates_the_deployment_whose_container_was_oom_killed(
    subscribers: Subscribers, cluster_events: ClusterEvents
) -> None:
    """The kernel kills the container that writes 256 MiB under its limit (a real OOM kill,
    ``OOMKilled`` as the kubelet reports it); the memory rule annotates its Deployment with
    the limit x 1.5."""
    s = subscribers

    def oom_killed() -> bool:
        for p in cluster_events.pods_of(OOM):
            st = container_status(p, OOM)
            for state in (st.get("lastState") or {}, st.get("state") or {}):
                if (state.get("terminated") or {}).get("reason") == "OOMKilled":
                    return True
        return False

    eventually_sync(oom_killed, 120, 2, what="the container OOMKilled, as the kubelet says")
    key = f"{ANNOTATION}.{OOM}"
    want = f"{OOM_LIMIT_MIB * 3 // 2}Mi"

    def annotated() -> str | None:
        meta = s.node.get("deployment", OOM, "-n", "default")["metadata"]
        return (meta.get("annotations") or {}).get(key)

    assert eventually_sync(annotated, 240, 5, what=f"{key} on deployment/{OOM}") == want
    records = [
        e for e in _records(s.node, "RemediationMemorySuggested")
        if e["involvedObject"].get("name", "") == OOM
    ]  # fmt: skip
    assert records, "the record of the suggestion"
