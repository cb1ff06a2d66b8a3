"""NATS subject naming: ``<prefix>.<cluster>.<namespace>.<kind>.<reason>``.

Event subjects are put together by ``converting.Converter`` (cached per value) from ``token``.

Every value is one token (``k8s_event_common.subjects.token``: an ordinary value as it is, any
other escaped, distinct values distinct tokens), so no Event can produce a wildcard, an empty
token or an extra level. Status events go to ``<prefix>.<cluster>._bridge.<what>``; no value's
token is ``_bridge``.
"""

from __future__ import annotations

from k8s_event_common.subjects import STATUS_TOKEN, token

__all__ = ["STATUS_TOKEN", "status_subject", "token"]


def status_subject(prefix: str, cluster: str, what: str) -> str:
    return f"{prefix}.{token(cluster)}.{STATUS_TOKEN}.{token(what)}"
