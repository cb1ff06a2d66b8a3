"""The whole pipeline (issue 41, point 6): the real bridge, two of them in leader election on
the simulated API server, the leader SIGKILLed mid-storm and once more later, and
``k8s-event-digests`` beside them, SIGKILLed itself a few times. The digests stored are the
projection of the versions stream read back, each once; per series their occurrences add up to
what the API server counted (its own store: each Event's final count, less where it stood when
the bridge first listed it); and the bridge's promise held (every version once).

The storm is both recorders' shapes, written to the simulator as client-go writes them: the old
recorder's ``count`` bumps, jumps of the count (its spam filter skipped writes), new Events
"(combined from similar events)" of the same object and reason; the new broadcaster's Events
with ``eventTime``, ``series.count`` from 2 and jumps of it (its 30-minute refresh); Pods that
start crashing mid-storm; and Events of both kinds that were there before the bridge started.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest

from k8s_event_common import streams
from k8s_event_sim.apiserver import now_rfc3339, now_rfc3339_micro
from tests.integration.harness import all_of, bridge_config, logged
from tests.integration.test_digests import (
    DIGESTS,
    PREFIX,
    decoded,
    digester,
    projected,
    settled,
    versions,
)
from tests.support import Workload, eventually, write_kubeconfig

pytestmark = pytest.mark.integration

WINDOW = 5  # seconds: longer than a leader change (lease 2 s), so a new series counts whole
ELECTION = {
    "enabled": True,
    "namespace": "bridge",
    "lease_duration": "2s",
    "renew_deadline": "1500ms",
    "retry_period": "200ms",
}
COMBINED = "(combined from similar events): "
OPERATIONS = 2400  # writes to the API server during the storm
RATE = 200.0  # of them per second


def count_of(obj: dict[str, Any]) -> int:
    """What the API server holds as an Event's count: ``series.count``, else ``count``, else 1
    (an Event of the new broadcaster before its second occurrence)."""
    return int((obj.get("series") or {}).get("count") or obj.get("count") or 1)


def series_of(obj: dict[str, Any]) -> tuple[str, str, str]:
    return (obj["metadata"]["namespace"], obj["involvedObject"]["uid"], obj["reason"])


class Storm:
    """The Events of a storm, written through the Workload (its ``ids`` are every version the
    API server wrote): per Pod one current Event that the storm repeats."""

    def __init__(self, sim: Any, seed: int = 41) -> None:
        self.sim = sim
        self.rng = random.Random(seed)
        self.w = Workload(sim, seed, now=lambda: datetime.now(UTC))
        self.pods: dict[str, dict[str, Any]] = {}  # pod -> {style, involved, event name}
        self.stood: dict[str, int] = {}  # Event uid -> its count at the bridge's first list
        self.figures: Counter[str] = Counter()

    def _new(self, pod: str, style: str, *, before: bool, combined: bool = False) -> None:
        """A new Event of ``pod`` (its series goes on), or of a new Pod."""
        p = self.pods.get(pod)
        reason = "BackOff" if style == "core" else "FailedScheduling"
        fields: dict[str, Any] = {}
        if p is not None:
            fields["involvedObject"] = p["involved"]
        if before:  # there for an hour already: it counts from where it stands
            hour_ago = datetime.now(UTC) - timedelta(hours=1)
            if style == "core":
                fields["firstTimestamp"] = hour_ago.strftime("%Y-%m-%dT%H:%M:%SZ")
            else:
                fields["eventTime"] = hour_ago.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        count = self.rng.randint(3, 40) if before else 1
        drawn = self.w.draw_event(
            "shop",
            style=style,  # type: ignore[arg-type]
            reason=reason,
            kind="Pod",
            name=pod,
            count=count,
            **fields,
        )
        if combined:
            drawn["message"] = COMBINED + drawn["message"]
        obj = self.w.record(self.sim.create_event(drawn), created=True)
        if before:
            self.stood[obj["metadata"]["uid"]] = count_of(obj)
        self.pods[pod] = {
            "style": style,
            "involved": obj["involvedObject"],
            "name": obj["metadata"]["name"],
        }
        self.figures["combined" if combined else "before" if before else "new"] += 1

    def before(self, core: int, new: int) -> None:
        """Events there before the bridge starts: ``core`` of the old recorder, ``new`` of
        the new broadcaster (with a series already), each of a Pod of its own."""
        for i in range(core):
            self._new(f"web-{i}", "core", before=True)
        if core:  # a series of two Events at the first list: both count from where they stood
            self._new("web-0", "core", before=True, combined=True)
        for i in range(new):
            self._new(f"sched-{i}", "events.k8s.io", before=True)

    def step(self) -> None:
        """One write of the storm."""
        r = self.rng.random()
        if r < 0.04 or not self.pods:  # a Pod starts crash-looping
            n = len(self.pods)
            if self.rng.random() < 0.75:
                self._new(f"web-{n}", "core", before=False)
            else:
                self._new(f"sched-{n}", "events.k8s.io", before=False)
            return
        pod = self.rng.choice(sorted(self.pods))
        p = self.pods[pod]
        if p["style"] == "core" and r < 0.08:  # 10 distinct messages: a combined Event
            self._new(pod, "core", before=False, combined=True)
            return
        if r < 0.18:  # the count jumps: writes skipped (a spam filter, a refresh)
            obj = self.sim.get_event("shop", p["name"])
            to = count_of(obj) + self.rng.randint(2, 9)
            if p["style"] == "core":
                change = {"count": to, "lastTimestamp": now_rfc3339()}
            else:
                change = {"series": {"count": to, "lastObservedTime": now_rfc3339_micro()}}
            self.w.record(self.sim.update_event("shop", p["name"], change), created=False)
            self.figures["jumps"] += 1
            return
        self.w.bump("shop", p["name"])  # count + 1 (series.count from 2), as the recorders
        self.figures["bumps"] += 1

    def counted(self) -> dict[tuple[str, str, str], int]:
        """Per series, what the API server counted since the bridge first listed it: every
        Event's final count, less where it stood then when it was there before."""
        out: Counter[tuple[str, str, str]] = Counter()
        for obj in self.sim.list_events("shop"):
            out[series_of(obj)] += count_of(obj) - self.stood.get(obj["metadata"]["uid"], 0)
        return dict(out)


