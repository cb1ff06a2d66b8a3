"""Which Events are published: a pure function of the Event and the filter settings.

``server_field_selector`` pushes what a field selector can express to the API server so that
less crosses the network; the client-side filter runs on every Event all the same.
"""

from __future__ import annotations

from typing import Any

from bridge.core.events import Event, View, view_of
from bridge.settings import FilterSettings

PUBLISHED_TYPES = frozenset({"ADDED", "MODIFIED"})


def event_count(ev: Event | View | dict[str, Any]) -> int:
    """``series.count``, else ``count``, else 1 (events.k8s.io-written Events have no count)."""
    v = view_of(ev)
    series = v.series
    if isinstance(series, dict):
        c = series.get("count")
        if isinstance(c, int) and c > 0:
            return c
    c = v.count
    if isinstance(c, int) and c > 0:
        return c
    return 1


class Filter:
    """``accepts(watch_type, event)`` decides; compiled once from the settings."""

    __slots__ = (
        "_by_type_only",
        "_exclude_ns",
        "_exclude_reasons",
        "_kinds",
        "_min_count",
        "_namespaces",
        "_reasons",
        "_types",
        "_watch_types",
    )

    def __init__(self, settings: FilterSettings) -> None:
        self._reasons = frozenset(settings.reasons)
        self._exclude_reasons = frozenset(settings.exclude_reasons)
        self._types = frozenset(settings.types)
        self._kinds = frozenset(settings.kinds)
        self._namespaces = frozenset(settings.namespaces)
        self._exclude_ns = frozenset(settings.exclude_namespaces)
        self._min_count = settings.min_count
        self._watch_types = (
            PUBLISHED_TYPES | {"DELETED"} if settings.include_deleted else PUBLISHED_TYPES
        )
        # no rule on the Event itself: only its watch type decides
        self._by_type_only = not (
            self._reasons
            or self._exclude_reasons
            or self._types
            or self._kinds
            or self._namespaces
            or self._exclude_ns
            or self._min_count > 1
        )

    def accepts(self, watch_type: str, ev: Event | View | dict[str, Any]) -> bool:
        if watch_type not in self._watch_types:
            return False
        if self._by_type_only:
            return True
        v = view_of(ev)
        reason = _text(v.reason)
        if self._reasons and reason not in self._reasons:
            return False
        if reason in self._exclude_reasons:
            return False
        if self._types and _text(v.type) not in self._types:
            return False
        if self._kinds and _text(v.involvedObject.kind) not in self._kinds:
            return False
        if self._namespaces or self._exclude_ns:
            ns = _text(v.metadata.namespace)
            if self._namespaces and ns not in self._namespaces:
                return False
            if ns in self._exclude_ns:
                return False
        return self._min_count <= 1 or event_count(v) >= self._min_count


def _text(value: Any) -> str:
    """A field compared with the settings: only a string counts (bad input is not a match)."""
    return value if isinstance(value, str) else ""


def server_field_selector(user_selector: str, settings: FilterSettings) -> str:
    """The user's selector AND-ed with what the filter can say as a field selector.

    Field selectors have only ``=``, ``==`` and ``!=`` joined by AND, so a single reason,
    type or kind is pushed as ``=``, and each exclusion as ``!=``; sets are left to the client.
    """
    terms = [t.strip() for t in user_selector.split(",") if t.strip()]
    if len(settings.reasons) == 1:
        terms.append(f"reason={settings.reasons[0]}")
    terms += [f"reason!={r}" for r in settings.exclude_reasons]
    if len(settings.types) == 1:
        terms.append(f"type={settings.types[0]}")
    if len(settings.kinds) == 1:
        terms.append(f"involvedObject.kind={settings.kinds[0]}")
    if len(settings.namespaces) == 1:
        terms.append(f"metadata.namespace={settings.namespaces[0]}")
    terms += [f"metadata.namespace!={n}" for n in settings.exclude_namespaces]
    seen: set[str] = set()
    out = []
    for t in terms:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return ",".join(out)
