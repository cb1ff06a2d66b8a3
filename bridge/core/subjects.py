"""NATS subject naming: ``<prefix>.<cluster>.<namespace>.<kind>.<reason>``.

Event subjects are put together by ``converting.Converter`` (cached per value) from ``token``.

Every token is sanitised: characters outside ``A-Za-z0-9_-`` become ``_`` and an empty token
becomes ``_``, so no Event can produce a wildcard, an empty token or an extra level.
Status events go to ``<prefix>.<cluster>._bridge.<what>``; ``_bridge`` is never a namespace
(namespace names are DNS labels and can not start with ``_``).
"""

from __future__ import annotations

from k8s_event_common.subjects import STATUS_TOKEN, token

__all__ = ["STATUS_TOKEN", "status_subject", "token"]


def status_subject(prefix: str, cluster: str, what: str) -> str:
    return f"{prefix}.{token(cluster)}.{STATUS_TOKEN}.{token(what)}"
