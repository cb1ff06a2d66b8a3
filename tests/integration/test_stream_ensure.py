"""The one ensure of a stream or bucket (k8s_event_common.streams.ensure) against a real
nats-server: what it creates is what the server answers back and what nats-py opens; a second
program's ensure takes it; one an admin made in another shape is refused, each key one log line
with its fields."""

from __future__ import annotations

import logging

import nats
import pytest

from k8s_event_common import streams


async def test_a_bucket_made_by_ensure_has_its_shape_as_the_server_says_and_opens(
    nats_server, caplog
):
    caplog.set_level(logging.INFO)
    nc = await nats.connect(nats_server.url)
    try:
        want = streams.seen_bucket("k8s_event_remediation")
        have = await streams.ensure(nc, want, "bucket", logger="k8s_event_consumer.streams")
        assert streams.differences(have, want) == []
        created = [r.fields for r in caplog.records if r.getMessage() == "stream_created"]
        assert created == [
            {
                "stream": "KV_k8s_event_remediation",
                "what": "bucket",
                "subjects": ["$KV.k8s_event_remediation.>"],
            }
        ]
        kv = await nc.jetstream().key_value("k8s_event_remediation")
        await kv.put("id", b"1")
        # another replica's ensure: taken as it is, nothing created or logged
        caplog.clear()
        assert await streams.ensure(nc, want, "bucket") == await streams.read_config(
            nc, "KV_k8s_event_remediation"
        )
        assert caplog.records == []
        assert (await kv.get("id")).value == b"1"
    finally:
        await nc.close()


async def test_a_stream_an_admin_made_in_another_shape_is_refused_key_by_key(nats_server, caplog):
    nc = await nats.connect(nats_server.url)
    try:
        want = streams.dead_letter_stream("K8S_EVENTS_DEAD", ["k8s.dead.otlp"], max_age=3600)
        await nc.jetstream().add_stream(
            name="K8S_EVENTS_DEAD", subjects=["k8s.dead.otlp"], allow_rollup_hdrs=True
        )
        with pytest.raises(streams.ShapeMismatch) as info:
            await streams.ensure(nc, want, "dead-letter stream", unchecked=["num_replicas"])
        keys = [d.key for d in info.value.differences]
        assert "allow_rollup_hdrs" in keys and "deny_delete" in keys
        logged = [r.fields for r in caplog.records if r.getMessage() == "stream_config_differs"]
        assert [f["key"] for f in logged] == keys
        assert all(f["what"] == "dead-letter stream" for f in logged)
        assert (await nc.jetstream().stream_info("K8S_EVENTS_DEAD")).config.allow_rollup_hdrs
        with pytest.raises(streams.StreamMissing, match="provision it"):
            await streams.ensure(nc, streams.seen_bucket("none"), "bucket", create=False)
    finally:
        await nc.close()
