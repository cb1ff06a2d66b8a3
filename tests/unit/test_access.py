"""The RBAC rules enrichment needs (bridge/access.py), and the two places that grant them: the
kustomize component deploy/components/enrich/ and the Helm chart's config.enrich. Each grants
exactly what access.rules computes for its config: nothing without enrichment, list and watch
on namespaces for namespace values, get on the kinds of enrich.object.kinds for object
values. The chart is rendered by the cached helm (tests/standins/gotools.py)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge import access, settings
from k8s_event_common.owners import KINDS
from tests.standins import gotools

GO_TOOLS = ("helm",)  # tests/conftest.py builds it after collection

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPONENT = DEPLOY / "components" / "enrich"
CHART = DEPLOY / "helm" / "k8s-event-bridge"
RELEASE = NAMESPACE = "k8s-event-bridge"

NAMESPACES = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
DEFAULT_KIND_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    {
        "apiGroups": ["apps"],
        "resources": ["daemonsets", "deployments", "replicasets", "statefulsets"],
        "verbs": ["get"],
    },
    {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": ["get"]},
]


@pytest.fixture(autouse=True)
def _no_bridge_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BRIDGE_ variable of whoever runs the tests changes no config here."""
    for name in list(os.environ):
        if name.startswith("BRIDGE_"):
            monkeypatch.delenv(name)


def config(enrich: dict[str, Any] | None = None, **sections: Any) -> settings.Settings:
    return settings.Settings.model_validate({**sections, "enrich": enrich or {}})


# ----------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    ("enrich", "expected"),
    [
        pytest.param({}, [], id="none"),
        pytest.param({"lookup_timeout": "5s", "max_inflight": 4}, [], id="bounds-only"),
        pytest.param({"object": {"kinds": ["Pod", "Node"]}}, [], id="kinds-without-values"),
        pytest.param({"namespace": {"labels": {"team": "team"}}}, [NAMESPACES], id="ns-label"),
        pytest.param(
            {"namespace": {"annotations": {"example.com/oncall": "oncall"}}},
            [NAMESPACES],
            id="ns-annotation",
        ),
        pytest.param(
            {"object": {"labels": {"app.kubernetes.io/name": "app"}}},
            DEFAULT_KIND_RULES,
            id="object-label",
        ),
        pytest.param({"object": {"owner_kind": "ownerkind"}}, DEFAULT_KIND_RULES, id="owner-kind"),
        pytest.param({"object": {"owner_name": "ownername"}}, DEFAULT_KIND_RULES, id="owner-name"),
        pytest.param(
            {"namespace": {"labels": {"team": "team"}}, "object": {"owner_kind": "ownerkind"}},
            [NAMESPACES, *DEFAULT_KIND_RULES],
            id="namespace-and-owner",
        ),
        pytest.param(
            {"object": {"owner_kind": "ownerkind", "kinds": ["Node"]}},
            [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
            id="node-cluster-scoped",
        ),
        pytest.param(
            {
                "namespace": {"annotations": {"example.com/oncall": "oncall"}},
                "object": {
                    "labels": {"app": "app"},
                    "kinds": ["CronJob", "Service", "Pod", "Node", "Deployment", "Pod"],
                },
            },
            [
                NAMESPACES,
                {"apiGroups": [""], "resources": ["nodes", "pods", "services"], "verbs": ["get"]},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
                {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["get"]},
            ],
            id="core-apps-batch-mix",
        ),
        pytest.param(
            {"object": {"owner_name": "ownername", "kinds": ["Job", "ReplicationController"]}},
            [
                {"apiGroups": [""], "resources": ["replicationcontrollers"], "verbs": ["get"]},
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
            ],
            id="core-and-batch",
        ),
        pytest.param({"object": {"owner_kind": "ownerkind", "kinds": []}}, [], id="no-kinds"),
    ],
)
def test_the_rules_are_what_the_enrich_config_reads(
    enrich: dict[str, Any], expected: list[dict[str, list[str]]]
) -> None:
    assert access.rules(config(enrich)) == expected


