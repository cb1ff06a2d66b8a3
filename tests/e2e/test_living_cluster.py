"""Events written by the real kube-scheduler, kube-controller-manager and kwok's kubelets
(cluster.py), through the bridge, on each Kubernetes version of the tier.

The truth is an independent raw watch on core/v1 Events of the whole cluster, started once the
bridge is ready and before the workload (:class:`Truth`): every version it saw whose reason
the test keeps must be in the stream exactly once, and each CloudEvent must be what the README
documents, computed here from the Event the truth saw (not by the bridge's code): the subject,
``id``, ``source``, ``type``, ``subject``, ``time`` (series.lastObservedTime, else
lastTimestamp, else eventTime, else creationTimestamp), ``k8scount`` (series.count, else
count, else 1), the other ``k8s*`` extensions, and ``data`` the Event without managedFields.
Each test also checks that the workload produced the shape it is about (a series, a
correlator's count bump, a combined Event), so that it can not pass on a cluster that wrote
nothing interesting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cloudevent_expected import CLUSTER
from tests.e2e.truth import Truth, assert_stream_carries
from tests.integration.harness import BridgeProcess, bridge_config, status_events
from tests.standins.cluster import (
    BRIEF_NODE_TOLERATIONS,
    CRASHLOOP_LABEL,
    LivingCluster,
    deployment,
)
from tests.support import eventually

pytestmark = pytest.mark.e2e

_ns = itertools.count(1)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def living_kubeconfig(living_cluster: LivingCluster) -> Path:
    """deploy/ applied to the living cluster; a token for the bridge's ServiceAccount."""
    return living_cluster.deployed_bridge_kubeconfig()


@pytest.fixture
def namespace(living_cluster: LivingCluster) -> Any:
    ns = living_cluster.create_namespace(f"living-{next(_ns)}")
    yield ns
    living_cluster.kubectl("delete", "namespace", ns, "--wait=false")


class Observer:
    """``truth = await observe(reasons, **sections)``: the bridge (as deploy/'s ServiceAccount,
    over the whole cluster, keeping ``reasons``: every reason when empty) started and ready,
    then the truth's watch. In that order: a version written between the two would be in the
    truth but, overwritten before the bridge's first list, never seen by the bridge (a first
    start lists only the newest version of each Event). ``observe.bridge`` is the process."""

    def __init__(
        self,
        tmp_path: Path,
        nats_url: str,
        kubeconfig: Path,
        cluster: LivingCluster,
        stack: contextlib.AsyncExitStack,
    ) -> None:
        self.tmp_path, self.nats_url, self.kubeconfig = tmp_path, nats_url, kubeconfig
        self.cluster, self.stack = cluster, stack
        self.bridge: BridgeProcess | None = None

    async def __call__(self, reasons: set[str], **sections: Any) -> Truth:
        sections.setdefault("filter", {})["reasons"] = sorted(reasons)
        sections.setdefault("kubernetes", {})["read_timeout"] = "90s"
        cfg = bridge_config(
            self.tmp_path, self.nats_url, self.kubeconfig, cluster={"name": CLUSTER}, **sections
        )
        self.bridge = BridgeProcess(cfg, self.tmp_path / "bridge.log").start()
        await self.bridge.wait_ready(timeout=60)
        return await self.stack.enter_async_context(Truth(self.cluster))


@pytest.fixture
async def observe(
    tmp_path: Path, nats_server: Any, living_kubeconfig: Path, living_cluster: LivingCluster
) -> AsyncIterator[Observer]:
    async with contextlib.AsyncExitStack() as stack:
        observer = Observer(tmp_path, nats_server.url, living_kubeconfig, living_cluster, stack)
        try:
            yield observer
        finally:
            if observer.bridge is not None:
                observer.bridge.kill()


def until(check: Callable[[], bool]) -> Callable[[], Any]:
    async def probe() -> bool:
        return await asyncio.to_thread(check)

    return probe


# ----------------------------------------------------------------------------- workloads


