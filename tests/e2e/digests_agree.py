"""The digests of one namespace held against what the API server counts (issue 41), shared by
tests/e2e/test_living_cluster_digests.py (the living cluster's components) and
tests/node/test_node_digests.py (a real kubelet).

**What the API server counts** for a series (the involved object's uid and the reason): the
sum, over the Events of that series the API server holds, of their count now (``series.count``,
else ``count``, else 1). The tests' workloads run in a namespace made after the bridge was
ready, so every one of those Events was created after the bridge started: each counts from 0
(an Event there at the bridge's first list would count from where it stood then; none is).

**What the digests say**: the sum of the occurrences of the series' digests, read back from the
digests' stream by an independent client.

:func:`agreed` compares them (:func:`agreement`) once the stream and the digests have caught
up with the API server, and holds the rest of what a digest promises: its sequence range points
at versions of its series (``first_seq`` and ``last_seq`` are such versions, and the versions of
the series in the range are ``versions`` many), every version of the series in exactly one
digest, no digest id twice, the uids it names the series' own.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from k8s_event_common.digests import Digest
from k8s_event_consumer import events
from k8s_event_consumer.events import KubeEvent
from tests.support import eventually

STREAM, DIGESTS = "K8S_EVENTS", "K8S_DIGESTS"
EVENTS_PREFIX, DIGEST_PREFIX = "k8s.events", "k8s.digests"

SeriesKey = tuple[str, str]  # (the involved object's uid, the reason)


@dataclass(frozen=True)
class Pending:
    """Not caught up yet (falsy), and why: what a wait that times out shows last."""

    why: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Stored:
    """One message of a stream with its sequence number."""

    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


async def read(url: str, stream: str, subject: str) -> list[Stored]:
    """Every message of ``stream`` on ``subject`` it held when asked, in sequence order."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream, subjects_filter=subject)
        held = sum((info.state.subjects or {}).values())
        out: list[Stored] = []
        if not held:
            return out
        sub = await js.subscribe(
            subject,
            stream=stream,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE),
        )
        try:
            while True:
                m = await sub.next_msg(timeout=10)
                meta = m.metadata
                out.append(Stored(meta.sequence.stream, m.subject, dict(m.headers or {}), m.data))
                if len(out) >= held and meta.num_pending == 0:
                    break
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        return out
    finally:
        await nc.close()


def api_count(event: dict[str, Any]) -> int:
    """An Event's count as the API server holds it: ``series.count``, else ``count``, else 1."""
    return int((event.get("series") or {}).get("count") or event.get("count") or 1)


def api_key(event: dict[str, Any]) -> SeriesKey:
    return (event["involvedObject"].get("uid") or "", event.get("reason") or "")


@dataclass
class Series:
    """One series of the namespace: what the API server counts, what the stream carries, what
    the digests say."""

    key: SeriesKey
    object: str  # kind/name, for the reader
    api: int = 0  # the API server's counts, summed over its Events
    events: int = 0  # its Event objects (uids) at the API server
    seqs: list[int] = field(default_factory=list)  # its versions' stream sequences
    uids: set[str] = field(default_factory=set)  # its uids in the stream
    digests: list[Digest] = field(default_factory=list)

    @property
    def occurrences(self) -> int:
        return sum(d.occurrences for d in self.digests)

    def line(self) -> str:
        sampled = any(d.sampled for d in self.digests)
        combined = any(d.combined for d in self.digests)
        return (
            f"{self.object} {self.key[1]}: API server {self.api} ({self.events} Events, "
            f"{len(self.seqs)} versions), digests {self.occurrences} in {len(self.digests)}"
            + (" sampled" if sampled else "")
            + (" combined" if combined else "")
        )