def test_without_enrichment_no_other_setting_adds_a_rule() -> None:
    """Watching some namespaces, a cluster name, leader election: the base's rights."""
    s = config(
        None,
        kubernetes={"namespaces": ["shop"]},
        cluster={"name": "prod"},
        leader_election={"enabled": True},
    )
    assert access.rules(s) == []


def test_the_rules_are_new_lists_each_time() -> None:
    """A caller changing what it got (a patch, a merge) changes no later answer."""
    s = config({"namespace": {"labels": {"team": "team"}}})
    first = access.rules(s)
    first[0]["verbs"].append("get")
    assert access.rules(s) == [NAMESPACES]
    assert access.NAMESPACES_RULE == NAMESPACES


def test_every_lookup_kind_is_in_a_group_the_docs_name() -> None:
    """docs/deploy.md names the groups: core, apps and batch."""
    groups = {k.group for k in KINDS.values()}
    assert groups == {"", "apps", "batch"}


# ----------------------------------------------------------------------------- deploy/


def _base_config_text() -> str:
    configmap = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())
    return str(configmap["data"]["bridge.yaml"])


def _load(text: str, tmp_path: Path, name: str = "bridge.yaml") -> settings.Settings:
    path = tmp_path / name
    path.write_text(text)
    return settings.load(str(path))


def _component_objects() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((COMPONENT / "rbac.yaml").read_text())
    return {d["kind"]: d for d in docs if d}


def test_the_base_asks_for_no_enrichment_and_grants_none(tmp_path: Path) -> None:
    """deploy/ as it is: enrichment off, so the base's ClusterRole is all it needs."""
    base = _load(_base_config_text(), tmp_path)
    assert not base.enrich.enabled
    assert access.rules(base) == []
    role = yaml.safe_load((DEPLOY / "clusterrole.yaml").read_text())
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["namespaces"],
            "resourceNames": ["kube-system"],
            "verbs": ["get"],
        },
    ]


def test_the_component_turns_on_the_example_enrichment() -> None:
    s = settings.load(str(COMPONENT / "bridge.yaml"))
    assert dict(s.enrich.namespace.labels) == {"team": "team"}
    assert not s.enrich.namespace.annotations
    assert not s.enrich.object.labels
    assert (s.enrich.object.owner_kind, s.enrich.object.owner_name) == ("ownerkind", "ownername")
    assert s.nats.subject_template == "{cluster}.{team}.{namespace}.{kind}.{reason}"


def test_the_component_grants_exactly_the_rules_of_its_config() -> None:
    objects = _component_objects()
    assert sorted(objects) == ["ClusterRole", "ClusterRoleBinding"]
    role = objects["ClusterRole"]
    assert role["rules"] == access.rules(settings.load(str(COMPONENT / "bridge.yaml")))
    assert role["rules"] == [NAMESPACES, *DEFAULT_KIND_RULES]


def test_the_component_binds_its_role_to_the_bridges_service_account() -> None:
    """Components are not touched by the base's transformers: names, namespace and labels are
    written out as the base's own binding has them."""
    objects = _component_objects()
    role, binding = objects["ClusterRole"], objects["ClusterRoleBinding"]
    base = yaml.safe_load((DEPLOY / "clusterrolebinding.yaml").read_text())
    account = yaml.safe_load((DEPLOY / "serviceaccount.yaml").read_text())
    base_labels = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["labels"][0]["pairs"]
    assert binding["roleRef"] == {**base["roleRef"], "name": role["metadata"]["name"]}
    assert binding["subjects"] == base["subjects"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"],
        }
    ]
    assert role["metadata"]["name"] != base["roleRef"]["name"]
    for obj in (role, binding):
        assert obj["metadata"]["labels"] == base_labels


