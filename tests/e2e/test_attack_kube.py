"""Issue 31, the Kubernetes half, attacked again (an independent attacker's variations), on a
real kube-apiserver with the shipped RBAC and admission policy, a real nats-server, the bridge
and the remediation worker as real processes.

- A tenant Pod that names a real ReplicaSet of another team's Deployment (its real uid) and
  copies its labels, ``pod-template-hash`` too: the ReplicaSet's selector selects it and
  Kubernetes' own ReplicaSet controller would count it one of its replicas, so the owner walk
  proves Pod → ReplicaSet → Deployment. The Pod runs what the tenant wrote, not the template:
  OOMKilled with its own 4Mi limit it must not make the worker suggest 6Mi on the Deployment
  (``pod_not_as_template``), nor with the template's limit in its own image, nor through a
  ReplicaSet of its own that the Deployment's selector claims (its template is the tenant's:
  the Pod is compared with the top owner's template); a Pod that does run the template's
  container still gets its suggestion.
- The admission policy's claim "everything else is refused": Kubernetes exempts the admission
  configuration itself from admission policies, so a role widened to it could remove the
  policy; the docs say so (never grant it), and this shows what they say.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from k8s_event_consumer.remediation.rules import annotation_key, suggest
from k8s_event_consumer.remediation.settings import MemorySettings
from tests.e2e.test_enrichment import grant_enrichment
from tests.e2e.test_owners import (
    about,
    apply,
    bridge,
    container,
    deployment,
    event,
    get,
    pod,
    replicaset,
    set_status,
)
from tests.e2e.test_subscribers import metric, remediation_config, worker_kubeconfig
from tests.e2e.truth import stream_events
from tests.integration.harness import ConsumerProcess, eventually
from tests.standins.controlplane import BRIDGE_NAMESPACE, ControlPlane

pytestmark = pytest.mark.e2e

_n = itertools.count(1)


@pytest.mark.timeout(300)
async def test_a_tenant_pod_in_a_real_replicaset_gets_no_suggestion_onto_its_deployment(
    control_plane: ControlPlane, nats_server: Any, tmp_path: Path
) -> None:
    cp = control_plane
    ns = f"atk-kube-{next(_n)}"
    cp.kubectl("create", "namespace", ns)
    worker_cfg = worker_kubeconfig(cp, ns)
    payments = deployment(cp, ns, "payments-api", [container("app", "256Mi")])
    rs = replicaset(cp, ns, payments, "7c9d4")
    labels = rs["metadata"]["labels"]  # app and pod-template-hash, copied
    rs_ref = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": rs["metadata"]["name"],
        "uid": rs["metadata"]["uid"],
        "controller": True,
    }
    other_image = {**container("app", "256Mi"), "image": "registry.invalid/tenant:6"}
    # a ReplicaSet of the tenant's own, its template the tenant's, claimed by payments-api (its
    # selector selects the ReplicaSet's labels): its Pod matches its template, not the
    # Deployment's
    own = {**payments, "spec": {**payments["spec"]}}
    own["spec"]["template"] = {
        "metadata": {"labels": {"app": "payments-api"}},
        "spec": {"containers": [container()]},
    }
    tenant_rs = replicaset(cp, ns, own, "evil1")
    tenant_rs_ref = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": tenant_rs["metadata"]["name"],
        "uid": tenant_rs["metadata"]["uid"],
        "controller": True,
    }
    pods = {
        # the tenant's: its own limit; the template's limit but its own image
        "tenant-limit": pod(cp, ns, "payments-api-7c9d4-t1", labels, rs_ref, [container()]),
        "tenant-image": pod(cp, ns, "payments-api-7c9d4-t2", labels, rs_ref, [other_image]),
        "tenant-rs": pod(
            cp,
            ns,
            "payments-api-evil1-t3",
            tenant_rs["metadata"]["labels"],
            tenant_rs_ref,
            [container()],
        ),
        # the genuine one: what the ReplicaSet's template says
        "genuine": pod(cp, ns, "payments-api-7c9d4-g", labels, rs_ref, [container("app", "256Mi")]),
    }
    for p in pods.values():
        set_status(cp, ns, p["metadata"]["name"], ["app"], oom=True)
    br = bridge(
        cp, tmp_path, nats_server.url, cp.deployed_bridge_kubeconfig(), filter={"namespaces": [ns]}
    )
    worker = ConsumerProcess(
        remediation_config(tmp_path, nats_server.url, worker_cfg), tmp_path / "remediation.log"
    )
    try:
        await br.wait_ready(timeout=60)
        worker.start()
        await worker.wait_ready(timeout=60)
        for name in ("tenant-limit", "tenant-image", "tenant-rs"):
            event(cp, ns, "OOMKilling", about(pods[name]))

        def refused() -> list[dict[str, Any]]:
            return [u for u in worker.log_events("untrusted") if u["why"] == "pod_not_as_template"]

        async def judged() -> bool:
            assert worker.running(), worker.logs()[-3000:]
            return len(refused()) >= 3 or bool(worker.log_events("acted"))

        await eventually(judged, timeout=120, interval=0.5)
        # the attack: nothing written onto payments-api
        after = get(cp, "deployment", "payments-api", ns)["metadata"].get("annotations") or {}
        assert not [k for k in after if k.startswith("remediation.")], after
        assert not worker.log_events("acted")
        details = " ".join(u["detail"] for u in refused())
        assert "4Mi" in details and "image registry.invalid/tenant:6" in details, details
        counted = await metric(
            worker, 'k8s_event_remediation_untrusted_total{why="pod_not_as_template"}'
        )
        assert counted >= 3
        assert "payments-api-evil1-t3" in details
        # the genuine one still gets its suggestion
        event(cp, ns, "OOMKilling", about(pods["genuine"]))
        await eventually(lambda: bool(worker.log_events("acted")), timeout=120, interval=0.5)
    finally:
        worker.kill()
        br.kill()
    key = annotation_key(MemorySettings().annotation, "app")
    after = get(cp, "deployment", "payments-api", ns)["metadata"].get("annotations") or {}
    assert after.get(key) == suggest("256Mi", 1.5) == "384Mi", after
    cp.kubectl("delete", "namespace", ns, "--wait=false")


def test_the_admission_configuration_is_not_the_policys_to_guard(
    control_plane: ControlPlane,
) -> None:
    """Kubernetes does not run admission policies on ValidatingAdmissionPolicies and their
    bindings: a role widened to them reaches them whatever the policy says. So the policy's
    comment and docs/consumers.md say it, and that the worker must never be granted
    admissionregistration.k8s.io."""
    cp = control_plane
    worker_kubeconfig(cp)
    n = next(_n)
    dummy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"atk-dummy-{n}"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [{"expression": "true"}],
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(dummy))
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"atk-admission-{n}"},
        "rules": [
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingadmissionpolicies"],
                "verbs": ["delete"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"atk-admission-{n}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"atk-admission-{n}",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": "k8s-event-remediation",
                "namespace": BRIDGE_NAMESPACE,
            }
        ],
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(role))
    cp.kubectl("apply", "-f", "-", input=json.dumps(binding))
    try:
        who = f"system:serviceaccount:{BRIDGE_NAMESPACE}:k8s-event-remediation"
        done = cp.kubectl(
            "delete", "validatingadmissionpolicy", f"atk-dummy-{n}", "--as", who, check=False
        )
        # Kubernetes exempts it: the policy can not refuse this (the docs say so)
        assert done.returncode == 0, done.stderr
        text = (Path(__file__).parents[2] / "deploy/consumers/remediation-policy.yaml").read_text()
        assert "never grant this ServiceAccount anything in admissionregistration.k8s.io" in text
    finally:
        cp.kubectl("delete", "clusterrolebinding", f"atk-admission-{n}", check=False)
        cp.kubectl("delete", "clusterrole", f"atk-admission-{n}", check=False)
        cp.kubectl("delete", "validatingadmissionpolicy", f"atk-dummy-{n}", check=False)


@pytest.mark.timeout(300)
async def test_an_event_about_another_namespaces_pod_gets_none_of_its_values(
    control_plane: ControlPlane, nats_server: Any, tmp_path: Path
) -> None:
    """The API server keeps an Event of namespace A whose involvedObject is in namespace B when
    it has an ``eventTime`` (the events.k8s.io-style fields: only old-style Events must agree):
    a tenant of A names the genuine Pod of ``payments`` in B, with its uid. The bridge takes
    none of that Pod's values (``object:invalid``), never its owner, and logs why
    (``object_refused``); the same Event in B is enriched."""
    cp = control_plane
    tenant, victim = f"atk-tenant-{next(_n)}", f"atk-payments-{next(_n)}"
    for ns in (tenant, victim):
        cp.kubectl("create", "namespace", ns)
    kubeconfig = grant_enrichment(cp)
    payments = deployment(cp, victim, "payments-api", [container()])
    rs = replicaset(cp, victim, payments, "7c9d4")
    rs_ref = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": rs["metadata"]["name"],
        "uid": rs["metadata"]["uid"],
        "controller": True,
    }
    genuine = pod(
        cp, victim, "payments-api-7c9d4-a", rs["metadata"]["labels"], rs_ref, [container()]
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())

    def new_style(ns: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"cross-{next(_n)}", "namespace": ns},
            "involvedObject": about(genuine),
            "reason": "BackOff",
            "message": "made up",
            "type": "Warning",
            "eventTime": now,
            "reportingComponent": "tenant.example.com/forger",
            "reportingInstance": "forger-1",
            "action": "Forge",
        }

    cross = apply(cp, new_style(tenant))
    # the API server kept it: the attack is possible
    assert cross["metadata"]["namespace"] == tenant
    assert cross["involvedObject"]["namespace"] == victim
    br = bridge(
        cp,
        tmp_path,
        nats_server.url,
        kubeconfig,
        filter={"namespaces": [tenant, victim]},
        enrich={
            "object": {
                "labels": {"app": "app"},
                "owner_kind": "ownerkind",
                "owner_name": "ownername",
                "kinds": ["Pod", "ReplicaSet", "Deployment"],
            },
            "lookup_timeout": "20s",
        },
    )
    try:
        await br.wait_ready(timeout=60)
        same = apply(cp, new_style(victim))
        names = {cross["metadata"]["name"]: "cross", same["metadata"]["name"]: "same"}
        got: dict[str, dict[str, Any]] = {}

        async def published() -> bool:
            assert br.running(), br.logs()[-3000:]
            for attrs, data in await stream_events(nats_server.url):
                k = names.get(data["metadata"]["name"])
                if k is not None:
                    got[k] = attrs
            return set(got) == {"cross", "same"} and bool(br.log_events("object_refused"))

        await eventually(published, timeout=90, interval=0.5)
    finally:
        br.kill()
    assert got["cross"].get("k8senrichmissing") == "object:invalid", got["cross"]
    assert not {"app", "ownerkind", "ownername"} & set(got["cross"]), got["cross"]
    assert got["same"].get("ownername") == "payments-api", got["same"]
    assert got["same"].get("k8senriched") == "complete", got["same"]
    refused = br.log_events("object_refused")
    assert any(r["why"] == "invalid" and r["involved_namespace"] == victim for r in refused)
    for ns in (tenant, victim):
        cp.kubectl("delete", "namespace", ns, "--wait=false")


# what a role widened further than test_remediation_policy.WIDENED grants
FURTHER = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "k8s-event-remediation-further"},
    "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "deletecollection"]},
        {
            "apiGroups": [""],
            "resources": ["pods/exec", "pods/attach", "pods/portforward", "pods/binding"],
            "verbs": ["get", "create"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments", "replicasets"],
            "verbs": ["get", "list", "create", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["update", "patch", "delete"]},
    ],
}


@pytest.mark.timeout(300)
async def test_a_role_widened_to_other_verbs_and_patch_types_reaches_no_further(
    control_plane: ControlPlane,
) -> None:
    """The policy under a role widened to deletecollection, exec, attach, port-forward, binding,
    every patch type and server-side apply: a healthy Pod survives a deletecollection (the
    crash-looping one may go: what the worker does), exec/attach/portforward/binding are refused,
    a JSON patch or a server-side apply that adds our annotation and changes the spec, or
    creates a Deployment, is refused, an Event can not be changed; the annotation alone, by any
    patch type, passes."""
    cp = control_plane
    ns = f"atk-policy-{next(_n)}"
    cp.kubectl("create", "namespace", ns)
    kubeconfig = worker_kubeconfig(cp, ns)
    cp.kubectl("apply", "-f", "-", input=json.dumps(FURTHER))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "k8s-event-remediation-further", "namespace": ns},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "k8s-event-remediation-further",
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
    for name in ("looping", "healthy"):
        cp.kubectl("run", name, "-n", ns, "--image=registry.invalid/app:1")
    set_status(cp, ns, "looping", ["looping"], oom=False)
    running = {"status": {"phase": "Running"}}  # port-forward asks nothing of a Pending Pod
    cp.kubectl(
        "patch", "pod", "healthy", "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps(running),
    )  # fmt: skip
    cp.kubectl("create", "deployment", "web", "-n", ns, "--image=registry.invalid/app:1")
    ev = event(cp, ns, "BackOff", about(get(cp, "pod", "looping", ns)))
    policy = "the remediation worker may not"

    def as_worker(*args: str, input: str | None = None) -> str:
        proc = cp.kubectl("-n", ns, *args, input=input, kubeconfig=kubeconfig, check=False)
        return proc.stderr if proc.returncode else ""

    async def in_force() -> bool:
        probe = ["patch", "deployment", "web", "--type=merge", "-p", '{"spec":{"replicas":0}}']
        return policy in as_worker(*probe, "--dry-run=server")

    await eventually(in_force, timeout=60, interval=0.5, what="the policy in force")
    key = "remediation.k8s-event-bridge.io/suggested-memory-limit.app"
    json_patch = [
        {"op": "add", "path": "/metadata/annotations", "value": {key: "6Mi"}},
        {"op": "replace", "path": "/spec/replicas", "value": 0},
    ]
    apply_spec = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "annotations": {key: "7Mi"}},
        "spec": {"replicas": 0},
    }
    created = {
        **apply_spec,
        "metadata": {"name": "new", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/evil:1"}]},
            },
        },
    }
    binding_body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "healthy", "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    ev_name = ev["metadata"]["name"]
    attacks = {
        "exec": ["exec", "healthy", "--", "true"],
        "attach": ["attach", "healthy"],
        "portforward": ["port-forward", "pod/healthy", "0:80", "--pod-running-timeout=5s"],
        "binding": [
            "create", "--raw", f"/api/v1/namespaces/{ns}/pods/healthy/binding", "-f", "-",
        ],
        "json patch": ["patch", "deployment", "web", "--type=json", "-p", json.dumps(json_patch)],
        "server-side apply": [
            "apply", "--server-side", "--force-conflicts", "--field-manager=x", "-f", "-",
        ],
        "server-side apply create": ["apply", "--server-side", "--field-manager=x", "-f", "-"],
        "replicaset create": ["create", "deployment", "evil", "--image=registry.invalid/e:1"],
        "event patch": ["patch", "event", ev_name, "--type=merge", "-p", '{"count": 99}'],
        "event delete": ["delete", "event", ev_name],
    }  # fmt: skip
    stdin = {
        "binding": json.dumps(binding_body),
        "server-side apply": json.dumps(apply_spec),
        "server-side apply create": json.dumps(created),
    }
    through = {}
    for what, args in attacks.items():
        out = as_worker(*args, input=stdin.get(what))
        if policy not in out:
            through[what] = out[-300:]
    # deletecollection: the policy sees each Pod's DELETE
    out = as_worker("delete", "pods", "--all", "--wait=false")
    healthy_left = cp.kubectl("get", "pod", "healthy", "-n", ns, check=False).returncode == 0
    assert not through, through
    assert healthy_left, out
    dep = get(cp, "deployment", "web", ns)
    assert dep["spec"]["replicas"] == 1 and key not in (dep["metadata"].get("annotations") or {})
    assert cp.kubectl("get", "deployment", "new", "-n", ns, check=False).returncode != 0
    # the annotation alone passes, by JSON patch too
    alone = [{"op": "add", "path": "/metadata/annotations", "value": {key: "6Mi"}}]
    assert as_worker("patch", "deployment", "web", "--type=json", "-p", json.dumps(alone)) == ""
    cp.kubectl("delete", "rolebinding", "k8s-event-remediation-further", "-n", ns, check=False)
    cp.kubectl("delete", "namespace", ns, "--wait=false")


def test_impersonation_is_not_the_policys_to_guard(control_plane: ControlPlane) -> None:
    """A role widened to ``impersonate`` makes the worker's token act as another user, whom the
    policy (matching the worker's user name) does not see: the docs say never to grant it."""
    cp = control_plane
    ns = f"atk-impersonate-{next(_n)}"
    cp.kubectl("create", "namespace", ns)
    kubeconfig = worker_kubeconfig(cp, ns)
    n = next(_n)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"atk-impersonate-{n}"},
        "rules": [{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"atk-impersonate-{n}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"atk-impersonate-{n}",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": "k8s-event-remediation",
                "namespace": BRIDGE_NAMESPACE,
            }
        ],
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(role))
    cp.kubectl("apply", "-f", "-", input=json.dumps(binding))
    try:
        as_other = ["--as=someone-else", "--as-group=system:masters"]
        args = ["create", "configmap", "x", "-n", ns, *as_other]
        done = cp.kubectl(*args, kubeconfig=kubeconfig, check=False)
        assert done.returncode == 0, done.stderr  # the policy does not see it: never grant it
        plain = cp.kubectl("create", "configmap", "y", "-n", ns, kubeconfig=kubeconfig, check=False)
        assert plain.returncode != 0
        text = (Path(__file__).parents[2] / "deploy/consumers/remediation-policy.yaml").read_text()
        assert "impersonate" in text
    finally:
        cp.kubectl("delete", "clusterrolebinding", f"atk-impersonate-{n}", check=False)
        cp.kubectl("delete", "clusterrole", f"atk-impersonate-{n}", check=False)
        cp.kubectl("delete", "namespace", ns, "--wait=false")
