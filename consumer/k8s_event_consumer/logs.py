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


def setup(level: str = "info", format: str = "json", own: tuple[str, ...] = ()) -> None:
    """``level`` for the subscribers' loggers (``k8s_event_consumer.*``, and the shared
    package's ``k8s_event_common.*``: the stream checks, the HTTP server) and those named in
    ``own`` (a subscriber built on the kit); every library's (kubernetes_asyncio, aiohttp,
    nats, ...) stays at WARNING: at debug they would log response bodies (Pod env values)."""
    root = logging.getLogger()
    root.handlers[:] = [logformat.handler(format)]
    logformat.quiet_libraries()
    for name in ("k8s_event_consumer", "k8s_event_common", *own):
        logging.getLogger(name).setLevel(level.upper())
