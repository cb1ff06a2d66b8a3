"""The Helm chart (deploy/helm/k8s-event-bridge/) checked by helm and by the real API server, and
held to the kustomize base (deploy/) and its components (deploy/components/) object by object.

- ``helm lint --strict`` and ``helm template`` with the default values and with every optional
  object on (ServiceMonitor, NetworkPolicy, PrometheusRule, Grafana dashboard); the chart's
  values.schema.json refuses a misspelt or mistyped value, naming it.
- ``kubectl apply --dry-run=server`` of what the chart renders, and of deploy/ with every
  component, on a control plane of its own with the Prometheus Operator's CRDs installed
  (tests/data/crds/): the API server's schema, defaulting, validation and admission, on each
  Kubernetes version of the tier (a field the oldest does not know fails there).
- The chart (release ``k8s-event-bridge`` in namespace ``k8s-event-bridge``) and kustomize make
  the same objects for the same values; what "same" means is in :func:`normalised`. Rendering
  does not depend on the API server's version, so these run on the first selected version
  only.
- The chart's copies of the alert rules and the dashboard are those of deploy/monitoring/.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from bridge import settings
from tests.config_keys import model_keys
from tests.standins import gotools
from tests.standins.controlplane import REPO, ControlPlane, selected_versions
from tests.support import eventually_sync

GO_TOOLS = ("helm",)

CHART = REPO / "deploy" / "helm" / "k8s-event-bridge"
DEPLOY = REPO / "deploy"
COMPONENTS = DEPLOY / "components"
MONITORING = DEPLOY / "monitoring"
CRDS = REPO / "tests" / "data" / "crds"
RELEASE = NAMESPACE = "k8s-event-bridge"  # as deploy/ names its objects and namespace

# A file of deploy/monitoring/ (the lead's; the source) -> its copies (chart, component).
COPIES = {
    MONITORING / "k8s-event-bridge.rules.yaml": [CHART / "files" / "k8s-event-bridge.rules.yaml"],
    MONITORING / "dashboard.json": [
        CHART / "files" / "k8s-event-bridge.dashboard.json",
        COMPONENTS / "dashboard" / "k8s-event-bridge.dashboard.json",
    ],
}

# Every optional object on: the chart's values, and the kustomize components that match them.
ALL_ON = {
    "serviceMonitor": {"enabled": True},
    "networkPolicy": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "dashboard": {"enabled": True},
}
ALL_COMPONENTS = ("servicemonitor", "networkpolicy", "prometheusrule", "dashboard")

DEFAULT_OBJECTS = {
    "serviceaccount/k8s-event-bridge",
    "configmap/k8s-event-bridge",
    "clusterrole.rbac.authorization.k8s.io/k8s-event-bridge",
    "clusterrolebinding.rbac.authorization.k8s.io/k8s-event-bridge",
    "role.rbac.authorization.k8s.io/k8s-event-bridge-leader-election",
    "rolebinding.rbac.authorization.k8s.io/k8s-event-bridge-leader-election",
    "service/k8s-event-bridge",
    "deployment.apps/k8s-event-bridge",
    "poddisruptionbudget.policy/k8s-event-bridge",
}
OPTIONAL_OBJECTS = {
    "servicemonitor.monitoring.coreos.com/k8s-event-bridge",
    "networkpolicy.networking.k8s.io/k8s-event-bridge",
    "prometheusrule.monitoring.coreos.com/k8s-event-bridge",
    "configmap/k8s-event-bridge-dashboard",
}

# The chart's checks that only render run once, on the first version the tier runs on.
once = pytest.mark.parametrize("kubernetes_version", selected_versions()[:1], indirect=True)


# ----------------------------------------------------------------------------- rendering


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(gotools.ensure("helm")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        # a HELM_NAMESPACE or the like of whoever runs the tests changes nothing here
        env={k: v for k, v in os.environ.items() if not k.startswith("HELM_")},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def chart_manifest(tmp_path: Path, values: dict[str, Any] | None = None) -> str:
    """``helm template`` of the chart as release k8s-event-bridge in namespace
    k8s-event-bridge."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values:
        args += ["--values", str(values_file(tmp_path, values))]
    return helm(*args).stdout


