"""The Helm chart installed on a real node with the ``helm install`` commands docs/deploy.md and the
README show, their values as written, only the image and the NATS address added
(tests/node/workloads.py ``as_run_here``); the NATS side as docs/deploy.md sets it up (the shipped
permissions, the stream provisioned by ``k8s-event-bridge provision``, the password in
``<fullname>-nats``). Each release gets a NATS server of its own.

One change more than the docs': the release's name and namespace (``docs`` and ``readme``, each
in its own namespace). The chart names its objects after the release, so that is the user's
choice; the docs' own name, ``k8s-event-bridge`` in ``k8s-event-bridge``, is deploy/'s, which
tests/node/test_deploy.py runs in the same cluster at the same time (its ClusterRole, its
namespace: two installs cannot share them). docs/deploy.md's release stays for the session:
tests/node/test_token.py checks it last, once its first token has expired.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.node.workloads import (
    CRDS,
    REPO,
    TOKEN_VOLUME,
    Release,
    container_status,
    eventually_sync,
    http_get,
    install,
    ready,
    uninstall,
)

pytest_plugins = ["tests.node.installs"]

CRD_NAMES = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


def assert_runs_and_publishes(release: Release) -> None:
    """Both replicas Ready through their probes, one leads, the Events the cluster wrote about
    the release's own Pods (the kubelet's ``Started``) and the leader's ``leader_changed`` are
    in the release's stream, under its cluster's name."""
    pods = release.pods()
    assert len(pods) == 2 and all(ready(p) for p in pods), [p["status"] for p in pods]
    names = {p["metadata"]["name"] for p in pods}
    leader = eventually_sync(release.holder, 60, 0.5, what="a replica holds the Lease")
    assert leader in names
    roles = {p["metadata"]["name"]: _role(p) for p in pods}
    assert sorted(roles.values()) == ["leader", "standby"], roles
    assert roles[leader] == "leader"

    def published() -> bool:
        subjects = {s for s, _, _ in release.nats.messages(f"k8s.events.{release.cluster}.>")}
        started = {
            f"k8s.events.{release.cluster}.{release.namespace}.Pod.Started",
            f"k8s.events.{release.cluster}._bridge.leader_changed",
        }
        return started <= subjects

    eventually_sync(published, 90, 1, what="the release's Events and leader_changed published")
    changed = release.nats.status_events(release.cluster, "leader_changed")
    assert leader in {c["identity"] for c in changed}


def _role(pod: dict[str, Any]) -> str:
    import json

    status, body = http_get(pod, "/status")
    assert status == 200, body
    return str(json.loads(body)["role"])


def assert_projected_token(release: Release) -> None:
    """The Pods run with the chart's 10-minute token, not Kubernetes' own (kube-api-access-*)."""
    for p in release.pods():
        vols = {v["name"]: v for v in p["spec"]["volumes"]}
        assert not [n for n in vols if n.startswith(TOKEN_VOLUME + "-")], sorted(vols)
        (token,) = [
            s["serviceAccountToken"]
            for s in vols[TOKEN_VOLUME]["projected"]["sources"]
            if "serviceAccountToken" in s
        ]
        assert token["expirationSeconds"] == 600
        assert container_status(p, "bridge")["restartCount"] == 0


def test_the_chart_installed_as_docs_deploy_md_says_runs_and_publishes(
    chart_release: Release,
) -> None:
    assert "--create-namespace" in chart_release.argv
    assert_runs_and_publishes(chart_release)
    assert_projected_token(chart_release)


def established(node: Any, crd: str) -> bool:
    status: str = node.kubectl(
        "get", f"crd/{crd}", "-o",
        'jsonpath={.status.conditions[?(@.type=="Established")].status}',
        check=False,
    )  # fmt: skip
    return status.strip() == "True"


def test_the_chart_installed_as_the_readme_says_runs_and_publishes(
    node: Any, tmp_path: Path
) -> None:
    """The README's command turns on the ServiceMonitor and the PrometheusRule, which need the
    Prometheus Operator's CRDs (the README says so): installed first, as a cluster with the
    operator has them, and removed after."""
    node.kubectl("apply", "--server-side", "-f", str(CRDS))
    try:
        for crd in CRD_NAMES:
            # polled, not `kubectl wait`: that one fails at once on a CRD whose status has no
            # conditions yet (".status.conditions accessor error"), as one just created has
            eventually_sync(lambda crd=crd: established(node, crd), 120, what=f"{crd} established")
        release = install(node, tmp_path, REPO / "README.md", "readme")
        try:
            assert "serviceMonitor.enabled=true" in release.argv
            assert_runs_and_publishes(release)
            for kind in ("servicemonitor", "prometheusrule"):
                node.kubectl("-n", release.namespace, "get", f"{kind}/{release.fullname}")
        finally:
            uninstall(node, release.name, release.namespace, release.nats)
    finally:
        node.kubectl("delete", "-f", str(CRDS), "--ignore-not-found", check=False)
