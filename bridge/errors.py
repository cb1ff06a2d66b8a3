"""The bridge's exceptions, one tree.

    BridgeError
    ├── ConfigError              bad or missing configuration (exit code 2)
    ├── KubeError                the Kubernetes API refused or failed a request
    │   ├── ResourceExpired      410: the resourceVersion or continue token is compacted away
    │   ├── TooManyRequests      429: throttled; ``retry_after`` seconds when the server said
    │   ├── Unauthorized         401: credentials missing, expired or rotated
    │   ├── Forbidden            403: RBAC does not allow the request
    │   ├── KubeUnavailable      5xx, refused, reset, timed out: the server is not there now
    │   ├── QuietWatch           an open watch sent nothing for kubernetes.read_timeout: not a
    │   │                        failure (Event watches carry no bookmarks), watch again
    │   ├── NotFound             404: the object is not there (a Lease not made yet)
    │   ├── Conflict             409: someone else wrote the object first (a Lease)
    │   └── KubeBadRequest       other 4xx: our request is wrong (bad field selector, ...)
    ├── ConversionError          an Event that can not be turned into a CloudEvent
    ├── JetStreamUnavailable     NATS or JetStream did not answer (timeout, no quorum, 503,
    │                            connection lost): passing, the step is tried again
    └── PublishError             the stream can not be used (start-up: create, check)
        ├── NoStream             no stream exists and nats.create_stream is false
        ├── StreamConfigMismatch an existing stream or bucket differs from its one shape
        │                        (k8s_event_common.streams), each key named
        └── JetStreamRefused     JetStream answered a start-up step with an error that asking
                                 again will not change (a bucket config it refuses, ...)

Publishing itself raises nothing: a timed-out or refused publish is sent again with the same
Nats-Msg-Id by ``bridge.jetstream.publishing.Publisher`` (see there), so no error type exists
for it.

Foreign exceptions are mapped once, at the boundary that met them, with ``raise ... from exc``:
``bridge.kube`` for aiohttp and kubernetes_asyncio, ``bridge.jetstream`` for nats-py. Above
the two boundaries nothing catches a library's exception.
"""

from __future__ import annotations

# Process exit codes of ``k8s-event-bridge run`` (and the other commands).
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""


class ConfigError(BridgeError):
    """The configuration is invalid; the message names the key."""


class KubeError(BridgeError):
    """A request to the Kubernetes API failed."""

    status: int | None = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class ResourceExpired(KubeError):
    status = 410


class TooManyRequests(KubeError):
    status = 429

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class Unauthorized(KubeError):
    status = 401


class Forbidden(KubeError):
    status = 403


class KubeUnavailable(KubeError):
    """5xx, connection refused or reset, read timeout."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class QuietWatch(KubeError):
    """An open watch sent nothing for ``kubernetes.read_timeout``. A default kube-apiserver
    sends no bookmarks on Event watches, so a quiet scope looks like this: a normal close,
    not an outage. A dead connection is found by TCP keepalive first (``KubeUnavailable``)."""


class NotFound(KubeError):
    status = 404


class Conflict(KubeError):
    status = 409


class KubeBadRequest(KubeError):
    status = 400


class ConversionError(BridgeError):
    """An Event can not be converted to a CloudEvent."""


class JetStreamUnavailable(BridgeError):
    """NATS or JetStream did not answer a request in time, or answered that it can not now."""


class PublishError(BridgeError):
    """A publish to JetStream failed."""


class NoStream(PublishError):
    pass


class StreamConfigMismatch(PublishError):
    """An existing stream's or bucket's configuration differs from its one shape."""


class JetStreamRefused(PublishError):
    """JetStream refused a request for good (an API error other than 503)."""


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
