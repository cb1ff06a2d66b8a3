"""What the alerting subscriber holds of the stream, bounded: every value an alert takes from a
message cut (``cut``), and the alerts held bounded in count and bytes, per namespace and in all
(``Held``). Pure: no I/O, no clock.

A core/v1 Event's message has no length limit, and any controller a team runs may write Events
in its namespace: an alert keeps at most ``message_bytes`` of it (events.k8s.io caps a note at
1 KiB, the default) and ``VALUE_BYTES`` of every other value (a name, a reason, an id), each cut
on a character boundary with a marker saying how much was left out. A label value cut carries a
digest of the whole too, so two long values stay two alerts.

``Held`` keeps the records of ``alerts.State`` by key, each of a ``Kind``:

- ``EVENT``: a Warning Event's alert (and one resolved because its labels changed), counted in
  its namespace (cluster and namespace) and in all: at most ``Bounds.namespace_alerts`` and
  ``namespace_bytes`` a namespace, ``alerts`` and ``bytes`` in all. A namespace at its bound
  can not crowd out the others;
- ``STATUS``: the bridge's status alerts (keyed by cluster and scope), at most ``status_alerts``;
- ``REFUSAL``: the alert telling that a namespace's (or every namespace's) alerts are refused,
  at most ``REFUSAL_ALERTS``.

An alert's bytes are what its label and annotation values take in memory (``cost``); what else
an alert holds (its dicts, times, the record) is about the same for every alert, counted by
number (bench/budget.py). A record that would go past a bound is refused: ``put`` answers why
(``Why``) and holds nothing new; a record replacing one of the same key counts only what it
adds.
"""

from __future__ import annotations

import enum
import hashlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

VALUE_BYTES: Final = 256  # a name, a reason, an id (a Kubernetes name is at most 253 bytes)
MESSAGE_BYTES: Final = 1024  # an Event's message, a status event's detail (the default)
REFUSAL_ALERTS: Final = 1024  # refusal alerts held at most (namespaces at their bound)
MIB: Final = 1024 * 1024


def cut(text: str, limit: int, *, distinct: bool = False) -> str:
    """``text`` if its UTF-8 is at most ``limit`` bytes; else its head, cut on a character
    boundary, and a marker of what was left out: ``...[cut: 912345 bytes]``, with ``distinct``
    also a digest of the whole (``...[cut: 912345 bytes #1a2b3c4d]``): ``limit`` bytes in all."""
    if len(text) * 4 <= limit:  # at most 4 bytes a character: it fits
        return text
    raw = text.encode("utf-8", "replace")  # a lone surrogate (JSON allows one) counts 1
    if len(raw) <= limit:
        return text
    digest = f" #{hashlib.blake2b(raw, digest_size=4).hexdigest()}" if distinct else ""
    widest = _marker(len(raw), digest)
    head = raw[: max(limit - len(widest.encode()), 0)].decode("utf-8", "ignore")
    return head + _marker(len(raw) - len(head.encode()), digest)


def _marker(left_out: int, digest: str) -> str:
    # ASCII: one character past Latin-1 would make CPython hold the whole text at 2 bytes each
    return f"...[cut: {left_out} bytes{digest}]"


def value(text: str) -> str:
    """A name, reason, id or label value from a message: at most ``VALUE_BYTES``, distinct."""
    return cut(text, VALUE_BYTES, distinct=True)


def cost(values: Iterable[str]) -> int:
    """What the strings take in memory (their objects, not their characters)."""
    return sum(sys.getsizeof(v) for v in values)


class Kind(enum.Enum):
    EVENT = "event"  # counted per namespace and in all
    STATUS = "status"  # the bridge's status alerts
    REFUSAL = "refusal"  # the alerts telling of refusals


class Why(enum.StrEnum):
    """Why an alert was refused (the ``why`` of ``alerts_refused_total``)."""

    NAMESPACE_ALERTS = "namespace_alerts"
    NAMESPACE_BYTES = "namespace_bytes"
    ALERTS = "alerts"
    BYTES = "bytes"
    STATUS_ALERTS = "status_alerts"
    REFUSAL_ALERTS = "refusal_alerts"


