import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_the_real_pipeline_and_checks_the_stream():
    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "demo", "--events", "80", "--rate", "400"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "missing                         : 0" in proc.stdout
    assert "duplicates                      : 0" in proc.stdout
    assert "BackOff" in proc.stdout or "Pulled" in proc.stdout  # events were shown
