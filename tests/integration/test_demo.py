"""The demo (`make demo`: the simulator package's console script, k8s_event_sim.demo)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DEMO = Path(sys.executable).parent / "k8s-event-bridge-demo"  # what `make demo` runs


def test_demo_runs_the_real_pipeline_and_checks_the_stream():
    proc = subprocess.run(
        [DEMO, "--events", "80", "--rate", "400"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "missing                         : 0" in proc.stdout
    assert "duplicates                      : 0" in proc.stdout
    assert "OK: every version in one digest" in proc.stdout  # k8s-event-digests on the stream
    assert "BackOff" in proc.stdout or "Pulled" in proc.stdout  # events were shown