async def test_a_storm_through_two_leader_changes_and_digester_kills_gives_the_api_servers_counts(
    leasing_sim: Any, nats_server: Any, run_bridge: Any, tmp_path: Path
) -> None:
    started = time.monotonic()
    sim = leasing_sim
    kubeconfig = write_kubeconfig(tmp_path / "leasing-kubeconfig", sim.url)
    configs = {
        who: bridge_config(
            tmp_path, nats_server.url, kubeconfig, leader_election={**ELECTION, "identity": who}
        )
        for who in ("bridge-a", "bridge-b")
    }
    storm = Storm(sim)
    storm.before(core=8, new=4)  # listed by the first leader: they count from where they stood
    bridges = {"bridge-a": run_bridge(config=configs["bridge-a"])}
    await bridges["bridge-a"].wait_ready()
    await eventually(lambda: logged(bridges["bridge-a"], "leading"), timeout=30, what="a leader")
    bridges["bridge-b"] = run_bridge(config=configs["bridge-b"])
    await bridges["bridge-b"].wait_ready()
    await all_of(nats_server.url, storm.w.ids)  # the first list is in the stream

    nc = await nats.connect(nats_server.url)
    await streams.provision(nc, streams.digest_stream(DIGESTS, PREFIX, max_age=30 * 86400.0))
    d = digester(tmp_path, nats_server, window=f"{WINDOW}s", grace="500ms").start()
    await d.wait_ready()

    rng = random.Random(4141)
    leader_kills_at = [OPERATIONS // 3, 2 * OPERATIONS // 3]
    digester_kills_at = sorted(rng.sample(range(OPERATIONS // 10, OPERATIONS), 3))
    kills: Counter[str] = Counter()
    takeovers: list[float] = []

    async def writer() -> None:
        begun = time.monotonic()
        for i in range(OPERATIONS):
            storm.step()
            delay = begun + (i + 1) / RATE - time.monotonic()
            await asyncio.sleep(max(delay, 0))

    def written(n: int) -> bool:
        """At least ``n`` writes of the storm made."""
        return sum(storm.figures[k] for k in ("new", "combined", "jumps", "bumps")) >= n

    task = asyncio.create_task(writer())
    try:
        leader, standby = "bridge-a", "bridge-b"
        schedule = sorted(
            [(at, "leader") for at in leader_kills_at]
            + [(at, "digester") for at in digester_kills_at]
        )
        for at, who in schedule:
            await eventually(functools.partial(written, at), timeout=60, what="the storm")
            if who == "digester":
                d.kill()  # SIGKILL anywhere: in a read, a fold, a write
                kills["digester"] += 1
                d.start()
                continue
            bridges[leader].kill()  # SIGKILL: the standby takes over when the Lease expires
            kills["leader"] += 1
            killed = time.monotonic()
            leading = functools.partial(logged, bridges[standby], "leading")
            await eventually(leading, timeout=30, what="a new leader")
            takeovers.append(time.monotonic() - killed)
            bridges[leader] = run_bridge(config=configs[leader])  # back, as the standby
            await bridges[leader].wait_ready()
            leader, standby = standby, leader
        await task

        # (c) the bridge's promise: every version the API server wrote, once
        ids = await all_of(nats_server.url, storm.w.ids, timeout=60)
        assert len(ids) == len(set(ids)), "a version twice in the stream"
        assert sorted(ids) == sorted(storm.w.ids), "a version lost"

        # (a) the digests stored are the projection of the versions stream, each once
        read = await versions(nc)
        want = projected(read, window=WINDOW)
        got = await settled(nc, len(want), timeout=60)
        assert got == want
        ds = [decoded(b) for b in got]
        assert len({x.id for x in ds}) == len(ds), "a digest twice"

        # (b) per series, the occurrences are what the API server counted
        occurrences: Counter[tuple[str, str, str]] = Counter()
        for x in ds:
            assert not x.series.overflow and not x.series.untrusted
            occurrences[(x.series.namespace, x.series.uid, x.series.reason)] += x.occurrences
        counted = storm.counted()
        # a new Event counts whole when it reached the stream within a window of happening
        # (fold.py): the leader changes must not delay one longer
        firsts: dict[str, float] = {}  # uid -> from happening to stored, its first version
        for _, t, e in read:
            if e is not None and e.uid not in storm.stood and e.first_seen is not None:
                firsts.setdefault(e.uid, (t - e.first_seen).total_seconds())
        late = max(firsts.values())
        assert dict(occurrences) == counted, f"new Events reached the stream up to {late:.1f}s late"
        assert any(x.sampled for x in ds) and any(x.combined for x in ds)
        print(
            f"\nversions {len(read)} ({len(storm.w.ids)} Event versions), digests {len(ds)} "
            f"over {len({x.start for x in ds})} windows of {WINDOW}s, series {len(counted)}, "
            f"occurrences {sum(occurrences.values())} = API server {sum(counted.values())}, "
            f"writes {dict(storm.figures)}, kills {dict(kills)}, takeovers "
            f"{', '.join(f'{x:.1f}s' for x in takeovers)}, new Events stored up to {late:.1f}s "
            "after they happened, "
            f"{time.monotonic() - started:.1f}s"
        )
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await d.stop()
        await nc.close()
