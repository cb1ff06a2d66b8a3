"""deploy/monitoring/: the alert rules tested by promtool, and the rules and the dashboard checked
against what a real bridge exposes on /metrics.

promtool is Prometheus' own (v0.316.0 = Prometheus 3.16, built from the Go module proxy by
e2e/build-go-tool.sh and cached). The metric check runs a real bridge against the simulated
API server and a real nats-server, scrapes it, and fails on any metric or label the rules or the
dashboard name that it does not expose (a rename that forgot the dashboard, a typo in a rule).
The subscribers' rules are checked the same against the three subscribers as real processes on
their shipped configs, and docs/monitoring.md's tables of their metrics against what each
exposes, both ways (a metric added without its row, a row left after a rename).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import shipped
from tests.integration.harness import ConsumerProcess, Writer, all_of, eventually
from tests.otlp_endpoint import Endpoint
from tests.standins import gotools
from tools import monitoring

GO_TOOLS = ("promtool",)

MONITORING = monitoring.MONITORING
RULES = monitoring.RULES
RULE_TESTS = MONITORING / "rules-tests.yaml"

# Labels Prometheus adds to every series of a target: job and instance always, the rest from
# Kubernetes service discovery (a ServiceMonitor's defaults).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
# up is Prometheus' own series of each target.
SYNTHETIC = {"up": {"job", "instance"}}

PROMQL_WORDS = {
    # aggregations, set operators, modifiers
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "limitk", "limit_ratio", "by", "without", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan",
}  # fmt: skip
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"')
IDENT = re.compile(r"(?<![\w$.:])([A-Za-z_:][A-Za-z0-9_:]*)(?![\w:])(?!\s*\()")
TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)|\{\{\s*([A-Za-z_]\w*)\s*\}\}")


def promtool() -> Path:
    return gotools.ensure("promtool")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, check=False
    )


# --- promtool -------------------------------------------------------------------------------


def test_promtool_checks_the_rules_file_and_the_prometheusrule():
    done = run(promtool(), "check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 17 rules found" in done.stdout
    # the PrometheusRule's spec is a rules file too
    spec = yaml.safe_load(monitoring.PROMETHEUS_RULE.read_text())["spec"]
    assert spec == yaml.safe_load(RULES.read_text())


def test_promtool_runs_the_alert_rules_unit_tests():
    done = run(promtool(), "test", "rules", RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_test_fails_when_a_rule_is_broken(tmp_path):
    """The unit tests can fail: a rule whose threshold moved is caught."""
    lag = "k8s_event_bridge_checkpoint_lag_seconds"
    rules = RULES.read_text().replace(f"{lag} > 300", f"{lag} > 600")
    assert rules != RULES.read_text()
    (tmp_path / RULES.name).write_text(rules)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = run(promtool(), "test", "rules", tmp_path / RULE_TESTS.name)
    assert done.returncode != 0
    assert "K8sEventBridgeCheckpointNotFresh" in done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_quiet():
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert sorted(set(alerts) - fires) == [], "alerts no test sees firing"
    assert sorted(set(alerts) - quiet) == [], "alerts no test sees quiet"
    assert set(fires | quiet) <= set(alerts), "tests of alerts that do not exist"


def test_every_alert_has_a_severity_a_summary_and_a_description_and_a_doc_section():
    doc = (Path(monitoring.REPO) / "docs" / "monitoring.md").read_text()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            assert f"### {rule['alert']}" in doc, f"docs/monitoring.md: no section {rule['alert']}"


def test_generated_files_are_fresh():
    stale = [str(p.relative_to(monitoring.REPO)) for p in monitoring.stale()]
    assert stale == [], f"stale: {stale}: run python -m tools.monitoring"


# --- the rules and the dashboard against a real bridge's /metrics -----------------------------


def exposed(text: str) -> dict[str, set[str]]:
    """Series name -> label names, from the text exposition (every sample line)."""
    out: dict[str, set[str]] = {k: set(v) for k, v in SYNTHETIC.items()}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?\s", line)
        assert m, line
        labels = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', m.group(3) or ""))
        out.setdefault(m.group(1), set()).update(labels)
    return out


def references(expr: str) -> tuple[set[str], list[tuple[str, str]], set[str]]:
    """What a PromQL expression names: metrics, (metric, label) pairs of its selectors, and the
    labels of its by/without/on/ignoring clauses."""
    grouping = {
        label.strip() for _, labels in GROUPING.findall(expr) for label in labels.split(",")
    } - {""}
    rest = GROUPING.sub(" ", expr)
    pairs: list[tuple[str, str]] = []
    for name, matchers in SELECTOR.findall(rest):
        for label in MATCHER.findall(matchers):
            pairs.append((name, label))
    rest = SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # ranges
    rest = re.sub(r'"(?:[^"\\]|\\.)*"', " ", rest)  # strings
    metrics = {
        name
        for name in IDENT.findall(rest)
        if name not in PROMQL_WORDS and not re.fullmatch(r"\d.*|[eE]\d*", name)
    }
    return metrics, pairs, grouping


def check(where: str, expr: str, series: dict[str, set[str]], texts: list[str]) -> list[str]:
    """Every name the expression (and its templates) uses must be exposed."""
    problems = []
    metrics, pairs, grouping = references(expr)
    if not metrics:
        problems.append(f"{where}: no metric found in {expr!r}")
    known = set(TARGET_LABELS)
    for m in metrics:
        if m not in series:
            problems.append(f"{where}: {m} is not exposed")
        else:
            known |= series[m]
    for metric, label in pairs:
        have = (series.get(metric, set()) if metric else known) | TARGET_LABELS
        if label not in have:
            problems.append(f"{where}: {metric or 'a selector'} has no label {label}")
    for label in grouping - known:
        problems.append(f"{where}: no metric of {expr!r} has the label {label}")
    for text in texts:
        for a, b in TEMPLATE_LABEL.findall(text):
            label = a or b
            if label not in known:
                problems.append(f"{where}: the template names label {label}, which {expr!r} lacks")
    return problems


BRIDGE_GROUP = "k8s-event-bridge"
SUBSCRIBERS_GROUP = "k8s-event-bridge-subscribers"


def rule_exprs(group_name: str) -> list[tuple[str, str, list[str]]]:
    """The alerts of one group of the rules file: (name, expr, annotation texts)."""
    groups = {g["name"]: g for g in yaml.safe_load(RULES.read_text())["groups"]}
    assert set(groups) == {BRIDGE_GROUP, SUBSCRIBERS_GROUP}
    return [
        (rule["alert"], rule["expr"], list(rule["annotations"].values()))
        for rule in groups[group_name]["rules"]
    ]


def dashboard_exprs() -> list[tuple[str, str, list[str]]]:
    board = json.loads(monitoring.DASHBOARD.read_text())
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r}", target["expr"], [target["legendFormat"]]))
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", var["definition"])
            assert m, var["definition"]
            out.append((f"variable {var['name']}", m.group(1), [f"{{{{{m.group(2)}}}}}"]))
    return out


@pytest.fixture
async def scraped(sim, run_bridge) -> dict[str, set[str]]:
    """A real bridge's series after a few Events went through and a checkpoint was saved."""
    w = Writer(sim)
    await w.write(10, bump_ratio=0.0)
    bridge = run_bridge()
    await bridge.wait_ready()
    await w.write(10, bump_ratio=0.5)

    async def through_and_saved() -> bool:
        published = await bridge.metric("events_published")
        return published >= len(w.ids) and await bridge.metric("checkpoint_resource_version") > 0

    await eventually(through_and_saved)
    _, text = await bridge.get("/metrics")
    return exposed(text)