async def test_unschedulable_pods_write_a_failedscheduling_series_from_the_scheduler(
    living_cluster: LivingCluster,
    namespace: str,
    observe: Any,
    nats_server: Any,
) -> None:
    """kube-scheduler writes events.k8s.io/v1 Events. Its broadcaster makes a *series* of a
    repeat with the same key, which includes the Pod's resourceVersion: the first failure
    writes the Pod's PodScheduled condition (a new resourceVersion), so the second attempt is a
    new Event, and the third (same message, the Pod unchanged) sets ``series.count`` 2 and
    ``series.lastObservedTime`` by PATCH, with no ``count`` and no ``lastTimestamp``. Later
    repeats are counted in memory and written every 30 minutes (``refreshTime``). The
    CloudEvent's ``k8scount`` and ``time`` follow the series."""
    reasons = {"FailedScheduling", "Scheduled"}
    truth = await observe(reasons)
    # more CPU than any node has: Insufficient cpu, the same message at every attempt
    too_big = deployment("too-big", namespace, 2)
    too_big["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8"}}
    living_cluster.apply(deployment("churn", namespace, 3))
    living_cluster.apply(too_big)
    await eventually(lambda: len(truth.of("FailedScheduling", namespace)) >= 2, timeout=60)

    def series() -> list[dict[str, Any]]:
        return [e for e in truth.of("FailedScheduling", namespace) if e.get("series")]

    # Deleting a scheduled Pod makes the scheduler try the unschedulable ones again
    # (NodeResourcesFit: "any deletion event to a scheduled pod could make the unscheduled pod
    # schedulable"); they fail the same way.
    for _ in range(12):
        if len(series()) >= 2:
            break
        running = [
            p["metadata"]["name"]
            for p in living_cluster.pods(namespace, "churn")
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        ]
        if running:
            living_cluster.kubectl("delete", "pod", "-n", namespace, running[0], "--wait=false")
        await asyncio.sleep(3)
    assert len(series()) >= 2, [
        (e["metadata"]["name"], e.get("series")) for e in truth.of("FailedScheduling", namespace)
    ]
    # fits once it asks for less: both are scheduled
    living_cluster.kubectl(
        "set", "resources", "deployment/too-big", "-n", namespace, "--requests=cpu=100m"
    )
    await eventually(
        until(lambda: len(living_cluster.running(namespace, "too-big")) >= 2),
        timeout=90,
        interval=0.5,
    )

    kept = await assert_stream_carries(nats_server.url, truth, reasons)
    for ev in series():
        assert ev["series"]["count"] >= 2
        assert not ev.get("count") and not ev.get("lastTimestamp"), ev
        assert ev.get("reportingComponent") == "default-scheduler", ev
        assert f"{ev['metadata']['uid']}/{ev['metadata']['resourceVersion']}" in kept


async def test_rollout_and_scaling_write_controller_events_with_count_bumps(
    living_cluster: LivingCluster,
    namespace: str,
    observe: Any,
    nats_server: Any,
) -> None:
    """The deployment and replicaset controllers through client-go's correlator: more than 10
    similar Events on one object in 10 minutes become one "(combined from similar events)"
    Event whose ``count`` is bumped by PATCH."""
    reasons = {"ScalingReplicaSet", "SuccessfulCreate", "SuccessfulDelete"}
    truth = await observe(reasons)
    living_cluster.apply(deployment("web", namespace, 2))
    living_cluster.kubectl("scale", "deployment", "web", "-n", namespace, "--replicas=14")
    await eventually(
        until(lambda: len(living_cluster.running(namespace, "web")) >= 14),
        timeout=90,
        interval=0.5,
    )
    # a rollout: a new ReplicaSet scaled up and the old one down, one pod at a time
    living_cluster.kubectl(
        "set", "image", "deployment/web", "-n", namespace, "app=registry.invalid/app:2"
    )
    living_cluster.kubectl(
        "rollout", "status", "deployment/web", "-n", namespace, "--timeout=120s", timeout=150
    )
    living_cluster.kubectl("scale", "deployment", "web", "-n", namespace, "--replicas=1")

    def combined() -> list[dict[str, Any]]:
        return [
            e
            for r in ("SuccessfulCreate", "SuccessfulDelete")
            for e in truth.of(r, namespace)
            if "(combined from similar events)" in e.get("message", "") and e.get("count", 0) >= 2
        ]

    await eventually(combined, timeout=90)
    await eventually(lambda: len(truth.of("SuccessfulDelete", namespace)) >= 3, timeout=60)
    kept = await assert_stream_carries(nats_server.url, truth, reasons)
    assert len(truth.of("ScalingReplicaSet", namespace)) >= 3
    bumped = [e for e in kept.values() if (e.get("count") or 1) >= 2]
    assert bumped, "no count bump was seen"


async def test_a_crash_loop_writes_backoff_with_the_kubelets_count_bumps(
    living_cluster: LivingCluster,
    namespace: str,
    observe: Any,
    nats_server: Any,
) -> None:
    """kwok plays the kubelet: a container that keeps failing, BackOff bumped by the
    correlator (same message on the same Pod), in binary content mode."""
    reasons = {"BackOff"}
    truth = await observe(reasons, cloudevents={"mode": "binary"})
    living_cluster.apply(deployment("crasher", namespace, 2, labels={CRASHLOOP_LABEL: "true"}))

    def bumped() -> list[dict[str, Any]]:
        return [e for e in truth.of("BackOff", namespace) if e.get("count", 0) >= 3]

    await eventually(lambda: len(bumped()) >= 2, timeout=90, interval=0.5)
    living_cluster.kubectl("scale", "deployment", "crasher", "-n", namespace, "--replicas=0")
    await assert_stream_carries(nats_server.url, truth, reasons)
    for e in bumped():
        assert e["involvedObject"]["kind"] == "Pod"
        assert e["source"].get("component") == "kwok_controller"


