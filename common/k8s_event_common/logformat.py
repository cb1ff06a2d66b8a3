"""The one log format of the bridge and the subscribers: a constant event name plus fields.

    log = Logger("bridge.watching")
    log.info("watch_closed", resource_version=rv, cause="timeout")

``json`` writes one JSON object per line (UTF-8, strict: a float that is not finite as null)::

    {"ts": "2026-11-30T12:00:00.123Z", "level": "info", "logger": "bridge.watching",
     "event": "watch_closed", "resource_version": "42", "cause": "timeout"}

the fields after ``event``, and ``exc`` (the traceback) when an exception is logged. ``text``
is for a person at a terminal: ``info    bridge.watching: watch_closed resource_version=42
cause=timeout``, each value one token: a value with a space, a quote, a control character or
non-ASCII is written quoted and escaped, JSON-style, so that what a message holds can not forge
a log line (a newline, an ESC sequence).

``log.sampled(level, key, event, interval, **fields)`` writes at most one line per interval per
key (what can repeat many times a second: malformed input, an endpoint refusing in a loop), the
line after some were left out with ``suppressed``, their count; ``warn_sampled`` is its WARNING.

``handler(fmt)`` is a stderr handler in either format; each program installs it
(``bridge.logs.setup``, ``k8s_event_consumer.logs.setup``).

``log.level`` is the level of the programs' own loggers only. Every other library's logger
(``LIBRARIES``: kubernetes_asyncio, aiohttp, nats, asyncio, urllib3, ...) stays at WARNING
whatever it says (``quiet_libraries``): at debug, kubernetes_asyncio logs each response body
(a Pod's env values, a Secret's data), aiohttp and nats-py what crosses the wire.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any

from k8s_event_common.clock import SYSTEM

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

# The libraries' loggers held at WARNING (``quiet_libraries``); a logger not named here
# inherits the root's level, which each program also keeps at WARNING. "client" is
# kubernetes_asyncio's Configuration's package logger.
LIBRARIES = (
    "kubernetes_asyncio",
    "client",
    "aiohttp",
    "nats",
    "asyncio",
    "urllib3",
    "websockets",
    "charset_normalizer",
    "prometheus_client",
    "pydantic",
    "yaml",
)
LIBRARY_LEVEL = logging.WARNING

__all__ = [
    "LEVELS",
    "LIBRARIES",
    "LIBRARY_LEVEL",
    "JsonFormatter",
    "Logger",
    "TextFormatter",
    "handler",
    "quiet_libraries",
]


def quiet_libraries() -> None:
    """Every library's logger at WARNING, whatever ``log.level`` says: the named ones
    (``LIBRARIES``) and the root, from which every other one inherits."""
    logging.getLogger().setLevel(LIBRARY_LEVEL)
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(LIBRARY_LEVEL)


def _timestamp(record: logging.LogRecord) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z"
    )


def _plain(value: Any) -> Any:
    """A field value JSON can not hold as it is: an enum's value, a time in RFC 3339, bytes as
    UTF-8 (undecodable bytes replaced), a set as a sorted list, a dataclass as an object, else
    its ``str``."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def _finite(value: Any) -> Any:
    """The value with every float that is not finite (inf, NaN: not JSON) as ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, set | frozenset) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return _finite(_plain(value))
    return value


def _dumps(out: dict[str, Any]) -> str:
    try:
        return json.dumps(out, default=_plain, ensure_ascii=False, allow_nan=False)
    except ValueError:  # inf or NaN somewhere: strict JSON readers refuse them
        return json.dumps(_finite(out), default=_plain, ensure_ascii=False, allow_nan=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``event``, the fields, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _dumps(out)


class TextFormatter(logging.Formatter):
    """``level   logger: event key=value ...``, each value one token."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        kv = " ".join(f"{k}={_token(v)}" for k, v in fields.items())
        return f"{record.levelname.lower():7} {record.name}: {record.getMessage()} {kv}".rstrip()


def _token(v: Any) -> str:
    """A field as one token: values from messages may hold spaces, newlines, escape sequences
    (a forged log line, a terminal's title): quoted and escaped then, JSON-style, non-ASCII
    as \\u escapes."""
    text = str(v)
    if text and text.isascii() and text.isprintable() and " " not in text and '"' not in text:
        return text
    return json.dumps(text)


class Logger:
    """``log.info(event, **fields)``: keyword arguments become the line's fields.

    ``sampled`` (and ``warn_sampled``, its WARNING) writes a line at most once per interval per
    sampling key, for what can repeat many times a second (malformed input, an endpoint that
    refuses in a loop); time is read from ``monotonic`` (``timed`` gives a program's Clock to a
    logger of the same name)."""

    def __init__(self, name: str, monotonic: Callable[[], float] = SYSTEM.monotonic) -> None:
        self._log = logging.getLogger(name)
        self._monotonic = monotonic
        # sampling key -> [when its last line was written, lines left out since]
        self._sampled: dict[str, list[float]] = {}

    @property
    def name(self) -> str:
        return self._log.name

    def timed(self, monotonic: Callable[[], float]) -> Logger:
        """This logger, its sampled lines timed by ``monotonic`` (and sampled on their own)."""
        return Logger(self._log.name, monotonic)

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

    def sampled(
        self, level: str, once: str, event: str, /, interval: float = 60.0, **fields: Any
    ) -> bool:
        """A line at ``level`` (a key of ``LEVELS``) at most once per ``interval`` seconds for
        the sampling key ``once``; the first line written after some were left out carries
        ``suppressed``, how many since the last one (a flood that stops leaves its last count
        unsaid: count the thing in a metric too). True when the line was written."""
        now = self._monotonic()
        seen = self._sampled.get(once)
        if seen is not None and now - seen[0] < interval:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            fields["suppressed"] = int(seen[1])
        self._sampled[once] = [now, 0]
        self._emit(LEVELS[level], event, fields)
        return True

    def warn_sampled(self, once: str, event: str, /, interval: float = 60.0, **fields: Any) -> None:
        """A WARNING at most once per ``interval`` seconds for the sampling key ``once``, so
        that a flood of malformed input can not flood the log (``sampled``)."""
        self.sampled("warning", once, event, interval=interval, **fields)


def handler(fmt: str = "json") -> logging.Handler:
    """A handler writing to stderr in ``fmt`` (``json``, else ``text``)."""
    out = logging.StreamHandler(sys.stderr)
    out.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    return out
