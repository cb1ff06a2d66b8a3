"""The Kubernetes API's failures, one tree for every program that talks to the API server.

    KubeError                    a request to the Kubernetes API failed, or was not sent
    ├── KubeConfigError          the kubeconfig or the in-cluster config can not be used
    ├── Invalid                  a path segment that is not a Kubernetes name: nothing was sent
    ├── Unavailable              asking again later may work (the worker holds the message)
    │   ├── KubeUnavailable      5xx, 408, refused, reset, timed out: the server is not there now
    │   └── TooManyRequests      429: throttled
    ├── Refused                  asking the same again will not change the answer
    │   ├── Unauthorized         401: credentials missing, expired or rotated
    │   ├── Forbidden            403: RBAC (or an admission policy) does not allow it
    │   ├── ResourceExpired      410: the resourceVersion or continue token is compacted away
    │   └── KubeBadRequest       other 4xx: the request is wrong (400, 422, ...)
    ├── NotFound                 404: the object is not there
    └── Conflict                 409: someone else wrote first, or a precondition no longer holds

Each ``Unavailable`` has ``retry_after``: the seconds the server's ``Retry-After`` asked for, or
None. Every error of an answer has ``status`` and a message ``"<status> <reason>: <the Status
object's message>"``; no other part of a response body is kept or logged.

A status is mapped here (``from_status``, ``error_for_status``), a foreign exception in
``k8s_event_common.kube.connection``; this module imports no client, so an error tree (the
bridge's ``bridge.errors``) can name these classes without loading one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

STATUS_PREVIEW = 200  # of a body that is not a Status object, this much is kept (an error page)


class KubeError(Exception):
    """A request to the Kubernetes API failed."""

    status: int | None = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class KubeConfigError(KubeError):
    """The kubeconfig or the in-cluster config can not be used: a configuration error."""


class Invalid(KubeError):
    """A path segment that is not a Kubernetes name: nothing was sent."""


class Unavailable(KubeError):
    """The API server did not answer, or asked to wait: try again later."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class KubeUnavailable(Unavailable):
    """5xx, 408, connection refused or reset, read timeout."""


class TooManyRequests(Unavailable):
    status = 429


class Refused(KubeError):
    """An answer that asking the same again will not change (401, 403, 410, 422, ...)."""


class Unauthorized(Refused):
    status = 401


class Forbidden(Refused):
    status = 403


class ResourceExpired(Refused):
    status = 410


class KubeBadRequest(Refused):
    status = 400


class NotFound(KubeError):
    status = 404


class Conflict(KubeError):
    status = 409


def from_status(
    status: int, message: str = "", reason: str = "", retry_after: float | None = None
) -> KubeError:
    """The exception for an HTTP status, or for an ERROR Status inside a watch stream."""
    text = f"{status} {reason}: {message or 'HTTP ' + str(status)}"
    if status == 410:
        return ResourceExpired(text)
    if status == 429:
        return TooManyRequests(text, retry_after=retry_after)
    if status == 401:
        return Unauthorized(text)
    if status == 403:
        return Forbidden(text)
    if status == 404:
        return NotFound(text)
    if status == 409:
        return Conflict(text)
    if status >= 500 or status in (0, 408):
        return KubeUnavailable(text, status=status, retry_after=retry_after)
    return KubeBadRequest(text, status=status)


def error_for_status(status: int, headers: Mapping[str, str] | None, body: bytes) -> KubeError:
    """The exception for a non-2xx answer, with the Status object's message and reason (of
    any other body, its first ``STATUS_PREVIEW`` bytes: an error page of a proxy)."""
    message, reason = "", ""
    try:
        doc: Any = json.loads(body) if body else {}
    except ValueError:  # not JSON, or not UTF-8
        message = body[:STATUS_PREVIEW].decode("utf-8", "replace")
    else:
        if isinstance(doc, dict):
            message = str(doc.get("message") or "")
            reason = str(doc.get("reason") or "")
    return from_status(status, message, reason, retry_after(headers))


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Retry-After in seconds; an HTTP date, inf or NaN (a hostile or broken server) is none."""
    value = headers.get("Retry-After") if headers else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None
