"""Enrichment, the pure part: what an Event gets from its namespace and its involved object.

``Plan`` is ``enrich`` compiled: which label and annotation keys become which CloudEvent
extension, and which kinds may be read. ``Namespaces`` holds, per namespace, only the values
the plan names (kept current by a list and watch, ``bridge.runtime.enriching``). ``ObjectInfo``
is what one read of an object leaves: its uid, the labels the plan names, its controller.
``LookupCache`` keeps them, bounded by count and bytes, least recently used first out, each
fresh for a TTL. ``Enrichment`` is the result for one Event: the extension values and what is
missing (``part:why``), which the converter writes as ``k8senriched`` and
``k8senrichmissing``.

Everything here comes from the cluster, where anyone who may create an Event chooses its
involvedObject and anyone who may create a Pod chooses its ownerReferences: ``target`` reads an
object only when the one rule trusts the reference (``k8s_event_common.tenancy``: in the Event's
own namespace; a cluster-scoped one from default or kube-system, and then only for Events in
``enrich.object.cluster_namespaces``), of a kind the plan allows, named by valid names, and
only when the Event names its uid; a read object counts only when its uid is the one the Event
names; its owners count only as far as ``k8s_event_common.owners.walk`` proves them from the
owner's side (``owner:unproven`` past that).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.settings import EnrichSettings
from k8s_event_common import owners, tenancy
from k8s_event_common.kube import paths

# whys of what is missing, as ``k8senrichmissing`` writes them (``part:why``)
TIMEOUT: Final = "timeout"  # the lookup did not answer within enrich.lookup_timeout
UNREACHABLE: Final = "unreachable"  # the API server could not be reached
FORBIDDEN: Final = "forbidden"  # 401/403: the bridge may not read it
NOTFOUND: Final = "notfound"  # no such object (or another object of that name now)
ERROR: Final = "error"  # another answer (5xx, 429, an unreadable body)
UNKNOWN: Final = "unknown"  # a namespace the namespace watch does not (yet) know
KIND: Final = "kind"  # a kind enrich.object.kinds does not name
INVALID: Final = "invalid"  # the Event names no object the bridge may read
OVERSIZED: Final = "oversized"  # an annotation value over MAX_VALUE
NOUID: Final = "nouid"  # the involvedObject names no uid: which object it is can not be told
SCOPE: Final = "scope"  # a cluster-scoped object, the Event in a namespace not trusted for it
UNPROVEN: Final = "unproven"  # a controller reference its owner does not confirm (owners.walk)
WHYS: Final = (
    TIMEOUT,
    UNREACHABLE,
    FORBIDDEN,
    NOTFOUND,
    ERROR,
    UNKNOWN,
    KIND,
    INVALID,
    OVERSIZED,
    NOUID,
    SCOPE,
    UNPROVEN,
)
PARTS: Final = ("namespace", "object", "owner")

MAX_VALUE: Final = 1024  # longest annotation value carried (label values are <= 63)
ENTRY_OVERHEAD: Final = 400  # bytes counted per cached object beyond its strings

# (kind, namespace, name): namespace "" for a cluster-scoped kind
Key = tuple[str, str, str]


@dataclass(frozen=True)
class ObjectInfo:
    """What the plan needs of one object read from the API server: its uid, the labels the plan
    names, and what the owner walk needs (``owners.Facts``: its labels only when it has a
    controller to prove, or may be one)."""

    uid: str
    labels: dict[str, str]
    facts: owners.Facts | None = None

    def size(self) -> int:
        n = ENTRY_OVERHEAD + len(self.uid)
        for k, v in self.labels.items():
            n += len(k) + len(v) + 100
        if self.facts is not None:
            n += self.facts.size()
        return n


@dataclass
class Enrichment:
    """The extension values of one Event and what is missing (``part:why``, in order)."""

    values: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def miss(self, part: str, why: str) -> None:
        item = f"{part}:{why}"
        if item not in self.missing:
            self.missing.append(item)

    def attributes(self) -> dict[str, str]:
        """The CloudEvent extensions: the values, ``k8senriched`` and, when partial,
        ``k8senrichmissing``."""
        out = dict(self.values)
        out["k8senriched"] = "partial" if self.missing else "complete"
        if self.missing:
            out["k8senrichmissing"] = ",".join(self.missing)
        return out


class Plan:
    """``enrich`` compiled: what to take from where."""

    def __init__(self, s: EnrichSettings) -> None:
        self.settings = s
        self.ns_labels = dict(s.namespace.labels)
        self.ns_annotations = dict(s.namespace.annotations)
        self.obj_labels = dict(s.object.labels)
        self.owner_kind = s.object.owner_kind
        self.owner_name = s.object.owner_name
        self.kinds = frozenset(s.object.kinds)
        self.cluster_namespaces = frozenset(s.object.cluster_namespaces)
        self.watches_namespaces = bool(self.ns_labels or self.ns_annotations)
        self.reads_objects = s.reads_objects
        self.follows_owners = bool(self.owner_kind or self.owner_name)

    def namespace_values(self, obj: Any) -> dict[str, str]:
        """The extension values a Namespace object gives (only the keys the plan names)."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return {}
        out: dict[str, str] = {}
        for source, mapping in (
            (meta.get("labels"), self.ns_labels),
            (meta.get("annotations"), self.ns_annotations),
        ):
            if not mapping or not isinstance(source, dict):
                continue
            for key, ext in mapping.items():
                v = source.get(key)
                if isinstance(v, str):
                    # an oversized annotation is left out; the converter marks it
                    out[ext] = v if len(v) <= MAX_VALUE else OVERSIZED_MARK
        return out

    def object_info(self, obj: Any, kind: str) -> ObjectInfo:
        """What one object read from the API server leaves for the cache."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            meta = {}
        uid = meta.get("uid")
        labels: dict[str, str] = {}
        source = meta.get("labels")
        if self.obj_labels and isinstance(source, dict):
            for key in self.obj_labels:
                v = source.get(key)
                if isinstance(v, str) and len(v) <= MAX_VALUE:
                    labels[key] = v
        # the walk's facts: all labels only where a selector may be matched against them (an
        # object with a controller) or where it claims others; bounded by the cache's bytes
        keep = self.follows_owners and owners.controller_ref(meta) is not None
        walked = owners.facts(kind, obj, keep_labels=keep)
        return ObjectInfo(uid if isinstance(uid, str) else "", labels, walked)

    def target(
        self, event_namespace: str, kind: Any, namespace: Any, name: Any, api_version: Any = ""
    ) -> Key | str:
        """The object to read for an involvedObject or an owner, or the why it is not read.

        The one rule first (``k8s_event_common.tenancy``): a reference the Event's namespace
        may not make is never read, whatever the plan: another namespace's object, or one of no
        namespace from a namespace the API server takes none from (``invalid``), a
        cluster-scoped object from a tenant's namespace (``scope``)."""
        verdict = tenancy.reference(event_namespace, kind, namespace, name)
        if not verdict.trusted:
            return SCOPE if verdict.why == tenancy.CLUSTER_SCOPED else INVALID
        if not isinstance(kind, str) or kind not in self.kinds:
            return KIND
        known = owners.KINDS[kind]
        if (
            isinstance(api_version, str)
            and api_version
            and api_version.rpartition("/")[0] != known.group
        ):
            return KIND  # a kind of that name in another API group: not ours to read
        # the rule of the path it would be read by: no object of a known kind has another name
        if paths.name_problem(name):
            return INVALID
        if known.namespaced:
            # trusted: in the Event's own namespace (or none, implied: an old client's)
            ns = verdict.namespace
            if paths.namespace_problem(ns):
                return INVALID
            return (kind, ns, name)
        # a cluster-scoped object (a Node), trusted from default and kube-system: its values
        # only where enrich.object.cluster_namespaces says who writes such Events
        if event_namespace not in self.cluster_namespaces:
            return SCOPE
        return (kind, "", name)


