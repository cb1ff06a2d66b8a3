"""What the one list/watch loop needs to know of a resource: data, not a second loop.

kopf's ``infinite_watch(resource=...)`` and client-go's Reflector (a ``ListerWatcher`` and an
``expectedType``) run one loop for any kind of object; what differs per resource is a path and
a decoder. Here too: the watcher (``bridge.runtime.watching``), the list pager
(``bridge.kube.paging``) and the watch-line reader (``bridge.kube.lines``) take a ``Resource``,
and what its items mean is the caller's ``Sink``.

One more thing differs, and it is data too: whether the resource is a **history** or a
**state**. Events are a history: each is handed on once, so a relist hands on only what is
newer than what was passed on, a 410 is judged for a gap (``bridge.core.gaps``) and the first
start follows ``kubernetes.initial``. Namespaces are a state: a list hands on all of it, in one
batch, and the sink replaces what it held (client-go's ``Store.Replace``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.core import events
from bridge.core.events import Event
from k8s_event_common.kube import paths


@dataclass(frozen=True)
class Resource:
    name: str  # the plural, as in its path and its RBAC rule: "events", "namespaces"
    api_version: str  # its [group/]version, as in its path: "v1", "coordination.k8s.io/v1"
    namespaced: bool  # its collection has a path in one namespace; else cluster-scoped
    from_line: Callable[[bytes], tuple[str, Event]]  # a watch line → (type, object)
    from_item: Callable[[Any], Event]  # a list item (bytes as listed, or a dict) → object
    history: bool  # handed on once each (Events); else a state a list replaces (Namespaces)

    @property
    def api(self) -> str:
        """Its group/version for a message that names a missing permission: ``core/v1``."""
        return self.api_version if "/" in self.api_version else f"core/{self.api_version}"

    def at(self, namespace: str | None) -> str:
        """The collection's path (``k8s_event_common.kube.paths``): in ``namespace``, or of all
        (None, or a cluster-scoped resource). Raises ``Invalid`` for a namespace that is not a
        DNS-1123 label: nothing is sent."""
        return paths.object_path(
            self.api_version, self.name, namespace if self.namespaced else None
        )


EVENTS = Resource(
    name="events",
    api_version="v1",
    namespaced=True,
    from_line=events.from_line,
    from_item=events.from_item,
    history=True,
)

NAMESPACES = Resource(
    name="namespaces",
    api_version="v1",
    namespaced=False,
    from_line=events.from_line,  # the view reads metadata, which every object has
    from_item=events.from_object,
    history=False,
)
