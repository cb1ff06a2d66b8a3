"""The subscribers' NATS section (``k8s_event_consumer.configuring.NatsSettings``): which
subjects the durable consumer reads. By default ``subjects``; with ``match``, one slice of the
Events by one filter built from the bridge's subject template, plus the status events. A name
the template does not hold, or ``match`` beside ``subjects``, is a config error naming the key
(exit 2), as every other one. And what every program's NATS section shares with the bridge's
(``k8s_event_common.configuring.NatsStream``): the stream, its subjects, their checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge import settings as bridge_settings
from k8s_event_common.configuring import NatsStream
from k8s_event_consumer.alerting import settings as alerting
from k8s_event_consumer.alerting.__main__ import main as alerting_main
from k8s_event_consumer.configuring import ConfigError, NatsSettings
from k8s_event_consumer.otlp import settings as otlp
from k8s_event_consumer.remediation import settings as remediation
from k8s_event_consumer.remediation.__main__ import main as remediation_main

TEAM = "{cluster}.{team}.{namespace}.{kind}.{reason}"


def test_by_default_the_subjects_decide_as_before() -> None:
    assert NatsSettings().filters == ["k8s.events.>"]
    assert NatsSettings(subjects=["a.>", "b.>"]).filters == ["a.>", "b.>"]
    # prefix and template alone change nothing: only match reads them
    assert NatsSettings(subject_template=TEAM, subject_prefix="x").filters == ["k8s.events.>"]


def test_a_team_takes_its_slice_with_one_filter_and_the_status_events() -> None:
    n = NatsSettings(subject_template=TEAM, match={"team": "payments"})
    assert n.filters == ["k8s.events.*.payments.*.*.*", "k8s.events.*._bridge.*"]
    n = NatsSettings(subject_template=TEAM, match={"team": "payments"}, status_events=False)
    assert n.filters == ["k8s.events.*.payments.*.*.*"]


def test_the_slice_follows_the_prefix_the_cluster_and_sanitises_each_value() -> None:
    n = NatsSettings(
        subject_prefix="hub.events",
        subject_template=TEAM,
        match={"cluster": "prod-eu-1", "team": "pay ments", "reason": "BackOff"},
    )
    assert n.filters == [
        "hub.events.prod-eu-1._pay_20ments.*.*.BackOff",
        "hub.events.prod-eu-1._bridge.*",  # the status events of that cluster only
    ]
    n = NatsSettings(match={"namespace": ""}, status_events=False)  # Events without one
    assert n.filters == ["k8s.events.*._.*.*"]


def test_a_filter_that_takes_every_status_event_already_is_not_doubled() -> None:
    n = NatsSettings(subject_template="{cluster}.{namespace}.{reason}", match={"cluster": "c"})
    assert n.filters == ["k8s.events.c.*.*"]


@pytest.mark.parametrize(
    ("nats", "says"),
    [
        ({"subject_template": TEAM, "match": {"teem": "payments"}}, "match.teem"),
        ({"match": {"team": "payments"}}, "match.team: not a placeholder of subject_template"),
        ({"subjects": ["k8s.events.>"], "match": {"namespace": "shop"}}, "exclude each other"),
        ({"match": {"namespace": "*"}}, "namespace: '*' is a wildcard"),
        ({"match": {"namespace": "a.>"}}, "wildcard"),
        ({"subject_template": "{cluster}..{reason}"}, "subject_template"),
        ({"subject_template": "{cluster}.{Team}"}, "subject_template"),
        ({"subject_prefix": "k8s.*"}, "subject_prefix"),
        (  # some status events and not all: JetStream refuses overlapping filters
            {"subject_template": "{cluster}.{namespace}.{reason}", "match": {"reason": "gap"}},
            "status_events: false",
        ),
    ],
)
def test_a_bad_slice_is_a_config_error_naming_the_key(
    nats: dict[str, object], says: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="nats") as err:
        alerting.load(str(_config(tmp_path, {"nats": nats})))
    assert says in str(err.value)


def test_an_overlap_is_fine_once_the_status_events_are_left_out() -> None:
    n = NatsSettings(
        subject_template="{cluster}.{namespace}.{reason}",
        match={"reason": "gap"},
        status_events=False,
    )
    assert n.filters == ["k8s.events.*.*.gap"]


def test_each_subscriber_exits_2_on_an_unknown_name_printing_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nats = {"subject_template": TEAM, "match": {"teem": "payments"}}
    assert alerting_main(["check-config", "--config", str(_config(tmp_path, {"nats": nats}))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "match.teem" in err
    f = _config(tmp_path, {"nats": nats, "kubernetes": {"cluster": "prod-eu-1"}})
    assert remediation_main(["check-config", "--config", str(f)]) == 2
    assert "match.teem" in capsys.readouterr().err


def test_match_comes_from_the_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMEDIATION_NATS__SUBJECT_TEMPLATE", TEAM)
    monkeypatch.setenv("REMEDIATION_NATS__MATCH", '{"team": "payments"}')
    cfg = remediation.load(str(_config(tmp_path, {"kubernetes": {"cluster": "prod-eu-1"}})))
    assert cfg.nats.filters[0] == "k8s.events.*.payments.*.*.*"
    # subjects from the environment beside match from the file: refused too
    monkeypatch.setenv("REMEDIATION_NATS__SUBJECTS", '["k8s.events.>"]')
    with pytest.raises(ConfigError, match="exclude each other"):
        remediation.load(str(_config(tmp_path, {"kubernetes": {"cluster": "prod-eu-1"}})))


def _config(tmp_path: Path, doc: dict[str, object]) -> Path:
    import yaml

    f = tmp_path / "config.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


# --------------------------------------------------- the keys every program's nats section shares

NATS_SECTIONS = [
    pytest.param(bridge_settings.NatsSettings, id="bridge"),
    pytest.param(alerting.NatsSettings, id="alerting"),
    pytest.param(otlp.NatsSettings, id="otlp"),
    pytest.param(remediation.NatsSettings, id="remediation"),
]


@pytest.mark.parametrize("section", NATS_SECTIONS)
def test_every_program_declares_the_stream_and_its_subjects_once(section: type) -> None:
    """One declaration, one default, one description: a program's section only inherits them."""
    assert issubclass(section, NatsStream)
    for key in ("stream", "subject_prefix", "subject_template"):
        assert key not in vars(section).get("__annotations__", {}), key
    n = section()
    assert (n.stream, n.subject_prefix, n.subject_template) == (
        "K8S_EVENTS",
        "k8s.events",
        "{cluster}.{namespace}.{kind}.{reason}",
    )