async def agreement(
    url: str,
    cluster: str,
    namespace: str,
    api_events: Callable[[], list[dict[str, Any]]],
) -> dict[SeriesKey, Series] | Pending:
    """Every series of ``namespace``: ``Pending`` while the stream or the digests have not caught up
    with the API server (``api_events()``: the namespace's Events it holds now); raises an
    AssertionError when, caught up, they disagree."""
    api = api_events()
    versions: list[tuple[int, KubeEvent]] = []
    for m in await read(url, STREAM, f"{EVENTS_PREFIX}.{cluster}.{namespace}.>"):
        ev = events.decode(m.subject, m.headers, m.data).event
        assert ev is not None, f"{m.subject} #{m.seq}: not an Event"
        versions.append((m.seq, ev))
    # the stream has caught up: the last version of each Event is the API server's
    latest = {ev.uid: ev.resource_version for _, ev in versions}
    held = {e["metadata"]["uid"]: e["metadata"]["resourceVersion"] for e in api}
    if latest != held:
        behind = sorted((u, rv, latest.get(u)) for u, rv in held.items() if latest.get(u) != rv)
        more = sorted(set(latest) - set(held))
        return Pending(
            f"stream behind the API server (uid, rv, stream's): {behind}; not held: {more}"
        )
    found: list[Digest] = []
    for m in await read(url, DIGESTS, f"{DIGEST_PREFIX}.{cluster}.{namespace}.>"):
        d = events.decode(m.subject, m.headers, m.data).digest
        assert d is not None, f"{m.subject} #{m.seq}: not a digest"
        found.append(d)

    series: dict[SeriesKey, Series] = {}
    for e in api:
        inv = e["involvedObject"]
        s = series.setdefault(api_key(e), Series(api_key(e), f"{inv['kind']}/{inv['name']}"))
        s.api += api_count(e)
        s.events += 1
    for seq, ev in versions:
        key = (ev.involved.uid, ev.reason)
        assert key in series, f"#{seq} {ev.id}: a series the API server does not hold: {key}"
        series[key].seqs.append(seq)
        series[key].uids.add(ev.uid)
    for d in found:
        key = (d.series.uid, d.series.reason)
        assert key in series, f"digest {d.id}: a series with no version in the stream: {key}"
        series[key].digests.append(d)
    # the digests have caught up: the last version of each series is in a digest, none later
    for s in series.values():
        last = max((d.last_seq for d in s.digests), default=0)
        if last != max(s.seqs):
            return Pending(f"{s.line()}: digests to #{last}, versions to #{max(s.seqs)}")

    ids = [d.id for d in found]
    assert len(set(ids)) == len(ids), (
        f"a digest id twice: {sorted(i for i in ids if ids.count(i) > 1)}"
    )
    for s in series.values():
        seqs = set(s.seqs)
        folded: list[int] = []
        for d in sorted(s.digests, key=lambda d: d.start):
            assert d.series.namespace == namespace and d.series.cluster == cluster, d
            assert not d.series.untrusted, d
            assert d.first_seq in seqs and d.last_seq in seqs, (
                f"{s.line()}: digest {d.id} [{d.first_seq}, {d.last_seq}] does not point at "
                f"versions of its series {sorted(seqs)}"
            )
            inside = [q for q in s.seqs if d.first_seq <= q <= d.last_seq]
            assert len(inside) == d.versions, (
                f"{s.line()}: digest {d.id} folded {d.versions} versions, its range holds "
                f"{len(inside)}"
            )
            assert set(d.uids) <= s.uids, (d.uids, s.uids)
            folded += inside
        assert sorted(folded) == sorted(s.seqs), (
            f"{s.line()}: versions in no digest or in two: {sorted(folded)} != {sorted(s.seqs)}"
        )
    disagree = [s.line() for s in series.values() if s.occurrences != s.api]
    assert not disagree, "digests and the API server disagree:\n" + "\n".join(disagree)
    return series


async def agreed(
    url: str,
    cluster: str,
    namespace: str,
    api_events: Callable[[], list[dict[str, Any]]],
    timeout: float = 120,
) -> dict[SeriesKey, Series]:
    """:func:`agreement` once the stream and the digests have caught up with the API server
    (waited for: the digests of the last window appear once it closed)."""
    found = await eventually(
        lambda: agreement(url, cluster, namespace, api_events),
        timeout,
        1,
        what="the stream and the digests caught up with the API server",
    )
    assert isinstance(found, dict)
    return found


def by_reason(series: dict[SeriesKey, Series]) -> dict[str, tuple[int, int]]:
    """reason -> (what the API server counts, the digests' occurrences), summed over objects."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (_, reason), s in series.items():
        out[reason][0] += s.api
        out[reason][1] += s.occurrences
    return {r: (a, o) for r, (a, o) in sorted(out.items())}
