"""A bounded run of the coverage-guided fuzzer (fuzz/decoders.py) over the seed corpus: the
watch-line, list-item and list-page decoders and what the bridge makes of them. Longer runs:
``make fuzz FUZZ_SECONDS=600``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # the fuzzer runs as a child process (tests/unit/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 15


def test_the_decoders_hold_under_fuzzing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "fuzz" / "corpus", corpus)  # the run adds to it: not the repo's
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / "decoders.py"),
            str(corpus),
            f"-max_total_time={SECONDS}",
            "-rss_limit_mb=2048",
            f"-artifact_prefix={tmp_path}/",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
    )
    crashes = list(tmp_path.glob("crash-*"))
    assert out.returncode == 0 and not crashes, out.stderr[-4000:]
    assert "Done " in out.stderr  # it ran, and ended by its time bound
