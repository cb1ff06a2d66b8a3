"""deploy/monitoring/: the Grafana dashboard, the PrometheusRule and the Helm chart's copies,
made from one source each.

- ``dashboard.json`` is built here (:func:`dashboard`), panel by panel.
- ``k8s-event-bridge.rules.yaml`` (the plain rules file) is written by hand; ``prometheusrule.yaml``
  carries the same groups for the Prometheus Operator.
- The Helm chart can not read files outside itself: ``deploy/helm/k8s-event-bridge/files/``
  holds copies of the rules and the dashboard; so does the kustomize component
  ``deploy/components/dashboard/`` (of the dashboard).

``python -m tools.monitoring`` writes them; ``--check`` names each stale file and exits 1
(tests/integration/test_monitoring.py runs the check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "k8s-event-bridge.rules.yaml"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboard.json"
CHART_FILES = REPO / "deploy" / "helm" / "k8s-event-bridge" / "files"
COMPONENTS = REPO / "deploy" / "components"

P = "k8s_event_bridge_"
SEL = 'namespace=~"$namespace", pod=~"$pod"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "[$__rate_interval]"

PROMETHEUS_RULE_HEADER = """\
# The alert rules (k8s-event-bridge.rules.yaml: the same groups; made by
# `python -m tools.monitoring`) as a PrometheusRule of the Prometheus Operator. Its Prometheus
# selects rules by label (spec.ruleSelector): add the labels yours expects, e.g.
# release: prometheus.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: k8s-event-bridge
  namespace: k8s-event-bridge
  labels:
    app.kubernetes.io/name: k8s-event-bridge
    app.kubernetes.io/part-of: k8s-event-bridge
spec:
"""


def _value_map(pairs: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    options = {
        str(k): {"text": text, "color": color, "index": i}
        for i, (k, text, color) in enumerate(pairs)
    }
    return [{"type": "value", "options": options}]


class Board:
    """Panels laid out in rows of 24 columns, top to bottom."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.y = 0
        self._id = 0

    def _next_id(self) -> int:
        self._id += 1
        return self._id

    def row(self, title: str) -> None:
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "id": self._next_id(),
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def next_line(self, height: int) -> None:
        self.y += height

    def panel(
        self,
        title: str,
        targets: list[tuple[str, str]],
        *,
        x: int,
        w: int,
        h: int = 8,
        unit: str = "short",
        kind: str = "timeseries",
        description: str = "",
        defaults: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        table: bool = False,
    ) -> None:
        queries: list[dict[str, Any]] = []
        for i, (expr, legend) in enumerate(targets):
            q: dict[str, Any] = {
                "datasource": DATASOURCE,
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
            }
            if table:
                q |= {"instant": True, "format": "table"}
            queries.append(q)
        if options is None and kind == "timeseries":
            options = {
                "legend": {"displayMode": "list", "placement": "bottom"},
                "tooltip": {"mode": "multi"},
            }
        p: dict[str, Any] = {
            "type": kind,
            "title": title,
            "id": self._next_id(),
            "datasource": DATASOURCE,
            "description": description,
            "gridPos": {"h": h, "w": w, "x": x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit, **(defaults or {})}, "overrides": []},
            "options": options or {},
            "targets": queries,
        }
        if table:
            p["transformations"] = [
                {"id": "labelsToFields", "options": {}},
                {"id": "merge", "options": {}},
            ]
        self.panels.append(p)

    def stat(
        self,
        title: str,
        expr: str,
        legend: str,
        *,
        x: int,
        w: int,
        mappings: list[dict[str, Any]] | None = None,
        thresholds: list[dict[str, Any]] | None = None,
        unit: str = "short",
        description: str = "",
    ) -> None:
        defaults: dict[str, Any] = {}
        if mappings:
            defaults["mappings"] = mappings
        if thresholds:
            defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
            defaults["color"] = {"mode": "thresholds"}
        self.panel(
            title,
            [(expr, legend)],
            x=x,
            w=w,
            h=4,
            unit=unit,
            kind="stat",
            description=description,
            defaults=defaults,
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "colorMode": "background",
                "textMode": "value_and_name",
            },
        )


def _rate(metric: str, by: str = "") -> str:
    inner = f"rate({P}{metric}{{{SEL}}}{RATE})"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def _increase(metric: str, by: str) -> str:
    return f"sum by ({by}) (increase({P}{metric}{{{SEL}}}{RATE}))"


