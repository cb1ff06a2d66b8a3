"""The one shape of each stream and bucket (k8s_event_common.streams): any key that weakens a
program's promise is a difference, named; the keys that weaken nothing are passed over. And the
bridge's publisher takes an ack only from its own stream (bridge.jetstream.publishing)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.core.messages import Message, Outgoing
from bridge.core.progress import Progress
from bridge.jetstream.publishing import Publisher
from bridge.metrics import Metrics
from k8s_event_common import streams

NS = 1_000_000_000
WANT = streams.event_stream("K8S_EVENTS", "k8s.events", max_age=7 * 86400, duplicate_window=7200)


def as_server_says(config: Any) -> dict[str, Any]:
    """What STREAM.INFO answers for ``config``: every key, the server's defaults filled in."""
    out = {**streams.DEFAULTS, "allow_direct": False, "compression": "none", "metadata": {}}
    out.update(streams.wire(config))
    return {k: (v.value if hasattr(v, "value") else v) for k, v in out.items()}


def test_the_shape_as_the_server_says_it_has_no_difference() -> None:
    assert streams.differences(as_server_says(WANT), WANT) == []


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"allow_rollup_hdrs": True}, "allow_rollup_hdrs"),
        ({"deny_purge": False}, "deny_purge"),
        ({"deny_delete": False}, "deny_delete"),
        ({"republish": {"src": ">", "dest": "k8s.events.team-b.>"}}, "republish"),
        ({"sources": [{"name": "ELSEWHERE"}]}, "sources"),
        ({"mirror": {"name": "ELSEWHERE"}}, "mirror"),
        ({"subject_transform": {"src": ">", "dest": "x.>"}}, "subject_transform"),
        ({"subjects": ["k8s.events.>", "other.>"]}, "subjects"),
        ({"retention": "workqueue"}, "retention"),
        ({"storage": "memory"}, "storage"),
        ({"num_replicas": 3}, "num_replicas"),
        ({"max_age": 60 * NS}, "max_age"),
        ({"max_msgs": 1}, "max_msgs"),
        ({"max_msgs_per_subject": 1}, "max_msgs_per_subject"),
        ({"discard": "new"}, "discard"),
        ({"duplicate_window": 1 * NS}, "duplicate_window"),
        ({"allow_msg_ttl": True}, "allow_msg_ttl"),
        ({"sealed": True}, "sealed"),
        ({"mirror_direct": True}, "mirror_direct"),
        # a direct get answers with the message itself on any reply subject (an Event's)
        ({"allow_direct": True}, "allow_direct"),
        ({"persist_mode": "async"}, "persist_mode"),
        ({"allow_msg_schedules": True}, "allow_msg_schedules"),
        ({"a_key_of_a_newer_server": True}, "a_key_of_a_newer_server"),
    ],
)
def test_a_key_that_weakens_the_stream_is_named(change: dict[str, Any], key: str) -> None:
    have = {**as_server_says(WANT), **change}
    diffs = streams.differences(have, WANT)
    assert [d.key for d in diffs] == [key]
    with pytest.raises(streams.ShapeMismatch, match=key):
        streams.refuse(have, WANT)


@pytest.mark.parametrize(
    "change",
    [
        {"compression": "s2"},
        {"description": "made by the platform team"},
        {"metadata": {"_nats.ver": "2.15.1", "owner": "platform"}},
        {"a_key_of_a_newer_server": False},
        {"placement": {"cluster": "east"}},
    ],
)
def test_a_key_that_weakens_nothing_passes(change: dict[str, Any]) -> None:
    assert streams.differences({**as_server_says(WANT), **change}, WANT) == []


def test_a_subscriber_checks_all_but_the_bridges_sizes() -> None:
    want = streams.event_stream("K8S_EVENTS", "k8s.events", max_age=0, duplicate_window=0)
    have = {**as_server_says(WANT), "allow_rollup_hdrs": True}
    diffs = streams.differences(have, want, unchecked=streams.SIZING)
    assert [d.key for d in diffs] == ["allow_rollup_hdrs"]


def test_a_bucket_with_a_republish_is_named() -> None:
    want = streams.seen_bucket("k8s_event_remediation")
    have = {**as_server_says(want), "republish": {"src": ">", "dest": "k8s.events.team-b.>"}}
    (d,) = streams.differences(have, want)
    assert d.key == "republish" and "k8s.events.team-b" in str(d)


# -- acks: only from the bridge's own stream


class FakeNats:
    max_payload = 1 << 20


def publisher_with_one_in_flight() -> tuple[Publisher, Outgoing, Progress]:
    pub = Publisher(FakeNats(), Metrics(), stream="K8S_EVENTS", fast_path=False)  # type: ignore[arg-type]
    progress = Progress(0)
    out = Outgoing(
        Message("k8s.events.c.ns.Pod.BackOff", b"{}", None, "uid/1"), progress.pending(1)
    )
    pub._adopt(out)
    return pub, out, progress


def test_an_ack_from_another_stream_is_refused_and_counted() -> None:
    pub, out, progress = publisher_with_one_in_flight()
    pub._ack(out.token, b'{"stream":"CAPTURED","seq":1}', False)
    assert not out.settled and progress.safe_rv == 0  # the checkpoint does not move
    assert pub._m.failed.labels("wrong_stream")._value.get() == 1
    assert pub._m.published.value == 0
    pub._ack(out.token, b'{"stream":"K8S_EVENTS","seq":1}', False)  # the next attempt's
    assert out.settled and progress.safe_rv == 1


def test_an_ack_without_a_sequence_or_of_another_domain_is_refused() -> None:
    pub, out, _ = publisher_with_one_in_flight()
    for answer in (b'{"stream":"K8S_EVENTS"}', b'{"stream":"K8S_EVENTS","seq":0}'):
        pub._ack(out.token, answer, False)
        assert not out.settled
    pub.domain = "edge"
    pub._ack(out.token, b'{"stream":"K8S_EVENTS","seq":1,"domain":"hub"}', False)
    pub._ack(out.token, b'{"stream":"K8S_EVENTS","seq":1}', False)
    assert not out.settled
    assert pub._m.failed.labels("wrong_stream")._value.get() == 4
    pub._ack(out.token, b'{"stream":"K8S_EVENTS","seq":1,"domain":"edge"}', False)
    assert out.settled


def test_an_answer_naming_no_stream_is_no_ack() -> None:
    pub, out, _ = publisher_with_one_in_flight()
    pub._ack(out.token, b'{"seq":1}', False)
    assert not out.settled
