"""The workload generator: realistic, sized like real Events, deterministic per seed."""

from __future__ import annotations

import collections
import datetime
import random
import re
from typing import Any

import msgspec
import pytest

from k8s_event_sim import SimApiServer, Workload, make_event, run_workload
from k8s_event_sim.apiserver import repeat_patch
from k8s_event_sim.workload import NAMESPACES

SERVER_FIELDS = {"uid": "0b6a4b1e-2f5c-4a8e-9d3b-7c1e5f2a9d40", "resourceVersion": "123456789"}


def stored_size(event: dict[str, Any]) -> int:
    """Bytes on the wire once the server has added uid, resourceVersion, creationTimestamp."""
    meta = {**event["metadata"], **SERVER_FIELDS, "creationTimestamp": "2026-01-01T00:00:00Z"}
    return len(msgspec.json.encode({**event, "metadata": meta}))


def test_make_event_is_a_function_of_the_seed() -> None:
    first = [make_event(random.Random(7), i=i) for i in range(20)]
    again = [make_event(random.Random(7), i=i) for i in range(20)]
    other = [make_event(random.Random(8), i=i) for i in range(20)]
    assert first == again
    assert first != other


@pytest.mark.parametrize("style", ["core", "events.k8s.io", None])
def test_events_are_half_to_one_and_a_half_kilobytes(style: Any) -> None:
    sizes = [stored_size(make_event(random.Random(s), i=s, style=style)) for s in range(500)]
    assert 500 <= min(sizes)
    assert max(sizes) <= 1536


def test_core_style_has_count_and_timestamps() -> None:
    event = make_event(random.Random(1), style="core", namespace="payments")
    assert event["apiVersion"] == "v1" and event["kind"] == "Event"
    assert event["metadata"]["namespace"] == "payments"
    assert event["count"] >= 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", event["lastTimestamp"])
    assert event["firstTimestamp"] <= event["lastTimestamp"]
    assert event["eventTime"] is None
    assert event["source"]["component"]
    assert event["metadata"]["managedFields"][0]["fieldsType"] == "FieldsV1"
    assert re.fullmatch(r"[a-z0-9.-]+\.[0-9a-f]{16}", event["metadata"]["name"])
    assert event["metadata"]["name"].startswith(event["involvedObject"]["name"] + ".")


def test_events_k8s_io_style_has_event_time_and_no_count() -> None:
    events = [make_event(random.Random(s), style="events.k8s.io") for s in range(200)]
    for event in events:
        assert "count" not in event
        assert event["firstTimestamp"] is None and event["lastTimestamp"] is None
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["eventTime"])
        assert event["reportingComponent"] and event["action"]
    with_series = [event for event in events if "series" in event]
    assert 0 < len(with_series) < len(events)
    assert all(event["series"]["count"] >= 2 for event in with_series)


def test_pod_events_name_a_container_field_path() -> None:
    events = [make_event(random.Random(s)) for s in range(300)]
    pulled = [e for e in events if e["reason"] == "Pulled"]
    assert pulled
    assert all(e["involvedObject"]["fieldPath"].startswith("spec.containers{") for e in pulled)
    assert all(e["involvedObject"]["kind"] == "Pod" for e in pulled)


def test_the_mix_looks_like_a_real_cluster() -> None:
    rng = random.Random(3)
    events = [make_event(rng, i=i) for i in range(3000)]
    reasons = collections.Counter(e["reason"] for e in events)
    kinds = collections.Counter(e["involvedObject"]["kind"] for e in events)
    namespaces = {e["metadata"]["namespace"] for e in events}
    for reason in (
        "BackOff",
        "OOMKilling",
        "FailedScheduling",
        "Unhealthy",
        "FailedMount",
        "FailedCreatePodSandBox",
        "Evicted",
        "NodeNotReady",
        "Failed",
        "Scheduled",
        "Pulling",
        "Pulled",
        "Created",
        "Started",
        "Killing",
        "SuccessfulCreate",
        "ScalingReplicaSet",
    ):
        assert reasons[reason] > 0, reason
    assert kinds.most_common(1)[0][0] == "Pod"
    assert set(kinds) >= {
        "Pod",
        "Node",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PersistentVolumeClaim",
    }
    assert namespaces == set(NAMESPACES)
    assert {e["type"] for e in events} == {"Normal", "Warning"}
    assert len({e["metadata"]["name"] for e in events}) == len(events)


def fixed_clock() -> datetime.datetime:
    return datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


def shape(sim: SimApiServer) -> list[tuple[Any, ...]]:
    return [
        (e["metadata"]["name"], e["reason"], e.get("count"), (e.get("series") or {}).get("count"))
        for e in sim.list_events()
    ]


async def test_run_workload_is_deterministic_and_bounded() -> None:
    first, second, other = SimApiServer(), SimApiServer(), SimApiServer()
    stats = await run_workload(first, total=400, rate=None, seed=5, clock=fixed_clock)
    await run_workload(second, total=400, rate=None, seed=5, clock=fixed_clock)
    await run_workload(other, total=400, rate=None, seed=6, clock=fixed_clock)
    assert shape(first) == shape(second)
    assert shape(first) != shape(other)
    assert stats.operations == stats.created + stats.bumped == 400
    assert first.resource_version == 1 + 400
    assert 0.2 < stats.bumped / 400 < 0.4
    assert len(first.list_events()) == stats.created
    bumped = [e for e in first.list_events() if (e.get("count") or 1) > 1 or "series" in e]
    assert bumped


