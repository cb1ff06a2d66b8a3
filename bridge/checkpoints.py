"""The checkpoint: the resourceVersion to resume from, one key per cluster and watch scope,
in a JetStream KV bucket, so it lives as long as the stream it describes.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Protocol

import msgspec
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from bridge import logs, subjects

log = logs.get("checkpoints")


@dataclass(frozen=True)
class Checkpoint:
    resource_version: int
    saved_at: float | None  # epoch seconds; the version was seen at most one interval before


class CheckpointStore(Protocol):
    async def load(self, key: str) -> Checkpoint | None: ...
    async def save(self, key: str, resource_version: int) -> None: ...


def checkpoint_key(cluster: str, namespace: str | None) -> str:
    """``<cluster>.all`` or ``<cluster>.ns.<namespace>``; KV keys allow ``[-/_=.a-zA-Z0-9]``."""
    scope = "all" if namespace is None else f"ns.{subjects.token(namespace)}"
    return f"{subjects.token(cluster)}.{scope}"


class KvCheckpointStore:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str, replicas: int = 1) -> KvCheckpointStore:
        try:
            kv = await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            kv = await js.create_key_value(bucket=bucket, history=5, replicas=replicas)
            log.info("checkpoint_bucket_created", bucket=bucket)
        return cls(kv)

    async def load(self, key: str) -> Checkpoint | None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        try:
            doc = msgspec.json.decode(entry.value)
            rv = int(doc["resourceVersion"])
            try:
                saved_at: float | None = calendar.timegm(
                    time.strptime(doc["savedAt"], "%Y-%m-%dT%H:%M:%SZ")
                )
            except (KeyError, TypeError, ValueError):
                saved_at = None
            return Checkpoint(rv, saved_at)
        except (msgspec.DecodeError, KeyError, TypeError, ValueError):
            # Starting over (a list) loses nothing: the stream drops what it already has.
            log.error(
                "checkpoint_unreadable",
                key=key,
                value=entry.value[:200].decode("utf-8", "replace"),
                action="starting from a fresh list",
            )
            return None

    async def save(self, key: str, resource_version: int) -> None:
        value = msgspec.json.encode(
            {
                "resourceVersion": str(resource_version),
                "savedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        await self._kv.put(key, value)
