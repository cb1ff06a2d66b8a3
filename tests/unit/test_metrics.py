"""The shared metrics layer (k8s_event_common.metrics): the hot-path collectors expose what
prometheus_client's own Counter and Histogram would, a program's registry and its counters from
0 on; the bridge's metrics on it follow Prometheus' conventions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from bridge.metrics import LATENCY_BUCKETS
from k8s_event_common import metrics
from k8s_event_common.metrics import HotCounter, HotHistogram


def samples(registry: CollectorRegistry) -> dict[str, float]:
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#") and "_created" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_hot_counter_and_histogram_render_like_the_library_ones():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    c1 = HotCounter("x_events", "doc", registry=ours)
    h1 = HotHistogram("x_latency_seconds", "doc", LATENCY_BUCKETS, registry=ours)
    c2 = Counter("x_events", "doc", registry=theirs)
    h2 = Histogram("x_latency_seconds", "doc", buckets=LATENCY_BUCKETS, registry=theirs)
    values = [0.0, 0.0005, 0.00051, 0.003, 0.01, 0.7, 10, 11, 1e9]
    for v in values:
        h1.observe(v)
        h2.observe(v)
    c1.inc()
    c1.inc(4)
    c2.inc()
    c2.inc(4)
    assert samples(ours) == samples(theirs)
    assert h1.count == len(values)


def _families(exposition: bytes) -> dict[str, str]:
    """name -> type, as the exposition's # TYPE lines say."""
    out = {}
    for line in exposition.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            out[name] = kind
    return out


def test_names_follow_prometheus_conventions():
    from bridge.metrics import PREFIX, Metrics

    for name, kind in _families(Metrics("1.2.3").render()).items():
        if not name.startswith(PREFIX):
            assert name.startswith(("process_", "python_")), name
            continue
        if kind == "counter":
            assert name.endswith("_total"), name
        elif not name.endswith("_created"):  # prometheus_client's creation time of a counter
            assert not name.endswith("_total"), f"{name}: a {kind} named like a counter"
        for unit in ("_ms", "_milliseconds", "_minutes", "_kb", "_mb", "_kilobytes"):
            assert not name.endswith(unit), f"{name}: base units only (seconds, bytes)"


def test_known_label_values_start_at_zero_so_a_first_increase_is_seen():
    """A series born at 1 has no earlier sample: increase() over it is 0 and the alert on the
    first gap or the first dropped message would never fire."""
    from bridge.jetstream.publishing import PERMANENT_ERRORS
    from bridge.metrics import DROP_REASONS, Metrics

    # every reason the publisher gives up for is one of them
    assert {"too_large", *(f"jetstream_{c}" for c in PERMANENT_ERRORS)} == set(DROP_REASONS)
    text = Metrics().render().decode()
    for series in (
        'k8s_event_bridge_gaps_total{certainty="likely"} 0.0',
        'k8s_event_bridge_gaps_total{certainty="possible"} 0.0',
        'k8s_event_bridge_messages_dropped_total{reason="too_large"} 0.0',
        'k8s_event_bridge_messages_dropped_total{reason="jetstream_10054"} 0.0',
        'k8s_event_bridge_publish_failures_total{reason="no_responders"} 0.0',
        'k8s_event_bridge_watch_restarts_total{cause="expired"} 0.0',
        'k8s_event_bridge_relists_total{cause="expired"} 0.0',
    ):
        assert series in text, series


def test_build_info_names_the_version():
    from bridge.metrics import Metrics

    assert 'k8s_event_bridge_build_info{version="1.2.3"} 1.0' in Metrics("1.2.3").render().decode()


def test_every_skip_reason_in_the_code_starts_at_zero():
    import re
    from pathlib import Path

    from bridge.metrics import SKIP_REASONS

    bridge = Path(__file__).resolve().parents[2] / "bridge"
    found = set()
    for name in ("runtime/watching.py", "runtime/staging.py", "kube/lines.py", "kube/paging.py"):
        text = (bridge / name).read_text()
        found |= set(re.findall(r'(?:_bad|skipped)\(\s*"(\w+)"', text))
        found |= set(re.findall(r'skipped\.labels\(\s*"(\w+)"', text))
        for pair in re.findall(r'reason = "(\w+)" if .* else "(\w+)"', text):
            found |= set(pair)
    assert found == set(SKIP_REASONS)


def test_a_programs_registry_has_the_process_and_python_families_and_nothing_else():
    names = set(_families(metrics.render(metrics.registry())))
    assert {"process_resident_memory_bytes", "process_open_fds", "python_info"} <= names
    assert all(n.startswith(("process_", "python_")) for n in names), names
    assert _families(metrics.render(metrics.registry(process_collectors=False))) == {}


def test_a_labelled_counters_known_values_are_exported_from_zero_in_their_order():
    r = metrics.registry(process_collectors=False)
    c = metrics.labelled_counter(r, "x_failures", "Failures, by reason", "reason", ("b", "a"))
    c.labels("a").inc(2)
    lines = [ln for ln in metrics.render(r).decode().splitlines() if ln.startswith("x_failures_t")]
    assert lines == ['x_failures_total{reason="b"} 0.0', 'x_failures_total{reason="a"} 2.0']


def test_nats_refused_reads_the_count_when_scraped_every_reason_from_zero():
    r = metrics.registry(process_collectors=False)
    counts = {"redirect": 3}
    refused = metrics.nats_refused(r, "x_nats_refused", read=lambda: counts)
    text = metrics.render(r).decode()
    assert f"# HELP x_nats_refused_total {metrics.NATS_REFUSED_HELP}" in text
    assert 'x_nats_refused_total{reason="tls"} 0.0' in text
    assert 'x_nats_refused_total{reason="redirect"} 3.0' in text
    refused.read = lambda: {"tls": 1}  # a program may wire the count later
    assert 'x_nats_refused_total{reason="tls"} 1.0' in metrics.render(r).decode()


def test_every_nats_refusal_the_connection_counts_is_exported():
    from k8s_event_common import connecting

    assert set(connecting.refusals()) == set(metrics.NATS_REFUSALS)
