"""Logs of the subscribers: one JSON object per line, a constant event name plus fields, as
the bridge writes them (``log.info("acted", action="delete_pod", pod="shop/web-1")``);
``format="text"`` for people."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class _Text(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        tail = " ".join(f"{k}={_value(v)}" for k, v in fields.items())
        return f"{record.levelname:<7} {record.name}: {record.getMessage()} {tail}".rstrip()


def _value(v: Any) -> str:
    """A field as one token: values from messages may hold spaces, newlines, escape sequences
    (a forged log line, a terminal's title): quoted and escaped then, JSON-style, non-ASCII
    as \\u escapes."""
    text = str(v)
    if text and text.isascii() and text.isprintable() and " " not in text and '"' not in text:
        return text
    return json.dumps(text)


class Logger:
    """``log.info(event, **fields)``."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(name)

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
    return Logger(f"k8s_event_consumer.{name}")


def setup(level: str = "info", format: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if format == "json" else _Text())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
