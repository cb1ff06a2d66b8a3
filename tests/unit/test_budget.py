"""The worst case of memory (bench/budget.py) against what deploy/ and the chart ship: the
defaults' bound under 80% of the limit, the request at least the measured idle program (the
bridge, the alerting subscriber)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml

from bench import budget
from bench.budget import MIB, AlertingBudget, Budget, quantity
from bridge.settings import Settings, load
from tests.unit.test_settings_cli import _configmap_config, _helm_values_config

REPO = Path(__file__).resolve().parents[2]


def deployment_resources() -> dict[str, dict[str, str]]:
    docs = yaml.safe_load_all(REPO.joinpath("deploy/deployment.yaml").read_text())
    deployment = next(d for d in docs if d and d.get("kind") == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["resources"]


def chart_resources() -> dict[str, dict[str, str]]:
    values = yaml.safe_load(REPO.joinpath("deploy/helm/k8s-event-bridge/values.yaml").read_text())
    return values["resources"]


@pytest.mark.parametrize(
    ("resources", "config"),
    [(deployment_resources, _configmap_config), (chart_resources, _helm_values_config)],
    ids=["deploy", "chart"],
)
def test_the_shipped_worst_case_is_under_80_percent_of_the_limit(tmp_path, resources, config):
    path = tmp_path / "bridge.yaml"
    path.write_text(config())
    bound = Budget.of(load(str(path))).total
    res = resources()
    limit = quantity(res["limits"]["memory"])
    assert bound <= 0.8 * limit, f"{bound / MIB:.1f} MiB > 80% of {res['limits']['memory']}"
    # the request: what an idle bridge measures (the kubelet evicts first what is above it)
    assert quantity(res["requests"]["memory"]) >= budget.IDLE_MIB * MIB


def test_the_bound_follows_the_configuration():
    base = Budget.of(Settings())
    bigger = Budget.of(
        Settings(queue={"max_bytes": 64 * MIB}, nats={"max_inflight_bytes": 64 * MIB})
    )
    assert bigger.total - base.total == pytest.approx(
        (64 - 8) * MIB * budget.QUEUE_COPIES + (64 - 4) * MIB * budget.WINDOW_COPIES
    )
    scoped = Budget.of(Settings(kubernetes={"namespaces": [f"n{i}" for i in range(100)]}))
    assert scoped.total > base.total
    assert [name for name, _ in base.rows()][-1] == "total"


def test_the_enrich_component_raises_the_limit_over_its_worst_case():
    """deploy/components/enrich: the enrichment's waiting Events, cache and namespaces are in
    the bound, and the component's memory limit keeps it under 80%."""
    component = REPO / "deploy/components/enrich"
    bound = Budget.of(load(str(component / "bridge.yaml")))
    assert bound.enrichment > 0
    assert bound.total > Budget.of(Settings()).total
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    (patch,) = kustomization["patches"]
    (op,) = yaml.safe_load(patch["patch"])
    assert op["path"].endswith("/resources/limits/memory")
    assert bound.total <= 0.8 * quantity(op["value"]), f"{bound.total_mib:.1f} MiB"


def test_the_enrichment_terms_follow_its_settings():
    none = Budget.of(Settings())
    assert none.enrichment == 0
    ns_only = Budget.of(Settings(enrich={"namespace": {"labels": {"team": "team"}}}))
    objects = Budget.of(
        Settings(enrich={"object": {"owner_kind": "ownerkind"}, "cache_bytes": 64 * MIB})
    )
    assert 0 < ns_only.enrichment < objects.enrichment
    assert objects.enrichment >= 64 * MIB * budget.CACHE_COPIES


# -- the alerting subscriber -------------------------------------------------------------------


def alerting_bound(config: str, max_payload: int = MIB) -> AlertingBudget:
    from k8s_event_consumer.alerting import settings

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "alerting.yaml"
        path.write_text(config)
        return AlertingBudget.of(settings.load(str(path)), max_payload)


@pytest.mark.parametrize("chart", [False, True], ids=["deploy", "chart"])
def test_the_alerting_worst_case_is_under_80_percent_of_its_limit(chart: bool) -> None:
    """deploy/consumers/alerting.yaml's and the chart's config and memory limit: the bound
    computed for a server of the default max_payload stays under 80% of the limit, and the
    request is at least an idle subscriber."""
    shipped = budget.shipped_alerting(chart=chart)
    bound = alerting_bound(shipped["config"]).total
    assert bound <= 0.8 * shipped["limit"], f"{bound / MIB:.1f} MiB > 80% of the limit"
    assert shipped["request"] >= budget.ALERTING_IDLE_MIB * MIB


def test_the_alerting_bound_follows_its_configuration() -> None:
    base = alerting_bound("")
    more = alerting_bound(
        "alerts: {max_bytes: 50331648, max_alerts: 20000}\nnats: {max_batch_bytes: 16777216}\n"
    )
    assert more.alerts - base.alerts == pytest.approx(24 * MIB + 10_000 * budget.PER_ALERT)
    assert more.in_hand - base.in_hand == pytest.approx(12 * MIB * budget.FETCH_COPIES)
    # a server that takes larger messages: a fetch raised to the largest, one decoded
    assert alerting_bound("", max_payload=8 * MIB).in_hand > base.in_hand + 8 * MIB
    assert [name for name, _ in base.rows()][-1] == "total"
