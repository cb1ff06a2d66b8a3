"""What the benchmark reads of the machine and of a bridge's metrics: the machine's busy CPU
(``/proc/stat``) and the latency histogram. The bridge itself runs as
``k8s_event_sim.programs.BridgeProcess`` (with ``cpu_seconds``, ``memory_kb``, its parsed
``metrics``), its config from ``k8s_event_sim.configs.bridge_config``."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def histogram(metrics: dict[str, float], name: str) -> list[tuple[float, float]]:
    """Cumulative buckets [(upper bound, count)], +Inf last."""
    buckets = []
    head = f'{name}_bucket{{le="'
    for key, value in metrics.items():
        if key.startswith(head):
            le = key[len(head) : -2]
            buckets.append((float("inf") if le == "+Inf" else float(le), value))
    return sorted(buckets)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Like PromQL's histogram_quantile: linear interpolation inside the bucket that holds the
    quantile (0 is the lower bound of the first bucket); in the +Inf bucket, the last bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound
