"""The subscribers in the chart (``alerting.enabled``, ``remediation.enabled``,
``otlp.enabled``; issue 21, items 2 and 6) and the digests' program (``digests.enabled``; issue
41), held to deploy/consumers/ and checked by the real API server:

- the alerting subscriber: a StatefulSet of two replicas started together, each with its own
  durable (its Pod's name), a headless Service, a PodDisruptionBudget, no ServiceAccount token;
- the OTLP subscriber: a Deployment of two replicas on one durable, a PodDisruptionBudget, its
  ServiceAccount with no token, its NATS password and the endpoint's headers from a Secret;
- the remediation worker: a ClusterRole with namespaced rules only, bound by a RoleBinding in
  each namespace of ``remediation.namespaces`` (and nowhere else), the same list as its
  config's ``remediation.namespaces.allow``, and a ValidatingAdmissionPolicy naming its
  ServiceAccount. Applied for real (not a dry run) on each Kubernetes version of the tier, the
  worker's identity may delete a crash-looping Pod in a listed namespace, and is refused a Pod
  in kube-system, a healthy Pod, and a change of a Deployment's template;
- the digests' program: a StatefulSet of two, each replica on a consumer of its own (its
  ordinal), a headless Service, a PodDisruptionBudget, its ServiceAccount with no token
  (tests/unit/test_digests_deploy.py holds the rest);
- the values schema names every key of each subscriber's config, as it does the bridge's;
- with all on, the chart makes the objects deploy/consumers/ makes (``<fullname>-alerting``
  for ``k8s-event-alerting``), field by field after :func:`normalised`.
"""

from __future__ import annotations

import copy
import difflib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from k8s_event_consumer import configuring
from k8s_event_consumer.alerting import settings as alerting_settings
from k8s_event_consumer.digests import settings as digests_settings
from k8s_event_consumer.otlp import settings as otlp_settings
from k8s_event_consumer.remediation import settings as remediation_settings
from tests.e2e.test_chart import (
    CHART,
    DEPLOY,
    HELM_LABELS,
    NAMESPACE,
    RELEASE,
    _schema_keys,
    _selects,
    chart_manifest,
    documents,
    helm,
    once,
    one,
    server_dry_run,
    values_file,
)
from tests.standins.controlplane import ControlPlane, KubectlError
from tests.support import eventually_sync

GO_TOOLS = ("helm",)

CONSUMERS = DEPLOY / "consumers"
ACT_IN = ["team-a", "team-b"]
ON = {
    "alerting": {"enabled": True},
    "remediation": {"enabled": True, "namespaces": ACT_IN},
    "otlp": {"enabled": True},
    "digests": {"enabled": True},
}
ALERTING = f"{RELEASE}-alerting"
REMEDIATION = f"{RELEASE}-remediation"
OTLP = f"{RELEASE}-otlp"
DIGESTS = f"{RELEASE}-digests"
WORKER = f"system:serviceaccount:{NAMESPACE}:{REMEDIATION}"

SUBSCRIBER_OBJECTS = {
    f"configmap/{ALERTING}",
    f"service/{ALERTING}",
    f"statefulset.apps/{ALERTING}",
    f"poddisruptionbudget.policy/{ALERTING}",
    f"configmap/{REMEDIATION}",
    f"serviceaccount/{REMEDIATION}",
    f"deployment.apps/{REMEDIATION}",
    f"clusterrole.rbac.authorization.k8s.io/{REMEDIATION}",
    *(f"rolebinding.rbac.authorization.k8s.io/{REMEDIATION}" for _ in ACT_IN),
    f"validatingadmissionpolicy.admissionregistration.k8s.io/{REMEDIATION}",
    f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{REMEDIATION}",
    f"configmap/{OTLP}",
    f"serviceaccount/{OTLP}",
    f"deployment.apps/{OTLP}",
    f"poddisruptionbudget.policy/{OTLP}",
    f"serviceaccount/{DIGESTS}",
    f"configmap/{DIGESTS}",
    f"service/{DIGESTS}",
    f"statefulset.apps/{DIGESTS}",
    f"poddisruptionbudget.policy/{DIGESTS}",
}


