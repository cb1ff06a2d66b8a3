"""NATS subject naming: ``<prefix>.<cluster>.<namespace>.<kind>.<reason>``.

Event subjects are put together by ``converting.Converter`` (cached per value) from ``token``.

Every token is sanitised: characters outside ``A-Za-z0-9_-`` become ``_`` and an empty token
becomes ``_``, so no Event can produce a wildcard, an empty token or an extra level.
Status events go to ``<prefix>.<cluster>._bridge.<what>``; ``_bridge`` is never a namespace
(namespace names are DNS labels and can not start with ``_``).
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
STATUS_TOKEN = "_bridge"


def token(value: str | None) -> str:
    if not value:
        return "_"
    if value.isascii() and value.replace("-", "").replace("_", "").isalnum():
        return value
    return _UNSAFE.sub("_", value)


def status_subject(prefix: str, cluster: str, what: str) -> str:
    return f"{prefix}.{token(cluster)}.{STATUS_TOKEN}.{token(what)}"
