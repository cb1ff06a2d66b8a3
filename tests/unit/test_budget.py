"""The worst case of memory (bench/budget.py) against what deploy/ and the chart ship: the
defaults' bound under 80% of the limit, the request at least the measured idle program (the
bridge; the OTLP subscriber, the alerting subscriber, the remediation worker)"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bench import budget
from bench.budget import MIB, AlertingBudget, Budget, OtlpBudget, RemediationBudget
from bridge.settings import Settings, load
from k8s_event_consumer.alerting import settings as alerting_settings
from k8s_event_consumer.otlp import settings as otlp_settings
from k8s_event_consumer.remediation import settings as remediation_settings
from tests import shipped
from tests.shipped import quantity
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


# --- the OTLP subscriber -------------------------------------------------------------------


@pytest.mark.parametrize("chart", [False, True], ids=["deploy", "chart"])
def test_the_otlp_subscribers_shipped_worst_case_is_under_80_percent_of_its_limit(
    tmp_path: Path, chart: bool
) -> None:
    path = tmp_path / "otlp.yaml"
    path.write_text(shipped.config_text("otlp", chart))
    bound = OtlpBudget.of(otlp_settings.load(str(path))).total
    request, limit = shipped.memory("otlp", chart)
    assert bound <= 0.8 * limit, f"{bound / MIB:.1f} MiB > 80% of {limit / MIB:.0f} MiB"
    assert request >= budget.OTLP_IDLE_MIB * MIB


def test_the_otlp_bound_follows_its_configuration() -> None:
    base = OtlpBudget.of(otlp_settings.Settings())
    bigger = OtlpBudget.of(otlp_settings.Settings(otlp={"max_request_bytes": 16 * MIB}))
    # the batch in hand and the request in flight, each in its copies
    assert bigger.total - base.total == pytest.approx(
        12 * MIB * (budget.OTLP_BATCH_COPIES + budget.OTLP_REQUEST_COPIES)
    )
    fewer = OtlpBudget.of(otlp_settings.Settings(nats={"batch": 64}))
    assert base.total - fewer.total == pytest.approx(448 * budget.OTLP_PER_MESSAGE)
    # a server allowing larger messages: one more in the batch, in a request, a dead letter
    larger = OtlpBudget.of(otlp_settings.Settings(), max_payload=8 * MIB)
    assert larger.total > base.total + 7 * MIB * budget.OTLP_BATCH_COPIES
    assert [name for name, _ in base.rows()][-1] == "total"


# --- the remediation worker ----------------------------------------------------------------


def remediation_config(config: str) -> dict[str, Any]:
    """The worker's config as the chart renders it: the cluster added when unset."""
    cfg: dict[str, Any] = yaml.safe_load(config)
    cfg.setdefault("kubernetes", {}).setdefault("cluster", "prod")
    return cfg


@pytest.mark.parametrize("chart", [False, True], ids=["deploy", "chart"])
def test_the_remediation_workers_shipped_worst_case_is_under_80_percent_of_its_limit(
    tmp_path: Path, chart: bool
) -> None:
    path = tmp_path / "remediation.yaml"
    path.write_text(yaml.safe_dump(remediation_config(shipped.config_text("remediation", chart))))
    bound = RemediationBudget.of(remediation_settings.load(str(path))).total
    request, limit = shipped.memory("remediation", chart)
    assert bound <= 0.8 * limit, f"{bound / MIB:.1f} MiB > 80% of {limit / MIB:.0f} MiB"
    assert request >= budget.REMEDIATION_IDLE_MIB * MIB


def test_a_fetch_holds_the_byte_budget_or_batch_messages_of_max_payload() -> None:
    fetched = budget.fetched
    assert fetched(SimpleNamespace(batch=64), MIB) == 64 * MIB  # a kit bounded in count only
    bounded = SimpleNamespace(batch=64, max_batch_bytes=4 * MIB)
    assert fetched(bounded, MIB) == 4 * MIB
    # the budget raised to the largest message; a few messages under their budget
    assert fetched(SimpleNamespace(batch=64, max_batch_bytes=64 * 1024), MIB) == MIB + 8 * 1024
    assert fetched(SimpleNamespace(batch=2, max_batch_bytes=4 * MIB), MIB) == 2 * MIB
    assert fetched(bounded, 8 * MIB) == 8 * MIB + 8 * 1024


def test_the_remediation_bound_follows_its_configuration() -> None:
    def of(max_payload: int = MIB, **sections: Any) -> RemediationBudget:
        return RemediationBudget.of(
            remediation_settings.Settings(kubernetes={"cluster": "c"}, **sections), max_payload
        )

    base = of()
    fewer = of(nats={"batch": 8})  # fewer messages a fetch: fewer bytes too, in count only
    assert fewer.fetches < base.fetches
    # when each object was acted on: every one of the last rate_limit, 4,096 at most
    hour = of(remediation={"rate_limit": "1h"})
    assert hour.last_actions == base.last_actions == budget.LAST_ACTIONS * budget.LAST_ACTION_BYTES
    short = of(remediation={"rate_limit": "10s"})
    assert short.last_actions == 10 * budget.ACTIONS_PER_SECOND * budget.LAST_ACTION_BYTES
    # a server allowing larger messages: the one decoded, the one nats-py reads, the fetches
    larger = of(8 * MIB)
    assert larger.total - base.total >= 7 * MIB * (budget.REMEDIATION_DECODE_COPIES + 1)
    assert [name for name, _ in base.rows()][-1] == "total"
    # the proof: the Event, the Pod and every owner the walk may read, each the largest object
    assert base.proof == (2 + 4) * budget.OBJECT_BYTES


# -- the alerting subscriber -------------------------------------------------------------------


def alerting_bound(config: str, max_payload: int = MIB) -> AlertingBudget:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "alerting.yaml"
        path.write_text(config)
        return AlertingBudget.of(alerting_settings.load(str(path)), max_payload)


@pytest.mark.parametrize("chart", [False, True], ids=["deploy", "chart"])
def test_the_alerting_worst_case_is_under_80_percent_of_its_limit(chart: bool) -> None:
    """deploy/consumers/alerting.yaml's and the chart's config and memory limit: the bound
    computed for a server of the default max_payload stays under 80% of the limit, and the
    request is at least an idle subscriber."""
    bound = alerting_bound(shipped.config_text("alerting", chart)).total
    request, limit = shipped.memory("alerting", chart)
    assert bound <= 0.8 * limit, f"{bound / MIB:.1f} MiB > 80% of the limit"
    assert request >= budget.ALERTING_IDLE_MIB * MIB


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
