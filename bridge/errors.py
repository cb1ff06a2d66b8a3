"""The bridge's exceptions, one tree, and the Kubernetes API's (shared).

    BridgeError
    ├── ConfigError              bad or missing configuration (exit code 2)
    ├── ConversionError          an Event that can not be turned into a CloudEvent
    ├── JetStreamUnavailable     NATS or JetStream did not answer (timeout, no quorum, 503,
    │                            connection lost): passing, the step is tried again
    └── PublishError             the stream can not be used (start-up: create, check)
        ├── NoStream             no stream exists and nats.create_stream is false
        ├── StreamConfigMismatch an existing stream or bucket differs from its one shape
        │                        (k8s_event_common.streams), each key named
        └── JetStreamRefused     JetStream answered a start-up step with an error that asking
                                 again will not change (a bucket config it refuses, ...)

    KubeError                    the Kubernetes API refused or failed a request: the tree the
    │                            bridge shares with the remediation worker, drawn and mapped in
    │                            ``k8s_event_common.kube.errors``; its names are re-exported
    │                            here. The ones the bridge meets:
    ├── ResourceExpired          410: the resourceVersion or continue token is compacted away
    ├── TooManyRequests          429: throttled; ``retry_after`` seconds when the server said
    ├── Unauthorized             401: credentials missing, expired or rotated
    ├── Forbidden                403: RBAC does not allow the request
    ├── KubeUnavailable          5xx, refused, reset, timed out: the server is not there now
    ├── QuietWatch               an open watch sent nothing for kubernetes.read_timeout: not a
    │                            failure (Event watches carry no bookmarks), watch again
    ├── NotFound                 404: the object is not there (a Lease not made yet)
    ├── Conflict                 409: someone else wrote the object first (a Lease)
    ├── KubeBadRequest           other 4xx: our request is wrong (bad field selector, ...)
    └── Invalid                  a path segment that is not a Kubernetes name (``..``, a
                                 ``/``, a ``%``): refused by ``k8s_event_common.kube.paths``,
                                 nothing sent (a configured one is a ConfigError at load)

A ``KubeError`` is not a ``BridgeError``: the kubeconfig that can not be used is mapped to
``ConfigError`` by ``bridge.kube.client``; nothing else catches ``BridgeError`` where a
``KubeError`` could arrive.

Publishing itself raises nothing: a timed-out or refused publish is sent again with the same
Nats-Msg-Id by ``bridge.jetstream.publishing.Publisher`` (see there), so no error type exists
for it.

Foreign exceptions are mapped once, at the boundary that met them, with ``raise ... from exc``:
``k8s_event_common.kube.connection`` (reached through ``bridge.kube``) for aiohttp and
kubernetes_asyncio, ``bridge.jetstream`` for nats-py. Above the two boundaries nothing catches
a library's exception.
"""

from __future__ import annotations

from k8s_event_common.kube.errors import (
    Conflict,
    Forbidden,
    Invalid,
    KubeBadRequest,
    KubeError,
    KubeUnavailable,
    NotFound,
    ResourceExpired,
    TooManyRequests,
    Unauthorized,
    from_status,
)

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_OK",
    "BridgeError",
    "ConfigError",
    "Conflict",
    "ConversionError",
    "Forbidden",
    "Invalid",
    "JetStreamRefused",
    "JetStreamUnavailable",
    "KubeBadRequest",
    "KubeError",
    "KubeUnavailable",
    "NoStream",
    "NotFound",
    "PublishError",
    "QuietWatch",
    "ResourceExpired",
    "StreamConfigMismatch",
    "TooManyRequests",
    "Unauthorized",
    "from_status",
]

# Process exit codes of ``k8s-event-bridge run`` (and the other commands).
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""


class ConfigError(BridgeError):
    """The configuration is invalid; the message names the key."""


class QuietWatch(KubeError):
    """An open watch sent nothing for ``kubernetes.read_timeout``. A default kube-apiserver
    sends no bookmarks on Event watches, so a quiet scope looks like this: a normal close,
    not an outage. A dead connection is found by TCP keepalive first (``KubeUnavailable``)."""


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
