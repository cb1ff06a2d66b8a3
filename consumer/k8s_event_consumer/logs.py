"""Logs of the subscribers, in the bridge's format (``k8s_event_common.logformat``): one JSON
object per line, a constant event name plus fields (``log.info("acted",
action="delete_pod", pod="shop/web-1")``); ``format="text"`` for people."""

from __future__ import annotations

import logging

from k8s_event_common import logformat
from k8s_event_common.logformat import Logger

__all__ = ["Logger", "get", "setup"]


def get(name: str) -> Logger:
    return Logger(f"k8s_event_consumer.{name}")


def setup(level: str = "info", format: str = "json") -> None:
    root = logging.getLogger()
    root.handlers[:] = [logformat.handler(format)]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