def test_the_components_config_is_the_bases_with_enrichment(tmp_path: Path) -> None:
    """bridge.yaml replaces the base's whole config: apart from enrich and the subject
    template it must stay the base's (a change to deploy/configmap.yaml goes there too)."""
    base = settings.redacted(_load(_base_config_text(), tmp_path))
    ours = settings.redacted(settings.load(str(COMPONENT / "bridge.yaml")))
    for c in (base, ours):
        c.pop("enrich")
        c["nats"].pop("subject_template")
    assert ours == base


def test_the_component_replaces_the_bases_config_map() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    configmap = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert kustomization["resources"] == ["rbac.yaml"]
    [generator] = kustomization["configMapGenerator"]
    assert generator["name"] == configmap["metadata"]["name"]
    assert generator["namespace"] == configmap["metadata"]["namespace"]
    assert generator["behavior"] == "replace"
    assert generator["files"] == ["bridge.yaml"]


# ----------------------------------------------------------------------------- the chart


def helm_template(tmp_path: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(path)]
    return subprocess.run(
        [str(gotools.ensure("helm")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("HELM_")},
    )


def rendered(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    done = helm_template(tmp_path, values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def chart_rules(objects: list[dict[str, Any]]) -> list[dict[str, list[str]]] | None:
    """The rules of the chart's enrichment ClusterRole; None when it renders none (then no
    binding either)."""
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    role = named.get(("ClusterRole", f"{RELEASE}-enrich"))
    binding = named.get(("ClusterRoleBinding", f"{RELEASE}-enrich"))
    assert (role is None) == (binding is None)
    if role is None:
        return None
    assert binding is not None
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
    ]
    return list(role["rules"])


def chart_config(objects: list[dict[str, Any]], tmp_path: Path) -> settings.Settings:
    """The config the chart's bridge runs with."""
    [cm] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == RELEASE]
    return _load(cm["data"]["bridge.yaml"], tmp_path, "chart-bridge.yaml")


CHART_CASES = [
    pytest.param({}, id="none"),
    pytest.param({"lookup_timeout": "3s", "object": {"kinds": ["Node"]}}, id="kinds-only"),
    pytest.param({"namespace": {"labels": {"team": "team"}}}, id="ns-label"),
    pytest.param({"namespace": {"annotations": {"example.com/oncall": "oncall"}}}, id="ns-ann"),
    pytest.param({"object": {"labels": {"app.kubernetes.io/name": "app"}}}, id="object-label"),
    pytest.param({"object": {"owner_kind": "ownerkind"}}, id="owner-kind"),
    pytest.param({"object": {"owner_name": "ownername"}}, id="owner-name"),
    pytest.param({"object": {"owner_kind": "ownerkind", "kinds": []}}, id="no-kinds"),
    pytest.param(
        {
            "namespace": {"labels": {"team": "team"}},
            "object": {
                "owner_name": "ownername",
                "kinds": ["CronJob", "Node", "Pod", "Deployment", "Pod", "Service"],
            },
        },
        id="core-apps-batch-mix",
    ),
    pytest.param({"object": {"owner_kind": "k", "kinds": list(KINDS)}}, id="every-kind"),
]


@pytest.mark.parametrize("enrich", CHART_CASES)
@pytest.mark.processes  # runs helm (tests/unit/conftest.py)
def test_the_chart_grants_what_access_computes(tmp_path: Path, enrich: dict[str, Any]) -> None:
    """The chart's ClusterRole <fullname>-enrich holds access.rules of the config it renders
    for the bridge; none at all when that is nothing."""
    objects = rendered(tmp_path, {"config": {"enrich": enrich}})
    expected = access.rules(chart_config(objects, tmp_path))
    assert chart_rules(objects) == (expected or None)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.processes  # runs helm (tests/unit/conftest.py)
def test_the_charts_kind_table_is_lookup_kinds(tmp_path: Path, kind: str) -> None:
    """Each kind alone: the chart's table (templates/_helpers.tpl) gives the group and
    resource of k8s_event_common.owners.KINDS."""
    k = KINDS[kind]
    objects = rendered(
        tmp_path, {"config": {"enrich": {"object": {"owner_kind": "k", "kinds": [kind]}}}}
    )
    assert chart_rules(objects) == [
        {"apiGroups": [k.group], "resources": [k.resource], "verbs": ["get"]}
    ]


def test_the_charts_schema_takes_the_lookup_kinds_and_no_other() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    enrich = schema["properties"]["config"]["properties"]["enrich"]
    kinds = enrich["properties"]["object"]["properties"]["kinds"]
    assert kinds["items"]["enum"] == list(KINDS)


@pytest.mark.processes  # runs helm (tests/unit/conftest.py)
def test_the_chart_refuses_an_unknown_kind_naming_it(tmp_path: Path) -> None:
    done = helm_template(
        tmp_path, {"config": {"enrich": {"object": {"owner_kind": "k", "kinds": ["Ingress"]}}}}
    )
    assert done.returncode != 0
    assert "/config/enrich/object/kinds/0" in done.stderr


@pytest.mark.processes  # runs helm (tests/unit/conftest.py)
def test_the_chart_grants_nothing_without_rbac_create(tmp_path: Path) -> None:
    values = {
        "rbac": {"create": False},
        "config": {"enrich": {"namespace": {"labels": {"team": "team"}}}},
    }
    objects = rendered(tmp_path, values)
    assert chart_rules(objects) is None
    assert not [o for o in objects if o["kind"].startswith("ClusterRole")]


@pytest.mark.processes  # runs helm (tests/unit/conftest.py)
def test_the_chart_still_refuses_a_plain_secret_next_to_enrichment(tmp_path: Path) -> None:
    values = {
        "config": {
            "enrich": {"namespace": {"labels": {"team": "team"}}},
            "nats": {"password": "hunter2"},
        }
    }
    done = helm_template(tmp_path, values)
    assert done.returncode != 0
    assert "at '/config/nats/password'" in done.stderr
    assert "hunter2" not in done.stderr


# Labels Helm puts on every object about the release, which the component has no notion of.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")  # fmt: skip


@pytest.mark.processes  # runs helm (tests/unit/conftest.py)
def test_the_chart_and_the_component_make_the_same_objects(tmp_path: Path) -> None:
    """The chart given the component's enrich and subject template makes the component's
    ClusterRole and ClusterRoleBinding, field by field, bar Helm's labels."""
    component = yaml.safe_load((COMPONENT / "bridge.yaml").read_text())
    values = {
        "config": {
            "enrich": component["enrich"],
            "nats": {"subject_template": component["nats"]["subject_template"]},
        }
    }
    objects = rendered(tmp_path, values)
    ours = {}
    for o in objects:
        if o["kind"].startswith("ClusterRole") and o["metadata"]["name"].endswith("-enrich"):
            o = copy.deepcopy(o)
            for label in HELM_LABELS:
                o["metadata"]["labels"].pop(label)
            ours[o["kind"]] = o
    assert ours == _component_objects()
    assert (
        chart_config(objects, tmp_path).nats.subject_template
        == (component["nats"]["subject_template"])
    )


def test_check_config_rbac_prints_the_cluster_role_of_the_configuration(tmp_path, capsys):
    from bridge import cli

    path = tmp_path / "bridge.yaml"
    path.write_text(
        yaml.safe_dump(
            {"enrich": {"namespace": {"labels": {"team": "team"}}, "object": {"kinds": ["Pod"]}}}
        )
    )
    assert cli.main(["check-config", "--config", str(path)]) == 0  # the config, as before
    assert "enrich:" in capsys.readouterr().out
    assert cli.main(["check-config", "--rbac", "--config", str(path)]) == 0
    role = yaml.safe_load(capsys.readouterr().out)
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == [access.NAMESPACES_RULE]  # no object values: no get
    path.write_text(yaml.safe_dump({"enrich": {"object": {"owner_kind": "ownerkind"}}}))
    assert cli.main(["check-config", "--rbac", "--config", str(path)]) == 0
    role = yaml.safe_load(capsys.readouterr().out)
    assert role["rules"] == access.rules(settings.load(str(path)))
    assert {r["verbs"][0] for r in role["rules"]} == {"get"}
