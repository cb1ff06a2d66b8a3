"""The format of a digest (``k8s_event_common.digests``): any digest read back is the same
digest, its bytes one function of its content; a digest not in the shape (wrong types, strings
past the bounds, negative counts, an id that is not its series' and window's, a window that
ends before it starts) is refused with a ``BadMessage`` naming the member."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s_event_common import cloudevents, digests
from k8s_event_common.cloudevents import BadMessage
from k8s_event_common.digests import Digest, Series

HEADERS = {"Content-Type": "application/cloudevents+json"}
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

SERIES = Series(
    cluster="prod-eu-1",
    namespace="shop",
    kind="Pod",
    name="web-1",
    uid="pod-web-1",
    reason="BackOff",
    type="Warning",
    reporting_component="kubelet",
)
DIGEST = Digest(
    series=SERIES,
    start=T0,
    end=T0 + timedelta(minutes=5),
    occurrences=57,
    versions=40,
    first_seen=T0 - timedelta(hours=1),
    last_seen=T0 + timedelta(seconds=299, microseconds=5),
    count_from=3,
    count_to=60,
    uids=("ev-1", "ev-2"),
    uids_omitted=0,
    first_message="Back-off restarting failed container web",
    last_message="Back-off restarting failed container web ✓",
    sampled=True,
    combined=False,
    stream="K8S_EVENTS",
    first_seq=1000,
    last_seq=1410,
)


def read(body: bytes) -> Digest:
    return digests.from_envelope(cloudevents.decode(HEADERS, body))


def doc_of(d: Digest = DIGEST) -> dict[str, Any]:
    return copy.deepcopy(digests.document(d))


def body_of(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


# --- round trips ------------------------------------------------------------------------------

# no surrogates: a digest's strings come from JSON the API server wrote (UTF-8 only); the
# messages are ``bounded`` by the fold (tests/unit/test_digests_fold.py)
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
TIMES = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
COUNTS = st.integers(0, digests.MAX_NUMBER)


@st.composite
def any_digest(draw: st.DrawFn) -> Digest:
    untrusted = draw(st.booleans())
    overflow = draw(st.booleans())
    series = Series(
        cluster=draw(TEXT),
        namespace="" if overflow else draw(TEXT),
        kind="" if overflow else draw(TEXT),
        name="" if untrusted or overflow else draw(TEXT),
        uid="" if untrusted or overflow else draw(TEXT),
        reason="" if overflow else draw(TEXT),
        type=draw(st.sampled_from(["Normal", "Warning"])),
        reporting_component=draw(TEXT),
        untrusted=untrusted,
        overflow=overflow,
    )
    start = draw(TIMES)
    return Digest(
        series=series,
        start=start,
        end=start + timedelta(seconds=draw(st.integers(1, 86400))),
        occurrences=draw(COUNTS),
        versions=draw(COUNTS),
        first_seen=draw(st.none() | TIMES),
        last_seen=draw(st.none() | TIMES),
        count_from=draw(COUNTS),
        count_to=draw(COUNTS),
        uids=tuple(draw(st.lists(TEXT, max_size=digests.MAX_UIDS))),
        uids_omitted=draw(COUNTS),
        first_message=draw(TEXT),
        last_message=draw(TEXT),
        sampled=draw(st.booleans()),
        combined=draw(st.booleans()),
        stream=draw(TEXT),
        first_seq=draw(COUNTS),
        last_seq=draw(COUNTS),
    )


@settings(max_examples=300)
@given(any_digest())
def test_any_digest_read_back_is_the_same_digest_and_the_same_bytes(d: Digest) -> None:
    body = digests.encode(d)
    back = read(body)
    assert back == d
    assert back.id == d.id
    assert digests.encode(back) == body


def test_the_bytes_are_a_function_of_the_content() -> None:
    same = Digest(**{**vars(DIGEST), "uids": ("ev-1", "ev-2")})
    assert digests.encode(same) == digests.encode(DIGEST)
    # one spelling of each instant, whatever zone the time was given in
    cet = T0.astimezone(timezone(timedelta(hours=1)))
    assert cet.hour == 13
    assert digests.encode(Digest(**{**vars(DIGEST), "start": cet})) == digests.encode(DIGEST)
    doc = json.loads(digests.encode(DIGEST))
    assert doc["id"] == DIGEST.id and doc["type"] == digests.TYPE
    assert doc["data"]["window"] == {"start": "2026-12-01T12:00:00Z", "end": "2026-12-01T12:05:00Z"}
    assert doc["data"]["lastSeen"] == "2026-12-01T12:04:59.000005Z"


def test_the_id_is_the_series_and_the_window_only() -> None:
    other_counts = Digest(**{**vars(DIGEST), "occurrences": 1, "last_message": "x"})
    assert other_counts.id == DIGEST.id
    other_window = Digest(**{**vars(DIGEST), "start": T0 + timedelta(minutes=5)})
    other_reason = Digest(**{**vars(DIGEST), "series": Series(**{**vars(SERIES), "reason": "x"})})
    assert len({DIGEST.id, other_window.id, other_reason.id}) == 3
    # the type and the reporting component are the last version's, not the series' identity
    relabelled = Series(**{**vars(SERIES), "type": "Normal", "reporting_component": "x"})
    assert Digest(**{**vars(DIGEST), "series": relabelled}).id == DIGEST.id


# --- hostile digests --------------------------------------------------------------------------


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value


DELETE = object()
HUGE = "x" * (digests.MAX_TEXT + 1)

HOSTILE = [
    ("data.series", [], "series"),
    ("data.window", "5m", "window"),
    ("data.counts", None, "counts"),
    ("data.stream", 1, "stream"),
    ("data.series.cluster", 42, "cluster"),
    ("data.series.name", HUGE, "name"),
    ("data.series.reason", ["BackOff"], "reason"),
    ("data.series.untrusted", "yes", "untrusted"),
    ("data.series.overflow", 1, "overflow"),
    ("data.occurrences", -1, "occurrences"),
    ("data.occurrences", "57", "occurrences"),
    ("data.occurrences", True, "occurrences"),
    ("data.occurrences", 57.0, "occurrences"),
    ("data.occurrences", digests.MAX_NUMBER + 1, "occurrences"),
    ("data.versions", DELETE, "versions"),
    ("data.counts.from", -3, "from"),
    ("data.counts.to", None, "to"),
    ("data.eventsOmitted", -1, "eventsOmitted"),
    ("data.stream.firstSequence", "1000", "firstSequence"),
    ("data.stream.lastSequence", -1, "lastSequence"),
    ("data.stream.name", HUGE, "name"),
    ("data.events", "ev-1", "events"),
    ("data.events", ["ev"] * (digests.MAX_UIDS + 1), "events"),
    ("data.events", [1], "events"),
    ("data.events", [HUGE], "events"),
    ("data.firstMessage", HUGE, "firstMessage"),
    ("data.lastMessage", {"text": "x"}, "lastMessage"),
    ("data.sampled", "false", "sampled"),
    ("data.combined", 0, "combined"),
    ("data.window.start", DELETE, "start"),
    ("data.window.end", "", "end"),
]


@pytest.mark.parametrize(("path", "value", "member"), HOSTILE, ids=lambda v: str(v)[:30])
def test_a_digest_not_in_the_shape_is_refused_naming_the_member(
    path: str, value: Any, member: str
) -> None:
    doc = doc_of()
    _set(doc, path, value)
    with pytest.raises(BadMessage) as exc:
        read(body_of(doc))
    assert f"digest {member} " in str(exc.value)


@pytest.mark.parametrize(
    ("path", "value", "member"),
    [
        ("data.window.start", 42, "start"),
        ("data.window.end", "tomorrow", "end"),
        ("data.firstSeen", "yesterday", "firstSeen"),
        ("data.lastSeen", ["2026-12-01T12:00:00Z"], "lastSeen"),
    ],
)
def test_a_time_not_in_the_shape_is_refused_naming_the_member(
    path: str, value: Any, member: str
) -> None:
    doc = doc_of()
    _set(doc, path, value)
    with pytest.raises(BadMessage) as exc:
        read(body_of(doc))
    assert f"digest {member} " in str(exc.value)


def test_a_window_that_ends_before_it_starts_is_refused() -> None:
    for end in ("2026-12-01T11:59:59Z", "2026-12-01T12:00:00Z"):
        doc = doc_of()
        doc["data"]["window"]["end"] = end
        with pytest.raises(BadMessage, match="digest window ends"):
            read(body_of(doc))


@pytest.mark.parametrize(
    "change",
    [
        lambda doc: doc.update(id="digest/" + "0" * 32),  # another id
        lambda doc: doc["data"]["series"].update(cluster="prod-us-1"),  # another series
        lambda doc: doc["data"]["series"].update(uid=""),  # the same Pod, by name
        lambda doc: doc["data"]["window"].update(start="2026-12-01T11:55:00Z"),  # another window
    ],
    ids=["id", "cluster", "uid", "window"],
)
def test_a_digest_whose_id_is_not_its_series_and_windows_is_refused(change: Any) -> None:
    doc = doc_of()
    change(doc)
    with pytest.raises(BadMessage, match=r"digest id .* is not its series' and window's"):
        read(body_of(doc))


def test_a_member_a_reader_does_not_know_is_passed_over() -> None:
    doc = doc_of()
    doc["data"]["newer"] = {"anything": 1}
    doc["k8sextra"] = "x"
    assert read(body_of(doc)) == DIGEST