async def test_rules_and_dashboard_name_only_what_a_real_bridge_exposes(scraped):
    assert "k8s_event_bridge_checkpoint_lag_seconds" in scraped  # the fixture's premise
    problems = []
    for where, expr, texts in [*rule_exprs(BRIDGE_GROUP), *dashboard_exprs()]:
        problems += check(where, expr, scraped, texts)
    assert problems == []


async def test_the_check_catches_a_renamed_metric_and_a_wrong_label(scraped):
    assert check("x", "k8s_event_bridge_queue_size > 0", scraped, []) == [
        "x: k8s_event_bridge_queue_size is not exposed"
    ]
    expr = "sum by (scopes) (k8s_event_bridge_checkpoint_lag_seconds)"
    assert check("x", expr, scraped, []) == [f"x: no metric of {expr!r} has the label scopes"]
    assert check("x", 'k8s_event_bridge_gaps_total{reason="likely"}', scraped, []) != []
    assert check("x", "k8s_event_bridge_ready == 0", scraped, ["{{ $labels.scope }}"]) != []


def test_references_reads_promql():
    metrics, pairs, grouping = references(
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{namespace=~"$ns", pod=~"x"}'
        '[$__rate_interval]))) / on (pod) group_left b_total{reason="x"} '
        'or absent(up{job="j"} == 1) and c offset 5m > 1e3'
    )
    assert metrics == {"a_bucket", "b_total", "up", "c"}
    assert pairs == [
        ("a_bucket", "namespace"),
        ("a_bucket", "pod"),
        ("b_total", "reason"),
        ("up", "job"),
    ]
    assert grouping == {"le", "pod"}