@dataclass(frozen=True)
class Bounds:
    """What ``Held`` holds at most (the ``alerts`` settings; docs/consumers.md)."""

    alerts: int = 10_000
    bytes: int = 24 * MIB
    namespace_alerts: int = 500
    namespace_bytes: int = 1 * MIB
    status_alerts: int = 1_000


@dataclass
class Use:
    alerts: int = 0
    bytes: int = 0


Where = tuple[str, str]  # (cluster, namespace) of an Event alert
R = TypeVar("R")
K = TypeVar("K")


@dataclass(frozen=True)
class _Entry(Generic[R]):
    record: R
    kind: Kind
    where: Where | None
    cost: int


class Held(Generic[K, R]):
    """Records by key, bounded by ``Bounds``; read like a mapping, changed by ``put`` and
    ``pop`` only."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self._entries: dict[K, _Entry[R]] = {}
        self._namespaces: dict[Where, Use] = {}
        self.events = Use()  # the Event alerts in all
        self._counts = {kind: 0 for kind in Kind}

    def get(self, key: K) -> R | None:
        entry = self._entries.get(key)
        return entry.record if entry is not None else None

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> Iterator[tuple[K, R]]:
        for key, entry in self._entries.items():
            yield key, entry.record

    def values(self) -> Iterator[R]:
        for entry in self._entries.values():
            yield entry.record

    def count(self, kind: Kind) -> int:
        return self._counts[kind]

    def namespace(self, where: Where) -> Use:
        """What a namespace's Event alerts hold (a copy)."""
        use = self._namespaces.get(where)
        return Use(use.alerts, use.bytes) if use is not None else Use()

    def namespaces(self) -> int:
        return len(self._namespaces)

    def put(self, key: K, record: R, kind: Kind, where: Where | None, size: int) -> Why | None:
        """Hold ``record`` under ``key`` (replacing the one there), costing ``size`` bytes;
        or, when that would go past a bound, hold nothing new and answer why."""
        old = self._entries.get(key)
        if old is not None and old.kind is not kind:
            raise ValueError(f"{key!r} is a {old.kind.value} record")
        why = self._refused(old, kind, where, size)
        if why is not None:
            return why
        if old is not None:
            self.pop(key)
        self._entries[key] = _Entry(record, kind, where, size)
        self._counts[kind] += 1
        if kind is Kind.EVENT:
            assert where is not None
            use = self._namespaces.setdefault(where, Use())
            for u in (use, self.events):
                u.alerts += 1
                u.bytes += size
        return None

    def pop(self, key: K) -> R | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._counts[entry.kind] -= 1
        if entry.kind is Kind.EVENT:
            assert entry.where is not None
            use = self._namespaces[entry.where]
            for u in (use, self.events):
                u.alerts -= 1
                u.bytes -= entry.cost
            if use.alerts == 0:
                del self._namespaces[entry.where]
        return entry.record

    def _refused(
        self, old: _Entry[R] | None, kind: Kind, where: Where | None, size: int
    ) -> Why | None:
        new = 0 if old is not None else 1
        grows = size - (old.cost if old is not None else 0)
        b = self.bounds
        if kind is Kind.STATUS:
            return Why.STATUS_ALERTS if self._counts[kind] + new > b.status_alerts else None
        if kind is Kind.REFUSAL:
            return Why.REFUSAL_ALERTS if self._counts[kind] + new > REFUSAL_ALERTS else None
        assert where is not None
        use = self._namespaces.get(where, Use())
        if use.alerts + new > b.namespace_alerts:
            return Why.NAMESPACE_ALERTS
        if grows > 0 and use.bytes + grows > b.namespace_bytes:
            return Why.NAMESPACE_BYTES
        if self.events.alerts + new > b.alerts:
            return Why.ALERTS
        if grows > 0 and self.events.bytes + grows > b.bytes:
            return Why.BYTES
        return None


def strings(
    labels: Mapping[str, str], annotations: Mapping[str, str], shared: Iterable[str]
) -> list[str]:
    """The strings an alert holds of its own: its label values but the ``shared`` labels'
    (the rules' static ones, one object for every alert), and its annotation values."""
    skip = set(shared)
    return [v for k, v in labels.items() if k not in skip] + list(annotations.values())
