"""The NATS boundary maps nats-py's failures once: passing ones to JetStreamUnavailable (the
runtime retries those), everything else through unchanged."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from bridge import errors
from bridge.jetstream.connection import passing, unavailable


@pytest.mark.parametrize(
    "exc",
    [
        nats.errors.TimeoutError(),
        nats.errors.NoRespondersError(),
        nats.errors.ConnectionClosedError(),
        nats.js.errors.ServiceUnavailableError(),  # a cluster electing leaders: 503
        TimeoutError(),
        ConnectionResetError(),
    ],
)
def test_passing_failures_become_jetstream_unavailable(exc):
    assert passing(exc)
    with pytest.raises(errors.JetStreamUnavailable, match=r"checkpoint c\.all") as info:
        with unavailable("checkpoint c.all"):
            raise exc
    assert info.value.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [errors.NoStream("no stream"), errors.StreamConfigMismatch("other subjects"), ValueError()],
)
def test_other_failures_pass_through_unchanged(exc):
    with pytest.raises(type(exc)) as info:
        with unavailable("stream K8S_EVENTS"):
            raise exc
    assert info.value is exc


@pytest.mark.parametrize(
    "exc",
    [
        nats.js.errors.APIError(code=500, err_code=10074, description="replicas > 1 not supported"),
        nats.js.errors.BadRequestError(code=400, description="bad request"),
    ],
)
def test_jetstream_refusing_for_good_is_final(exc):
    with pytest.raises(errors.JetStreamRefused, match="checkpoint bucket b") as info:
        with unavailable("checkpoint bucket b"):
            raise exc
    assert isinstance(info.value, errors.PublishError)  # the start-up treats it as final
    assert info.value.__cause__ is exc
