"""``tail --digests`` and the drill-down into a digest's versions, pure: the options, the
digest read back by the format's one decoder, its line, and what is printed for a message on
the digests' stream that is no digest (the command itself: tests/integration/
test_tail_digests.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge import cli
from bridge.jetstream.tailing import (
    Filters,
    check_range,
    digest_line,
    not_a_digest,
    read_digest,
)
from k8s_event_common import digests
from k8s_event_common.cloudevents import BadMessage
from tests.unit.test_tailing_hostile import HOSTILE, raw_controls

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def digest(**series: Any) -> digests.Digest:
    s = digests.Series(
        cluster="prod-eu-1",
        namespace="shop",
        kind="Pod",
        name="web-1",
        uid="u-pod",
        reason="BackOff",
        type="Warning",
        reporting_component="kubelet",
    )
    return digests.Digest(
        series=replace(s, **series),
        start=START,
        end=START + timedelta(minutes=5),
        occurrences=57,
        versions=40,
        first_seen=START + timedelta(seconds=3),
        last_seen=START + timedelta(seconds=290),
        count_from=12,
        count_to=69,
        uids=("u-ev-1",),
        uids_omitted=0,
        first_message="Back-off restarting failed container web",
        last_message="Back-off restarting failed container web",
        sampled=True,
        combined=False,
        stream="K8S_EVENTS",
        first_seq=120,
        last_seq=180,
    )


def message(d: digests.Digest) -> tuple[dict[str, str], bytes]:
    return digests.headers(d), digests.encode(d)


# -- reading one back --------------------------------------------------------------------------


def test_a_digest_reads_back_as_itself_with_its_document() -> None:
    d = digest()
    got, doc = read_digest(*message(d))
    assert got == d
    assert doc == digests.document(d)  # what --json prints


def test_the_line_says_what_a_person_asks_and_where_to_drill_down() -> None:
    text = digest_line(digest())
    assert "BackOff Pod shop/web-1: 57 times in 40 versions" in text
    assert "count 12->69" in text and "seq 120-180" in text and "[sampled]" in text
    assert text.startswith("2026-11-30T12:00:00Z +5m0s ")


def broken_doc(d: digests.Digest, path: str, value: Any) -> bytes:
    doc = digests.document(d)
    *parents, last = path.split(".")
    target = doc
    for p in parents:
        target = target[p]
    target[last] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (broken_doc(digest(), "type", "io.k8s.event.warning"), "is not io.k8s.digest"),
        (broken_doc(digest(), "id", "digest/" + "0" * 32), "digest id"),
        (broken_doc(digest(), "data.occurrences", -1), "digest occurrences -1"),
        (broken_doc(digest(), "data.events", ["u"] * 17), "at most 16"),
        (broken_doc(digest(), "data.lastMessage", "x" * 5000), "over 1024"),
        (broken_doc(digest(), "data.window.end", "2026-11-30T11:00:00Z"), "before it starts"),
        (broken_doc(digest(), "data.series", "shop"), "digest series"),
    ],
    ids=[
        "not json",
        "not an object",
        "another type",
        "an id not its own",
        "a negative count",
        "too many uids",
        "a message too long",
        "a window backwards",
        "series not an object",
    ],
)
def test_what_is_no_digest_is_refused_naming_what_is_wrong(body: bytes, says: str) -> None:
    with pytest.raises(BadMessage, match=says):
        read_digest(dict(digests.HEADERS), body)


def test_a_message_that_is_no_digest_is_one_bounded_line_naming_it() -> None:
    subject = "k8s.digests." + "x\x1b[2J" * 10_000
    text = not_a_digest(subject, BadMessage("digest occurrences 'x' is not a count"))
    assert text.startswith("(not a digest: k8s.digests.x\\x1b[2J")
    assert "[cut: 50012 characters]" in text and "is not a count" in text
    assert len(text) < 600 and not raw_controls(text) and "\n" not in text


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_no_terminal_control_of_a_digest_reaches_its_line(value: str) -> None:
    d = digest(namespace=f"shop{value}", name=f"web{value}", kind=f"Pod{value}")
    d = replace(d, series=replace(d.series, reason=f"BackOff{value}"), last_message=value)
    got, _ = read_digest(*message(d))
    text = digest_line(got)
    assert not raw_controls(text), repr(text)
    assert "\n" not in text


def test_an_untrusted_series_names_no_object() -> None:
    text = digest_line(digest(name="", uid="", untrusted=True))
    assert "Pod in shop (untrusted)" in text


# -- the filters on a digest's series ----------------------------------------------------------


def test_the_filters_keep_a_digest_by_its_series() -> None:
    d = digest()
    assert Filters().keeps_digest(d)
    assert Filters(types=frozenset({"warning"})).keeps_digest(d)
    assert not Filters(types=frozenset({"normal"})).keeps_digest(d)
    assert Filters(namespaces=frozenset({"shop"}), reasons=frozenset({"BackOff"})).keeps_digest(d)
    assert not Filters(kinds=frozenset({"Node"})).keeps_digest(d)
    assert Filters(where={"cluster": frozenset({"prod-eu-1"})}).keeps_digest(d)
    assert not Filters(where={"cluster": frozenset({"prod-us-1"})}).keeps_digest(d)


def test_a_single_value_narrows_the_digests_subject_as_digests_subject_makes_it() -> None:
    d = digest(reason="Back Off")
    f = Filters(namespaces=frozenset({"shop"}), reasons=frozenset({"Back Off"}))
    assert f.digest_subject("k8s.digests") == "k8s.digests.*.shop.*._Back_20Off"
    assert digests.subject("k8s.digests", d.series) == "k8s.digests.prod-eu-1.shop.Pod._Back_20Off"
    assert Filters().digest_subject("k8s.digests") == "k8s.digests.>"


# -- the options -------------------------------------------------------------------------------


def test_a_range_ends_after_it_starts_and_reads_every_subject() -> None:
    check_range(120, 180, None)
    check_range(120, 120, None)
    check_range(None, 180, None)
    with pytest.raises(ValueError, match="--to-seq 100 is before --from-seq 120"):
        check_range(120, 100, None)
    with pytest.raises(ValueError, match="leave out --subject"):
        check_range(120, 180, "k8s.events.>")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--from-seq", "120", "--to-seq", "100"], "--to-seq 100 is before --from-seq 120"),
        (["--to-seq", "9", "--subject", "k8s.events.>"], "leave out --subject"),
        (["--to-seq", "9", "--since", "10m"], "not --since"),
        (["--at-least", "5"], "add --digests"),
        (["--digests", "--where", "team=payments"], "--where team: not a value of a digest"),
    ],
)
def test_tail_exits_2_naming_an_option_it_can_not_take(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["tail", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--from-seq", "0"], "--from-seq: 0 is not 1 or more"),
        (["--to-seq", "ten"], "--to-seq: 'ten' is not a whole number"),
        (["--at-least", "-3", "--digests"], "--at-least: -3 is not 1 or more"),
        (["--from-seq", "5", "--since", "10m"], "not allowed with argument"),
        (["--from-seq", "5", "--all"], "not allowed with argument"),
    ],
)
def test_argparse_refuses_a_sequence_that_is_no_sequence(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["tail", *args])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_the_digest_options_parse() -> None:
    args = cli._parser().parse_args(
        ["tail", "--digests", "--at-least", "10", "--from-seq", "3", "--to-seq", "7", "--json"]
    )
    assert (args.digests, args.at_least, args.from_seq, args.to_seq, args.json) == (
        True,
        10,
        3,
        7,
        True,
    )
