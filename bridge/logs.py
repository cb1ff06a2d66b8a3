"""Structured logging: a constant event name plus fields, one JSON object per line.

    log = logs.get("watching")
    log.info("watch_closed", resource_version=rv, cause="timeout")

``warn_sampled`` logs a skipped-input warning once per key per interval, with a sample,
so that a flood of malformed lines can not flood the log.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import msgspec

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
        return msgspec.json.encode(out, enc_hook=str).decode()


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        kv = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{record.levelname.lower():7} {record.name}: {record.getMessage()} {kv}".rstrip()


class Logger:
    """A thin wrapper that turns keyword arguments into structured fields."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(f"bridge.{name}")
        self._last: dict[str, float] = {}

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

    def warn_sampled(self, once: str, event: str, /, interval: float = 60.0, **fields: Any) -> None:
        """A WARNING at most once per ``interval`` seconds for the sampling key ``once``."""
        now = time.monotonic()
        last = self._last.get(once)
        if last is None or now - last >= interval:
            self._last[once] = now
            self._emit(logging.WARNING, event, fields)


def get(name: str) -> Logger:
    return Logger(name)


def setup(level: str = "info", fmt: str = "json") -> None:
    root = logging.getLogger("bridge")
    root.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root.addHandler(handler)
    root.setLevel(_LEVELS.get(level, logging.INFO))
    root.propagate = False
