"""Structured logging: a constant event name plus fields, one JSON object per line.

    log = logs.get("running")
    log.info("alerts_sent", alertmanagers=2, alerts=1)

``setup`` formats the whole process's logging, so the kit's lines (``k8s_event_consumer``)
come out in the same format.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        kv = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{record.levelname.lower():7} {record.name}: {record.getMessage()} {kv}".rstrip()


class Logger:
    """A thin wrapper that turns keyword arguments into structured fields."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(f"k8s_event_consumer.alerting.{name}")

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        if self._log.isEnabledFor(level):
            self._log.log(level, event, extra={"fields": fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields)


def get(name: str) -> Logger:
    return Logger(name)


def setup(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
    # nats-py and aiohttp are chatty at debug; their warnings still show
    for noisy in ("nats", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(_LEVELS[level], logging.INFO))
