"""The checkpoint store of the service: a JetStream KV bucket, one key per cluster and watch
scope, so the checkpoint lives as long as the stream it describes. It is the runtime's
``CheckpointStore`` port (``bridge.runtime.ports``); what a checkpoint is lives in
``bridge.core.checkpoints``.

Writes are compare-and-set on the key's KV revision and never move the checkpoint backwards
(CAS-max, ``model/``: ``CKPT=0``): with two replicas, a deposed leader that is still running
can not rewind what the new leader saved. A write that finds a newer checkpoint stored leaves
it; one that finds an older one (written meanwhile by the other) tries again on top of it.
"""

from __future__ import annotations

import calendar
import time

import msgspec
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.kv import KeyValue

from bridge import errors, logs
from bridge.core.checkpoints import Checkpoint
from bridge.jetstream import streams
from bridge.jetstream.connection import unavailable
from bridge.settings import NatsSettings

log = logs.get("checkpoints")

CAS_ATTEMPTS = 5


class KvCheckpointStore:
    """Failures JetStream may recover from raise ``errors.JetStreamUnavailable``."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        # key -> (KV revision, resourceVersion) last read or written here
        self._seen: dict[str, tuple[int, int | None]] = {}

    @classmethod
    async def open(
        cls, nc: NATS, bucket: str, settings: NatsSettings | None = None
    ) -> KvCheckpointStore:
        """The bucket checked against its one shape (``streams.checkpoint_config``: a
        difference raises ``StreamConfigMismatch``), created when missing and allowed."""
        settings = settings or NatsSettings()
        with unavailable(f"checkpoint bucket {bucket}"):
            want = streams.checkpoint_config(bucket, settings)
            await streams.ensure(nc, want, settings, what="checkpoint bucket", create=True)
            kv = await nc.jetstream(domain=settings.domain).key_value(bucket)
        return cls(kv)

    async def load(self, key: str) -> Checkpoint | None:
        with unavailable(f"checkpoint {key}"):
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                self._seen.pop(key, None)
                return None
        cp = self._decode(key, entry.value)
        self._seen[key] = (entry.revision or 0, cp.resource_version if cp else None)
        return cp

    def _decode(self, key: str, value: bytes | None) -> Checkpoint | None:
        if value is None:
            return None
        try:
            doc = msgspec.json.decode(value)
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
                value=value[:200].decode("utf-8", "replace"),
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
            for _ in range(CAS_ATTEMPTS):
                seen = self._seen.get(key)
                if seen is None:
                    await self.load(key)
                    seen = self._seen.get(key, (0, None))
                revision, stored = seen
                if stored is not None and stored >= resource_version:
                    if stored > resource_version:
                        log.warn_sampled(
                            f"ahead:{key}",
                            "checkpoint_not_moved_back",
                            interval=60,
                            key=key,
                            stored=stored,
                            ours=resource_version,
                            note="another replica saved a newer checkpoint: it stays",
                        )
                    return
                try:
                    if revision:
                        new = await self._kv.update(key, value, last=revision)
                    else:
                        new = await self._kv.create(key, value)
                except nats.js.errors.KeyWrongLastSequenceError:
                    self._seen.pop(key, None)  # written meanwhile: read it, decide again
                    continue
                self._seen[key] = (new, resource_version)
                return
            raise errors.JetStreamUnavailable(
                f"checkpoint {key}: written by someone else {CAS_ATTEMPTS} times in a row"
            )
