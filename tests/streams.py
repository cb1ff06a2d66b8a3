"""The shipped shapes (``k8s_event_common.streams``), for tests that make the stream or a bucket
before the programs start, as an operator does (``k8s-event-bridge provision``)."""

from __future__ import annotations

from typing import Any

from nats.js.api import StreamConfig

from bridge.jetstream.streams import wanted_config
from bridge.settings import NatsSettings


def k8s_events(**settings: Any) -> StreamConfig:
    """``K8S_EVENTS`` as a bridge with these ``nats`` settings (defaults otherwise) wants it."""
    return wanted_config(NatsSettings(**settings))
