"""Which configuration keys hold secrets: their values are never echoed, in a configuration
error or anywhere else. A ``*_file`` key holds a path, but a secret pasted there by mistake
(a seed in ``NKEY_SEED_FILE``) must not be printed back either."""

from __future__ import annotations

import re

SECRET_KEYS = frozenset({"password", "token", "bearer_token"})


def never_echo(key: str) -> bool:
    """Whether the value given for ``key`` (a dotted path, or its last part) must not be shown."""
    parts = key.split(".")
    last = parts[-1]
    # a map of headers (otlp.headers.<name>) holds tokens under names of the user's choosing
    return last in SECRET_KEYS or last.endswith("_file") or "headers" in parts


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")


def redact_text(text: str) -> str:
    """``text`` with the user name, password or token of every URL in it shown as ``***``."""
    return _USERINFO.sub(r"\1***@", text)
