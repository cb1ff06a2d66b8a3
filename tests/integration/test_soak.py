"""The soak test in its 2-minute version (``make soak`` runs 10 minutes; docs/soak.md): the
real bridge under steady Events through watch drops, a quiet period, a NATS restart, a 410 and
JetStream silent for 20 s, its memory and every internal structure flat after warm-up, and the
stream the truth at the end."""

import pytest

from soak.run import Settings, soak, summary

pytestmark = pytest.mark.integration

FAULTS = ["watch_drops", "quiet", "nats_restart", "expired_410", "jetstream_silent"]


@pytest.mark.timeout(420)
async def test_two_minutes_of_faults_leave_the_bridge_flat_and_the_stream_true(tmp_path):
    result = await soak(Settings(seconds=120, out_dir=tmp_path))
    report = summary(result)
    print(report)
    assert [f["name"] for f in result["faults"]] == FAULTS
    failed = [c for c in result["checks"] if not c["ok"]]
    assert not failed, report
    stream = result["stream"]
    assert stream["kept_versions"] > 5000  # the load really went through
    assert stream["missing_unexplained"] == stream["duplicates"] == 0
    assert stream["gaps"] == 1