@pytest.mark.parametrize("section", NATS_SECTIONS)
@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("stream", "K8S.EVENTS", "may hold only A-Z a-z 0-9 _ -"),
        ("inbox_prefix", "_INBOX.>", "dot-separated tokens"),
        ("subject_prefix", "k8s.*", "dot-separated tokens"),
        ("subject_prefix", "k" * 257, "at most 256 characters"),
        ("subject_template", "{cluster}..{reason}", "token ''"),
        ("subject_template", "{namespace}.{cluster}", r"must start with \{cluster\}"),
        ("subject_template", "{cluster}", r"must start with \{cluster\}. and go on"),
    ],
)
def test_every_program_checks_the_shared_keys_alike(
    section: type, key: str, value: str, error: str
) -> None:
    """A program's own default for a key (``inbox_prefix``) keeps the check of its type."""
    with pytest.raises(ValidationError, match=error) as info:
        section(**{key: value})
    assert info.value.errors()[0]["loc"] == (key,)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        (alerting.NatsSettings, "durable"),
        (otlp.NatsSettings, "durable"),
        (remediation.NatsSettings, "durable"),
        (remediation.NatsSettings, "seen_bucket"),
        (bridge_settings.NatsSettings, "domain"),
        (bridge_settings.CheckpointSettings, "bucket"),
        (otlp.DeadLetterSettings, "stream"),
    ],
)
def test_every_name_of_a_durable_bucket_stream_or_domain_is_one_token(
    section: type, key: str
) -> None:
    with pytest.raises(ValidationError, match="may hold only A-Z a-z 0-9 _ -"):
        section(**{key: "a.b"})
    assert getattr(section(**{key: "A-z_9"}), key) == "A-z_9"
