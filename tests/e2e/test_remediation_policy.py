"""The remediation worker's admission policy (deploy/consumers/remediation-policy.yaml) against a
role widened beyond remediation-rbac.yaml, on the real kube-apiserver: an operator who grants
the worker's ServiceAccount more (or an attacker who holds its token where someone did) still
gets only what the worker does. With the shipped RBAC, the shipped policy and a second
RoleBinding granting scale, eviction, ephemeral containers, Pod create and update, workload
delete and ConfigMaps: scale to 0, the eviction of a healthy Pod, an ephemeral container, a Pod
label patch, a Pod's creation, a ConfigMap, a workload's deletion are each refused with the
policy's message, and nothing changed; the worker's genuine delete of a crash-looping Pod (uid
precondition), its annotation of a Deployment and its Event still pass."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from k8s_event_consumer.remediation.kube import Kube, NotFound, Refused
from k8s_event_consumer.remediation.settings import KubernetesSettings
from tests.e2e.test_subscribers import SUGGESTION_KEY, worker_kubeconfig
from tests.integration.harness import eventually
from tests.standins.controlplane import BRIDGE_NAMESPACE, ControlPlane

pytestmark = pytest.mark.e2e

_ns = itertools.count(1)
WORKER = f"system:serviceaccount:{BRIDGE_NAMESPACE}:k8s-event-remediation"
POLICY = "the remediation worker may not"

# what a widened role grants on top of remediation-rbac.yaml
WIDENED = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "k8s-event-remediation-widened"},
    "rules": [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["pods/ephemeralcontainers", "pods/status"],
            "verbs": ["get", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": ["apps"],
            "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
            "verbs": ["get", "list", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale", "statefulsets/scale", "replicasets/scale"],
            "verbs": ["get", "update", "patch"],
        },
    ],
}


def widen(cp: ControlPlane, namespace: str) -> None:
    cp.kubectl("apply", "-f", "-", input=json.dumps(WIDENED))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "k8s-event-remediation-widened", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "k8s-event-remediation-widened",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": "k8s-event-remediation",
                "namespace": BRIDGE_NAMESPACE,
            }
        ],
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(binding))


def crash_loop(cp: ControlPlane, namespace: str, name: str) -> None:
    status = {
        "status": {
            "containerStatuses": [
                {
                    "name": name,
                    "image": "registry.invalid/app:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 5,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                }
            ]
        }
    }
    cp.kubectl(
        "patch", "pod", name, "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip


def get(cp: ControlPlane, what: str, name: str, namespace: str) -> dict[str, Any]:
    out = cp.kubectl("get", what, name, "-n", namespace, "-o", "json").stdout
    result: dict[str, Any] = json.loads(out)
    return result


async def test_a_widened_role_reaches_only_what_the_worker_does(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    ns = f"widened-{next(_ns)}"
    cp.kubectl("create", "namespace", ns)
    kubeconfig = worker_kubeconfig(cp, ns)
    widen(cp, ns)
    for name in ("looping", "healthy"):
        cp.kubectl("run", name, "-n", ns, "--image=registry.invalid/app:1", "--labels=app=shop")
    crash_loop(cp, ns, "looping")
    cp.kubectl("create", "deployment", "web", "-n", ns, "--image=registry.invalid/app:1")
    dep = get(cp, "deployment", "web", ns)
    healthy = get(cp, "pod", "healthy", ns)
    looping_uid = get(cp, "pod", "looping", ns)["metadata"]["uid"]

    def as_worker(*args: str, input: str | None = None) -> str:
        """A kubectl command with the worker's token: refused (its stderr), or "" when it
        went through."""
        proc = cp.kubectl(*args, "-n", ns, input=input, kubeconfig=kubeconfig, check=False)
        return proc.stderr if proc.returncode else ""

    # the policy is in force once the API server has loaded it (and the widened binding)
    async def in_force() -> bool:
        out = as_worker("label", "pod", "healthy", "probe=1", "--dry-run=server")
        return POLICY in out

    await eventually(in_force, timeout=60, interval=0.5, what="the policy in force")

    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "healthy", "namespace": ns},
    }
    container = {"name": "debug", "image": "registry.invalid/tools:1"}
    debug = {"spec": {"ephemeralContainers": [container | {"targetContainerName": "healthy"}]}}
    ephemeral = ["--subresource=ephemeralcontainers", "--type=strategic", "-p", json.dumps(debug)]
    failed = json.dumps({"status": {"phase": "Failed"}})
    eviction_path = f"/api/v1/namespaces/{ns}/pods/healthy/eviction"
    # what, kubectl's arguments, its stdin, the operation and resource the refusal names
    attacks: list[tuple[str, list[str], str | None, str]] = [
        ("scale to 0", ["scale", "deployment", "web", "--replicas=0"], None,
         "UPDATE apps/deployments/scale"),
        ("evict a healthy Pod", ["create", "--raw", eviction_path, "-f", "-"],
         json.dumps(eviction), "CREATE core/pods/eviction"),
        ("an ephemeral container", ["patch", "pod", "healthy", *ephemeral], None,
         "UPDATE core/pods/ephemeralcontainers"),
        ("a Pod label patch", ["label", "pod", "healthy", "app=evil", "--overwrite"], None,
         "UPDATE core/pods"),
        ("a Pod status patch",
         ["patch", "pod", "healthy", "--subresource=status", "--type=merge", "-p", failed],
         None, "UPDATE core/pods/status"),
        ("a new Pod", ["run", "intruder", "--image=registry.invalid/evil:1"], None,
         "CREATE core/pods"),
        ("a ConfigMap", ["create", "configmap", "x", "--from-literal=a=b"], None,
         "CREATE core/configmaps"),
        ("a workload's deletion", ["delete", "deployment", "web"], None,
         "DELETE apps/deployments"),
    ]  # fmt: skip
    for what, args, stdin, expected in attacks:
        out = as_worker(*args, input=stdin)
        assert POLICY in out and expected in out, (what, out)

    # nothing changed
    after = get(cp, "deployment", "web", ns)
    assert after["spec"]["replicas"] == dep["spec"]["replicas"]
    now = get(cp, "pod", "healthy", ns)
    assert now["metadata"]["uid"] == healthy["metadata"]["uid"]
    assert now["metadata"]["labels"] == healthy["metadata"]["labels"]
    assert not now["spec"].get("ephemeralContainers")
    assert cp.kubectl("get", "pod", "intruder", "-n", ns, check=False).returncode != 0
    assert cp.kubectl("get", "configmap", "x", "-n", ns, check=False).returncode != 0

    # the genuine actions, with the worker's own client, still pass
    kube = Kube(KubernetesSettings(cluster="c", kubeconfig=str(kubeconfig), request_timeout=5))
    await kube.connect()
    try:
        with pytest.raises(Refused, match="CrashLoopBackOff"):
            await kube.delete_pod(ns, "healthy", healthy["metadata"]["uid"], dry_run=False)
        await kube.delete_pod(ns, "looping", looping_uid, dry_run=False)
        with pytest.raises(NotFound):
            await kube.get("v1", "Pod", ns, "looping")
        await kube.annotate(
            "apps/v1",
            "Deployment",
            ns,
            "web",
            dep["metadata"]["uid"],
            {SUGGESTION_KEY: "1Gi"},
            False,
        )
        await kube.create_event(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "remediation-record", "namespace": ns},
                "involvedObject": {"kind": "Deployment", "name": "web", "namespace": ns},
                "reason": "RemediationMemorySuggested",
                "message": "suggested",
                "type": "Normal",
                "source": {"component": "k8s-event-remediation"},
            },
        )
    finally:
        await kube.close()
    annotated = get(cp, "deployment", "web", ns)
    assert annotated["metadata"]["annotations"][SUGGESTION_KEY] == "1Gi"
    cp.kubectl("delete", "namespace", ns, "--wait=false")
