"""The one ensure of a stream or bucket (k8s_event_common.streams.ensure), the bridge's and the
subscribers': checked against its shape, created when missing and allowed, each difference one
structured log line (an event name and fields, never a sentence in the event), and the errors
each caller tells apart. Against a fake JetStream API here; tests/integration/test_publishing.py
and test_nats_permissions.py run it against a real nats-server."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from k8s_event_common import streams

WANT = streams.event_stream("K8S_EVENTS", "k8s.events", max_age=86400, duplicate_window=120)
BUCKET = streams.seen_bucket("k8s_event_remediation")


def as_server_says(config: StreamConfig) -> dict[str, Any]:
    """What STREAM.INFO answers for ``config``: every key, the server's defaults filled in."""
    out = {**streams.DEFAULTS, "compression": "none", "metadata": {}, **streams.wire(config)}
    return {k: (v.value if hasattr(v, "value") else v) for k, v in out.items()}


@dataclass
class Reply:
    data: bytes


class FakeJetStream:
    """STREAM.INFO answered from ``configs``; ``add_stream`` stores one, or raises ``fail``."""

    def __init__(self) -> None:
        self.configs: dict[str, dict[str, Any]] = {}
        self.fail: Exception | None = None
        self.made_meanwhile: dict[str, Any] | None = None  # stored when add_stream is asked
        self.created: list[str] = []
        self.asked: list[str] = []

    async def request(self, subject: str, payload: bytes, timeout: float) -> Reply:
        self.asked.append(subject)
        name = subject.rsplit(".", 1)[1]
        if name in self.configs:
            return Reply(json.dumps({"config": self.configs[name]}).encode())
        error = {"code": 404, "err_code": 10059, "description": "stream not found"}
        return Reply(json.dumps({"error": error}).encode())

    def jetstream(self, domain: str | None = None) -> FakeJetStream:
        return self

    async def add_stream(self, config: StreamConfig) -> None:
        assert config.name is not None
        if self.made_meanwhile is not None:
            self.configs[config.name] = self.made_meanwhile
        if self.fail is not None:
            raise self.fail
        self.configs[config.name] = as_server_says(config)
        self.created.append(config.name)


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    """The fields of each record whose event is ``name``."""
    return [r.fields for r in caplog.records if r.getMessage() == name]


async def test_a_missing_stream_is_created_with_its_shape_and_its_config_returned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    js = FakeJetStream()
    caplog.set_level(logging.INFO)
    have = await streams.ensure(js, WANT, "stream")
    assert js.created == ["K8S_EVENTS"]
    assert have == as_server_says(WANT)
    assert events(caplog, "stream_created") == [
        {"stream": "K8S_EVENTS", "what": "stream", "subjects": ["k8s.events.>"]}
    ]
    # there now, in its shape: read, nothing created, nothing logged
    caplog.clear()
    assert await streams.ensure(js, WANT, "stream") == have
    assert js.created == ["K8S_EVENTS"] and caplog.records == []


async def test_each_difference_is_one_line_with_the_key_in_a_field_not_in_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    js = FakeJetStream()
    js.configs["K8S_EVENTS"] = {
        **as_server_says(WANT),
        "deny_delete": False,
        "allow_rollup_hdrs": True,
    }
    with pytest.raises(streams.ShapeMismatch) as info:
        await streams.ensure(js, WANT, "stream", logger="k8s_event_consumer.streams")
    assert [d.key for d in info.value.differences] == ["allow_rollup_hdrs", "deny_delete"]
    assert info.value.stream == "K8S_EVENTS"
    assert [r.name for r in caplog.records] == ["k8s_event_consumer.streams"] * 2
    assert [r.levelno for r in caplog.records] == [logging.ERROR] * 2
    assert events(caplog, "stream_config_differs") == [
        {
            "what": "stream",
            "stream": "K8S_EVENTS",
            "key": "allow_rollup_hdrs",
            "existing": "true",
            "wanted": "false",
        },
        {
            "what": "stream",
            "stream": "K8S_EVENTS",
            "key": "deny_delete",
            "existing": "false",
            "wanted": "true",
        },
    ]
    assert js.created == []


async def test_unchecked_keys_are_passed_over() -> None:
    js = FakeJetStream()
    js.configs[str(BUCKET.name)] = {**as_server_says(BUCKET), "num_replicas": 3}
    with pytest.raises(streams.ShapeMismatch, match="num_replicas"):
        await streams.ensure(js, BUCKET, "bucket")
    have = await streams.ensure(js, BUCKET, "bucket", unchecked=["num_replicas"])
    assert have["num_replicas"] == 3


