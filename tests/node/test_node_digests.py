"""``k8s-event-digests`` on a real kubelet's crash loop (issue 41): deploy/'s bridge in its Pods
carries every version to NATS as docs/deploy.md sets it up; the digests' program, on the host
with the operator's credentials (deploy/nats/ has no user of its own for it yet), folds them
into 10-second windows; the digests, read back from their stream, agree with what the API
server counts, series by series (tests/e2e/digests_agree.py): the kubelet's BackOff, Pulled,
Created, Started bumped by the old recorder on one Pod, the scheduler's Events."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.digests_agree import agreed, api_count, by_reason
from tests.integration.harness import ConsumerProcess
from tests.node.test_node import pod
from tests.node.workloads import OPERATOR, Deployed
from tests.support import free_port

pytest_plugins = ["tests.node.installs"]

MODULE = "k8s_event_consumer.digests"
CRASHER = "crasher"
CRASH = ["python", "-c", "import sys; print('crashing on purpose'); sys.exit(3)"]


def digester(work: Path, deployed: Deployed) -> ConsumerProcess:
    """``k8s-event-digests`` with windows of 10 s closed 1 s after their end, on the operator's
    user; its stream made by its own ``provision`` (docs/deploy.md)."""
    nats = deployed.nats
    cfg = work / "digests.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "nats": {
                    "servers": [nats.url],
                    "user": OPERATOR,
                    "password": nats.passwords[OPERATOR],
                },
                "digests": {"window": "10s", "grace": "1s"},
                "http": {"host": "127.0.0.1", "port": free_port()},
                "log": {"level": "debug", "format": "json"},
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "provision", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return ConsumerProcess(cfg, work / "digests.log", module=MODULE)


def backoff(node: Any, namespace: str) -> int:
    """The BackOff count the API server holds for the crash loop's Pod."""
    return max((api_count(e) for e in node.events(namespace, CRASHER) if e["reason"] == "BackOff"),
               default=0)  # fmt: skip


def test_digests_of_a_real_crash_loop_agree_with_what_the_api_server_counts(
    node: Any, deployed: Deployed, namespace: str, tmp_path: Path
) -> None:
    """A container that exits 3 at once: the kubelet restarts it with its back-off and bumps
    BackOff (and Pulled, Created, Started) on one Event each, up to its spam filter; a Pod no
    node matches: the scheduler's FailedScheduling. Once BackOff was counted 4 times the Pods
    go; every series' digests then add up to the counts the API server holds, each digest's
    sequences point at versions of its series, no id twice."""
    d = digester(tmp_path, deployed).start()
    try:
        asyncio.run(d.wait_ready(timeout=60))
        container = {"command": CRASH}
        node.apply(pod(CRASHER, namespace, node.image, container, terminationGracePeriodSeconds=1))
        node.apply(
            pod(
                "unschedulable",
                namespace,
                node.image,
                {"command": ["python", "-c", "pass"]},
                nodeSelector={"node-tier.k8s-event-bridge.io/no-such-node": "true"},
            )
        )
        node.wait_for(lambda: backoff(node, namespace) >= 4, "BackOff counted 4 times", 420)
        node.kubectl("delete", "pod", "--all", "-n", namespace, "--wait=true", timeout=120)
        deployed.carried(timeout=120)  # the truth's every version is in the stream once

        url = deployed.nats.operator_url
        found = asyncio.run(
            agreed(url, deployed.cluster, namespace, lambda: node.events(namespace), 180)
        )
        figures = by_reason(found)
        print(f"\n{namespace}: reason: (API server, digests) {figures}")
        for s in sorted(found.values(), key=lambda s: s.key[1]):
            print(f"  {s.line()}")
        (loop,) = [s for s in found.values() if s.key[1] == "BackOff"]
        assert loop.api >= 4 and loop.object == f"Pod/{CRASHER}", loop.line()
        assert {"Scheduled", "Started", "FailedScheduling"} <= set(figures), figures
        sources = {d.series.reporting_component for s in found.values() for d in s.digests}
        assert {"kubelet", "default-scheduler"} <= sources, sources
    finally:
        asyncio.run(d.stop())
