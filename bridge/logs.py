"""Structured logging: a constant event name plus fields, one JSON object per line.

    log = logs.get("watching")
    log.info("watch_closed", resource_version=rv, cause="timeout")

``warn_sampled`` logs a skipped-input warning once per key per interval, with a sample,
so that a flood of malformed lines can not flood the log. The line format is the one the
subscribers write too: ``k8s_event_common.logformat``.
"""

from __future__ import annotations

import logging

from k8s_event_common import logformat
from k8s_event_common.logformat import Logger

__all__ = ["Logger", "get", "setup"]


def get(name: str) -> Logger:
    return Logger(f"bridge.{name}")


def setup(level: str = "info", fmt: str = "json") -> None:
    """``level`` for the bridge's own loggers; every library's stays at WARNING."""
    logformat.quiet_libraries()
    root = logging.getLogger("bridge")
    root.handlers.clear()
    root.addHandler(logformat.handler(fmt))
    root.setLevel(logformat.LEVELS.get(level, logging.INFO))
    root.propagate = False
