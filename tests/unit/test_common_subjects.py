"""The subject template (``k8s_event_common.subjects``): how a value becomes a token, how a
template reads, and the one filter a subscriber takes a slice of the stream with. The bridge
fills the template in with the same ``token``, so a filter built here meets its subjects."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8s_event_common.subjects import (
    DEFAULT_TEMPLATE,
    FIELDS,
    STATUS_TOKEN,
    parse_template,
    placeholders,
    status_filter,
    subject_filter,
    token,
)

TEAM = "{cluster}.{team}.{namespace}.{kind}.{reason}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("shop", "shop"),
        ("kube-system", "kube-system"),
        ("Back_Off-2", "Back_Off-2"),
        ("a.b", "a_b"),  # no extra level
        ("*", "_"),  # no wildcard
        (">", "_"),
        ("a b\tc", "a_b_c"),
        ("café", "caf_"),  # ASCII only
        ("", "_"),  # never an empty token
        (None, "_"),
    ],
)
def test_a_value_becomes_one_safe_token(value: str | None, expected: str) -> None:
    assert token(value) == expected


@given(st.text(max_size=40))
def test_no_value_makes_a_wildcard_an_empty_token_or_a_level(value: str) -> None:
    t = token(value)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", t)
    assert len(t) == max(len(value), 1)


def test_the_default_template_is_the_subject_layout_subscribers_know() -> None:
    assert DEFAULT_TEMPLATE == "{cluster}.{namespace}.{kind}.{reason}"
    assert placeholders(DEFAULT_TEMPLATE) == ["cluster", "namespace", "kind", "reason"]
    assert set(placeholders(DEFAULT_TEMPLATE)) <= set(FIELDS)


def test_a_template_reads_as_placeholders_and_literals() -> None:
    assert parse_template("{cluster}.events.{team}.{kind}") == [
        (True, "cluster"),
        (False, "events"),
        (True, "team"),
        (True, "kind"),
    ]
    assert placeholders(TEAM) == ["cluster", "team", "namespace", "kind", "reason"]


@pytest.mark.parametrize(
    "bad",
    [
        "{cluster}..{reason}",  # an empty token
        "{cluster}.{Team}",  # a placeholder is a-z 0-9
        "{cluster}.{te-am}",
        "{cluster}.x{team}",  # one placeholder or a literal, not both
        "{cluster}.*",  # no wildcard
        "{cluster}.>",
        "{cluster}._bridge",  # a literal never starts with _
        "{cluster}.a b",
        "",
    ],
)
def test_a_token_that_is_neither_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match="token"):
        parse_template(bad)


def test_the_filter_of_a_slice_names_its_values_and_stars_the_rest() -> None:
    assert subject_filter("k8s.events", TEAM, team="payments") == "k8s.events.*.payments.*.*.*"
    assert subject_filter("k8s.events") == "k8s.events.*.*.*.*"
    assert (
        subject_filter("k8s.events", DEFAULT_TEMPLATE, cluster="prod-eu-1", reason="BackOff")
        == "k8s.events.prod-eu-1.*.*.BackOff"
    )
    assert subject_filter("p", "{cluster}.x.{kind}", kind="Pod") == "p.*.x.Pod"


def test_a_value_of_the_filter_is_sanitised_as_the_bridge_sanitises_it() -> None:
    assert subject_filter("p", TEAM, team="pay ments", namespace="") == "p.*.pay_ments._.*.*"
    # a value can not widen the filter
    assert subject_filter("p", TEAM, team="*") == "p.*._.*.*.*"
    assert subject_filter("p", TEAM, team="a.>") == "p.*.a__.*.*.*"


def test_a_name_the_template_does_not_hold_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"teem: not in the subject template"):
        subject_filter("p", TEAM, teem="payments")
    with pytest.raises(ValueError, match=r"team"):
        subject_filter("p", DEFAULT_TEMPLATE, team="payments")


def test_a_slice_never_ends_in_a_full_wildcard_so_no_status_event_comes_with_it() -> None:
    f = subject_filter("k8s.events", TEAM, team="payments")
    assert ">" not in f
    # the status events of a cluster are one level shorter than any Event of this template
    status = status_filter("k8s.events", "prod-eu-1")
    assert status == f"k8s.events.prod-eu-1.{STATUS_TOKEN}.*"
    assert len(status.split(".")) != len(f.split("."))


def test_the_status_filter_of_one_cluster_one_kind_or_all() -> None:
    assert status_filter("k8s.events") == "k8s.events.*._bridge.*"
    assert status_filter("k8s.events", "prod-eu-1", "gap") == "k8s.events.prod-eu-1._bridge.gap"
    assert status_filter("k8s.events", "a.b") == "k8s.events.a_b._bridge.*"


def test_a_long_value_is_cut_and_stays_apart_from_its_neighbours():
    from k8s_event_common.subjects import MAX_TOKEN

    a, b = "x" * 5000 + "a", "x" * 5000 + "b"
    ta, tb = token(a), token(b)
    assert len(ta) == len(tb) == MAX_TOKEN and ta != tb
    assert token(a) == ta  # the same value, the same token
    assert token("y" * MAX_TOKEN) == "y" * MAX_TOKEN  # up to the limit: unchanged


def test_a_subject_of_the_longest_values_stays_under_the_control_line():
    from bridge.core.converting import Converter
    from bridge.core.enrichment import Enrichment
    from bridge.core.events import from_obj

    template = ".".join(["{cluster}", "{namespace}"] + ["{kind}", "{reason}", "{team}"] * 4)
    c = Converter("c" * 60, "p" * 256, "structured", template)
    ev = from_obj(
        {
            "metadata": {"uid": "u", "resourceVersion": "1", "namespace": "n" * 63},
            "involvedObject": {"kind": "K" * 5000, "name": "x"},
            "reason": "R" * 5000,
        }
    )
    msg = c.convert(ev, Enrichment({"team": "t" * 1024}))
    assert len(msg.subject) < 4096 - 200  # room for "HPUB <subject> <reply> <sizes>"
