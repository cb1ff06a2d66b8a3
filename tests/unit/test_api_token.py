"""The API token of the programs that talk to the API server (the bridge, the remediation
worker), in deploy/, deploy/consumers/ and the chart: a projected token of 10 minutes mounted
where the in-cluster config reads it, not the one Kubernetes mounts by itself (3607 s, which the
API server extends to a year). What is not checked here, the kubelet rotating the file and the
programs going on with the new one, is tests/node/test_deploy.py's.
"""

from __future__ import annotations

import posixpath
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_event_common.kube.lean import incluster_config
from tests.standins import gotools

# the chart's cases run helm: the go-tools tier's, once it is built (a cold run's unit tier
# would otherwise build it inside a test's time limit)
GO_TOOLS = ("helm",)
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "k8s-event-bridge"
MOUNT = posixpath.dirname(incluster_config.SERVICE_TOKEN_FILENAME)
LIFE = 600  # seconds: the API server's minimum (MinTokenAgeSec in k8s.io/kubernetes)
KUBELET_RENEWS_AT = 0.8  # of a projected token's life (the kubelet's token manager)
EXTENDED = 3607  # a token asked for exactly this long is extended to a year by the API server


def _objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _files(*names: str) -> Callable[[], list[dict[str, Any]]]:
    return lambda: [o for n in names for o in _objects((ROOT / "deploy" / n).read_text())]


def _chart() -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            str(gotools.ensure("helm")), "template", "k8s-event-bridge", str(CHART),
            "--namespace", "k8s-event-bridge",
            "--set", "alerting.enabled=true", "--set", "otlp.enabled=true",
            "--set", "digests.enabled=true",
            "--set", "remediation.enabled=true", "--set-json", 'remediation.namespaces=["shop"]',
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return _objects(done.stdout)


SOURCES = [
    pytest.param(_files("deployment.yaml", "serviceaccount.yaml"), "k8s-event-bridge", id="deploy"),
    pytest.param(
        _files("consumers/remediation.yaml", "consumers/remediation-rbac.yaml"),
        "k8s-event-remediation",
        id="consumers-remediation",
    ),
    pytest.param(_chart, "k8s-event-bridge", id="chart-bridge", marks=pytest.mark.processes),
    pytest.param(
        _chart, "k8s-event-bridge-remediation", id="chart-remediation", marks=pytest.mark.processes
    ),
]


def _workload(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    pod: dict[str, Any] = found["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize(("load", "name"), SOURCES)
def test_the_token_is_projected_for_ten_minutes_where_the_in_cluster_config_reads_it(
    load: Callable[[], list[dict[str, Any]]], name: str
) -> None:
    pod = _workload(load(), name)
    assert pod["automountServiceAccountToken"] is False, "Kubernetes' own token would be mounted"
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == MOUNT]
    assert mount.get("readOnly") is True
    assert "subPath" not in mount, "a subPath mount is never updated: the token would not rotate"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    sources = volume["projected"]["sources"]
    files = {}
    for source in sources:
        (kind,) = source
        if kind == "serviceAccountToken":
            token = source[kind]
            # no audience: the API server's own, which it accepts
            assert token == {"path": "token", "expirationSeconds": LIFE}
            files[token["path"]] = kind
        else:
            for item in source[kind]["items"]:
                files[item["path"]] = (kind, source[kind].get("name"), item.get("key"),
                                       item.get("fieldRef", {}).get("fieldPath"))  # fmt: skip
    # the three files kubernetes_asyncio's in-cluster loader and pod_namespace() read
    assert files == {
        posixpath.basename(incluster_config.SERVICE_TOKEN_FILENAME): "serviceAccountToken",
        posixpath.basename(incluster_config.SERVICE_CERT_FILENAME): (
            "configMap", "kube-root-ca.crt", "ca.crt", None,
        ),
        "namespace": ("downwardAPI", None, None, "metadata.namespace"),
    }  # fmt: skip


@pytest.mark.parametrize(("load", "name"), SOURCES)
def test_no_pod_of_the_service_account_gets_the_token_kubernetes_mounts(
    load: Callable[[], list[dict[str, Any]]], name: str
) -> None:
    objects = load()
    account = _workload(objects, name)["serviceAccountName"]
    (sa,) = [
        o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account
    ]
    assert sa["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("load", "kind", "name"),
    [
        pytest.param(
            _files("consumers/alerting.yaml"), "StatefulSet", "k8s-event-alerting",
            id="consumers-alerting",
        ),
        pytest.param(
            _files("consumers/otlp.yaml"), "Deployment", "k8s-event-otlp", id="consumers-otlp"
        ),
        pytest.param(
            _chart, "StatefulSet", "k8s-event-bridge-alerting", id="chart-alerting",
            marks=pytest.mark.processes,
        ),
        pytest.param(
            _chart, "Deployment", "k8s-event-bridge-otlp", id="chart-otlp",
            marks=pytest.mark.processes,
        ),
        pytest.param(
            _files("consumers/digests.yaml"), "StatefulSet", "k8s-event-digests",
            id="consumers-digests",
        ),
        pytest.param(
            _chart, "StatefulSet", "k8s-event-bridge-digests", id="chart-digests",
            marks=pytest.mark.processes,
        ),
    ],
)  # fmt: skip
def test_the_subscribers_without_the_api_get_no_token_at_all(
    load: Callable[[], list[dict[str, Any]]], kind: str, name: str
) -> None:
    """The alerting subscriber talks to NATS and Alertmanager only, the OTLP subscriber to
    NATS and its endpoint only, the digests' program to NATS only."""
    objects = load()
    (workload,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    pod = workload["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    account = pod.get("serviceAccountName")
    if account is not None:  # an account of its own: none of its Pods gets a token either
        (sa,) = [
            o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account
        ]
        assert sa["automountServiceAccountToken"] is False
    assert not [v for v in pod.get("volumes", []) if "projected" in v]
    assert not [m for c in pod["containers"] for m in c.get("volumeMounts", [])
                if m["mountPath"] == MOUNT]  # fmt: skip


def test_the_programs_read_the_new_token_before_the_old_one_expires() -> None:
    """The kubelet writes a new token at 80 % of the old one's life; the in-cluster loader reads
    the file again on the first request a refresh period after its last read. The old token
    must still be good until then."""
    refresh = incluster_config.TOKEN_REFRESH_PERIOD.total_seconds()
    assert KUBELET_RENEWS_AT * LIFE + refresh < LIFE


def test_the_chart_default_is_the_api_servers_minimum_and_not_the_extended_life() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["serviceAccount"]["tokenExpirationSeconds"] == LIFE != EXTENDED
