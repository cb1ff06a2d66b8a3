"""The enrichment in a real bridge process, a real nats-server and the simulated API server:
a SIGKILL mid-flow loses and duplicates nothing, every Event carries its team and owner, and
object reads that hang hold no Event past the lookup timeout."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import msgspec

from k8s_event_common.subjects import subject_filter
from k8s_event_sim.workload import make_event
from tests.integration.harness import (
    count_at_least,
    event_ids,
    metric_at_least,
    stream_messages,
)
from tests.support import eventually

TEMPLATE = "{cluster}.{team}.{namespace}.{kind}.{reason}"
TEAMS = {"shop": "payments", "blog": "content"}
ENRICH = {
    "namespace": {"labels": {"team": "team"}},
    "object": {"labels": {"app": "app"}, "owner_kind": "ownerkind", "owner_name": "ownername"},
}


def cluster(sim: Any, pods_per_ns: int = 10) -> dict[tuple[str, str], str]:
    """Per namespace a Deployment web → ReplicaSet web-1 → Pods; (namespace, pod) → uid."""
    uids: dict[tuple[str, str], str] = {}
    for ns, team in TEAMS.items():
        sim.set_namespace(ns, {"team": team})
        for pod, uid in sim.put_deployment(ns, "web", pods_per_ns, {"app": f"web-{ns}"}):
            uids[(ns, pod)] = uid
    return uids


def write(sim: Any, rng: random.Random, uids: dict[tuple[str, str], str], n: int) -> None:
    keys = sorted(uids)
    for i in range(n):
        ns, pod = keys[i % len(keys)]
        ev = make_event(rng, namespace=ns, reason="BackOff", kind="Pod", name=pod, i=i)
        ev["involvedObject"]["uid"] = uids[(ns, pod)]
        sim.create_event(ev)


def written_ids(sim: Any) -> list[str]:
    return [f"{e['metadata']['uid']}/{e['metadata']['resourceVersion']}" for e in sim.list_events()]


async def enriched(nats_url: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (s, msgspec.json.decode(b))
        for s, _, b in await stream_messages(nats_url)
        if "._bridge." not in s
    ]


async def test_sigkill_mid_flow_with_enrichment_loses_and_duplicates_nothing(
    sim, nats_server, run_bridge
):
    uids = cluster(sim)
    rng = random.Random(7)
    config = {"enrich": ENRICH, "nats": {"subject_template": TEMPLATE}}
    bridge = run_bridge(**config)
    await bridge.wait_ready()
    write(sim, rng, uids, 150)
    await eventually(lambda: count_at_least(nats_server.url, 40))
    bridge.kill()  # SIGKILL: Events waiting for lookups and in flight are lost to this process
    await bridge.wait_exit()
    write(sim, rng, uids, 150)
    again = run_bridge(**config)
    await again.wait_ready()
    expected = written_ids(sim)
    await eventually(lambda: count_at_least(nats_server.url, len(expected)))
    ids = await event_ids(nats_server.url)
    assert sorted(ids) == sorted(expected), "lost or duplicated across the SIGKILL"
    for subject, ce in await enriched(nats_server.url):
        ns = ce["k8snamespace"]
        assert subject == f"k8s.events.test.{TEAMS[ns]}.{ns}.Pod.BackOff"
        assert ce["team"] == TEAMS[ns] and ce["app"] == f"web-{ns}"
        assert (ce["ownerkind"], ce["ownername"]) == ("Deployment", "web")
        assert ce["k8senriched"] == "complete", ce.get("k8senrichmissing")
    # each object read once per process at most, not once per Event
    pods = [p for p in sim.object_reads if "/pods/" in p]
    assert len(pods) <= 2 * len(uids)
    # one team's Events with one subject filter
    payments = await stream_messages(
        nats_server.url, subject=subject_filter("k8s.events", TEMPLATE, team="payments")
    )
    assert payments and {msgspec.json.decode(b)["k8snamespace"] for _, _, b in payments} == {"shop"}


async def test_hung_object_reads_hold_no_event_past_the_lookup_timeout(
    sim, nats_server, run_bridge
):
    uids = cluster(sim, pods_per_ns=3)
    gate = asyncio.Event()  # cleared: every object read hangs
    sim.faults.objects_gate = gate
    bridge = run_bridge(
        enrich={**ENRICH, "lookup_timeout": "300ms"}, nats={"subject_template": TEMPLATE}
    )
    await bridge.wait_ready()
    write(sim, random.Random(3), uids, 30)
    await eventually(lambda: count_at_least(nats_server.url, 30))
    got = await enriched(nats_server.url)
    assert len(got) == 30
    for subject, ce in got:
        ns = ce["k8snamespace"]
        # the namespace's values need no read: routing by team holds while objects hang
        assert ce["team"] == TEAMS[ns] and subject.split(".")[3] == TEAMS[ns]
        assert ce["k8senriched"] == "partial"
        assert ce["k8senrichmissing"] in ("object:timeout", "object:unreachable")
        assert "ownerkind" not in ce
    assert await metric_at_least(bridge, "enrich_missing_total", 30)
    _, body = await bridge.get("/status")
    status = json.loads(body)["enrich"]
    assert status["namespaces_synced"] is True and status["namespaces"] == len(TEAMS)
    # the reads answer again: once the pause is over, new Events are complete
    gate.set()
    rng = random.Random(4)

    async def complete() -> bool:
        write(sim, rng, uids, 2)  # Events keep coming; the pause (1 s doubling) ends
        return any(ce.get("k8senriched") == "complete" for _, ce in await enriched(nats_server.url))

    await eventually(complete, timeout=60)
    expected = written_ids(sim)
    await eventually(lambda: count_at_least(nats_server.url, len(expected)))
    assert sorted(await event_ids(nats_server.url)) == sorted(expected)