async def test_a_missing_stream_not_to_be_created_is_stream_missing_a_not_found_error() -> None:
    js = FakeJetStream()
    with pytest.raises(streams.StreamMissing, match="bucket KV_k8s_event_remediation does not"):
        await streams.ensure(js, BUCKET, "bucket", create=False)
    assert js.created == []
    # what the subscribers catch today: nats-py's NotFoundError
    with pytest.raises(nats.js.errors.NotFoundError) as info:
        await streams.ensure(js, BUCKET, "bucket", create=False)
    assert not isinstance(info.value, streams.StreamNotCreated)
    assert info.value.stream == "KV_k8s_event_remediation"


@pytest.mark.parametrize("timeout", [nats.errors.TimeoutError(), TimeoutError()])
async def test_a_create_without_an_answer_is_stream_not_created(timeout: Exception) -> None:
    """The shipped permissions grant no program STREAM.CREATE: the request gets no answer."""
    js = FakeJetStream()
    js.fail = timeout
    with pytest.raises(streams.StreamNotCreated, match="provision it") as info:
        await streams.ensure(js, WANT, "stream")
    assert isinstance(info.value, streams.StreamMissing)
    assert info.value.__cause__ is timeout


async def test_a_create_jetstream_refuses_raises_its_api_error() -> None:
    js = FakeJetStream()
    js.fail = nats.js.errors.BadRequestError(
        code=400, err_code=10065, description="subjects overlap with an existing stream"
    )
    with pytest.raises(nats.js.errors.BadRequestError) as info:
        await streams.ensure(js, WANT, "stream")
    assert info.value is js.fail
    assert not isinstance(info.value, streams.StreamMissing)


async def test_a_stream_made_meanwhile_in_another_shape_is_read_and_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    js = FakeJetStream()
    js.made_meanwhile = {**as_server_says(WANT), "deny_purge": False}
    js.fail = nats.js.errors.BadRequestError(
        code=400, err_code=10058, description="stream name already in use"
    )
    with pytest.raises(streams.ShapeMismatch, match="deny_purge"):
        await streams.ensure(js, WANT, "stream")
    assert [e["key"] for e in events(caplog, "stream_config_differs")] == ["deny_purge"]
    assert events(caplog, "stream_created") == []


async def test_a_stream_made_meanwhile_in_its_shape_is_taken() -> None:
    js = FakeJetStream()
    js.made_meanwhile = as_server_says(WANT)
    js.fail = nats.js.errors.BadRequestError(code=400, err_code=10058, description="in use")
    assert await streams.ensure(js, WANT, "stream") == as_server_says(WANT)


async def test_a_domain_is_asked_through_its_api() -> None:
    js = FakeJetStream()
    await streams.ensure(js, WANT, "stream", domain="hub")
    assert js.asked == ["$JS.hub.API.STREAM.INFO.K8S_EVENTS"] * 2


async def test_a_subscriber_checks_the_bridges_stream_but_not_its_sizes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    js = FakeJetStream()
    with pytest.raises(streams.StreamMissing, match="stream K8S_EVENTS not found"):
        await streams.check_event_stream(js, "K8S_EVENTS", "k8s.events")
    js.configs["K8S_EVENTS"] = {**as_server_says(WANT), "max_age": 7, "num_replicas": 3}
    await streams.check_event_stream(js, "K8S_EVENTS", "k8s.events")
    js.configs["K8S_EVENTS"]["subjects"] = ["other.>"]
    await streams.check_event_stream(js, "K8S_EVENTS")
    with pytest.raises(streams.ShapeMismatch, match="subjects"):
        await streams.check_event_stream(js, "K8S_EVENTS", "k8s.events")
    js.configs["K8S_EVENTS"]["allow_rollup_hdrs"] = True
    caplog.clear()
    with pytest.raises(streams.ShapeMismatch, match="allow_rollup_hdrs"):
        await streams.check_event_stream(js, "K8S_EVENTS")
    assert [e["key"] for e in events(caplog, "stream_config_differs")] == ["allow_rollup_hdrs"]
    assert js.created == []  # a subscriber never makes the bridge's stream


def test_refuse_logs_nothing_and_raises_nothing_for_the_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    streams.refuse(as_server_says(WANT), WANT)
    assert caplog.records == []