def rendered(tmp_path: Path, values: dict[str, Any] = ON) -> list[dict[str, Any]]:
    return documents(chart_manifest(tmp_path, values))


# ----------------------------------------------------------------------------- helm


def test_helm_lint_strict_passes_with_every_subscriber(tmp_path: Path) -> None:
    done = helm(
        "lint", "--strict", str(CHART), "--namespace", NAMESPACE,
        "--values", str(values_file(tmp_path, ON)), check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for bad in ("[WARNING]", "[ERROR]", "Fail:"):
        assert bad not in out, out


def test_the_subscribers_are_off_by_default(tmp_path: Path) -> None:
    names = {o["metadata"]["name"] for o in rendered(tmp_path, {})}
    assert not {n for n in names if n.startswith((ALERTING, REMEDIATION, OTLP, DIGESTS))}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"remediation": {"enabled": True}}, "at '/remediation/namespaces': minItems: got 0"),
        (
            {"remediation": {"enabled": True, "namespaces": ["team-a", "kube-system"]}},
            "at '/remediation/namespaces/1': value must be 'not kube-system",
        ),
        (
            {"remediation": {"enabled": True, "namespaces": [NAMESPACE]}},
            f"remediation.namespaces: {NAMESPACE} is the release's own namespace",
        ),
        (
            {"remediation": {"config": {"remediation": {"namespaces": {"allow": ["x"]}}}}},
            "at '/remediation/config/remediation/namespaces/allow'",
        ),
        (
            {"alerting": {"config": {"nats": {"durable": "one-for-both"}}}},
            "each replica names its durable after its Pod",
        ),
        ({"alerting": {"config": {"alerts": {"reason": ["BackOff"]}}}}, "'reason' not allowed"),
        (
            {"remediation": {"enabled": True, "namespaces": ["a"], "config": {"remediaton": {}}}},
            "'remediaton' not allowed",
        ),
        ({"otlp": {"config": {"otlp": {"endpont": "http://x:4318"}}}}, "'endpont' not allowed"),
        ({"otlp": {"config": {"dead_letters": {}}}}, "'dead_letters' not allowed"),
    ],
    ids=[
        "no-namespaces",
        "kube-system",
        "own-namespace",
        "allow-in-config",
        "one-durable",
        "misspelt-alerting-key",
        "misspelt-remediation-section",
        "misspelt-otlp-key",
        "misspelt-otlp-section",
    ],
)
def test_a_bad_subscriber_value_is_refused_naming_it(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    path = str(values_file(tmp_path, values))
    done = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "--values", path, check=False)
    assert done.returncode != 0, done.stdout
    assert message in done.stderr


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= _model_keys(ann, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


@pytest.mark.parametrize(
    ("sub", "model"),
    [
        ("alerting", alerting_settings.Settings),
        ("remediation", remediation_settings.Settings),
        ("otlp", otlp_settings.Settings),
        ("digests", digests_settings.Settings),
    ],
)
def test_the_values_schema_names_every_key_of_each_subscriber_config(
    sub: str, model: type[BaseModel]
) -> None:
    """``<sub>.config`` in values.schema.json names the subscriber's keys, no more, no
    fewer (the secret and file keys among them, refused with a message)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = _schema_keys(schema["properties"][sub]["properties"]["config"])
    expected = _model_keys(model)
    assert names == expected, (
        f"values.schema.json {sub}.config: missing {sorted(expected - names)}, "
        f"unknown to the subscriber {sorted(names - expected)}"
    )


# ----------------------------------------------------------------------------- alerting


def test_the_alerting_subscriber_runs_two_replicas_each_with_its_own_durable(
    tmp_path: Path,
) -> None:
    """Two replicas started together, each naming its durable after its Pod (a StatefulSet's
    names are stable across restarts); the headless Service is the StatefulSet's
    serviceName; the PodDisruptionBudget lets one go at a time; no ServiceAccount token; the
    bridge's selectors and the subscriber's never select each other's Pods; both replicas
    share one generatorURL."""
    objects = rendered(tmp_path)
    sts = one(objects, "StatefulSet", ALERTING)["spec"]
    assert sts["replicas"] == 2
    assert sts["podManagementPolicy"] == "Parallel"
    pod = sts["template"]
    labels = pod["metadata"]["labels"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_INDEX"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    # the durables deploy/nats/permissions.json names, whatever the release is called
    assert env["ALERTING_NATS__DURABLE"]["value"] == "k8s-event-alerting-$(POD_INDEX)"
    assert env["ALERTING_NATS__NAME"]["value"] == "$(POD_NAME)"
    names = list(env)
    assert names.index("POD_INDEX") < names.index("ALERTING_NATS__DURABLE")  # $(...) order

    service = one(objects, "Service", ALERTING)
    assert sts["serviceName"] == ALERTING
    assert service["spec"]["clusterIP"] == "None"
    pdb = one(objects, "PodDisruptionBudget", ALERTING)["spec"]
    assert pdb["maxUnavailable"] == 1
    bridge_pod = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for selector in (
        sts["selector"]["matchLabels"],
        service["spec"]["selector"],
        pdb["selector"]["matchLabels"],
    ):
        assert _selects(selector, labels)
        assert not _selects(selector, bridge_pod)
    for kind in ("Deployment", "PodDisruptionBudget"):
        bridge_selector = one(objects, kind)["spec"]["selector"]["matchLabels"]
        assert not _selects(bridge_selector, labels)

    config = yaml.safe_load(one(objects, "ConfigMap", ALERTING)["data"]["alerting.yaml"])
    bridge = yaml.safe_load(one(objects, "ConfigMap")["data"]["bridge.yaml"])
    assert config["nats"]["servers"] == bridge["nats"]["servers"]
    assert "durable" not in config["nats"]
    # one generatorURL for both (the default would name each one's durable): either takes
    # back the alerts the other sent
    assert config["alerts"]["generator_url"] == f"nats://K8S_EVENTS/{ALERTING}"


# ----------------------------------------------------------------------------- otlp


def test_the_otlp_subscriber_runs_two_replicas_on_one_durable_with_no_token(
    tmp_path: Path,
) -> None:
    """Two replicas of a Deployment on the durable deploy/nats/permissions.json names, whatever
    the release is called (no per-Pod durable: each message goes to one of them), its
    connection named after its Pod; a PodDisruptionBudget; a ServiceAccount of its own that,
    like its Pods, gets no token; the NATS password and the endpoint's headers by
    secretKeyRef from <fullname>-otlp, optional; the bridge's NATS in its config; the
    bridge's selectors and its own never select each other's Pods."""
    args = ["template", "other", str(CHART), "--namespace", "ops"]
    objects = documents(helm(*args, "--values", str(values_file(tmp_path, ON))).stdout)
    name = "other-k8s-event-bridge-otlp"
    deployment = one(objects, "Deployment", name)["spec"]
    assert deployment["replicas"] == 2
    pod = deployment["template"]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == name
    assert spec["automountServiceAccountToken"] is False
    assert one(objects, "ServiceAccount", name)["automountServiceAccountToken"] is False
    assert not [v for v in spec["volumes"] if "projected" in v or "secret" in v]
    (container,) = spec["containers"]
    assert container["command"] == ["k8s-event-otlp"]
    env = {e["name"]: e for e in container["env"]}
    assert "OTLP_NATS__DURABLE" not in env
    assert env["OTLP_NATS__NAME"]["value"] == "$(POD_NAME)"
    assert list(env).index("POD_NAME") < list(env).index("OTLP_NATS__NAME")  # $(...) order
    for variable, key in (("OTLP_NATS__PASSWORD", "nats-password"),
                          ("OTLP_OTLP__HEADERS", "otlp-headers")):  # fmt: skip
        assert env[variable]["valueFrom"] == {
            "secretKeyRef": {"name": name, "key": key, "optional": True}
        }
    config = yaml.safe_load(one(objects, "ConfigMap", name)["data"]["otlp.yaml"])
    bridge = yaml.safe_load(
        one(objects, "ConfigMap", "other-k8s-event-bridge")["data"]["bridge.yaml"]
    )
    assert config["nats"]["servers"] == bridge["nats"]["servers"]
    assert config["nats"]["durable"] == "k8s-event-otlp"
    assert config["nats"]["subjects"] == ["k8s.events.>"]
    assert "headers" not in config["otlp"]

    pdb = one(objects, "PodDisruptionBudget", name)["spec"]
    assert pdb["maxUnavailable"] == 1
    labels = pod["metadata"]["labels"]
    bridge_pod = one(objects, "Deployment", "other-k8s-event-bridge")["spec"]["template"]
    for selector in (deployment["selector"]["matchLabels"], pdb["selector"]["matchLabels"]):
        assert _selects(selector, labels)
        assert not _selects(selector, bridge_pod["metadata"]["labels"])
    for kind in ("Deployment", "PodDisruptionBudget"):
        bridge_selector = one(objects, kind, "other-k8s-event-bridge")["spec"]["selector"]
        assert not _selects(bridge_selector["matchLabels"], labels)


# ----------------------------------------------------------------------------- digests


def test_the_digests_program_runs_two_replicas_each_with_its_own_consumer(
    tmp_path: Path,
) -> None:
    """Two replicas started together, each reading through the consumer its provision made
    for its ordinal (the names deploy/nats/permissions.json allows, whatever the release is
    called); the headless Service is the StatefulSet's serviceName; one replica away at a
    time; no token; the bridge's selectors and its own never select each other's Pods."""
    objects = rendered(tmp_path)
    sts = one(objects, "StatefulSet", DIGESTS)["spec"]
    assert sts["replicas"] == 2
    assert sts["podManagementPolicy"] == "Parallel"
    pod = sts["template"]
    labels = pod["metadata"]["labels"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["serviceAccountName"] == DIGESTS
    assert one(objects, "ServiceAccount", DIGESTS)["automountServiceAccountToken"] is False
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["DIGESTS_NATS__DURABLE"]["value"] == "k8s-event-digests-$(POD_INDEX)"
    assert env["DIGESTS_NATS__NAME"]["value"] == "$(POD_NAME)"
    names = list(env)
    assert names.index("POD_INDEX") < names.index("DIGESTS_NATS__DURABLE")  # $(...) order
    service = one(objects, "Service", DIGESTS)
    assert sts["serviceName"] == DIGESTS
    assert service["spec"]["clusterIP"] == "None"
    pdb = one(objects, "PodDisruptionBudget", DIGESTS)["spec"]
    assert pdb["maxUnavailable"] == 1
    bridge_pod = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for selector in (
        sts["selector"]["matchLabels"],
        service["spec"]["selector"],
        pdb["selector"]["matchLabels"],
    ):
        assert _selects(selector, labels)
        assert not _selects(selector, bridge_pod)
    for kind in ("Deployment", "PodDisruptionBudget"):
        bridge_selector = one(objects, kind)["spec"]["selector"]["matchLabels"]
        assert not _selects(bridge_selector, labels)
    config = yaml.safe_load(one(objects, "ConfigMap", DIGESTS)["data"]["digests.yaml"])
    bridge = yaml.safe_load(one(objects, "ConfigMap")["data"]["bridge.yaml"])
    assert config["nats"]["servers"] == bridge["nats"]["servers"]
    assert "durable" not in config["nats"] and "subjects" not in config["nats"]


# ----------------------------------------------------------------------------- remediation

NAMESPACED = {("", "pods"), ("", "events"), ("", "replicationcontrollers"), *(("apps", r) for r in (
    "replicasets", "deployments", "statefulsets", "daemonsets")), ("batch", "jobs"),
    ("batch", "cronjobs")}  # fmt: skip


def test_the_remediation_worker_is_bound_only_in_its_namespaces(tmp_path: Path) -> None:
    """A RoleBinding of the worker's ClusterRole in each listed namespace and nowhere else,
    no ClusterRoleBinding of it, rules on namespaced resources only, the same list in its
    config's remediation.namespaces.allow; its Pods selected by its Deployment only."""
    objects = rendered(tmp_path)
    role = one(objects, "ClusterRole", REMEDIATION)
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) in NAMESPACED, rule
    bindings = [
        o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["name"] == REMEDIATION
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(ACT_IN)
    for b in bindings:
        assert b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": REMEDIATION,
        }
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": REMEDIATION, "namespace": NAMESPACE}
        ]
    for crb in (o for o in objects if o["kind"] == "ClusterRoleBinding"):
        assert {"kind": "ServiceAccount", "name": REMEDIATION, "namespace": NAMESPACE} not in crb[
            "subjects"
        ]
        assert crb["roleRef"]["name"] != REMEDIATION

    config = yaml.safe_load(one(objects, "ConfigMap", REMEDIATION)["data"]["remediation.yaml"])
    assert config["remediation"]["namespaces"]["allow"] == ACT_IN
    assert config["kubernetes"]["cluster"] == "my-cluster"
    assert config["nats"]["subjects"] == ["k8s.events.my-cluster.*.Pod.>"]
    pod = one(objects, "Deployment", REMEDIATION)["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == REMEDIATION
    assert _selects(
        one(objects, "Deployment", REMEDIATION)["spec"]["selector"]["matchLabels"],
        pod["metadata"]["labels"],
    )
    assert not _selects(
        one(objects, "Deployment")["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]
    )


def test_the_admission_policy_names_the_worker_of_this_release(tmp_path: Path) -> None:
    """Another release in another namespace: the policy's condition and the binding name
    that release's worker and policy, not deploy/'s."""
    args = ["template", "other", str(CHART), "--namespace", "ops"]
    done = helm(*args, "--values", str(values_file(tmp_path, ON)))
    objects = documents(done.stdout)
    name = "other-k8s-event-bridge-remediation"
    policy = one(objects, "ValidatingAdmissionPolicy", name)["spec"]
    [condition] = policy["matchConditions"]
    assert f"'system:serviceaccount:ops:{name}'" in condition["expression"]
    binding = one(objects, "ValidatingAdmissionPolicyBinding", name)["spec"]
    assert binding == {"policyName": name, "validationActions": ["Deny"]}


# ----------------------------------------------------------------------------- the API server


@pytest.fixture
def api(chart_control_plane: ControlPlane) -> ControlPlane:
    """The chart tests' control plane (conftest.py: NAMESPACE and ACT_IN exist)."""
    assert NAMESPACE == "k8s-event-bridge" and ACT_IN == ["team-a", "team-b"]
    return chart_control_plane


@pytest.mark.e2e
def test_the_chart_with_every_subscriber_is_accepted_by_the_api_server(
    api: ControlPlane, tmp_path: Path
) -> None:
    accepted = server_dry_run(api, "-f", "-", manifest=chart_manifest(tmp_path, ON))
    names = (ALERTING, REMEDIATION, OTLP, DIGESTS)
    subscribers = [o for o in accepted if o.rsplit("/", 1)[1].startswith(names)]
    assert sorted(subscribers) == sorted(
        [*SUBSCRIBER_OBJECTS - {f"rolebinding.rbac.authorization.k8s.io/{REMEDIATION}"}]
        + [f"rolebinding.rbac.authorization.k8s.io/{REMEDIATION}"] * len(ACT_IN)
    )


def _as_worker(cp: ControlPlane, *args: str) -> tuple[bool, str]:
    done = cp.kubectl(f"--as={WORKER}", *args, check=False)
    return done.returncode == 0, done.stdout + done.stderr


def _pod(cp: ControlPlane, ns: str, name: str, *, crash_looping: bool) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(pod))
    if crash_looping:
        waiting = {"reason": "CrashLoopBackOff", "message": "back-off restarting"}
        status = {
            "status": {
                "containerStatuses": [
                    {
                        "name": "app",
                        "image": "app:1",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 7,
                        "state": {"waiting": waiting},
                        "lastState": {},
                    }
                ]
            }
        }
        cp.kubectl(
            "patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(status),
        )  # fmt: skip


@pytest.mark.e2e
def test_the_worker_may_do_only_what_the_chart_grants(api: ControlPlane, tmp_path: Path) -> None:
    """The chart's remediation objects applied for real; then, as the worker's
    ServiceAccount: a crash-looping Pod in a listed namespace is deleted; a Pod in
    kube-system, a healthy Pod, a Deployment's template are refused (RBAC, then the
    admission policy); its own annotations on the Deployment are let through."""
    objects = [
        o
        for o in rendered(tmp_path)
        if o["metadata"]["name"] == REMEDIATION and o["kind"] != "Deployment"
    ]
    api.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    _pod(api, "kube-system", "system-crasher", crash_looping=True)
    ok, out = _as_worker(api, "delete", "pod", "system-crasher", "-n", "kube-system")
    assert not ok and "forbidden" in out.lower(), out
    ok, out = _as_worker(api, "get", "pods", "-A")
    assert not ok, out

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app", "namespace": ACT_IN[0]},
        "spec": {
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            },
        },
    }
    api.kubectl("apply", "-f", "-", input=json.dumps(deployment))
    _pod(api, ACT_IN[0], "healthy", crash_looping=False)
    _pod(api, ACT_IN[0], "crasher", crash_looping=True)

    # the policy is enforced once the API server has loaded it: until a healthy Pod's delete
    # is refused by it (a dry run changes nothing)
    def refused() -> str | None:
        ok, out = _as_worker(api, "delete", "pod", "healthy", "-n", ACT_IN[0], "--dry-run=server")
        return None if ok else out

    what = "the admission policy enforced (a healthy Pod's delete refused)"
    out = eventually_sync(refused, 30, 0.5, what=what, retry_on=())
    assert "may delete only a Pod with a container in CrashLoopBackOff" in out, out

    template = {
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "evil:1"}]}}}
    }
    ok, out = _as_worker(
        api, "patch", "deployment", "app", "-n", ACT_IN[0], "--type=strategic",
        "-p", json.dumps(template),
    )  # fmt: skip
    assert not ok and "may not change a workload's spec" in out, out
    ok, out = _as_worker(api, "annotate", "deployment", "app", "-n", ACT_IN[0], "other.io/x=1")
    assert not ok and "only the remediation.k8s-event-bridge.io/" in out, out
    ok, out = _as_worker(
        api, "annotate", "deployment", "app", "-n", ACT_IN[0],
        "remediation.k8s-event-bridge.io/suggested-memory-limit.app=192Mi",
    )  # fmt: skip
    assert ok, out

    ok, out = _as_worker(api, "delete", "pod", "crasher", "-n", ACT_IN[0], "--wait=false")
    assert ok, out
    with pytest.raises(KubectlError):
        api.kubectl("get", "pod", "crasher", "-n", ACT_IN[0])


