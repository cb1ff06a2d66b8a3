"""Side by side with the collector's own Kubernetes events receiver (issue 33, item 5).

``python -m bench.otlp [--quick]`` (``make bench-otlp``) runs two paths from one real
kube-apiserver (tests/standins/controlplane.py) to an OpenTelemetry Collector's file exporter:

- **A**: an ``otelcol`` (v0.139.0, e2e/build-otelcol.sh) with contrib's ``k8s_events`` receiver;
- **B**: the bridge (two replicas, leader election on a Lease, as deploy/ runs it) → JetStream
  (nats-server) → ``k8s-event-otlp`` → an ``otelcol`` with the OTLP receiver;

under one load (``load``: kubelet-like Event writes and count bumps, the truth every version the
API server accepted) through the same faults (``phases``: a restart of the receiving side, an
outage of path B's collector, an outage of the API server, a leader change), and reports per
path and phase the versions lost and duplicated (``matching``: how each path's records are
matched to versions) and the CPU and memory of each path's processes (``sampling``). Results:
a table on stdout, ``bench/results/otlp-<timestamp>.json``, ``otlp-latest.json`` and
``otlp-latest.md`` (``report``). Modules: ``paths`` (the processes of each path),
``restarting`` (a kubelet's restarts), ``outputs`` (the collectors' files read as they grow).
"""

from __future__ import annotations

import sys
import time


def log(msg: str) -> None:
    """A line of the run's progress on stderr (the results go to stdout)."""
    print(f"[bench.otlp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
