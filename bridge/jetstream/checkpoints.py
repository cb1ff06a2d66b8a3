"""The checkpoint store of the service: a JetStream KV bucket, one key per cluster and watch
scope, so the checkpoint lives as long as the stream it describes. It is the runtime's
``CheckpointStore`` port (``bridge.runtime.ports``); what a checkpoint is lives in
``bridge.core.checkpoints``.
"""

from __future__ import annotations

import calendar
import time

import msgspec
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from bridge import logs
from bridge.core.checkpoints import Checkpoint
from bridge.jetstream.connection import unavailable

log = logs.get("checkpoints")


class KvCheckpointStore:
    """Failures JetStream may recover from raise ``errors.JetStreamUnavailable``."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str, replicas: int = 1) -> KvCheckpointStore:
        with unavailable(f"checkpoint bucket {bucket}"):
            try:
                kv = await js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                kv = await js.create_key_value(bucket=bucket, history=5, replicas=replicas)
                log.info("checkpoint_bucket_created", bucket=bucket)
        return cls(kv)

    async def load(self, key: str) -> Checkpoint | None:
        with unavailable(f"checkpoint {key}"):
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
        with unavailable(f"checkpoint {key}"):
            await self._kv.put(key, value)
