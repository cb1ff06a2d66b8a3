"""``k8s-event-digests`` on the living cluster's own Events (issue 41): the real kube-scheduler
(the new broadcaster: events.k8s.io, ``series.count``), kube-controller-manager and kwok's
kubelets (the old recorder: ``count`` bumped, "(combined from similar events)") write; the
bridge carries every version; the digests of 10-second windows, read back from their stream,
agree with what the API server counts, series by series (tests/e2e/digests_agree.py).
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cloudevent_expected import CLUSTER  # the Observer's bridge's cluster
from tests.e2e.digests_agree import agreed, api_count, by_reason
from tests.e2e.test_living_cluster import Observer, until
from tests.integration.harness import ConsumerProcess, subscriber_config
from tests.standins.cluster import CRASHLOOP_LABEL, LivingCluster, deployment
from tests.support import eventually

pytestmark = pytest.mark.e2e

MODULE = "k8s_event_consumer.digests"
_ns = itertools.count(1)


@pytest.fixture(scope="session")
def digests_kubeconfig(living_cluster: LivingCluster) -> Path:
    """deploy/ applied to the living cluster; a token for the bridge's ServiceAccount."""
    return living_cluster.deployed_bridge_kubeconfig()


@pytest.fixture
def digests_namespace(living_cluster: LivingCluster) -> Iterator[str]:
    ns = living_cluster.create_namespace(f"digests-{next(_ns)}")
    yield ns
    living_cluster.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.fixture
async def digests_observe(
    tmp_path: Path, nats_server: Any, digests_kubeconfig: Path, living_cluster: LivingCluster
) -> AsyncIterator[Observer]:
    async with contextlib.AsyncExitStack() as stack:
        observer = Observer(tmp_path, nats_server.url, digests_kubeconfig, living_cluster, stack)
        try:
            yield observer
        finally:
            if observer.bridge is not None:
                observer.bridge.kill()


def digester(tmp_path: Path, nats_url: str) -> ConsumerProcess:
    """``k8s-event-digests`` with windows of 10 s closed 1 s after their end, its stream made
    by its own ``provision`` (docs/deploy.md)."""
    cfg = subscriber_config(
        tmp_path,
        MODULE,
        {"servers": [nats_url]},
        tmp_path / "none",
        name="digests.yaml",
        digests={"window": "10s", "grace": "1s"},
    )
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "provision", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return ConsumerProcess(cfg, tmp_path / "digests.log", module=MODULE)


@pytest.mark.timeout(420)  # a crash loop, a scheduler's series, and the last window closed
async def test_digests_agree_with_what_the_api_server_counts_on_a_living_cluster(
    living_cluster: LivingCluster,
    digests_namespace: str,
    digests_observe: Observer,
    nats_server: Any,
    tmp_path: Path,
) -> None:
    """A crash loop on kwok's kubelets (BackOff bumped by the old recorder), a Deployment no
    node can take (the scheduler's FailedScheduling becoming a series), the controllers' own
    Events about both: every series' digests add up to the counts the API server holds, each
    digest's sequences point at versions of its series, no id twice."""
    ns = digests_namespace
    truth = await digests_observe(set())
    d = digester(tmp_path, nats_server.url).start()
    try:
        await d.wait_ready()
        too_big = deployment("too-big", ns, 2)
        too_big["spec"]["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "8"}
        }
        living_cluster.apply(deployment("crasher", ns, 2, labels={CRASHLOOP_LABEL: "true"}))
        living_cluster.apply(deployment("churn", ns, 3))
        living_cluster.apply(too_big)

        def bumped() -> list[dict[str, Any]]:
            return [e for e in truth.of("BackOff", ns) if e.get("count", 0) >= 3]

        def series() -> list[dict[str, Any]]:
            return [e for e in truth.of("FailedScheduling", ns) if e.get("series")]

        await eventually(lambda: len(bumped()) >= 2, timeout=120, interval=0.5)
        await eventually(lambda: len(truth.of("FailedScheduling", ns)) >= 2, timeout=60)
        # a scheduled Pod deleted makes the scheduler try the unschedulable ones again
        # (test_living_cluster.py says why): until a FailedScheduling Event is a series
        for _ in range(12):
            if series():
                break
            seen = len(truth.of("FailedScheduling", ns))
            running = living_cluster.running(ns, "churn")
            if running:
                name = running[0]["metadata"]["name"]
                living_cluster.kubectl("delete", "pod", "-n", ns, name, "--wait=false")
            # the lambda is awaited in this iteration: it reads this iteration's seen
            await eventually(lambda: len(truth.of("FailedScheduling", ns)) > seen, timeout=30)  # noqa: B023
        assert series(), [e.get("series") for e in truth.of("FailedScheduling", ns)]

        # the bridge down while the crash loop bumps on, etcd's history compacted: started
        # again, its watch gets 410 and it lists, so the stream jumps over counts (as after an
        # outage); the digests follow the counts, not the versions they read
        bridge = digests_observe.bridge
        assert bridge is not None
        bridge.kill()
        at_kill = {e["metadata"]["uid"]: api_count(e) for e in truth.of("BackOff", ns)}
        await eventually(
            lambda: all(
                max(api_count(e) for e in truth.of("BackOff", ns) if e["metadata"]["uid"] == u)
                >= c + 2
                for u, c in at_kill.items()
            ),
            timeout=120,
            interval=0.5,
        )
        living_cluster.compact()
        bridge.start()
        await bridge.wait_ready(timeout=60)

        # the writers stop: the crash loop's Pods go, the big ones fit and are scheduled
        living_cluster.kubectl("scale", "deployment", "crasher", "-n", ns, "--replicas=0")
        living_cluster.kubectl(
            "set", "resources", "deployment/too-big", "-n", ns, "--requests=cpu=100m"
        )
        await eventually(
            until(lambda: len(living_cluster.running(ns, "too-big")) >= 2), 90, interval=0.5
        )
        await eventually(until(lambda: not living_cluster.pods(ns, "crasher")), 90, interval=0.5)

        def held() -> list[dict[str, Any]]:
            return list(living_cluster.get_json("events", "-n", ns)["items"])

        found = await agreed(nats_server.url, CLUSTER, ns, held)
        figures = by_reason(found)
        print(f"\n{ns}: reason: (API server, digests) {figures}")
        for s in sorted(found.values(), key=lambda s: s.key[1]):
            print(f"  {s.line()}")
        # the shapes it is about were there: bumps of the old recorder, a series of the new
        backoff = [s for s in found.values() if s.key[1] == "BackOff"]
        assert len(backoff) >= 2 and all(s.api >= 5 for s in backoff), [s.line() for s in backoff]
        # the jump: counts the stream never carried a version of, in a digest marked sampled
        assert all(s.api > len(s.seqs) for s in backoff), [s.line() for s in backoff]
        assert all(any(d.sampled for d in s.digests) for s in backoff)
        scheduling = [s for s in found.values() if s.key[1] == "FailedScheduling"]
        assert sum(s.api for s in scheduling) >= 3, [s.line() for s in scheduling]
        assert {"Scheduled", "ScalingReplicaSet", "SuccessfulCreate"} <= set(figures), figures
        assert all(s.digests for s in found.values())
    finally:
        await d.stop()
