"""The side-by-side comparison of ``make bench-otlp`` (bench/otlp/), its phases in their quick
form, on a control plane of its own: the bridge's path to a real OpenTelemetry Collector keeps
the stream's promise through every fault the comparison runs (a SIGKILL of the bridge's leader
and of k8s-event-otlp while it sends, an outage of its collector, an outage of the API server, a
leader change), and the report holds both paths' numbers.

Of the collector's own ``k8s_events`` receiver (path A) only what its pinned source (v0.139.0)
makes certain is asserted: a version written while its collector was down, which happened
before the collector started again, is not in its output (the receiver drops every Event
timestamped before its own start, and a later version is another). The rest of its numbers are
measured, not promised.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.otlp import phases, report
from tests.standins.controlplane import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.newest]
GO_TOOLS = ("otelcol",)  # tests/conftest.py builds it after collection


@pytest.mark.timeout(420)  # the quick run takes about 2 minutes on 2 busy cores
async def test_the_bridges_path_loses_nothing_and_repeats_within_its_bound_beside_the_receiver(
    control_plane_factory, tmp_path: Path
) -> None:
    cp: ControlPlane = control_plane_factory()
    result = await phases.Comparison(cp, tmp_path, phases.QUICK).run()
    a, b = result["paths"]["A"], result["paths"]["B"]
    truth = result["truth"]
    for phase in phases.PHASES:
        assert truth["per_phase"][phase] > 0, f"no Event written in {phase}"

    # path B: every version once at least, duplicates within docs/consumers.md's bound, every
    # copy carrying the id of its own version
    assert b["lost"] == 0, f"path B lost {b['lost']}: {b['lost_versions']}"
    assert b["duplicates"] <= b["duplicate_bound"] == phases.SUBSCRIBER_BATCH
    assert b["copies_with_another_id"] == 0
    assert b["unmatched"] == 0
    assert b["matched"] == truth["versions"] + b["duplicates"]
    # the faults happened: the subscriber and the leader were killed and came back, the standby
    # took the Lease, the API server was away (the bridge said so)
    restarted = {r["process"] for r in result["restarts"]}
    assert {"a-1", "k8s-event-otlp"} <= restarted
    (change,) = [f for f in result["faults"] if f["phase"] == "leader change"]
    assert change["new_leader"] not in (None, change["old_leader"])
    assert b["status_records"].get("apiserver_unreachable", 0) >= 1
    assert b["status_records"].get("leader_changed", 0) >= 3  # the start, the restart, the change

    # path A: what its source makes certain
    assert a["certain_lost"] > 0, "no version written while its collector was down"
    assert a["certain_lost_in_output"] == []
    assert a["lost"] >= a["certain_lost"]

    # the report holds both paths' numbers
    for path in (a, b):
        res = path["resources"]
        assert res["cpu_s"] > 0 and res["peak_rss_mb"] > 0 and res["steady_rss_mb"] > 0
        assert res["samples"] > 0
        assert set(path["per_phase"]) == set(phases.PHASES)
    table = report.markdown(result)
    assert "| **all** |" in table and "B's duplicates against" in table
