"""The CloudEvent ids a subscriber has handled, so that a redelivered message is acked and
skipped instead of handled twice: ``MemorySeen`` in the process, ``KVSeen`` in a JetStream KV
bucket (across restarts, shared by replicas), ``NoSeen`` for a handler whose copies are
harmless."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Protocol

import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

from k8s_event_common import streams as shapes

DEFAULT_SEEN_TTL = 7 * 86400.0
MEMORY_SEEN = 100_000  # the ids a MemorySeen keeps by default


def digest(id_: str) -> bytes:
    """An id as a subscriber keeps it in memory: 16 bytes, however long the id a message
    carries."""
    return hashlib.blake2b(id_.encode(errors="surrogatepass"), digest_size=16).digest()


class Seen(Protocol):
    """The CloudEvent ids already handled."""

    async def contains(self, id_: str) -> bool: ...

    async def add(self, id_: str) -> None: ...


class MemorySeen:
    """The last ``limit`` ids handled by this process (redeliveries come soon after), each kept
    as a 16-byte digest: what one costs (about 160 bytes with its entry) does not grow with the
    id a message carries, whose length is its publisher's word."""

    def __init__(self, limit: int = MEMORY_SEEN) -> None:
        self._ids: OrderedDict[bytes, None] = OrderedDict()
        self._limit = limit

    async def contains(self, id_: str) -> bool:
        return digest(id_) in self._ids

    async def add(self, id_: str) -> None:
        self._ids[digest(id_)] = None
        if len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)


class NoSeen:
    """Remembers nothing: every delivery is handled, a redelivered one again. For a handler
    whose copies are harmless (they carry the same id) and whose ids must not be trusted to
    skip: a message forged with a genuine id seen first would hide the genuine one."""

    async def contains(self, id_: str) -> bool:
        return False

    async def add(self, id_: str) -> None:
        return None


class KVSeen:
    """Ids handled, in a JetStream KV bucket (keys: the id's SHA-256; entries expire after
    ``ttl`` seconds): survives the subscriber's restarts and is shared by its replicas."""

    def __init__(self, kv: Any) -> None:
        self._kv = kv

    @staticmethod
    def shape(bucket: str, ttl: float = DEFAULT_SEEN_TTL, replicas: int = 1) -> StreamConfig:
        """The bucket's one shape (its stream ``KV_<bucket>``): ``k8s_event_common.streams``."""
        return shapes.seen_bucket(bucket, ttl=ttl, replicas=replicas)

    @classmethod
    async def open(
        cls, nc: NATS, bucket: str, ttl: float = DEFAULT_SEEN_TTL, replicas: int | None = None
    ) -> KVSeen:
        """The bucket checked against its shape (``ShapeMismatch`` names each difference: a
        republish, a mirror, other limits ...), or created with it when missing and the
        credentials may (the shipped permissions do not: it is provisioned first). ``replicas``
        None: any number (a cluster's operator provisions it R3), one made here has 1."""
        want = cls.shape(bucket, ttl, replicas or 1)
        unchecked = ["num_replicas"] if replicas is None else []
        await shapes.ensure(nc, want, "bucket", unchecked=unchecked)
        return cls(await nc.jetstream().key_value(bucket))

    @staticmethod
    def key(id_: str) -> str:
        return hashlib.sha256(id_.encode()).hexdigest()

    async def contains(self, id_: str) -> bool:
        try:
            await self._kv.get(self.key(id_))
        except nats.js.errors.KeyNotFoundError:
            return False
        return True

    async def add(self, id_: str) -> None:
        await self._kv.put(self.key(id_), b"1")
