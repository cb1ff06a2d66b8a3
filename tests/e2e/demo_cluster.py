"""``make demo-cluster``: the demo's show on a living cluster (cluster.py) instead of the
simulator: a real kube-apiserver, kube-scheduler, kube-controller-manager and kwok's kubelets
write the Events, the bridge carries them into an embedded nats-server, and at the end the
stream is checked against an independent watch of the cluster (truth.py).

    python -m tests.e2e.demo_cluster [--version newest|oldest|v1.X.Y] [--quiet]

Needs the e2e binaries cached (e2e/build-control-plane.sh; it says how when they are not).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge import logs
from bridge.jetstream import tailing
from bridge.settings import Settings
from k8s_event_sim.demo import show, start_listed, stop_showing
from k8s_event_sim.natsserver import NatsServer
from tests.cloudevent_expected import CLUSTER
from tests.e2e.truth import Truth, assert_stream_carries
from tests.standins.cluster import (
    BRIEF_NODE_TOLERATIONS,
    CRASHLOOP_LABEL,
    LivingCluster,
    deployment,
)
from tests.standins.controlplane import (
    BUILD_SCRIPT,
    REPO,
    ControlPlaneError,
    bin_dir,
    binaries_present,
    kubernetes_version,
)
from tests.support import NotMet, eventually

REASONS = {
    "FailedScheduling",
    "BackOff",
    "NodeNotReady",
    "TaintManagerEviction",
    "SuccessfulCreate",
    "ScalingReplicaSet",
}


def _say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


async def _wait(check: Callable[[], object], what: str, timeout: float = 90) -> None:
    """Until ``check()`` (blocking: it runs kubectl, so off the loop) is true; the demo goes
    on, saying what it did not see, when it is not."""
    try:
        await eventually(lambda: asyncio.to_thread(check), timeout, 0.5, what=what)
    except NotMet:
        print(f"   (not seen in {timeout:.0f}s: {what})")


async def workload(cluster: LivingCluster, truth: Truth, ns: str, say: Any = None) -> None:
    """What the demo shows, in namespace ``ns`` (also what capture_events.py records)."""
    say = say or _say
    cluster.kubectl("create", "namespace", ns)

    say(
        "1. a Deployment asking for more CPU than any node has: the scheduler's "
        "FailedScheduling (a series as it repeats, each time a scheduled Pod goes)"
    )
    cluster.apply(deployment("too-big", ns, 2, cpu="8"))
    await _wait(lambda: len(truth.of("FailedScheduling", ns)) >= 2, "FailedScheduling")

    say("2. a crash loop: kwok's kubelet reports BackOff, the correlator bumps count")
    cluster.apply(deployment("crasher", ns, 2, labels={CRASHLOOP_LABEL: "true"}))
    await _wait(
        lambda: sum(e.get("count", 0) >= 3 for e in truth.of("BackOff", ns)) >= 2,
        "BackOff counted three times",
    )
    cluster.kubectl("scale", "deployment", "crasher", "-n", ns, "--replicas=0")

    say("3. a node lost: NodeNotReady, its Pods evicted and replaced; then it returns")
    cluster.apply(deployment("web", ns, 6, pod_spec={"tolerations": BRIEF_NODE_TOLERATIONS}))
    await _wait(lambda: len(cluster.running(ns, "web")) >= 6, "web Running")
    victim = cluster.running(ns, "web")[0]["spec"]["nodeName"]
    print(f"   {victim}'s kubelet stops reporting")
    cluster.silence(victim)
    await _wait(lambda: truth.of("TaintManagerEviction", ns), "TaintManagerEviction")
    await asyncio.sleep(2)
    print(f"   {victim}'s kubelet reports again")
    cluster.revive(victim)
    await _wait(lambda: cluster.node_ready(victim), f"{victim} Ready")
    await _wait(
        lambda: any(e.get("series") for e in truth.of("FailedScheduling", ns)),
        "a FailedScheduling series",
        timeout=30,
    )

    say("4. web scaled to 14 and rolled out: the correlator combines similar Events")
    cluster.kubectl("scale", "deployment", "web", "-n", ns, "--replicas=14")
    cluster.kubectl("set", "image", "deployment/web", "-n", ns, "app=registry.invalid/app:2")
    cluster.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=120s", timeout=150)
    await asyncio.sleep(2)


async def main(version: str, quiet: bool = False) -> int:
    if not binaries_present(version):
        print(
            f"The living cluster needs kube-apiserver, kube-scheduler, kube-controller-manager, "
            f"kubectl, etcd and kwok for Kubernetes {version}, built once from the Go module "
            f"proxy (the first version about 8 minutes on 2 cores, etcd and kwok included, the "
            f"second about 4 more; cached in {bin_dir(version)}):\n\n"
            f"    bash {BUILD_SCRIPT.relative_to(REPO)} --living {version}\n\n"
            "(or `make control-plane` for both versions), then run `make demo-cluster` again. "
            "(`make demo` needs none of it.)",
            file=sys.stderr,
        )
        return 2
    logs.setup("error", "text")
    tmp = Path(tempfile.mkdtemp(prefix="bridge-demo-cluster-"))
    server = NatsServer(store_dir=str(tmp / "nats")).start()
    t0 = time.monotonic()
    cluster = LivingCluster(version=version)
    try:
        cluster.start()
    except ControlPlaneError as e:
        server.stop()
        print(f"the living cluster did not start: {e}", file=sys.stderr)
        return 1
    settings = Settings(
        cluster={"name": CLUSTER},
        kubernetes={"kubeconfig": str(cluster.kubeconfig)},
        nats={"servers": [server.url]},
        filter={"reasons": sorted(REASONS)},
        checkpoint={"interval": 0.5},
        http={"host": "127.0.0.1", "port": 0},
    )
    print(f"nats-server {server.url} (JetStream, store {server.store_dir})")
    print(
        f"living cluster, Kubernetes {version}: kube-apiserver {cluster.url}, kube-scheduler, "
        f"kube-controller-manager, kwok with {len(cluster.node_names)} nodes "
        f"(up in {time.monotonic() - t0:.1f}s)"
    )
    print(f"keeping Events with reasons {', '.join(sorted(REASONS))}")
    received: list[str] = []
    reader: tailing.Tail | None = None
    showing: asyncio.Task[None] | None = None

    try:
        # the truth starts once the bridge has listed: a version overwritten before that list
        # is never listed, so it could not be in the stream
        bridge, run = await start_listed(settings)
        if run.done():
            return await run
        async with Truth(cluster) as truth:
            reader = await tailing.Tail.open(settings.nats, None, from_start=True)
            showing = asyncio.create_task(show(reader, received, quiet, indent="   "))
            await workload(cluster, truth, "demo")

            _say("summary: the stream against an independent watch of the cluster")
            try:
                kept = await assert_stream_carries(server.url, truth, REASONS, timeout=60)
            except AssertionError as e:
                print(f"   FAILED: {e}")
                return 1
            bridge.request_stop()
            await run
            by_reason: dict[str, int] = {}
            for ev in kept.values():
                by_reason[ev["reason"]] = by_reason.get(ev["reason"], 0) + 1
            print(f"   Event versions the cluster wrote and the filter keeps: {len(kept)}")
            for reason, n in sorted(by_reason.items()):
                print(f"     {reason:<22} {n}")
            for ev in kept.values():
                if ev.get("series"):
                    print(
                        f"   series: {ev['involvedObject']['name']} {ev['reason']} "
                        f"count {ev['series']['count']} at {ev['series']['lastObservedTime']}"
                    )
            print(f"   CloudEvents read from the stream: {len(received)}")
            print("   OK: each once, with id, time and k8scount as the Event says")
            return 0
    finally:
        await stop_showing(showing, reader)
        cluster.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="newest", help="newest, oldest or v1.X.Y")
    parser.add_argument("--quiet", action="store_true", help="no line per CloudEvent")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(kubernetes_version(args.version), args.quiet)))
