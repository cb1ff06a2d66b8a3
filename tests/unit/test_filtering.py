import pytest

from bridge.core.filtering import Filter, event_count, server_field_selector
from bridge.settings import FilterSettings
from tests import support


def ev(reason="BackOff", type_="Warning", kind="Pod", ns="default", count=None, series=None):
    return support.event(
        reason=reason, type=type_, kind=kind, namespace=ns, count=count, series=series
    )


@pytest.mark.parametrize(
    ("settings", "watch_type", "event", "accepted"),
    [
        ({}, "ADDED", ev(), True),
        ({}, "MODIFIED", ev(), True),
        ({}, "DELETED", ev(), False),
        ({"include_deleted": True}, "DELETED", ev(), True),
        ({"reasons": ["OOMKilling"]}, "ADDED", ev(), False),
        ({"reasons": ["OOMKilling", "BackOff"]}, "ADDED", ev(), True),
        ({"exclude_reasons": ["BackOff"]}, "ADDED", ev(), False),
        ({"types": ["Warning"]}, "ADDED", ev(type_="Normal"), False),
        ({"types": ["Warning"]}, "ADDED", ev(), True),
        ({"kinds": ["Node"]}, "ADDED", ev(), False),
        ({"kinds": ["Node", "Pod"]}, "ADDED", ev(), True),
        ({"namespaces": ["prod"]}, "ADDED", ev(), False),
        ({"namespaces": ["prod"]}, "ADDED", ev(ns="prod"), True),
        ({"exclude_namespaces": ["kube-system"]}, "ADDED", ev(ns="kube-system"), False),
        ({"min_count": 3}, "ADDED", ev(count=2), False),
        ({"min_count": 3}, "MODIFIED", ev(count=3), True),
        ({"min_count": 3}, "MODIFIED", ev(series={"count": 5}), True),
        ({"min_count": 2}, "ADDED", ev(), False),  # no count at all counts as 1
        ({}, "BOOKMARK", ev(), False),
    ],
)
def test_filter(settings, watch_type, event, accepted):
    assert Filter(FilterSettings(**settings)).accepts(watch_type, event) is accepted


def test_filter_survives_events_missing_fields():
    f = Filter(FilterSettings(reasons=["BackOff"], kinds=["Pod"], namespaces=["a"], min_count=2))
    assert f.accepts("ADDED", {}) is False
    assert f.accepts("ADDED", {"involvedObject": "nonsense", "metadata": None}) is False


@pytest.mark.parametrize(
    ("obj", "count"),
    [
        ({}, 1),
        ({"count": 4}, 4),
        ({"series": {"count": 9}, "count": 4}, 9),
        ({"count": 0}, 1),
        ({"count": "7"}, 1),
        ({"series": None, "count": 2}, 2),
    ],
)
def test_event_count(obj, count):
    assert event_count(obj) == count


@pytest.mark.parametrize(
    ("user", "settings", "expected"),
    [
        ("", {}, ""),
        ("", {"types": ["Warning"]}, "type=Warning"),
        ("", {"types": ["Warning", "Normal"]}, ""),
        ("", {"reasons": ["BackOff"]}, "reason=BackOff"),
        ("", {"reasons": ["BackOff", "OOMKilling"]}, ""),
        ("", {"exclude_reasons": ["Pulled", "Created"]}, "reason!=Pulled,reason!=Created"),
        ("type=Warning", {"types": ["Warning"]}, "type=Warning"),
        (
            "source=kubelet",
            {"kinds": ["Pod"], "exclude_namespaces": ["kube-system"]},
            "source=kubelet,involvedObject.kind=Pod,metadata.namespace!=kube-system",
        ),
    ],
)
def test_server_field_selector_only_narrows(user, settings, expected):
    assert server_field_selector(user, FilterSettings(**settings)) == expected


def test_filter_treats_non_string_fields_as_no_match_instead_of_raising():
    f = Filter(
        FilterSettings(
            reasons=["BackOff"],
            exclude_reasons=["X"],
            types=["Warning"],
            kinds=["Pod"],
            exclude_namespaces=["kube-system"],
        )
    )
    weird = {
        "reason": ["BackOff"],
        "type": {"a": 1},
        "involvedObject": {"kind": ["Pod"]},
        "metadata": {"namespace": ["kube-system"]},
    }
    assert f.accepts("ADDED", weird) is False
    assert Filter(FilterSettings(exclude_reasons=["X"])).accepts("ADDED", weird) is True