async def test_every_metric_the_bridge_exposes_is_in_docs_monitoring(scraped):
    doc = (monitoring.REPO / "docs" / "monitoring.md").read_text()
    prefix = "k8s_event_bridge_"
    families = set()
    for name in scraped:
        if not name.startswith(prefix):
            continue
        short = name.removeprefix(prefix)
        if short.endswith("_created"):  # prometheus_client's creation time of a counter
            short = short.removesuffix("_created") + "_total"
        for suffix in ("_bucket", "_sum", "_count"):
            if short.endswith(suffix) and f"{prefix}{short.removesuffix(suffix)}_bucket" in scraped:
                short = short.removesuffix(suffix)
        families.add(short)
    assert len(families) > 25
    missing = sorted(f for f in families if f"| `{f}` |" not in doc)
    assert missing == [], "docs/monitoring.md's metrics table lacks these"


async def test_what_the_alerts_read_follows_real_faults(sim, nats_server, run_bridge):
    """The gauges the alerts read move with real faults and come back: the API server refusing
    connections (K8sEventBridgeWatchFailing), a nats-server that keeps its connections and
    answers nothing, as a stream without quorum does (K8sEventBridgePublishStalled)."""
    w = Writer(sim)
    bridge = run_bridge(queue={"max_events": 321})
    await bridge.wait_ready()

    async def value(name: str, labels: str = "") -> float:
        return await bridge.metric(name, labels)

    assert await value("leader") == 1
    assert await value("queue_max_messages") == 321
    assert await value("scope_synced", 'scope="*"') == 1
    assert await value("watch_failing_seconds", 'scope="*"') == 0

    await sim.refuse_connections()
    assert await eventually(lambda: _above(value("watch_failing_seconds", 'scope="*"'), 1.5))
    assert await value("apiserver_reachable") == 0
    assert await value("scope_synced", 'scope="*"') == 1  # it had synced: it stays so
    await sim.accept_connections()
    assert await eventually(lambda: _equal(value("watch_failing_seconds", 'scope="*"'), 0))

    assert nats_server.proc is not None
    nats_server.proc.send_signal(signal.SIGSTOP)
    try:
        await w.write(20, bump_ratio=0.0)
        assert await eventually(lambda: _above(value("publish_oldest_wait_seconds"), 3))
        waiting = await value("queue_depth") + await value("publish_inflight")
        assert waiting > 0
        # past http.unready_after (2 s here): the gauge says so when scraped, though nobody
        # asked /readyz
        assert await value("ready") == 0
    finally:
        nats_server.proc.send_signal(signal.SIGCONT)
    assert await eventually(lambda: _equal(value("publish_oldest_wait_seconds"), 0), timeout=30)
    assert await eventually(lambda: _equal(value("ready"), 1))
    ids = await all_of(nats_server.url, w.ids)
    assert sorted(ids) == sorted(w.ids)


async def _above(read, bound: float) -> bool:
    return (await read) > bound


async def _equal(read, wanted: float) -> bool:
    return (await read) == wanted


def test_the_dashboard_is_laid_out_and_wired_as_grafana_reads_it():
    """Unique panel ids, panels on the 24-column grid without overlaps, unique refIds per
    panel, every $variable a query uses defined, the data source a variable."""
    board = json.loads(monitoring.DASHBOARD.read_text())
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(set(refs)) == len(refs), p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    defined = {v["name"] for v in board["templating"]["list"]}
    assert defined == {"datasource", "namespace", "pod"}
    text = monitoring.DASHBOARD.read_text()
    used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text)) - {"__rate_interval"}
    assert used <= defined, used - defined


SUBSCRIBERS = (
    "k8s_event_consumer.alerting",
    "k8s_event_consumer.remediation",
    "k8s_event_consumer.otlp",
)