OVERSIZED_MARK: Final = "\x00oversized"  # stands for a value left out for its size


def object_path(key: Key) -> str:
    """The API path of an object (``k8s_event_common.kube.paths``; its segments validated by
    ``Plan.target`` first, so ``Invalid`` is not expected here)."""
    kind, namespace, name = key
    k = owners.KINDS[kind]
    return paths.object_path(k.api_version, k.resource, namespace if k.namespaced else None, name)


class Namespaces:
    """Per namespace, the extension values the plan takes from it (nothing else is held)."""

    def __init__(self) -> None:
        self._values: dict[str, dict[str, str]] = {}
        self.synced = False
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    def get(self, name: str) -> dict[str, str] | None:
        return self._values.get(name)

    def put(self, name: str, values: dict[str, str]) -> None:
        self.delete(name)
        self._values[name] = values
        self.bytes += _ns_size(name, values)

    def delete(self, name: str) -> None:
        old = self._values.pop(name, None)
        if old is not None:
            self.bytes -= _ns_size(name, old)

    def replace(self, values: dict[str, dict[str, str]]) -> None:
        """All namespaces at once (after a list)."""
        self._values = values
        self.bytes = sum(_ns_size(k, v) for k, v in values.items())
        self.synced = True


def _ns_size(name: str, values: dict[str, str]) -> int:
    return 200 + len(name) + sum(len(k) + len(v) + 100 for k, v in values.items())


class LookupCache:
    """Objects read, bounded by count and bytes (least recently used out first).

    An entry is fresh for ``ttl`` (a negative one, "no such object", for ``negative_ttl``);
    a stale one stays until pushed out, so that while the API server is away the last known
    values are still used (``stale``)."""

    def __init__(self, max_entries: int, max_bytes: int, ttl: float, negative_ttl: float) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.bytes = 0
        # key -> (read at, the object or None for "not found", its size)
        self._entries: OrderedDict[Key, tuple[float, ObjectInfo | None, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def fresh(self, key: Key, now: float) -> tuple[bool, ObjectInfo | None]:
        """(found fresh, the object or None for a fresh "not found")."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        at, info, _ = entry
        ttl = self.ttl if info is not None else self.negative_ttl
        if now - at > ttl:
            return False, None
        self._entries.move_to_end(key)
        return True, info

    def stale(self, key: Key) -> ObjectInfo | None:
        """The last object read under this key, however old (None: none known)."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None else None

    def put(self, key: Key, info: ObjectInfo | None, now: float) -> None:
        size = (info.size() if info is not None else ENTRY_OVERHEAD) + sum(map(len, key))
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[2]
        self._entries[key] = (now, info, size)
        self.bytes += size
        while self._entries and (
            len(self._entries) > self.max_entries or self.bytes > self.max_bytes
        ):
            _, (_, _, gone) = self._entries.popitem(last=False)
            self.bytes -= gone
