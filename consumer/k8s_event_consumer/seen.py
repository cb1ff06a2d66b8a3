"""The CloudEvent ids a subscriber has handled, so that a redelivered message is acked and
skipped instead of handled twice: ``MemorySeen`` in the process, ``KVSeen`` in a JetStream KV
bucket (across restarts, shared by replicas; an entry counts only when its value is the one
this program writes), ``NoSeen`` for a handler whose copies are harmless."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Protocol

import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

from k8s_event_common import streams as shapes
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_common.cloudevents import quoted
from k8s_event_common.logformat import Logger

DEFAULT_SEEN_TTL = 7 * 86400.0
MEMORY_SEEN = 100_000  # the ids a MemorySeen keeps by default
# the first word of every value a KVSeen writes, and its version: ``KVSeen.value``
MARK = b"k8s-event-seen/1"

log = Logger("k8s_event_consumer.seen")


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
    ``ttl`` seconds): survives the subscriber's restarts and is shared by its replicas.

    An entry counts only when its value is the one this program writes for that id in that
    bucket (``value``: ``MARK``, the bucket's name, the key), compared byte for byte. nats-server
    checks a request's subject against the permissions, not its reply subject, and JetStream
    answers into any subject of the account: a request of another program's user whose reply
    subject is ``$KV.<bucket>.<key>`` stores JetStream's answer in the bucket under a key of
    the attacker's choosing. That answer is JSON (an API answer; a CloudEvent, delivered or got,
    in either mode), an empty body (a pull request's status), or a value stored elsewhere and
    handed out raw (another bucket's entry by a direct get: ``1``, a resourceVersion; this
    bucket's entry of another key): none is this value, so a key that exists proves nothing
    and such an entry is absent (``contains`` False: the message is handled, and ``add``
    overwrites the entry), counted (``forged``) and logged (``seen_forged``, once a minute).

    The value is no secret: a user who may both store bytes of its choosing in a stream of the
    account (the bridge's, which may publish Events) and have JetStream hand them out raw on a
    reply subject (a pull request on a durable where they are next) can write it. A keyed MAC
    would close that only with a key no other program's credentials reach, a Secret of its own
    to distribute and rotate, while this program's own user, which any such key sits beside,
    may write the bucket directly; separate NATS accounts for the bridge and the subscribers
    close the whole class at the server (docs/design.md, the subscribers' handled ids).

    Entries of the previous version (the value ``1``) no longer count: ``1`` is what many
    buckets hold, a direct get hands it out raw. An id handled before the upgrade and delivered
    again within the bucket's TTL (a redelivery, a replay) is handled again."""

    def __init__(self, kv: Any, bucket: str, clock: Clock = SYSTEM) -> None:
        self._kv = kv
        self.bucket = bucket
        self.forged = 0  # entries found whose value this program did not write
        self._log = log.timed(clock.monotonic)  # its lines sampled on its clock

    @staticmethod
    def shape(bucket: str, ttl: float = DEFAULT_SEEN_TTL, replicas: int = 1) -> StreamConfig:
        """The bucket's one shape (its stream ``KV_<bucket>``): ``k8s_event_common.streams``."""
        return shapes.seen_bucket(bucket, ttl=ttl, replicas=replicas)

    @classmethod
    async def open(
        cls,
        nc: NATS,
        bucket: str,
        ttl: float = DEFAULT_SEEN_TTL,
        replicas: int | None = None,
        clock: Clock = SYSTEM,
    ) -> KVSeen:
        """The bucket checked against its shape (``ShapeMismatch`` names each difference: a
        republish, a mirror, other limits ...), or created with it when missing and the
        credentials may (the shipped permissions do not: it is provisioned first). ``replicas``
        None: any number (a cluster's operator provisions it R3), one made here has 1."""
        want = cls.shape(bucket, ttl, replicas or 1)
        unchecked = ["num_replicas"] if replicas is None else []
        await shapes.ensure(nc, want, "bucket", unchecked=unchecked)
        return cls(await nc.jetstream().key_value(bucket), bucket, clock)

    @staticmethod
    def key(id_: str) -> str:
        """The id's key: the SHA-256 of its UTF-8 (a lone surrogate, which a JSON id may
        carry, passed through: no id makes this raise)."""
        return hashlib.sha256(id_.encode(errors="surrogatepass")).hexdigest()

    def value(self, id_: str) -> bytes:
        """What this program writes for ``id_``: ``MARK``, the bucket's name and the id's key,
        space-separated; no JSON, no empty body, no other key's or bucket's value."""
        return self._value(self.key(id_))

    def _value(self, key: str) -> bytes:
        return b" ".join((MARK, self.bucket.encode(), key.encode()))

    async def contains(self, id_: str) -> bool:
        key = self.key(id_)
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return False
        if entry.value == self._value(key):
            return True
        self.forged += 1
        got = entry.value or b""
        self._log.warn_sampled(
            "seen_forged",
            "seen_forged",
            bucket=self.bucket,
            key=key,
            revision=entry.revision,
            value=quoted(got[:512].decode(errors="replace")),
            size=len(got),
        )
        return False

    async def add(self, id_: str) -> None:
        key = self.key(id_)
        await self._kv.put(key, self._value(key))
