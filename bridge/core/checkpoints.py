"""The checkpoint: the resourceVersion a watch scope resumes from, and the key it is kept under.

Where it is kept is a port of the runtime (``bridge.runtime.ports.CheckpointStore``); the
service keeps it in a JetStream KV bucket (``bridge.jetstream.checkpoints``), so it lives as
long as the stream it describes.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.core import subjects


@dataclass(frozen=True)
class Checkpoint:
    resource_version: int
    saved_at: float | None  # epoch seconds; the version was seen at most one interval before


def scope_name(namespace: str | None) -> str:
    """How a watch scope is named in logs, metrics, /readyz and /status: its namespace, or
    ``*`` for all namespaces."""
    return namespace or "*"


def checkpoint_key(cluster: str, namespace: str | None) -> str:
    """``<cluster>.all`` or ``<cluster>.ns.<namespace>``; KV keys allow ``[-/_=.a-zA-Z0-9]``."""
    scope = "all" if namespace is None else f"ns.{subjects.token(namespace)}"
    return f"{subjects.token(cluster)}.{scope}"
