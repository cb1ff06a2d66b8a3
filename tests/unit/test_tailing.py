"""``tail``'s filters and ``--since``, pure (the command itself: test_bridge_flow.py)."""

from datetime import UTC, datetime, timedelta

import pytest

from bridge import cli, settings
from bridge.jetstream.tailing import Filters, line, parse_since, parse_where, where_names

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ce(ns="shop", reason="BackOff", kind="Pod", type_="io.k8s.event.warning"):
    return {"type": type_, "k8snamespace": ns, "k8sreason": reason, "k8skind": kind}


STATUS = {"type": "io.k8s.bridge.gap"}


def test_no_filter_keeps_everything_and_reads_every_subject():
    f = Filters()
    assert f.keeps(ce()) and f.keeps(STATUS)
    assert f.subject("k8s.events") == "k8s.events.>"


def test_each_filter_is_a_set_and_they_are_and_ed():
    f = Filters(namespaces=frozenset({"shop", "pay"}), types=frozenset({"warning"}))
    assert f.keeps(ce(ns="pay"))
    assert not f.keeps(ce(ns="web"))
    assert not f.keeps(ce(type_="io.k8s.event.normal"))
    assert not f.keeps(STATUS)  # the bridge's own events only without an Event filter
    f = Filters(reasons=frozenset({"OOMKilling"}), kinds=frozenset({"Node"}))
    assert f.keeps(ce(reason="OOMKilling", kind="Node"))
    assert not f.keeps(ce(reason="OOMKilling", kind="Pod"))


def test_single_values_narrow_the_subject_for_jetstream():
    f = Filters(namespaces=frozenset({"shop"}), reasons=frozenset({"BackOff", "OOMKilling"}))
    assert f.subject("k8s.events") == "k8s.events.*.shop.*.*"
    f = Filters(kinds=frozenset({"Pod"}), reasons=frozenset({"Back Off"}))
    assert f.subject("p") == "p.*.*.Pod._Back_20Off"  # the bridge's token
    assert Filters(types=frozenset({"warning"})).subject("p") == "p.>"  # not in the subject


@pytest.mark.parametrize(
    ("text", "ago"),
    [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1.5m", 90)],
)
def test_since_a_duration_ago(text, ago):
    assert parse_since(text, NOW) == NOW - timedelta(seconds=ago)


def test_since_an_rfc3339_time():
    assert parse_since("2026-11-30T11:00:00Z") == datetime(2026, 11, 30, 11, tzinfo=UTC)
    assert parse_since("2026-11-30T12:00:00+01:00") == datetime(2026, 11, 30, 11, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "10", "5w", "2026-11-30T11:00:00"])
def test_since_refuses_what_it_can_not_place(text):
    with pytest.raises(ValueError, match="--since"):
        parse_since(text, NOW)


# -- the subject template, --where and the enrichment extensions ------------------------------

TEAM = "{cluster}.{team}.{namespace}.{kind}.{reason}"


def enriched_ce(**ext: str) -> dict[str, object]:
    return {**ce(), "k8scluster": "prod-eu-1", "k8senriched": "complete", **ext}


def test_the_subject_follows_the_configured_template() -> None:
    f = Filters(namespaces=frozenset({"shop"}))
    assert f.subject("k8s.events", TEAM) == "k8s.events.*.*.shop.*.*"
    f = Filters(where={"team": frozenset({"payments"})}, reasons=frozenset({"BackOff"}))
    assert f.subject("k8s.events", TEAM) == "k8s.events.*.payments.*.*.BackOff"
    f = Filters(where={"team": frozenset({"pay ments"})})
    assert f.subject("p", TEAM) == "p.*._pay_20ments.*.*.*"  # the bridge's token
    f = Filters(where={"cluster": frozenset({"prod-eu-1"})})
    assert f.subject("p", TEAM) == "p.prod-eu-1.*.*.*.*"


def test_a_name_outside_the_template_or_with_two_values_is_left_to_keeps() -> None:
    team = Filters(where={"team": frozenset({"payments"})})
    assert team.subject("p") == "p.>"  # the default template has no {team}
    assert team.keeps(enriched_ce(team="payments"))
    assert not team.keeps(enriched_ce(team="shop"))
    assert not team.keeps(ce())  # no team
    assert not team.keeps(STATUS)
    two = Filters(where={"team": frozenset({"payments", "shop"})})
    assert two.subject("p", TEAM) == "p.*.*.*.*.*"
    assert two.keeps(enriched_ce(team="shop"))
    # type is the Event's spelling in the subject: matched by keeps, never by the subject
    typed = Filters(where={"type": frozenset({"warning"})})
    assert typed.subject("p", "{cluster}.{type}.{namespace}") == "p.>"
    assert typed.keeps(ce()) and not typed.keeps(ce(type_="io.k8s.event.normal"))


def test_an_empty_value_takes_the_events_without_it() -> None:
    f = Filters(where={"team": frozenset({""})})
    assert f.subject("p", TEAM) == "p.*._.*.*.*"
    assert f.keeps(ce()) and not f.keeps(enriched_ce(team="payments"))


def test_namespace_and_where_namespace_are_one_filter() -> None:
    f = Filters(namespaces=frozenset({"shop"}), where={"namespace": frozenset({"pay"})})
    assert f.keeps(ce(ns="shop")) and f.keeps(ce(ns="pay")) and not f.keeps(ce(ns="web"))
    assert f.subject("p") == "p.*.*.*.*"


def test_where_parses_name_value_pairs_and_or_s_one_names_values() -> None:
    known = ["cluster", "namespace", "kind", "reason", "type", "team"]
    pairs = ["team=payments", "team=shop", "type=Warning", "reason=Back=Off", "namespace="]
    assert parse_where(pairs, known) == {
        "team": frozenset({"payments", "shop"}),
        "type": frozenset({"warning"}),
        "reason": frozenset({"Back=Off"}),  # split at the first =
        "namespace": frozenset({""}),
    }


@pytest.mark.parametrize(
    ("pair", "says"),
    [("teem=payments", "--where teem: neither"), ("team", "NAME=VALUE expected")],
)
def test_where_refuses_an_unknown_name_naming_it(pair: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_where([pair], ["cluster", "namespace", "kind", "reason", "type", "team"])


def test_where_knows_the_template_and_every_enrichment_extension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRIDGE_ENRICH__NAMESPACE__LABELS", '{"example.com/team": "team"}')
    monkeypatch.setenv("BRIDGE_ENRICH__OBJECT__OWNER_NAME", "owner")
    monkeypatch.setenv("BRIDGE_NATS__SUBJECT_TEMPLATE", TEAM)
    names = where_names(settings.load(None))
    assert set(names) == {"cluster", "namespace", "kind", "reason", "type", "team", "owner"}


def test_tail_exits_2_naming_an_unknown_where(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tail", "--where", "teem=payments"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--where teem" in err


def test_the_line_shows_the_enrichment_extensions_and_what_is_missing() -> None:
    full = {**enriched_ce(team="payments", ownername="shop"), "data": {"message": "m"}}
    assert line(full).endswith(" ownername=shop team=payments m")
    partial = {
        **ce(),
        "k8senriched": "partial",
        "k8senrichmissing": "object:timeout,namespace:unknown",
        "team": "payments",
        "data": {"message": "m"},
    }
    assert line(partial).endswith(" team=payments [partial: object:timeout,namespace:unknown] m")
    assert line({**ce(), "data": {"message": "m"}}).endswith("x1    m")  # none: as before
