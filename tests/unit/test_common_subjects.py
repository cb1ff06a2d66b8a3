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
    MAX_TOKEN,
    STATUS_TOKEN,
    parse_template,
    placeholders,
    status_filter,
    subject_filter,
    token,
    untoken,
)

TEAM = "{cluster}.{team}.{namespace}.{kind}.{reason}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # ordinary values are their own tokens, as they always were
        ("shop", "shop"),
        ("kube-system", "kube-system"),
        ("BackOff", "BackOff"),
        ("Pod", "Pod"),
        ("Back_Off-2", "Back_Off-2"),
        ("prod_eu", "prod_eu"),
        ("y" * MAX_TOKEN, "y" * MAX_TOKEN),  # up to the limit
        # any other value is escaped: no extra level, no wildcard, and read back
        ("a.b", "_a__b"),
        ("pay.ments", "_pay__ments"),
        ("pay*ments", "_pay_2aments"),
        ("pay ments", "_pay_20ments"),
        ("pay_ments.", "_pay_5fments__"),
        ("*", "__2a"),
        (">", "__3e"),
        ("a b\tc", "_a_20b_09c"),
        ("café", "_caf_c3_a9"),
        ("_", "__5f"),  # a value: never the missing token
        ("_bridge", "__5fbridge"),  # never the status events' token
        ("-x", "_-x"),
        # none: the missing token (Kubernetes omits an empty string)
        ("", "_"),
        (None, "_"),
    ],
)
def test_a_value_becomes_one_safe_token(value: str | None, expected: str) -> None:
    assert token(value) == expected
    assert untoken(expected) == (value or None)


SAFE = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_TOKEN}}}")
# the values subjects are made of, and any text: ASCII, punctuation, the escape character itself,
# any Unicode (lone surrogates too: JSON may hold them)
VALUES = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="._-*> \tab", max_size=30),
    st.from_regex(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", fullmatch=True),
    st.text(alphabet=st.characters(codec=None), max_size=20),
)


@given(VALUES)
def test_no_value_makes_a_wildcard_an_empty_token_or_a_level(value: str) -> None:
    t = token(value)
    assert SAFE.fullmatch(t), t
    assert t != STATUS_TOKEN


@given(VALUES, VALUES)
def test_distinct_values_give_distinct_tokens(a: str, b: str) -> None:
    if (a or None) != (b or None):
        assert token(a) != token(b)


@given(VALUES)
def test_a_token_reads_back_to_its_value(value: str) -> None:
    t = token(value)
    try:
        assert untoken(t) == (value or None)
    except ValueError as exc:  # only a long value's cut is not read back
        assert "cut" in str(exc) and 1 + 3 * len(value.encode("utf-8", "surrogatepass")) > MAX_TOKEN


@given(st.text(min_size=MAX_TOKEN - 20, max_size=600), st.text(max_size=600))
def test_long_values_stay_apart_when_cut(a: str, b: str) -> None:
    ta, tb = token(a), token(b)
    assert SAFE.fullmatch(ta) and SAFE.fullmatch(tb)
    if a != b:
        assert ta != tb


@pytest.mark.parametrize("bad", ["", "_abc", "_a_zz", "_a_2", "a.b", "a*", "_a__b_-0123"])
def test_untoken_refuses_what_no_value_makes(bad: str) -> None:
    with pytest.raises(ValueError):
        untoken(bad)


def test_an_ordinary_value_of_the_dns_kinds_and_reasons_is_its_own_token() -> None:
    """Existing subscriptions keep working: the tokens of ordinary values are unchanged."""
    for value in ["default", "kube-system", "web-7d4b9c-x2x9z", "Deployment", "FailedScheduling"]:
        assert token(value) == value and untoken(value) == value


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
    assert subject_filter("p", TEAM, team="pay ments", namespace="") == "p.*._pay_20ments._.*.*"
    # a value can not widen the filter, nor take another value's Events
    assert subject_filter("p", TEAM, team="*") == "p.*.__2a.*.*.*"
    assert subject_filter("p", TEAM, team="pay.ments") != subject_filter(
        "p", TEAM, team="pay*ments"
    )
    assert subject_filter("p", TEAM, team="a.>") == "p.*._a___3e.*.*.*"


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
    assert status_filter("k8s.events", "a.b") == "k8s.events._a__b._bridge.*"


def test_a_long_value_is_cut_and_stays_apart_from_its_neighbours():

    a, b = "x" * 5000 + "a", "x" * 5000 + "b"
    ta, tb = token(a), token(b)
    assert len(ta) == len(tb) == MAX_TOKEN and ta != tb
    assert token(a) == ta  # the same value, the same token
    assert token("y" * MAX_TOKEN) == "y" * MAX_TOKEN  # up to the limit: unchanged
    assert token("y" * (MAX_TOKEN + 1)) != "y" * MAX_TOKEN
    with pytest.raises(ValueError, match="cut"):
        untoken(ta)
    # a value spelled like a cut token is not one: it is escaped
    assert token(ta) != ta


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
