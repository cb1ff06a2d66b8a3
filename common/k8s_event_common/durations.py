"""Durations as a person writes them in a configuration file or on a command line: ``90``,
``"1.5s"``, ``"500ms"``, ``"1m30s"``, ``"2h"``, ``"1d"``, read as seconds. Both programs'
settings (``k8s_event_common.configuring``) and ``k8s-event-bridge tail --since`` read them
here. No third-party import: the consumer kit may use it without the ``settings`` extra."""

from __future__ import annotations

import re
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """``90``, ``"90"``, ``"1.5s"``, ``"500ms"``, ``"1m30s"``, ``"2h"`` → seconds. Raises
    ``ValueError`` (a pydantic validator reports it as the key's error)."""
    if isinstance(value, bool):
        raise ValueError("a duration such as 1s, 500ms, 2m or 1h is expected")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for m in _DURATION.finditer(text):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _UNITS[m.group(2)]
                pos = m.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"{value!r} is not a duration such as 1s, 500ms, 2m or 1h"
                ) from None
    else:
        raise ValueError("a duration such as 1s, 500ms, 2m or 1h is expected")
    if seconds < 0:
        raise ValueError("a duration can not be negative")
    return seconds


def parse_with_unit(text: str) -> float:
    """A duration that names its unit (``"30s"``, ``"10m"``, ``"1h30m"``), as a command line's
    ``--since 10m`` does: a bare number (``"10"``) is refused, as it says neither seconds nor
    minutes. Raises ``ValueError``."""
    try:
        float(text)  # "10", but also "inf" and "nan", which Python reads as numbers
    except ValueError:
        return parse_duration(text)
    raise ValueError(f"{text!r} is not a duration with a unit such as 30s, 10m or 2h")