@pytest.mark.timeout(300)  # its waits are longer than the default 120 s
async def test_a_node_that_stops_reporting_writes_nodenotready_and_its_pods_are_evicted(
    living_cluster: LivingCluster,
    namespace: str,
    observe: Any,
    nats_server: Any,
) -> None:
    """A node's kubelet goes silent (kwok lets go of it: no Lease renewal): after
    ``--node-monitor-grace-period`` the node lifecycle controller sets Ready=Unknown and writes
    NodeNotReady on the Node and on each of its Pods, taints it ``unreachable:NoExecute``; the
    taint eviction controller evicts the Pods that tolerate that for 2 s only
    (TaintManagerEviction) and the ReplicaSet replaces them (SuccessfulCreate)."""
    reasons = {"NodeNotReady", "TaintManagerEviction", "SuccessfulCreate"}
    truth = await observe(reasons)
    living_cluster.apply(
        deployment("spread", namespace, 6, pod_spec={"tolerations": BRIEF_NODE_TOLERATIONS})
    )

    def running() -> list[dict[str, Any]]:
        return living_cluster.running(namespace, "spread")

    await eventually(until(lambda: len(running()) >= 6), timeout=60, interval=0.5)
    victim = running()[0]["spec"]["nodeName"]
    on_victim = {p["metadata"]["name"] for p in running() if p["spec"]["nodeName"] == victim}
    living_cluster.silence(victim)
    try:
        await eventually(
            until(
                lambda: (
                    len(running()) >= 6 and all(p["spec"]["nodeName"] != victim for p in running())
                )
            ),
            timeout=120,
            interval=0.5,
        )
        evicted = {e["involvedObject"]["name"] for e in truth.of("TaintManagerEviction", namespace)}
        assert on_victim <= evicted, (on_victim, evicted)
    finally:
        living_cluster.revive(victim)
    await eventually(until(lambda: living_cluster.node_ready(victim)), timeout=60, interval=0.5)
    kept = await assert_stream_carries(nats_server.url, truth, reasons)
    on_node = [e for e in kept.values() if e["involvedObject"]["kind"] == "Node"]
    assert [e["involvedObject"]["name"] for e in on_node] == [victim]
    assert on_node[0]["source"].get("component") == "node-controller"
    on_pods = {
        e["involvedObject"]["name"]
        for e in kept.values()
        if e["reason"] == "NodeNotReady" and e["involvedObject"]["kind"] == "Pod"
    }
    assert on_victim <= on_pods


@pytest.mark.timeout(300)  # its waits are longer than the default 120 s
async def test_a_burst_of_hundreds_of_pods_every_version_of_every_reason(
    living_cluster: LivingCluster,
    namespace: str,
    observe: Any,
    nats_server: Any,
) -> None:
    """240 Pods up and down again, at the rate the components write: Scheduled from the
    scheduler (events.k8s.io), SuccessfulCreate / SuccessfulDelete from the ReplicaSet
    controller (combined and bumped by the correlator, then rate-limited by its spam filter),
    ScalingReplicaSet, Started from kwok's kubelets. The bridge keeps every reason."""
    truth = await observe(set())
    living_cluster.apply(deployment("burst", namespace, 240, cpu="10m"))

    def phases() -> list[str]:
        return [p["status"].get("phase", "") for p in living_cluster.pods(namespace, "burst")]

    await eventually(until(lambda: phases().count("Running") >= 240), timeout=240, interval=1)
    living_cluster.kubectl("scale", "deployment", "burst", "-n", namespace, "--replicas=0")
    await eventually(until(lambda: not phases()), timeout=180, interval=1)
    kept = await assert_stream_carries(nats_server.url, truth, None, timeout=180)
    mine = [e for e in kept.values() if e["metadata"]["namespace"] == namespace]
    reasons = {e["reason"] for e in mine}
    assert {"Scheduled", "Started", "SuccessfulCreate", "ScalingReplicaSet"} <= reasons, reasons
    assert len(mine) >= 480, len(mine)  # 240 Scheduled and 240 Started at the least


@pytest.mark.timeout(300)  # its waits are longer than the default 120 s
async def test_a_bridge_killed_in_the_middle_of_a_burst_loses_and_doubles_nothing(
    living_cluster: LivingCluster,
    namespace: str,
    observe: Observer,
    nats_server: Any,
) -> None:
    """SIGKILL of the bridge while 200 Pods come up (no drain, no final checkpoint), a new one
    started 3 s later resumes from the last checkpoint saved: every version the components
    wrote meanwhile is in the stream once (what it had published twice is dropped by the
    stream's duplicate window)."""
    truth = await observe(set())
    living_cluster.apply(deployment("killed", namespace, 200, cpu="10m"))
    await eventually(until(lambda: len(living_cluster.running(namespace, "killed")) >= 40), 120)
    assert observe.bridge is not None
    observe.bridge.kill()
    killed_at = len(truth.versions)
    await asyncio.sleep(3)
    observe.bridge.start()
    await observe.bridge.wait_ready(timeout=60)
    await eventually(
        until(lambda: len(living_cluster.running(namespace, "killed")) >= 200), 180, interval=1
    )
    kept = await assert_stream_carries(nats_server.url, truth, None, timeout=180)
    assert len(kept) > killed_at + 100, (killed_at, len(kept))  # much was written after the kill
    # the new process watched on from the checkpoint: one list in all (the first process's)
    assert [e["event"] for e in observe.bridge.log_events()].count("listed") == 1
    assert not await status_events(nats_server.url, "gap")
