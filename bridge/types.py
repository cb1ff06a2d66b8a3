"""The bridge's own small types; raw wire shapes are TypedDicts."""

from __future__ import annotations

from typing import Any, TypedDict


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    managedFields: list[Any]


class InvolvedObject(TypedDict, total=False):
    kind: str
    namespace: str
    name: str
    uid: str
    apiVersion: str
    fieldPath: str


class EventSeries(TypedDict, total=False):
    count: int
    lastObservedTime: str


class RawEvent(TypedDict, total=False):
    """A core/v1 Event as the API sends it (fields the bridge reads)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    involvedObject: InvolvedObject
    reason: str
    message: str
    type: str
    count: int
    firstTimestamp: str | None
    lastTimestamp: str | None
    eventTime: str | None
    series: EventSeries | None
    reportingComponent: str
    reportingInstance: str


class WatchLine(TypedDict):
    type: str
    object: dict[str, Any]