@pytest.fixture
async def subscribers_scraped(tmp_path, nats_server, kubeconfig, run_bridge) -> dict[str, str]:
    """The alerting subscriber, the remediation worker and the OTLP subscriber as real
    processes on their shipped configs (tests/shipped.py), on the stream of a real bridge (their
    Alertmanager need not answer for this; the OTLP subscriber's endpoint takes the bridge's
    status events, so that its records are counted), scraped: each one's /metrics text."""
    await run_bridge().wait_ready()  # the stream they read
    endpoint = await Endpoint().start()
    procs = {}
    try:
        for module in SUBSCRIBERS:
            path = shipped.subscriber(
                tmp_path, module, nats_server.url, kubeconfig=kubeconfig, otlp_endpoint=endpoint.url
            )
            procs[module] = ConsumerProcess(path, tmp_path / f"{module}.log", module=module).start()
        for proc in procs.values():
            await proc.wait_ready()
        await eventually(lambda: bool(endpoint.accepted), timeout=30)
        return {module: (await proc.get("/metrics"))[1] for module, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
        await endpoint.stop()


async def test_the_subscriber_rules_name_only_what_real_subscribers_expose(subscribers_scraped):
    """The subscribers' group of rules names only their metrics and labels."""
    series: dict[str, set[str]] = {}
    for text in subscribers_scraped.values():
        for name, labels in exposed(text).items():
            series.setdefault(name, set()).update(labels)
    problems = []
    for where, expr, texts in rule_exprs(SUBSCRIBERS_GROUP):
        problems += check(where, expr, series, texts)
    assert problems == []
    assert "k8s_event_alerting_held_total" in series  # exported from 0, before any hold
    assert "k8s_event_remediation_held_total" in series
    assert "k8s_event_otlp_endpoint_up" in series


# what a subscriber's /metrics says of a family: its type and the label names of its samples
Family = tuple[str, frozenset[str]]


def families(text: str, prefix: str) -> dict[str, Family]:
    """The families of ``prefix`` in a /metrics text, named without it, by their ``# TYPE``
    lines (prometheus_client's ``_created`` of a counter is the counter's), each with the
    label names its samples carry."""
    kinds = dict(re.findall(rf"^# TYPE {prefix}(\w+) (\w+)$", text, re.M))
    out: dict[str, Family] = {}
    for name, kind in kinds.items():
        base = name.removesuffix("_created")
        if base != name and kinds.get(f"{base}_total") == "counter":
            continue
        labels = exposed(text).get(prefix + name, set())
        out[name] = (kind, frozenset(labels))
    return out


def documented() -> dict[str, dict[str, Family]]:
    """docs/monitoring.md's tables of "The subscribers' metrics": per prefix
    (``k8s_event_alerting_`` ...), metric → (type, label names); the table of every
    subscriber in each."""
    doc = (monitoring.REPO / "docs" / "monitoring.md").read_text()
    section = doc.split("\n## The subscribers' metrics\n", 1)[1].split("\n## ", 1)[0]
    common: dict[str, Family] = {}
    out: dict[str, dict[str, Family]] = {}
    table = common
    for line in section.splitlines():
        if line.startswith("**"):
            prefix = re.search(r"\(`(k8s_event_\w+_)`", line)
            table = out.setdefault(prefix.group(1), {}) if prefix else common
        elif line.startswith("| `"):
            name, kind, labels = (cell.strip() for cell in line.strip("|").split("|")[:3])
            table[name.strip("`")] = (kind, frozenset(re.findall(r"`(\w+)`", labels)))
    return {prefix: {**common, **own} for prefix, own in out.items()}


async def test_the_subscribers_metrics_tables_are_what_real_subscribers_expose(
    subscribers_scraped,
):
    """Every row of docs/monitoring.md's subscriber tables is a family of the real program's
    /metrics, of that type and with those labels, and every family it exposes (but the
    standard process_* and python_info) is a row."""
    tables = documented()
    prefixes = {f"k8s_event_{m.rsplit('.', 1)[1]}_": m for m in SUBSCRIBERS}
    assert set(tables) == set(prefixes)
    problems = []
    for prefix, module in prefixes.items():
        real = families(subscribers_scraped[module], prefix)
        rows = tables[prefix]
        problems += [
            f"{prefix}{n}: exposed, not in the table" for n in sorted(set(real) - set(rows))
        ]
        problems += [
            f"{prefix}{n}: in the table, not exposed" for n in sorted(set(rows) - set(real))
        ]
        for name in sorted(set(real) & set(rows)):
            (kind, labels), (doc_kind, doc_labels) = real[name], rows[name]
            if kind != doc_kind:
                problems.append(f"{prefix}{name}: a {kind}, the table says {doc_kind}")
            if labels and labels != doc_labels:  # a family with no sample yet shows none
                problems.append(
                    f"{prefix}{name}: labels {sorted(labels)}, the table {sorted(doc_labels)}"
                )
    assert problems == []
