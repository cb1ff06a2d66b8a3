"""The kit's counts of messages, exported: a refused (bad) message is counted where an operator
looks, not only in the log."""

from __future__ import annotations

from k8s_event_consumer.consuming import Stats
from k8s_event_consumer.metrics import Metrics


def test_the_kits_counts_are_exported_by_result() -> None:
    metrics = Metrics("k8s_event_x_", [])
    stats = Stats()
    stats.export(metrics)
    assert b'k8s_event_x_messages_total{result="bad"} 0.0' in metrics.render()
    stats.handled, stats.skipped_duplicates, stats.bad, stats.failed = 5, 2, 3, 1
    text = metrics.render().decode()
    assert "# TYPE k8s_event_x_messages_total counter" in text
    for result, value in (("handled", 5), ("duplicate", 2), ("bad", 3), ("failed", 1)):
        assert f'k8s_event_x_messages_total{{result="{result}"}} {value}.0' in text
    assert {f"{r}" for r, _ in Stats.RESULTS} == {
        "handled",
        "duplicate",
        "retried",
        "failed",
        "bad",
        "discarded",
    }
