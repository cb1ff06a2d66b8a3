"""The soak's verdict, from the samples and the stream read back: pure functions, no I/O.

Two questions:

- **flat after warm-up**: RSS, open descriptors, asyncio tasks and every internal structure of
  the bridge (``/status`` ``internals``) sampled through the run; what the last sample shows,
  with the bridge healthy and caught up, is back where the warm-up left it, and no structure
  ever went past its configured bound on the way;
- **stream = truth**: every Event version written that the filter keeps is in the stream
  exactly once, nothing else is; a version may be missing only inside the range of a ``gap``
  status event, and then only when a newer version of the same Event is in the stream (the
  relist after a 410 publishes the newest version of every Event, nothing in between).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MIB = 1024  # KiB
CACHE_BOUND = 4096  # bridge.core.converting.SUBJECT_CACHE_SIZE and the valid-time set's bound
CACHES = ("subject_cache", "type_cache", "valid_time_cache")


@dataclass(frozen=True)
class Bounds:
    """The bridge settings that bound its structures, and the slack the verdict allows."""

    queue_events: int
    queue_bytes: int
    inflight: int
    inflight_bytes: int
    rss_slack_kib: int = 10 * MIB  # RSS at the end: warm-up peak + max(this, rss_slack_ratio)
    rss_slack_ratio: float = 0.15
    tail_slack_kib: int = 3 * MIB  # RSS over the steady tail after the last fault
    fd_slack: int = 2
    task_slack: int = 2


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, ok, detail))

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def _values(samples: Iterable[dict[str, Any]], key: str) -> list[int]:
    return [s[key] for s in samples if s.get(key) is not None]


def internal_keys(samples: Sequence[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for s in samples:
        for k in s.get("internals") or {}:
            keys[k] = None
    return list(keys)


def flat(
    samples: Sequence[dict[str, Any]], warmup_end: float, bounds: Bounds, *, tail_from: float
) -> Verdict:
    """Flat after warm-up: ``samples`` in time order, the last one taken caught up;
    ``tail_from``: when the steady load after the last fault begins."""
    v = Verdict()
    warm = [s for s in samples if s["t"] < warmup_end]
    after = [s for s in samples if s["t"] >= warmup_end]
    if not warm or not after or samples[-1].get("internals") is None:
        v.add("samples", False, f"{len(warm)} in warm-up, {len(after)} after, last incomplete")
        return v
    end = samples[-1]

    warm_rss = max(_values(warm, "rss_kib"))
    slack = max(bounds.rss_slack_kib, int(warm_rss * bounds.rss_slack_ratio))
    v.add(
        "rss_end",
        end["rss_kib"] <= warm_rss + slack,
        f"end {end['rss_kib']} KiB vs warm-up peak {warm_rss} KiB + {slack} KiB",
    )
    # the steady tail after the faults: Events keep passing, nothing may keep growing
    tail = [s["rss_kib"] for s in samples if s["t"] >= tail_from and s.get("rss_kib")]
    if len(tail) >= 2:
        v.add(
            "rss_tail_flat",
            tail[-1] - tail[0] <= bounds.tail_slack_kib,
            f"{tail[0]} -> {tail[-1]} KiB over the steady tail from {tail_from:g} s "
            f"(slack {bounds.tail_slack_kib} KiB)",
        )
    else:
        v.add("rss_tail_flat", False, f"{len(tail)} samples in the steady tail")
    # while a fault holds Events, the queue and the ack window may fill: that much more, no more
    budget = slack + (bounds.queue_bytes + bounds.inflight_bytes) // 1024
    peak = max(_values(after, "rss_kib"))
    v.add(
        "rss_peak",
        peak <= warm_rss + budget,
        f"peak after warm-up {peak} KiB vs warm-up peak {warm_rss} KiB + {budget} KiB "
        "(slack + queue and window byte bounds)",
    )
    for key, slack_n in (("fds", bounds.fd_slack), ("asyncio_tasks", bounds.task_slack)):
        get = (lambda s, k=key: s.get(k)) if key == "fds" else (lambda s, k=key: _internal(s, k))
        warm_max = max(x for x in map(get, warm) if x is not None)
        v.add(
            f"{key}_end",
            get(end) <= warm_max + slack_n,
            f"end {get(end)} vs warm-up max {warm_max} + {slack_n}",
        )

    # every structure within its bound at every sample
    limits = {
        "queue": bounds.queue_events,
        "queue_bytes": bounds.queue_bytes,
        "publisher_pending": bounds.inflight,
        # one message may take the window past its byte bound (a window is never empty)
        "publisher_pending_bytes": bounds.inflight_bytes + 1024 * 1024,
        **dict.fromkeys(CACHES, CACHE_BOUND),
    }
    # the ledger: about two entries per Event in flight (folding), plus list markers
    ledger = 2 * (bounds.queue_events + bounds.inflight) + 64
    for key in internal_keys(samples):
        limit = ledger if key.startswith("progress_entries") else limits.get(key)
        if limit is None:
            continue
        top = max(x for s in samples if (x := _internal(s, key)) is not None)
        v.add(f"{key}_bounded", top <= limit, f"max {top} vs bound {limit}")

    # caught up and healthy: what only holds Events in flight is empty again
    for key in internal_keys(samples):
        if key in ("queue", "queue_bytes", "publisher_pending", "publisher_pending_bytes") or (
            key.startswith("progress_entries")
        ):
            at_end = _internal(end, key)
            allowed = 1 if key.startswith("progress_entries") else 0
            v.add(f"{key}_drained", at_end is not None and at_end <= allowed, f"end {at_end}")
    return v


def _internal(sample: dict[str, Any], key: str) -> int | None:
    internals = sample.get("internals")
    if internals is None:
        return None
    value = internals.get(key)
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class Version:
    """One version of an Event the soak wrote: its CloudEvent id and whether the filter keeps it."""

    id: str
    uid: str
    rv: int
    kept: bool


def truth(
    written: Sequence[Version],
    stream_ids: Sequence[str],
    gaps: Sequence[tuple[int, int]],
    *,
    expired_faults: int,
) -> tuple[Verdict, dict[str, int]]:
    """Stream = truth; ``gaps`` are the (from, to] ranges of the ``gap`` status events."""
    v = Verdict()
    kept = {w.id: w for w in written if w.kept}
    have = set(stream_ids)
    duplicates = len(stream_ids) - len(have)
    unexpected = have - kept.keys()
    missing = [kept[i] for i in kept.keys() - have]
    newest_in_stream: dict[str, int] = {}
    for i in have & kept.keys():
        w = kept[i]
        newest_in_stream[w.uid] = max(newest_in_stream.get(w.uid, 0), w.rv)
    explained = [
        m
        for m in missing
        if any(lo < m.rv <= hi for lo, hi in gaps) and newest_in_stream.get(m.uid, 0) > m.rv
    ]
    unexplained = [m for m in missing if m not in explained]
    v.add("no_duplicates", duplicates == 0, f"{len(stream_ids)} messages, {len(have)} distinct")
    v.add(
        "nothing_unexpected",
        not unexpected,
        f"{len(unexpected)} ids not written or filtered out"
        + (f", e.g. {sorted(unexpected)[:3]}" if unexpected else ""),
    )
    v.add(
        "nothing_lost",
        not unexplained,
        f"{len(missing)} kept versions missing, {len(explained)} inside a reported gap and "
        f"superseded in the stream"
        + (f"; unexplained e.g. {[m.id for m in unexplained[:3]]}" if unexplained else ""),
    )
    v.add(
        "gaps_only_from_410",
        len(gaps) <= expired_faults,
        f"{len(gaps)} gap status events, {expired_faults} compactions that expired the watch",
    )
    figures = {
        "written_versions": len(written),
        "kept_versions": len(kept),
        "stream_event_messages": len(stream_ids),
        "stream_distinct": len(have),
        "duplicates": duplicates,
        "unexpected": len(unexpected),
        "missing_in_gap": len(explained),
        "missing_unexplained": len(unexplained),
        "gaps": len(gaps),
    }
    return v, figures