def _gauge(metric: str) -> str:
    return f"{P}{metric}{{{SEL}}}"


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard: overview, flow, queue and JetStream, scopes and checkpoints."""
    b = Board()
    b.row("Overview")
    up_down = [(0, "not ready", "red"), (1, "ready", "green")]
    b.stat(
        "Ready",
        _gauge("ready"),
        "{{pod}}",
        x=0,
        w=4,
        mappings=_value_map(up_down),
        description="/readyz: 1 while it answers 200",
    )
    b.stat(
        "Leader",
        _gauge("leader"),
        "{{pod}}",
        x=4,
        w=4,
        mappings=_value_map([(0, "standby", "blue"), (1, "leading", "green")]),
        description="1 while the replica reads and publishes (it holds the Lease, or runs alone)",
    )
    b.stat(
        "NATS",
        _gauge("nats_connected"),
        "{{pod}}",
        x=8,
        w=4,
        mappings=_value_map([(0, "disconnected", "red"), (1, "connected", "green")]),
    )
    b.stat(
        "API server",
        _gauge("apiserver_reachable"),
        "{{pod}}",
        x=12,
        w=4,
        mappings=_value_map([(0, "unreachable", "red"), (1, "reachable", "green")]),
    )
    b.stat(
        "Version",
        _gauge("build_info"),
        "{{pod}} {{version}}",
        x=16,
        w=4,
        unit="none",
        description="The running version (build_info's version label)",
    )
    b.stat(
        "Restarts (24h)",
        f"changes(process_start_time_seconds{{{SEL}}}[24h])",
        "{{pod}}",
        x=20,
        w=4,
        thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
        description="Process restarts Prometheus saw: a crash, an OOM kill, a rollout",
    )
    b.next_line(4)

    b.row("Flow")
    b.panel(
        "Events and messages per second",
        [
            (_rate("events_received_total", "pod"), "received {{pod}}"),
            (_rate("events_filtered_total", "pod"), "filtered {{pod}}"),
            (_rate("events_published_total", "pod"), "published {{pod}}"),
            (_rate("publish_duplicates_total", "pod"), "duplicates {{pod}}"),
        ],
        x=0,
        w=12,
        unit="ops",
        description="Received from the API server; dropped by the filter; published (acked by "
        "JetStream: Events and status events); acked as duplicates",
    )
    bucket = f"{P}publish_latency_seconds_bucket{{{SEL}}}"
    latency_sum = _rate("publish_latency_seconds_sum")
    latency_count = _rate("publish_latency_seconds_count")
    b.panel(
        "Publish latency (sent to JetStream ack)",
        [
            (f"histogram_quantile(0.5, sum by (le) (rate({bucket}{RATE})))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate({bucket}{RATE})))", "p99"),
            (f"{latency_sum} / {latency_count}", "mean"),
        ],
        x=12,
        w=12,
        unit="s",
    )
    b.next_line(8)
    b.panel(
        "Publish failures and retries",
        [
            (_rate("publish_failures_total", "reason"), "failed: {{reason}}"),
            (_rate("publish_retries_total"), "sent again"),
        ],
        x=0,
        w=12,
        unit="ops",
        description="Attempts that failed, by reason: each is sent again with the same "
        "Nats-Msg-Id unless the reason is permanent (then the message is dropped)",
    )
    b.panel(
        "Gaps, dropped messages, bad input",
        [
            (_increase("gaps_total", "certainty"), "gap: {{certainty}}"),
            (_increase("messages_dropped_total", "reason"), "dropped: {{reason}}"),
            (_increase("input_skipped_total", "reason"), "skipped: {{reason}}"),
        ],
        x=12,
        w=12,
        description="A gap and a dropped message are status events in the stream too; bad "
        "input skipped is logged with a sample",
    )
    b.next_line(8)

    b.row("Queue and JetStream")
    b.panel(
        "Queue",
        [
            (_gauge("queue_depth"), "queued {{pod}}"),
            (_gauge("queue_max_messages"), "bound {{pod}}"),
        ],
        x=0,
        w=8,
        description="Messages waiting to be published; at the bound the watch waits "
        "(back-pressure), nothing is dropped",
    )
    b.panel(
        "Queue bytes",
        [(_gauge("queue_bytes"), "queued {{pod}}"), (_gauge("queue_max_bytes"), "bound {{pod}}")],
        x=8,
        w=8,
        unit="bytes",
    )
    b.panel(
        "In flight",
        [
            (_gauge("publish_inflight"), "in flight {{pod}}"),
            (_gauge("publish_oldest_wait_seconds"), "oldest ack wait (s) {{pod}}"),
        ],
        x=16,
        w=8,
        description="Publishes waiting for their JetStream ack, and how long the oldest has waited",
    )
    b.next_line(8)

    b.row("Watches and checkpoints, per scope")
    b.panel(
        "Scope status",
        [
            (_gauge("scope_synced"), "synced {{scope}}"),
            (_gauge("watch_failing_seconds"), "failing for (s) {{scope}}"),
        ],
        x=0,
        w=8,
        kind="table",
        table=True,
        options={"showHeader": True},
        description="Per scope (a namespace, or * for all): its first list done (1), and how "
        "long its list or watch has been failing (0: it works)",
    )
    b.panel(
        "API server breaker",
        [(_gauge("apiserver_breaker_state"), "{{scope}}")],
        x=8,
        w=8,
        defaults={
            "mappings": _value_map(
                [(0, "healthy", "green"), (1, "open", "red"), (2, "half-open", "orange")]
            ),
            "min": 0,
            "max": 2,
        },
        description="Per scope: 0 healthy, 1 open (the API server failing or slow), 2 half-open "
        "(a probe is out)",
    )
    b.panel(
        "Checkpoint lag",
        [
            (_gauge("checkpoint_lag_seconds"), "{{scope}}"),
            (_gauge("checkpoint_age_seconds"), "since the last save {{pod}}"),
        ],
        x=16,
        w=8,
        unit="s",
        description="How long the oldest read but unsaved progress of a scope has waited (a "
        "quiet scope stays at 0); the time since the last save",
    )
    b.next_line(8)
    b.panel(
        "Watch restarts and relists by cause",
        [
            (_increase("watch_restarts_total", "cause"), "{{cause}}"),
            (_increase("relists_total", "cause"), "relist: {{cause}}"),
        ],
        x=0,
        w=8,
        description="quiet and closed are normal (Event watches carry no bookmarks); error, "
        "auth and expired are not",
    )
    b.panel(
        "Breaker opened, auth failures",
        [
            (
                _increase("apiserver_breaker_opened_total", "scope, reason"),
                "breaker {{scope}}: {{reason}}",
            ),
            (_increase("kube_auth_failures_total", "status"), "HTTP {{status}}"),
        ],
        x=8,
        w=8,
    )
    b.panel(
        "Memory (RSS)",
        [(f"process_resident_memory_bytes{{{SEL}}}", "{{pod}}")],
        x=16,
        w=8,
        unit="bytes",
        description="Bounded whatever the event rate or outage length (docs/soak.md)",
    )
    b.next_line(8)

    def variable(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "type": "query",
            "label": label,
            "datasource": DATASOURCE,
            "query": {"query": query, "refId": name},
            "definition": query,
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {},
            "hide": 0,
            "sort": 1,
        }

    return {
        "title": "k8s-event-bridge",
        "uid": "k8s-event-bridge",
        "description": "k8s-event-bridge: Kubernetes Events to NATS JetStream "
        "(deploy/monitoring/, docs/monitoring.md)",
        "tags": ["kubernetes", "nats", "k8s-event-bridge"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "graphTooltip": 1,
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "label": "Data source",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                variable("namespace", "Namespace", f"label_values({P}build_info, namespace)"),
                variable(
                    "pod", "Pod", f'label_values({P}build_info{{namespace=~"$namespace"}}, pod)'
                ),
            ]
        },
        "panels": b.panels,
    }


def prometheus_rule(rules_text: str) -> str:
    """The PrometheusRule: the rules file's ``groups:`` under ``spec:``, comments dropped."""
    body = rules_text[rules_text.index("\ngroups:\n") + 1 :]
    indented = "".join(("  " + line) if line.strip() else line for line in body.splitlines(True))
    return PROMETHEUS_RULE_HEADER + indented


def wanted() -> dict[Path, str]:
    """Every generated file and what it must hold."""
    rules = RULES.read_text()
    board = json.dumps(dashboard(), indent=2) + "\n"
    return {
        DASHBOARD: board,
        PROMETHEUS_RULE: prometheus_rule(rules),
        CHART_FILES / "k8s-event-bridge.rules.yaml": rules,
        CHART_FILES / "k8s-event-bridge.dashboard.json": board,
        COMPONENTS / "dashboard" / "k8s-event-bridge.dashboard.json": board,
    }


def stale() -> list[Path]:
    return [p for p, text in wanted().items() if not p.is_file() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.monitoring", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        out = stale()
        for p in out:
            print(
                f"{p.relative_to(REPO)} is stale: run python -m tools.monitoring", file=sys.stderr
            )
        return 1 if out else 0
    for p, text in wanted().items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
