"""A test module that runs a Go tool (tests/standins/gotools.py) says so in ``GO_TOOLS``:
tools/testrun.py runs those tests in the go-tools tier once the tools are built, and the other tiers
leave them out. One that does not say it runs in the unit or integration tier, where a cold machine
builds the tool inside the test's time limit (a cold CI run failed so)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
RUNS_A_TOOL = re.compile(r"gotools\.ensure\(|ensure_otelcol\(|\bCollector\(")


def test_every_module_that_runs_a_go_tool_names_it() -> None:
    missing = [
        str(p.relative_to(TESTS.parent))
        for p in sorted(TESTS.rglob("test_*.py"))
        if RUNS_A_TOOL.search(p.read_text()) and not re.search(r"^GO_TOOLS = ", p.read_text(), re.M)
    ]
    assert missing == [], f"these run a Go tool without GO_TOOLS: {missing}"
