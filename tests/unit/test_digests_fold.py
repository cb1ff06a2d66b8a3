"""The projection of the versions stream into digests (``k8s_event_consumer.digests.fold``), on
Events built as the bridge sends them (``tests.support``: the Event, the converter's CloudEvent,
the consumer kit's ``decode``): a storm is one digest per series; conservation, as a property
over random orders, duplicates, relists, jumps and new uids of both recorders, checked against
an oracle written here from the rule in docs/design.md ("Digests: one per series per window"),
not from the fold; the same bytes twice and from a later start; windows in the stream's time;
the tenant's word; the cap; the bounds; memory with the active series."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8s_event_common import cloudevents, digests
from k8s_event_common.digests import Digest
from k8s_event_consumer.digests.fold import Projection
from k8s_event_consumer.digests.running import reading_point
from k8s_event_consumer.events import KubeEvent, decode
from tests import support

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # a multiple of every window used here
HEADERS = {"Content-Type": "application/cloudevents+json"}
STREAM = "K8S_EVENTS"
FAR = datetime(9999, 1, 1, tzinfo=UTC)

Message = tuple[int, datetime, KubeEvent | None]


def version(
    pod: str = "web-1",
    count: int = 1,
    *,
    uid: str | None = None,
    rv: int | None = None,
    namespace: str = "shop",
    reason: str = "BackOff",
    first: datetime = T0,
    last: datetime | None = None,
    message: str | None = None,
    new: bool = False,
    involved: dict[str, Any] | None = None,
    cluster: str = "prod-eu-1",
) -> KubeEvent:
    """A version of a BackOff-like Event about Pod ``pod`` (involved uid ``pod-<pod>``) as the
    bridge publishes it and the kit decodes it. The old recorder's shape (``count``,
    ``firstTimestamp``), or with ``new`` the new broadcaster's: ``eventTime``, no count, then
    ``series.count`` from 2."""
    uid = uid or f"ev-{pod}"
    last = last or first
    shape: dict[str, Any]
    if new:
        series = None
        if count >= 2:
            series = {"count": count, "lastObservedTime": last.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        shape = {"event_time": first, "series": series, "reportingComponent": "default-scheduler"}
    else:
        shape = {"count": count, "first": first, "last": last, "source": {"component": "kubelet"}}
    obj = support.event(
        f"{pod}.{uid}",
        rv if rv is not None else count,
        namespace=namespace,
        uid=uid,
        reason=reason,
        involved=pod,
        involved_object=involved
        if involved is not None
        else {"namespace": namespace, "uid": f"pod-{pod}"},
        message=message if message is not None else f"Back-off restarting failed container {pod}",
        **shape,
    )
    ev = decode(
        "k8s.events.x", HEADERS, json.dumps(support.cloudevent(obj, cluster=cluster)).encode()
    )
    assert ev.event is not None
    return ev.event


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fold(
    messages: list[Message], *, window: float = 60, idle: float = 7200, max_series: int = 20000
) -> tuple[Projection, list[Digest]]:
    """Every digest of ``messages``, the last window closed by a clock far past it."""
    p = Projection(window=window, idle=idle, max_series=max_series, stream=STREAM)
    out: list[Digest] = []
    for seq, t, ev in messages:
        out.extend(p.add(seq, t, ev))
    out.extend(p.close(FAR, 0))
    return p, out


def numbered(timed: Sequence[tuple[datetime, KubeEvent | None]]) -> list[Message]:
    return [(i + 1, t, ev) for i, (t, ev) in enumerate(timed)]


# --- a storm ----------------------------------------------------------------------------------


def test_a_storm_of_ten_thousand_bumps_over_a_hundred_pods_is_a_hundred_digests() -> None:
    storm = [
        (at(i * 0.001), version(f"web-{pod}", c))
        for i, (c, pod) in enumerate((c, pod) for c in range(1, 101) for pod in range(100))
    ]
    p, out = fold(numbered(storm), window=300)
    assert len(out) == 100
    assert sum(d.occurrences for d in out) == 10_000
    assert {d.series.name: d.occurrences for d in out} == {f"web-{i}": 100 for i in range(100)}
    assert {(d.versions, d.count_from, d.count_to) for d in out} == {(100, 0, 100)}
    assert len({d.id for d in out}) == 100
    assert {d.start for d in out} == {T0} and {d.end for d in out} == {at(300)}
    assert p.figures.versions == sum(d.versions for d in out) == 10_000
    assert not any(d.sampled for d in out)  # every bump was read: the counts went one by one


# --- conservation, a property -----------------------------------------------------------------

WINDOW = 60.0  # seconds; the generator keeps "began now" and "was there before" apart by it


@dataclass
class Plan:
    """One Event uid of a series: its counts in the order the recorder wrote them."""

    series: int
    uid: str
    new: bool  # the new broadcaster's shape
    counts: list[int]
    fresh: bool  # began when first stored (else: there before, a first list)
    message: str


@st.composite
def plans(draw: st.DrawFn) -> list[Plan]:
    out: list[Plan] = []
    for s in range(draw(st.integers(1, 4))):
        new = draw(st.booleans())
        for k in range(draw(st.integers(1, 3))):
            jumps = st.lists(st.integers(1, 30), max_size=6)  # > 1: a spam filter's
            if new:  # created without a count (1), then series.count 2, then jumps
                counts = [1]
                if draw(st.booleans()):
                    counts.append(2)
                    for j in draw(jumps):
                        counts.append(counts[-1] + j)
            else:  # a count already there (a first list) or 1, then bumps and jumps
                counts = [draw(st.integers(1, 40))]
                for j in draw(jumps):
                    counts.append(counts[-1] + j)
            message = f"Back-off {s}"
            if k and not new and draw(st.booleans()):
                message = f"(combined from similar events): Back-off {s}"
            # k > 0: a combined Event, or one the recorder's cache forgot, back under a new uid
            out.append(Plan(s, f"ev-{s}-{k}", new, counts, draw(st.booleans()), message))
    return out


@st.composite
def stream(draw: st.DrawFn) -> tuple[list[Plan], list[Message]]:
    """The versions of the plans in a random order (older versions read after newer ones),
    with duplicates and relists (the same version again, anywhere after), a few messages that
    are no Event, stored at times that mostly go forward, sometimes back a little, sometimes
    past a whole window."""
    ps = draw(plans())
    tokens: list[tuple[int, int] | None] = [
        (n, i) for n, p in enumerate(ps) for i in range(len(p.counts))
    ]
    tokens = list(draw(st.permutations(tokens)))
    for _ in range(draw(st.integers(0, 6))):  # duplicates, relists
        src = draw(st.integers(0, len(tokens) - 1))
        tokens.insert(draw(st.integers(src + 1, len(tokens))), tokens[src])
    for _ in range(draw(st.integers(0, 2))):  # a status event: it moves the time only
        tokens.insert(draw(st.integers(0, len(tokens))), None)
    steps = draw(
        st.lists(
            st.one_of(st.integers(-3000, 15000), st.just(61_000)),
            min_size=len(tokens),
            max_size=len(tokens),
        )
    )
    stored, t = [], 0
    for step in steps:
        t = max(0, t + step)
        stored.append(t)
    # a uid's first time (whole seconds, as the API server writes it) from where the stream's
    # time (made monotone, the design's rule) stood when it was first stored: within a window
    # when it began then, more than a window before when it was there already
    monotone, now = [], 0
    for ms in stored:
        now = max(now, ms)
        monotone.append(now)
    firsts: dict[int, datetime] = {}
    for token, ms in zip(tokens, monotone, strict=True):
        if token is None or token[0] in firsts:
            continue
        p = ps[token[0]]
        back = draw(st.integers(0, 55) if p.fresh else st.integers(62, 900))
        firsts[token[0]] = at(ms // 1000 - back)
    messages: list[Message] = []
    for seq, (token, ms) in enumerate(zip(tokens, stored, strict=True), start=1):
        ev = None
        if token is not None:
            p, i = ps[token[0]], token[1]
            ev = version(
                f"web-{p.series}",
                p.counts[i],
                uid=p.uid,
                rv=i + 1,
                first=firsts[token[0]],
                last=at(ms // 1000),
                message=p.message,
                new=p.new,
            )
        messages.append((seq, at(ms / 1000), ev))
    return ps, messages


def conserved(ps: list[Plan], messages: list[Message]) -> dict[str, int]:
    """The oracle, per series (the Pod's name): for each uid, its highest count less where it
    stood when first seen: 0 when it began while its series was followed (its first
    occurrence at most a window before its series' first version was stored, the stream's
    time made monotone; for the series' first uid, before its own version), else its first
    count. Nothing is forgotten here (idle is longer than any stream drawn)."""
    since: dict[str, datetime] = {}
    stood: dict[str, int] = {}
    now: datetime | None = None
    for _, stored, ev in messages:
        now = stored if now is None else max(now, stored)
        if ev is None:
            continue
        pod = ev.involved.name
        since.setdefault(pod, now)
        if ev.uid not in stood:
            assert ev.first_seen is not None
            began = ev.first_seen >= since[pod] - timedelta(seconds=WINDOW)
            stood[ev.uid] = 0 if began else ev.count
    out: dict[str, int] = defaultdict(int)
    for p in ps:
        out[f"web-{p.series}"] += max(p.counts) - stood[p.uid]
    return dict(out)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream())
def test_conservation_occurrences_add_up_to_what_the_counts_advanced(
    case: tuple[list[Plan], list[Message]],
) -> None:
    ps, messages = case
    p, out = fold(messages, window=WINDOW, idle=1e6)  # nothing forgotten: every series known
    want = conserved(ps, messages)
    got: dict[str, int] = defaultdict(int)
    for d in out:
        got[d.series.name] += d.occurrences
    assert {k: v for k, v in got.items()} == want
    assert sum(d.occurrences for d in out) == sum(want.values())
    given_versions = sum(ev is not None for _, _, ev in messages)
    assert p.figures.versions == sum(d.versions for d in out) == given_versions
    # one digest per series and window, each naming only sequences it folded
    assert len({d.id for d in out}) == len(out)
    seqs = {seq for seq, _, ev in messages if ev is not None}
    assert all(d.first_seq in seqs and d.last_seq in seqs for d in out)
    assert all(d.first_seq <= d.last_seq for d in out)


# --- both recorders, read one by one ----------------------------------------------------------


def test_the_old_recorders_jumps_new_uids_and_a_first_list() -> None:
    there = at(-3600)  # at the first list, an hour old at count 7: counts from where it stood
    messages = numbered(
        [
            (at(1), version("web-1", 7, first=there)),
            (at(2), version("web-1", 8, first=there)),
            (at(3), version("web-1", 20, first=there)),  # the spam filter skipped 11 writes
            (at(4), version("web-1", 8, first=there)),  # an older version, read late
            (at(5), version("web-1", 20, first=there)),  # a relist: the same version again
            # the cache forgot it: back under a new uid, counting from 1; then a combined one
            (at(6), version("web-1", 1, uid="ev-b", first=at(6))),
            (at(7), version("web-1", 3, uid="ev-c", message="(combined from similar events): x")),
        ]
    )
    _, (d,) = fold(messages)
    assert d.occurrences == (20 - 7) + 1 + 3
    assert (d.count_from, d.versions, d.sampled, d.combined) == (7, 7, True, True)
    assert d.uids == ("ev-web-1", "ev-b", "ev-c")
    assert d.series.reporting_component == "kubelet"


def test_the_new_broadcasters_series_counts_from_its_creation() -> None:
    messages = numbered(
        [
            (at(1), version("web-1", 1, new=True)),  # no series yet
            (at(2), version("web-1", 2, new=True)),  # series.count 2
            (at(40), version("web-1", 9, new=True)),  # refreshed later: a jump
        ]
    )
    _, (d,) = fold(messages)
    assert (d.occurrences, d.count_from, d.count_to, d.sampled) == (9, 0, 9, True)
    assert d.series.reporting_component == "default-scheduler"


# --- the same bytes ---------------------------------------------------------------------------


def busy_stream(seed: int, *, minutes: int = 40) -> list[Message]:
    """A stream of several windows: Pods crash-looping (counts one by one and in jumps, new
    uids, some there an hour before they were first stored), duplicates and relists, stored
    times that go back a little."""
    rng = random.Random(seed)
    counts: dict[str, int] = defaultdict(int)
    uids: dict[str, str] = {}
    firsts: dict[str, datetime] = {}
    out: list[tuple[datetime, KubeEvent | None]] = []
    ms = 0
    last: KubeEvent | None = None
    while ms < minutes * 60_000:
        ms += rng.choice([100, 500, 2000, 8000])
        stored = ms - rng.choice([0, 0, 0, 1500])  # a server's clock a little behind
        if last is not None and rng.random() < 0.05:
            out.append((at(stored / 1000), last))  # a duplicate, a relist
            continue
        pod = f"web-{rng.randrange(12)}"
        if pod not in uids or rng.random() < 0.03:  # a new Event of the series
            uids[pod] = f"ev-{pod}-{ms}"
            counts[uids[pod]] = rng.choice([1, 1, 5])
            firsts[uids[pod]] = at(ms // 1000 - rng.choice([0, 0, 3600]))
        else:
            counts[uids[pod]] += rng.choice([1, 1, 1, 4])
        uid = uids[pod]
        last = version(pod, counts[uid], uid=uid, first=firsts[uid], last=at(ms // 1000))
        out.append((at(stored / 1000), last))
    return numbered(out)


def test_folding_the_same_stream_twice_gives_the_same_bytes() -> None:
    messages = busy_stream(1)
    _, a = fold(messages)
    _, b = fold(messages)
    assert len(a) > 20
    assert [digests.encode(d) for d in a] == [digests.encode(d) for d in b]


def resumed(messages: list[Message], start: datetime, *, window: float, idle: float) -> list[bytes]:
    """What a restart writes for the windows from ``start`` on: the fold from the first message
    stored at or after twice ``idle`` and a window before ``start`` (the program's reading
    point, running.py)."""
    since = reading_point(start, idle=idle, window=window)
    i = next(n for n, (_, t, _) in enumerate(messages) if t >= since)
    _, out = fold(messages[i:], window=window, idle=idle)
    return [digests.encode(d) for d in out if d.start >= start]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_folding_from_a_later_start_gives_the_same_bytes_for_the_windows_after_it(
    seed: int,
) -> None:
    window, idle = 60.0, 300.0  # idle short, so that the series come and go in the stream
    messages = busy_stream(seed, minutes=60)
    _, full = fold(messages, window=window, idle=idle)
    starts = sorted({d.start for d in full})
    later = [s for s in starts if s >= messages[0][1] + timedelta(seconds=idle + 2 * window)]
    assert len(later) > 20
    for start in later:
        want = [digests.encode(d) for d in full if d.start >= start]
        assert resumed(messages, start, window=window, idle=idle) == want, start


def silenced(messages: list[Message], seed: int) -> list[Message]:
    """``messages`` with stretches of 70 s to 15 min where nothing at all is stored."""
    rng = random.Random(seed)
    shift, out = 0, []
    for seq, t, ev in messages:
        if rng.random() < 0.03:
            shift += rng.randrange(70, 900)
        out.append((seq, t + timedelta(seconds=shift), ev))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_folding_from_a_later_start_with_silences_gives_the_same_bytes(seed: int) -> None:
    window, idle = 60.0, 300.0
    messages = silenced(busy_stream(seed, minutes=60), seed)
    _, full = fold(messages, window=window, idle=idle)
    starts = sorted({d.start for d in full})
    for start in [s for s in starts if s >= messages[0][1] + timedelta(seconds=idle + window)]:
        want = [digests.encode(d) for d in full if d.start >= start]
        assert resumed(messages, start, window=window, idle=idle) == want, start


def test_folding_from_a_later_start_after_a_silence_gives_the_same_bytes() -> None:
    window, idle = 60.0, 300.0
    messages = numbered(
        [
            (at(0), version("web-1", 1)),
            (at(10), version("web-2", 1)),
            # nothing at all is stored for 1,000 s; then the first Event is bumped: quiet for
            # longer than idle, it is forgotten and counts from where it stood (design.md)
            (at(1000), version("web-1", 2)),
            (at(1010), version("web-2", 2)),
        ]
    )
    _, full = fold(messages, window=window, idle=idle)
    start = at(960)
    want = [digests.encode(d) for d in full if d.start >= start]
    assert resumed(messages, start, window=window, idle=idle) == want


# --- windows ----------------------------------------------------------------------------------


def test_a_version_stored_at_a_windows_end_belongs_to_the_next() -> None:
    p = Projection(window=60, idle=7200, max_series=100, stream=STREAM)
    assert p.add(1, at(0), version("web-1", 1)) == []
    assert p.add(2, at(59.999999), version("web-1", 2)) == []
    (closed,) = p.add(3, at(60), version("web-1", 3))
    assert (closed.start, closed.end, closed.occurrences, closed.last_seq) == (at(0), at(60), 2, 2)
    (nxt,) = p.close(FAR, 0)
    assert (nxt.start, nxt.end, nxt.occurrences, nxt.first_seq) == (at(60), at(120), 1, 3)


def test_a_window_closes_by_the_servers_clock_only_past_its_end_and_the_grace() -> None:
    p = Projection(window=60, idle=7200, max_series=100, stream=STREAM)
    assert p.close(at(1000), 5) == []  # nothing open
    p.add(1, at(10), version("web-1", 1))
    assert p.open_end == at(60)
    assert p.close(at(64.999999), 5) == []
    assert p.close(at(60), 0.0) != []
    assert p.open_end is None and p.figures.windows == 1

    q = Projection(window=60, idle=7200, max_series=100, stream=STREAM)
    q.add(1, at(10), version("web-1", 1))
    assert q.close(at(64), 5) == []
    (d,) = q.close(at(65.000001), 5)
    assert (d.start, d.end) == (at(0), at(60))
    assert q.close(at(200), 5) == []  # closed once


def test_a_late_message_is_counted_and_folded_into_the_open_window() -> None:
    p = Projection(window=60, idle=7200, max_series=100, stream=STREAM)
    p.add(1, at(10), version("web-1", 1))
    (first,) = p.close(at(66), 5)
    assert p.figures.late == 0
    # a server whose clock is behind by more than the grace stores one in the closed window
    assert p.add(2, at(58), version("web-1", 2)) == []
    assert p.figures.late == 1
    p.add(3, at(70), version("web-1", 3))
    (second,) = p.close(FAR, 0)
    assert (second.start, second.versions, second.occurrences) == (at(60), 2, 2)
    assert (first.occurrences, first.start) == (1, at(0))


def test_a_status_event_moves_the_time_and_folds_nothing() -> None:
    p = Projection(window=60, idle=7200, max_series=100, stream=STREAM)
    p.add(1, at(10), version("web-1", 1))
    (d,) = p.add(2, at(61), None)
    assert (d.versions, d.last_seq) == (1, 1)
    assert p.through == 2 and p.figures.versions == 1
    assert p.close(FAR, 0) == []  # the window it opened holds no series


# --- the tenant's word ------------------------------------------------------------------------


def test_a_foreign_involved_object_makes_a_series_without_its_name_or_uid() -> None:
    victim = {"namespace": "shop", "uid": "pod-web-1"}
    messages = numbered(
        [
            (at(1), version("web-1", 1)),  # shop's own Event about its Pod
            # two tenants write Events with eventTime about shop's Pod, its name and uid
            (at(2), version("web-1", 5, uid="x1", namespace="evil", involved=victim, new=True)),
            (at(3), version("web-1", 6, uid="x2", namespace="evil2", involved=victim, new=True)),
            (at(4), version("web-1", 7, uid="x3", namespace="evil", involved=victim, new=True)),
        ]
    )
    _, out = fold(messages)
    by_ns = {d.series.namespace: d for d in out}
    assert set(by_ns) == {"shop", "evil", "evil2"}
    own = by_ns["shop"]
    assert (own.series.name, own.series.uid, own.series.untrusted) == ("web-1", "pod-web-1", False)
    assert (own.occurrences, own.uids) == (1, ("ev-web-1",))
    for ns, uids in (("evil", ("x1", "x3")), ("evil2", ("x2",))):
        s = by_ns[ns].series
        assert (s.name, s.uid, s.untrusted, s.kind) == ("", "", True, "Pod")
        assert by_ns[ns].uids == uids
    assert len({d.id for d in out}) == 3


# --- the cap ----------------------------------------------------------------------------------


def test_at_the_cap_the_least_recently_seen_quiet_series_is_forgotten() -> None:
    messages = numbered(
        [
            (at(1), version("web-1", 1)),
            (at(2), version("web-2", 1)),
            (at(3), version("web-3", 1)),
            (at(4), version("web-1", 2)),  # web-2 is now the least recently seen
            (at(61), version("web-4", 1)),  # a new window: none of the three is in it
            (at(62), version("web-2", 2)),  # forgotten: known again, counts from where it stood
        ]
    )
    p, out = fold(messages, max_series=3)
    assert p.figures.forgotten == 2  # web-2 for web-4, then web-3 for web-2
    assert p.figures.overflowed == 0
    later = {d.series.name: d for d in out if d.start == at(60)}
    assert set(later) == {"web-2", "web-4"}
    # forgotten, then seen again more than a window after it began: from where it stood
    assert (later["web-2"].occurrences, later["web-2"].count_from) == (0, 2)
    assert p.figures.versions == sum(d.versions for d in out) == len(messages)
    assert p.held()[0] == 3


def test_at_the_cap_with_every_series_active_the_rest_goes_to_the_overflow_digest() -> None:
    messages = numbered(
        [(at(1 + i), version(f"web-{i % 5}", 1 + i // 5)) for i in range(20)]  # 5 series
        + [(at(30), version("web-0", 9, cluster="prod-us-1"))]  # another cluster's
    )
    p, out = fold(messages, max_series=2)
    assert p.figures.versions == sum(d.versions for d in out) == len(messages)
    overflow = [d for d in out if d.series.overflow]
    assert [d.series.cluster for d in overflow] == ["prod-eu-1", "prod-us-1"]
    assert [(d.versions, d.occurrences) for d in overflow] == [(12, 12), (1, 1)]
    assert p.figures.overflowed == 13
    assert {d.series.name for d in out if not d.series.overflow} == {"web-0", "web-1"}
    assert out[-2:] == overflow  # after every series of the window, in the projection's order
    assert all(d.series.name == "" and d.series.reason == "" for d in overflow)
    assert all(digests.encode(d) for d in overflow)


# --- bounded ----------------------------------------------------------------------------------


def test_messages_are_cut_and_uids_bounded() -> None:
    long = "x" * (digests.MAX_MESSAGE * 3)
    versions = [(at(1), version("web-1", 1, uid="u-0", message=long))]
    versions += [(at(2 + i), version("web-1", 1, uid=f"u-{i + 1}")) for i in range(20)]
    versions.append((at(30), version("web-1", 2, uid="u-0", message="y" + long)))
    _, (d,) = fold(numbered(versions))
    assert d.first_message == long[: digests.MAX_MESSAGE]
    assert d.last_message == ("y" + long)[: digests.MAX_MESSAGE]
    assert len(d.uids) == digests.MAX_UIDS and d.uids[0] == "u-0"
    assert d.uids_omitted == 21 - digests.MAX_UIDS
    assert read_back(d) == d


def read_back(d: Digest) -> Digest:
    """The digest as a reader (and the writer's own frontier, at its next start) takes it."""
    return digests.from_envelope(cloudevents.decode(HEADERS, digests.encode(d)))


def test_a_lone_surrogate_in_a_message_still_encodes_and_reads_back() -> None:
    lone = replace(version("web-1", 1), message="restart \ud800 failed")
    _, (d,) = fold(numbered([(at(1), lone)]))
    assert "restart \ufffd".encode() in digests.encode(d)
    assert read_back(d).last_message.startswith("restart \ufffd")


def test_a_lone_surrogate_at_the_bound_still_reads_back() -> None:
    text = "x" * (digests.MAX_MESSAGE - 1) + "\ud800 and more"
    lone = replace(version("web-1", 1), message=text)
    _, (d,) = fold(numbered([(at(1), lone)]))
    assert read_back(d).last_message == d.last_message


# --- memory grows with the active series, not the versions -------------------------------------


def test_memory_holds_the_active_series_and_forgets_them_after_idle() -> None:
    base = [version(f"web-{i}", 1) for i in range(10)]
    p = Projection(window=60, idle=600, max_series=20000, stream=STREAM)
    out: list[Digest] = []
    for n in range(100_000):
        ev = replace(base[n % 10], count=1 + n // 10)
        out.extend(p.add(n + 1, at(n * 0.002), ev))  # 200 s: four windows
        if n % 10_000 == 0:
            assert p.held() == (10, 10) or n < 10
    assert p.held() == (10, 10)
    assert p.figures.versions == 100_000
    # idle of quiet, then a message (no Event) and its window closed by the server's clock
    out.extend(p.add(100_001, at(200 + 600), None))
    assert p.held() == (10, 10)  # only a window's close forgets
    out.extend(p.close(at(200 + 600 + 60), 0))
    assert p.held() == (0, 0) and p.figures.expired == 10
    assert sum(d.occurrences for d in out) == 100_000


# --- found in review: each failed before its fix ----------------------------------------------


def test_a_new_uid_first_seen_long_after_its_series_began_resumes_to_the_same_bytes() -> None:
    """A series followed since before the replay's start, whose next version comes more than a
    window after it, with a new uid that began between: a replay from only ``idle`` and a window
    before took the series' start later, and counted that uid differently (4 against 0)."""
    window, idle = 300.0, 3600.0
    messages = numbered([
        (at(2950), version("x", 1, uid="A", first=at(2950))),
        (at(3500), version("x", 2, uid="A", first=at(2950), last=at(3500))),
        (at(6910), version("aaa", 1, uid="F", first=at(6910))),
        (at(6950), version("x", 4, uid="C", first=at(3100), last=at(6950))),
        (at(7300), None),
    ])  # fmt: skip
    _, full = fold(messages, window=window, idle=idle)
    want = [digests.encode(d) for d in full if d.start >= at(6900)]
    assert want and resumed(messages, at(6900), window=window, idle=idle) == want


def test_overflow_digests_come_in_the_writers_order_with_several_clusters() -> None:
    """The writer's frontier is the last digest in ``(start, series key)`` order: an overflow
    digest of cluster ``a`` emitted after a series of cluster ``b`` would be passed over as
    stored, and lost."""
    messages = numbered([
        (at(1), version("p1", cluster="a")),
        (at(2), version("p2", cluster="b")),
        (at(61), version("p1", 2, cluster="a", last=at(61))),
        (at(62), version("p2", 2, cluster="b", last=at(62))),
        (at(63), version("p3", cluster="a", first=at(63))),  # past the cap: overflow of a
    ])  # fmt: skip
    p, out = fold(messages, window=60, max_series=2)
    assert p.figures.overflowed == 1
    second = [d for d in out if d.start == at(60)]
    assert [d.series.overflow for d in second] == [False, True, False]  # a's, a's overflow, b's
    places = [(d.start, d.series.key) for d in out]
    assert places == sorted(places)


def test_a_count_past_an_int32_still_gives_a_digest_every_reader_takes() -> None:
    """A forged count (2**60) made a digest over the format's bound: every reader refused it,
    the program's own frontier too (it would not start again)."""
    _, (d,) = fold(numbered([(at(1), version("web-1", 2**60))]))
    assert read_back(d) == d
    assert d.count_to == 2**31 - 1


def test_an_overflow_digests_cluster_is_bounded_as_every_series_string() -> None:
    messages = numbered([
        (at(1), version("p1", cluster="c")),
        # past the cap of 1: a cluster over MAX_TEXT with a lone surrogate (a forged message)
        (at(2), replace(version("p2", cluster="x"), cluster="\ud800" + "c" * 2000)),
    ])  # fmt: skip
    p, out = fold(messages, max_series=1)
    assert p.figures.overflowed == 1
    for d in out:
        assert read_back(d) == d


def test_uids_of_one_series_are_bounded() -> None:
    """One Event per occurrence (a new note each time): the uids a series follows stay at the
    bound, the least recently seen forgotten and counted."""
    from k8s_event_consumer.digests import fold as folding

    n = folding.MAX_UIDS + 50
    messages = numbered([(at(i * 0.01), version("web-1", uid=f"u{i}", first=at(i * 0.01)))
                         for i in range(n)])  # fmt: skip
    p, out = fold(messages, window=300)
    assert p.held() == (1, folding.MAX_UIDS)
    assert p.figures.uids_forgotten == 50
    assert sum(d.occurrences for d in out) == n  # each counted once, none lost
