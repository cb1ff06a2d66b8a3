"""The hot-path collectors expose what prometheus_client's own Counter and Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from bridge.metrics import LATENCY_BUCKETS, HotCounter, HotHistogram


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