def documents(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def overlay(tmp_path: Path, components: tuple[str, ...]) -> Path:
    """An overlay of deploy/ with these components, as an operator writes one (kustomize
    refuses an absolute path to a base, so the paths are relative)."""
    d = tmp_path / "overlay"
    d.mkdir(exist_ok=True)
    rel = Path(os.path.relpath(DEPLOY, d))
    (d / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel)],
                "components": [str(rel / "components" / c) for c in components],
            }
        )
    )
    return d


def kustomize_objects(cp: ControlPlane, tmp_path: Path, components: tuple[str, ...]) -> list[Any]:
    """``kubectl kustomize`` (kubectl's own kustomize, in the control plane's cache) of deploy/
    with these components."""
    return documents(cp.kubectl("kustomize", str(overlay(tmp_path, components))).stdout)


def one(objects: list[dict[str, Any]], kind: str, name: str = RELEASE) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


# ----------------------------------------------------------------------------- copies


@pytest.mark.parametrize(
    ("source", "copy_path"),
    [(s, c) for s, copies in COPIES.items() for c in copies],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_copies_of_deploy_monitoring_are_byte_identical(source: Path, copy_path: Path) -> None:
    """Helm can not read files outside the chart, nor kustomize outside a component's
    directory: both hold a copy of what deploy/monitoring/ has, which must not drift."""
    assert source.is_file(), f"{source.relative_to(REPO)} is missing"
    fix = f"run cp {source.relative_to(REPO)} {copy_path.relative_to(REPO)}"
    assert copy_path.is_file(), f"{copy_path.relative_to(REPO)} is missing: {fix}"
    assert copy_path.read_bytes() == source.read_bytes(), (
        f"{copy_path.relative_to(REPO)} differs from {source.relative_to(REPO)}: {fix}"
    )


# ----------------------------------------------------------------------------- helm lint


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["default", "all-optional-on"])
def test_helm_lint_strict_passes(tmp_path: Path, values: dict[str, Any]) -> None:
    """``helm lint --strict``: no warning, no error, and no ``fail`` of a template, which
    lint reports only as an INFO line."""
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    if values:
        args += ["--values", str(values_file(tmp_path, values))]
    done = helm(*args, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    for bad in ("[WARNING]", "[ERROR]", "Fail:"):
        assert bad not in out, out


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"serviceMonitr": {"enabled": True}}, "additional properties 'serviceMonitr' not allowed"),
        ({"serviceMonitor": {"enable": True}}, "additional properties 'enable' not allowed"),
        ({"networkPolicy": {"enabled": "yes"}}, "at '/networkPolicy/enabled': got string"),
        ({"networkPolicy": {"nats": {"ports": ["4222"]}}}, "at '/networkPolicy/nats/ports/0'"),
        (
            {"dashboard": {"labels": {"grafana_dashboard": 1}}},
            "/dashboard/labels/grafana_dashboard",
        ),
        ({"prometheusRule": {"labels": {"release": True}}}, "/prometheusRule/labels/release"),
        ({"replicaCount": 0}, "at '/replicaCount': minimum: got 0, want 1"),
        ({"config": {"nats": {"servres": ["nats://a:4222"]}}}, "'servres' not allowed"),
        ({"config": {"nats": {"servers": ["a:4222"]}}}, "at '/config/nats/servers/0'"),
        ({"config": {"htpp": {"port": 8081}}}, "additional properties 'htpp' not allowed"),
        ({"serviceMonitor": {"interval": "30 s"}}, "at '/serviceMonitor/interval'"),
        (
            {"serviceAccount": {"tokenExpirationSeconds": 599}},
            "at '/serviceAccount/tokenExpirationSeconds': minimum: got 599, want 600",
        ),
        (
            {"serviceAccount": {"tokenExpirationSeconds": 3607}},
            "not 3607: the API server extends a token asked for exactly 3607 s to a year",
        ),
        (
            {"config": {"leader_election": {"enabled": True}}},
            "set leaderElection.*, not config.leader_election",
        ),
    ],
    ids=[
        "misspelt-section",
        "misspelt-key",
        "string-for-boolean",
        "string-for-port",
        "number-for-label",
        "boolean-for-label",
        "no-replicas",
        "misspelt-config-key",
        "nats-url-without-scheme",
        "misspelt-config-section",
        "bad-scrape-interval",
        "token-below-the-api-minimum",
        "token-the-api-server-extends",
        "config-leader-election",
    ],
)
def test_a_bad_value_is_refused_by_lint_and_template(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    """values.schema.json: a typo or a wrong type fails ``helm lint`` and ``helm template``
    with a message naming the value (the last: the template's own ``fail``, which lint
    reports without failing, so only template is held to it)."""
    path = str(values_file(tmp_path, values))
    done = helm("template", RELEASE, str(CHART), "--values", path, check=False)
    assert done.returncode != 0, done.stdout
    assert message in done.stderr
    if "leader_election" not in values.get("config", {}):
        done = helm("lint", "--strict", str(CHART), "--values", path, check=False)
        assert done.returncode != 0
        assert message in done.stdout + done.stderr


def _schema_keys(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for name, sub in schema["properties"].items():
        if sub.get("type") == "object" and "properties" in sub:
            out |= _schema_keys(sub, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


def test_the_values_schema_names_every_key_of_the_bridge_config() -> None:
    """``config`` in values.schema.json names the bridge's keys (a misspelt one fails helm,
    not the Pod), no more, no fewer; the bridge checks the values themselves. leader_election
    is the chart's to write (templates/configmap.yaml refuses it with a message of its
    own)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    config = schema["properties"]["config"]
    names = _schema_keys(config) - {"leader_election"}
    expected = {k for k in model_keys(settings.Settings()) if not k.startswith("leader_election.")}
    assert names == expected, (
        f"values.schema.json config: missing {sorted(expected - names)}, "
        f"unknown to the bridge {sorted(names - expected)}"
    )


# ----------------------------------------------------------------------------- the API server

CRD_NAMES = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


@pytest.fixture(scope="module")
def api(control_plane_factory: Any) -> Iterator[ControlPlane]:
    """A control plane of this module's own (nothing applied that a dry run could merge
    with), the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs installed and
    Established, and the namespace the chart is installed into (``--create-namespace``)."""
    cp: ControlPlane = control_plane_factory()
    cp.kubectl("apply", "--server-side", "-f", str(CRDS))
    for crd in CRD_NAMES:
        wait_established(cp, crd)
    cp.kubectl("create", "namespace", NAMESPACE)
    yield cp


def wait_established(cp: ControlPlane, crd: str, timeout: float = 60) -> None:
    """Until the CRD's Established condition is True. Neither ``kubectl wait`` nor a jsonpath
    filter: with kubectl 1.32 both fail at once ("status.conditions accessor error", "<nil> is
    not array or slice") on a CRD that has no conditions yet, just after its creation."""

    def established() -> bool:
        status = json.loads(cp.kubectl("get", f"crd/{crd}", "-o", "json").stdout)["status"]
        conditions = status.get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    eventually_sync(established, timeout, 0.2, what=f"{crd} Established", retry_on=())


def server_dry_run(cp: ControlPlane, *source: str, manifest: str | None = None) -> list[str]:
    """The objects the API server accepted in a server-side dry run (``-o name``); strict
    field validation: an unknown or duplicated field is an error, not a warning."""
    done = cp.kubectl(
        "apply", "--dry-run=server", "--validate=strict", *source, "-o", "name", input=manifest
    )
    return done.stdout.split()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("values", "expected"),
    [({}, DEFAULT_OBJECTS), (ALL_ON, DEFAULT_OBJECTS | OPTIONAL_OBJECTS)],
    ids=["default", "all-optional-on"],
)
def test_the_chart_is_accepted_by_the_api_server(
    api: ControlPlane, tmp_path: Path, values: dict[str, Any], expected: set[str]
) -> None:
    """What ``helm template`` renders passes a server-side dry run: the optional objects
    only when enabled, each accepted (the CRDs' schemas included)."""
    manifest = chart_manifest(tmp_path, values)
    assert sorted(server_dry_run(api, "-f", "-", manifest=manifest)) == sorted(expected)


@pytest.mark.e2e
def test_deploy_with_every_component_is_accepted_by_the_api_server(
    api: ControlPlane, tmp_path: Path
) -> None:
    """deploy/ with deploy/components/* in an overlay passes a server-side dry run."""
    out = server_dry_run(api, "-k", str(overlay(tmp_path, ALL_COMPONENTS)))
    expected = {"namespace/k8s-event-bridge"} | DEFAULT_OBJECTS | OPTIONAL_OBJECTS
    assert sorted(out) == sorted(expected)


# ----------------------------------------------------------------------------- chart = kustomize

# Labels Helm puts on every object about the release, which a kustomize build has no notion
# of. Dropped wherever a label map holds them (metadata, selectors, the Pod template), and
# only with exactly these values, so a wrong one still shows. In the chart the selectors carry
# app.kubernetes.io/instance (two releases never select each other's Pods);
# test_every_selector_selects_the_bridge_pods checks that each render's selectors fit its
# own Pods, which the comparison can not see once instance is dropped.
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
HELM_LABELS = {
    "helm.sh/chart": f"{CHART_META['name']}-{CHART_META['version']}",
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": RELEASE,
    # follows appVersion, the image tag's default; kustomize names the version once, in the
    # image tag (images: newTag), which the comparison covers
    "app.kubernetes.io/version": CHART_META["appVersion"],
}


def _drop_helm_labels(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in HELM_LABELS.items():
            if node.get(key) == value:
                del node[key]
        for v in node.values():
            _drop_helm_labels(v)
    elif isinstance(node, list):
        for v in node:
            _drop_helm_labels(v)


def effective_config(text: str, tmp_path: Path) -> dict[str, Any]:
    """The settings the bridge runs with for this bridge.yaml: defaults filled in, durations
    and sizes parsed (as ``k8s-event-bridge check-config`` prints them)."""
    path = tmp_path / "bridge.yaml"
    path.write_text(text)
    return settings.redacted(settings.load(str(path)))


def normalised(obj: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """An object as both tools are to make it. "Same" means equal after only this:

    - the Helm labels above are dropped;
    - the Pod template's ``checksum/config`` annotation is dropped: the chart rolls the Pods
      when the config changes; with kustomize one restarts them (docs/deploy.md);
    - the ConfigMap's ``bridge.yaml`` is compared as the config the bridge runs with, not as
      text: deploy/configmap.yaml keeps comments and leaves defaults out, the chart writes
      the leader_election section (lease name, durations) in full;

    Everything else is compared as rendered: kind, name, namespace, labels, annotations,
    spec, rules, data, in list order."""
    obj = copy.deepcopy(obj)
    _drop_helm_labels(obj)
    if obj["kind"] == "Deployment":
        meta = obj["spec"]["template"]["metadata"]
        annotations = meta.get("annotations", {})
        annotations.pop("checksum/config", None)
        if not annotations:
            meta.pop("annotations", None)
    if obj["kind"] == "ConfigMap" and "bridge.yaml" in obj.get("data", {}):
        obj["data"]["bridge.yaml"] = effective_config(obj["data"]["bridge.yaml"], tmp_path)
    return obj


def by_identity(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for o in objects:
        key = f"{o['kind']} {o['metadata'].get('namespace', '-')}/{o['metadata']['name']}"
        assert key not in out, f"{key} twice"
        out[key] = o
    return out


@pytest.mark.e2e
@once
@pytest.mark.parametrize(
    ("values", "components"),
    [({}, ()), (ALL_ON, ALL_COMPONENTS)],
    ids=["default", "all-optional-on"],
)
def test_the_chart_and_kustomize_make_the_same_objects(
    api: ControlPlane,
    tmp_path: Path,
    values: dict[str, Any],
    components: tuple[str, ...],
) -> None:
    """The chart with these values and deploy/ with the matching components make the same
    objects, field by field (:func:`normalised`), except the Namespace: kustomize makes it,
    Helm installs into one (``--create-namespace``) and can not own it."""
    chart = by_identity(documents(chart_manifest(tmp_path, values)))
    kustomized = by_identity(kustomize_objects(api, tmp_path, components))
    assert kustomized.pop(f"Namespace -/{NAMESPACE}")["kind"] == "Namespace"
    assert sorted(chart) == sorted(kustomized)
    differing = []
    for key in sorted(chart):
        ours, theirs = normalised(chart[key], tmp_path), normalised(kustomized[key], tmp_path)
        if ours != theirs:
            diff = difflib.unified_diff(
                yaml.safe_dump(theirs, sort_keys=True).splitlines(),
                yaml.safe_dump(ours, sort_keys=True).splitlines(),
                "kustomize",
                "helm",
                lineterm="",
            )
            differing.append(f"{key}:\n" + "\n".join(diff))
    assert not differing, "\n\n".join(differing)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


WORKLOADS = ("Deployment", "StatefulSet")
# the chart's subscribers on (tests/e2e/test_chart_subscribers.py), next to the bridge
SUBSCRIBERS_ON = {
    "alerting": {"enabled": True},
    "remediation": {"enabled": True, "namespaces": ["team-a"]},
    "otlp": {"enabled": True},
    "digests": {"enabled": True},
}


def _pod_labels(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] in WORKLOADS]


def _consumer_pod_labels() -> list[dict[str, str]]:
    """The Pods' labels of deploy/consumers/' alerting subscriber, remediation worker, OTLP
    subscriber and digests' program, and of the examples reading digests (alerting-digests.yaml,
    otlp-digests.yaml)."""
    out = []
    for path in (DEPLOY / "consumers").glob("*.yaml"):
        out += _pod_labels([d for d in yaml.safe_load_all(path.read_text()) if d])
    assert len(out) == 6, out
    return out


@pytest.mark.e2e
@once
@pytest.mark.parametrize("source", ["chart", "kustomize"])
def test_every_selector_selects_the_bridge_pods(
    api: ControlPlane, tmp_path: Path, source: str
) -> None:
    """In each render, every selector (Deployment, Service, PodDisruptionBudget, the
    anti-affinity, NetworkPolicy) selects the bridge's Pods and not the subscribers' of
    deploy/consumers/ (same namespace) nor the chart's own subscribers, and the ServiceMonitor
    selects the Service, by its port name, with the job name the alert rules expect."""
    consumers = _consumer_pod_labels()
    if source == "chart":
        objects = documents(chart_manifest(tmp_path, ALL_ON | SUBSCRIBERS_ON))
        subscribers = [o for o in objects if o["metadata"]["name"] != RELEASE]
        consumers += _pod_labels(subscribers)
        assert len(consumers) == 10
    else:
        objects = kustomize_objects(api, tmp_path, ALL_COMPONENTS)
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]
    service = one(objects, "Service")
    affinity = pod["spec"]["affinity"]["podAntiAffinity"]
    term = affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    selectors = {
        "Deployment": deployment["spec"]["selector"]["matchLabels"],
        "Service": service["spec"]["selector"],
        "PodDisruptionBudget": one(objects, "PodDisruptionBudget")["spec"]["selector"][
            "matchLabels"
        ],
        "anti-affinity": term["labelSelector"]["matchLabels"],
        "NetworkPolicy": one(objects, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
    }
    for what, selector in selectors.items():
        assert _selects(selector, pod["metadata"]["labels"]), (what, selector)
        for consumer in consumers:
            assert not _selects(selector, consumer), (what, selector, consumer)

    monitor = one(objects, "ServiceMonitor")["spec"]
    assert _selects(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    assert [e["port"] for e in monitor["endpoints"]] == [
        p["name"] for p in service["spec"]["ports"]
    ]
    # K8sEventBridgeDown (deploy/monitoring/) looks for up{job="k8s-event-bridge"}
    assert service["metadata"]["labels"][monitor["jobLabel"]] == "k8s-event-bridge"


# ----------------------------------------------------------------------------- NetworkPolicy


def _nats_ports(servers: list[str]) -> set[int]:
    """The ports the NATS client connects to (its defaults: 4222; 80 for ws://, 443 for
    wss://)."""
    out = set()
    for url in servers:
        parts = urlsplit(url)
        out.add(parts.port or {"ws": 80, "wss": 443}.get(parts.scheme, 4222))
    return out


def _allowed(rules: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for rule in rules for p in rule["ports"]}


@pytest.mark.e2e
@once
@pytest.mark.parametrize(
    "config",
    [
        None,
        {"http": {"port": 9090}, "nats": {"servers": ["nats://a.example:4333", "tls://b.example"]}},
        {"nats": {"servers": ["wss://nats.example", "ws://nats.example:8080"]}},
        "kustomize",
    ],
    ids=["chart-default", "chart-other-ports", "chart-websocket", "kustomize"],
)
def test_the_network_policy_allows_what_the_bridge_needs(
    api: ControlPlane, tmp_path: Path, config: dict[str, Any] | str | None
) -> None:
    """In: the http port the container listens on (metrics, probes), nothing else. Out: the
    API server (443, 6443), every NATS server's port, DNS on UDP and TCP, nothing else. The
    chart follows config.http.port and config.nats.servers."""
    if config == "kustomize":
        objects = kustomize_objects(api, tmp_path, ("networkpolicy",))
    else:
        values = {"networkPolicy": {"enabled": True}}
        if config:
            values["config"] = config
        objects = documents(chart_manifest(tmp_path, values))
    bridge_config = yaml.safe_load(one(objects, "ConfigMap")["data"]["bridge.yaml"])
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    http_port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    assert http_port == bridge_config.get("http", {}).get("port", 8080)

    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert _allowed(policy["ingress"]) == {("TCP", http_port)}
    nats = {("TCP", port) for port in _nats_ports(bridge_config["nats"]["servers"])}
    api_server = {("TCP", 443), ("TCP", 6443)}
    dns = {("UDP", 53), ("TCP", 53)}
    assert _allowed(policy["egress"]) == api_server | nats | dns


# ----------------------------------------------------------------------------- rules, dashboard


@pytest.mark.parametrize("labels", [{}, {"release": "prometheus"}])
def test_the_prometheus_rule_carries_the_alert_rules(
    tmp_path: Path, labels: dict[str, str]
) -> None:
    """prometheusRule.enabled: the groups of deploy/monitoring/k8s-event-bridge.rules.yaml,
    and prometheusRule.labels for the operator's ruleSelector."""
    values = {"prometheusRule": {"enabled": True, "labels": labels}}
    rule = one(documents(chart_manifest(tmp_path, values)), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((MONITORING / "k8s-event-bridge.rules.yaml").read_text())
    assert labels.items() <= rule["metadata"]["labels"].items()


def test_the_dashboard_config_map_is_labelled_for_grafana(tmp_path: Path) -> None:
    """dashboard.enabled: a ConfigMap with deploy/monitoring/dashboard.json as it is, with
    the label Grafana's sidecar looks for."""
    values = {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "Kubernetes"}}}
    cm = one(documents(chart_manifest(tmp_path, values)), "ConfigMap", f"{RELEASE}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Kubernetes"}
    assert cm["data"] == {"k8s-event-bridge.json": (MONITORING / "dashboard.json").read_text()}


# ----------------------------------------------------------------------------- the README's way


def _readme_install_commands() -> list[list[str]]:
    """The commands of the README's block that installs the bridge in a cluster, each as its
    arguments (continuation lines joined, comments dropped)."""
    readme = (REPO / "README.md").read_text()
    start = readme.index("In the cluster, with kustomize or Helm")
    begin = readme.index("```sh\n", start) + len("```sh\n")
    block = readme[begin : readme.index("\n```", begin)]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
            words = words[1:]  # an environment assignment before the command (DOCKER_BUILDKIT=1)
        if words:
            commands.append(words)
    return commands


@pytest.mark.e2e
@once
def test_the_readme_install_commands_pass_a_server_dry_run(
    api: ControlPlane, tmp_path: Path
) -> None:
    """What an operator copies from the README: `kubectl apply -k deploy/` and the `helm
    install` with its values, each through the real API server (a server-side dry run:
    there is no image to run here)."""
    commands = {c[0]: c for c in _readme_install_commands()}
    assert set(commands) == {"docker", "kubectl", "helm"}
    kubectl = commands["kubectl"]
    assert kubectl[1:] == ["apply", "-k", "deploy/"]
    assert f"deployment.apps/{RELEASE}" in server_dry_run(api, "-k", str(REPO / "deploy"))

    helm_args = commands["helm"][1:]
    assert helm_args[:2] == ["install", RELEASE]
    chart_at = helm_args.index("deploy/helm/k8s-event-bridge")
    helm_args[chart_at] = str(CHART)
    rendered = helm("template", *[a for a in helm_args[1:] if a != "--create-namespace"])
    accepted = server_dry_run(api, "-f", "-", manifest=rendered.stdout)
    operator = "monitoring.coreos.com"
    for kind in ("deployment.apps", f"servicemonitor.{operator}", f"prometheusrule.{operator}"):
        assert f"{kind}/{RELEASE}" in accepted
    config = one(documents(rendered.stdout), "ConfigMap")["data"]["bridge.yaml"]
    assert yaml.safe_load(config)["cluster"]["name"] == "prod-eu-1"