# ----------------------------------------------------------------------------- = deploy/consumers/

# the chart's name of each object of deploy/consumers/ (release k8s-event-bridge)
RENAMED = {
    ALERTING: "k8s-event-alerting",
    REMEDIATION: "k8s-event-remediation",
    OTLP: "k8s-event-otlp",
    DIGESTS: "k8s-event-digests",
}


def _rename(node: Any) -> Any:
    if isinstance(node, dict):
        return {_rename(k): _rename(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_rename(v) for v in node]
    if isinstance(node, str):
        for chart_name, name in RENAMED.items():
            node = node.replace(chart_name, name)
    return node


def _drop_labels(node: Any, labels: set[str]) -> None:
    if isinstance(node, dict):
        for key in labels & set(node):
            if key.startswith(("app.kubernetes.io/", "helm.sh/")):
                del node[key]
        for v in node.values():
            _drop_labels(v, labels)
    elif isinstance(node, list):
        for v in node:
            _drop_labels(v, labels)


def _effective(text: str, name: str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    load = {
        "alerting": alerting_settings.load,
        "remediation": remediation_settings.load,
        "otlp": otlp_settings.load,
        "digests": digests_settings.load,
    }[name]
    return configuring.redacted(load(str(path)))


def _collapse_expressions(node: Any) -> None:
    """CEL ignores whitespace; kustomize writes a folded scalar's more-indented lines back
    with an extra line break."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expression" and isinstance(value, str):
                node[key] = " ".join(value.split())
            else:
                _collapse_expressions(value)
    elif isinstance(node, list):
        for value in node:
            _collapse_expressions(value)


def normalised(obj: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """An object of deploy/consumers/ or of the chart as both are to make it. "Same" means
    equal after only this: the chart's names (``<fullname>-alerting``) read as deploy/'s
    (``k8s-event-alerting``), wherever they appear; Helm's labels about the release and the
    component label (which the chart's selectors carry to keep the release's programs apart)
    dropped; the Pod template's ``checksum/config`` dropped; each config compared as the
    settings the program runs with; the whitespace of the admission policy's CEL
    expressions collapsed."""
    obj = _rename(copy.deepcopy(obj))
    _drop_labels(obj, {*HELM_LABELS, "app.kubernetes.io/component"})
    template = obj.get("spec", {}).get("template", {})
    annotations = template.get("metadata", {}).get("annotations", {})
    annotations.pop("checksum/config", None)
    if template and not annotations:
        template["metadata"].pop("annotations", None)
    if obj["kind"] == "ValidatingAdmissionPolicy":
        _collapse_expressions(obj["spec"])
    for name in ("alerting", "remediation", "otlp", "digests"):
        if obj["kind"] == "ConfigMap" and f"{name}.yaml" in obj.get("data", {}):
            obj["data"][f"{name}.yaml"] = _effective(obj["data"][f"{name}.yaml"], name, tmp_path)
    return obj


def _identity(o: dict[str, Any]) -> str:
    return f"{o['kind']} {o['metadata'].get('namespace', '-')}/{o['metadata']['name']}"


@pytest.mark.e2e
@once
def test_the_chart_makes_the_subscribers_of_deploy_consumers(
    api: ControlPlane, tmp_path: Path
) -> None:
    """With every subscriber on, the namespaces of deploy/consumers/'s RoleBindings and its
    cluster name, the chart's subscriber objects are deploy/consumers/'s, field by field
    (:func:`normalised`)."""
    kustomized = documents(api.kubectl("kustomize", str(CONSUMERS)).stdout)
    bound = [o["metadata"]["namespace"] for o in kustomized if o["kind"] == "RoleBinding"]
    config = yaml.safe_load(
        one(kustomized, "ConfigMap", "k8s-event-remediation")["data"]["remediation.yaml"]
    )
    values = {
        "config": {"cluster": {"name": config["kubernetes"]["cluster"]}},
        "alerting": {"enabled": True},
        "remediation": {"enabled": True, "namespaces": bound},
        "otlp": {"enabled": True},
        "digests": {"enabled": True},
    }
    chart = [
        o for o in documents(chart_manifest(tmp_path, values)) if o["metadata"]["name"] in RENAMED
    ]
    ours = {_identity(_rename(o)): normalised(o, tmp_path) for o in chart}
    theirs = {_identity(o): normalised(o, tmp_path) for o in kustomized}
    assert sorted(ours) == sorted(theirs), (sorted(ours), sorted(theirs))
    differing = []
    for key in sorted(ours):
        if ours[key] != theirs[key]:
            diff = difflib.unified_diff(
                yaml.safe_dump(theirs[key], sort_keys=True).splitlines(),
                yaml.safe_dump(ours[key], sort_keys=True).splitlines(),
                "deploy/consumers",
                "helm",
                lineterm="",
            )
            differing.append(f"{key}:\n" + "\n".join(diff))
    assert not differing, "\n\n".join(differing)