async def test_run_workload_paces_to_the_rate_and_respects_namespaces() -> None:
    sim = SimApiServer()
    stats = await run_workload(sim, total=20, rate=200, bump_ratio=0.0, namespaces=["a", "b"])
    assert stats.created == 20 and stats.bumped == 0
    assert stats.elapsed >= 0.09
    assert {e["metadata"]["namespace"] for e in sim.list_events()} == {"a", "b"}


def test_the_workload_records_every_version_and_the_newest_of_each_event() -> None:
    sim = SimApiServer()
    w = Workload(sim, 3)
    first = w.create(namespace="shop")
    again = w.bump("shop", first["metadata"]["name"])
    uid = first["metadata"]["uid"]
    assert w.ids == [f"{uid}/{first['metadata']['resourceVersion']}", w.latest[uid]]
    assert w.latest[uid] == f"{uid}/{again['metadata']['resourceVersion']}"
    assert (w.stats.created, w.stats.bumped) == (1, 1)


def test_a_repeat_of_an_expired_event_writes_a_new_one_and_forgets_it() -> None:
    sim = SimApiServer()
    w = Workload(sim, 3, bump_ratio=1.0)
    gone = w.create()
    sim.delete_event(gone["metadata"]["namespace"], gone["metadata"]["name"])
    written = w.step()
    assert written is not None and written["metadata"]["uid"] != gone["metadata"]["uid"]
    assert (gone["metadata"]["namespace"], gone["metadata"]["name"]) not in w.recent
    assert w.stats.created == 2


def test_a_name_already_taken_is_counted_not_raised() -> None:
    sim = SimApiServer()
    Workload(sim, 9).step()
    assert Workload(sim, 9).step() is None  # the same seed draws the same name
    assert len(sim.list_events()) == 1


def test_the_draw_narrows_to_the_kinds_and_style_asked_for() -> None:
    w = Workload(seed=4, kinds=("Pod",), style="core")
    events = [w.draw_event("e2e-1") for _ in range(200)]
    assert {e["involvedObject"]["kind"] for e in events} == {"Pod"}
    assert {e["involvedObject"]["namespace"] for e in events} == {"e2e-1"}
    assert all(e["count"] >= 1 and e["eventTime"] is None for e in events)


def test_a_repeat_patch_is_what_the_recorders_send() -> None:
    core = {"count": 4, "lastTimestamp": "2026-01-01T00:00:00Z"}
    assert repeat_patch(core)["count"] == 5 and "lastTimestamp" in repeat_patch(core)
    first_repeat = {"count": None, "eventTime": "2026-01-01T00:00:00.000000Z"}
    assert repeat_patch(first_repeat)["series"]["count"] == 2
    assert repeat_patch({"series": {"count": 7}})["series"]["count"] == 8


@pytest.mark.parametrize(
    ("reason", "kind", "name", "event_type"),
    [
        ("BackOff", "Pod", "web-1", "Warning"),
        ("Pulled", "Pod", "web-1", "Normal"),
        ("FailedScheduling", "Pod", "api-0", "Warning"),
        ("OOMKilling", "Pod", "worker-3", "Warning"),  # a pair the table lacks: Warning
        ("NodeNotReady", "Node", "node-1", "Normal"),
        ("ScalingReplicaSet", "Deployment", "shop", "Normal"),
    ],
)
def test_a_pinned_reason_kind_and_name_are_what_is_written(
    reason: str, kind: str, name: str, event_type: str
) -> None:
    event = make_event(random.Random(1), namespace="shop", reason=reason, kind=kind, name=name)
    assert (event["reason"], event["type"]) == (reason, event_type)
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (kind, name)
    assert event["metadata"]["name"].startswith(f"{name}.")


def test_the_message_and_the_reporter_follow_the_pinned_object() -> None:
    backoff = make_event(random.Random(2), namespace="shop", reason="BackOff", name="web-1")
    assert backoff["involvedObject"]["kind"] == "Pod"  # the only kind BackOff has
    assert "in pod web-1_shop(" in backoff["message"]
    node = make_event(random.Random(2), reason="OOMKilling", kind="Node", name="node-1")
    assert node["involvedObject"]["uid"] == "node-1"
    assert node["source"] == {"component": "kernel-monitor", "host": "node-1"}
    assert node["metadata"]["namespace"] == "default"  # where Node Events are recorded


@pytest.mark.parametrize("seed", range(20))
def test_a_pinned_count_of_one_is_a_first_occurrence(seed: int) -> None:
    core = make_event(random.Random(seed), style="core", count=1)
    assert core["count"] == 1 and core["firstTimestamp"] == core["lastTimestamp"]
    new = make_event(random.Random(seed), style="events.k8s.io", count=1)
    assert "series" not in new and "count" not in new
    repeated = make_event(random.Random(seed), style="events.k8s.io", count=4)
    assert repeated["series"]["count"] == 4
    assert repeated["series"]["lastObservedTime"] > repeated["eventTime"]


def test_a_pin_no_scenario_has_is_refused() -> None:
    with pytest.raises(ValueError, match="Rebooted"):
        make_event(random.Random(1), reason="Rebooted")
    with pytest.raises(ValueError, match="Service"):
        make_event(random.Random(1), kind="Service")


def test_a_pinned_draw_wins_over_the_workload_narrowing() -> None:
    w = Workload(seed=4, kinds=("Pod",), style="core")
    node = w.draw_event(kind="Node", style="events.k8s.io", count=1, type="Warning")
    assert node["involvedObject"]["kind"] == "Node"
    assert node["eventTime"] and "series" not in node and node["type"] == "Warning"
    oom = w.draw_event(reason="OOMKilling")  # a reason the table has about Nodes only
    assert (oom["reason"], oom["involvedObject"]["kind"]) == ("OOMKilling", "Node")
    assert w.draw_event()["involvedObject"]["kind"] == "Pod"  # the narrowing still holds
