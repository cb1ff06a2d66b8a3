"""The remediation worker's memory under hostile sizes, as a real process on its shipped config
(deploy/consumers/remediation.yaml, limit 128Mi): every message of the stream as large as
nats-server lets one be (``max_payload``, 1 MiB), each about a crash-looping Pod of one of many
namespaces whose Event, read back, carries a message of that size, and whose Pod, ReplicaSet and
Deployment each carry the most annotations the API server takes (256 KiB). The worker reads
each claim back (the Event, the Pod, the owner walk), records its dry-run action and sends it;
its peak RSS (VmHWM) must stay under the shipped limit and under the bound bench/budget.py
computes for its config (docs/performance.md, "The remediation worker's memory")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio
from aiohttp import web

from bench.budget import MIB, RemediationBudget
from k8s_event_consumer import configuring
from k8s_event_consumer.remediation.settings import load
from k8s_event_sim.apiserver import SimApiServer, status_response
from tests import shipped
from tests.integration.harness import (
    Bridges,
    ConsumerProcess,
    bridge_config,
    eventually,
    write_kubeconfig,
)
from tests.support import event

pytestmark = pytest.mark.integration

MODULE = "k8s_event_consumer.remediation"
NAMESPACES = 40
PODS = 3  # per namespace: 120 Events, each a message of about max_payload
MAX_PAYLOAD = 1 << 20  # nats-server's default
MESSAGE = MAX_PAYLOAD - 16 * 1024  # the Event's message: its CloudEvent just under max_payload
ANNOTATIONS = 256 * 1024 - 64  # the API server's bound on an object's annotations
LIMIT = 128 * MIB  # deploy/consumers/remediation.yaml


class ActingSim(SimApiServer):
    """The simulated API server and the two writes of a dry run: an Event created (the
    action's record), a Pod deleted with ``dryRun`` (answered, nothing deleted)."""

    async def _not_found(self, request: web.Request) -> web.Response:
        parts = request.path.strip("/").split("/")
        if (
            request.method == "POST"
            and parts[:3] == ["api", "v1", "namespaces"]
            and (parts[4:] == ["events"])
        ):
            body = await request.json()
            body.setdefault("metadata", {})["namespace"] = parts[3]
            try:
                return web.json_response(self.create_event(body), status=201)
            except ValueError:
                return status_response(409, "already exists", "AlreadyExists")
        if request.method == "DELETE" and parts[4:5] == ["pods"]:
            pod = self.cluster_objects.get(request.path)
            if pod is None:
                return status_response(404, "pods not found", "NotFound")
            return web.json_response(pod)  # a dry run: nothing deleted
        return await super()._not_found(request)


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[ActingSim]:
    server = ActingSim()
    await server.start()
    yield server
    await server.stop()


def namespaces() -> list[str]:
    return [f"team-{i:02d}" for i in range(NAMESPACES)]


def crash_looping_pods(sim: ActingSim) -> list[tuple[str, str, str]]:
    """In every namespace a Deployment, its ReplicaSet and ``PODS`` Pods crash-looping (7
    restarts), each object with 256 KiB of annotations: (namespace, Pod, uid)."""
    out = []
    big = {"hostile": "a" * ANNOTATIONS}
    for ns in namespaces():
        pods = sim.put_deployment(ns, "app", PODS)
        for path, obj in sim.cluster_objects.items():
            if f"/namespaces/{ns}/" in path:
                obj["metadata"]["annotations"] = big
        for name, uid in pods:
            pod = sim.cluster_objects[f"/api/v1/namespaces/{ns}/pods/{name}"]
            pod["spec"] = {"containers": [{"name": "app", "image": "app:1"}]}
            pod["status"] = {
                "containerStatuses": [
                    {
                        "name": "app",
                        "restartCount": 7,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    }
                ]
            }
            out.append((ns, name, uid))
    return out


async def stream_state(url: str) -> tuple[int, int]:
    """The stream's messages and bytes."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info("K8S_EVENTS")
        return info.state.messages, info.state.bytes
    finally:
        await nc.close()


@pytest.mark.xfail(
    "max_batch_bytes" not in configuring.NatsSettings.model_fields,
    reason="the kit's fetch is bounded in messages only: 64 of 1 MiB, twice (177-181 MiB)",
    strict=True,
)
@pytest.mark.timeout(600)
async def test_messages_of_max_payload_about_large_objects_keep_the_peak_rss_under_the_limit(
    tmp_path: Path, sim: ActingSim, nats_server: Any
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.url)
    targets = crash_looping_pods(sim)
    bridges = Bridges(tmp_path)
    try:
        bridge = bridges.start(bridge_config(tmp_path, nats_server.url, kubeconfig))
        await bridge.wait_ready()
        now = datetime.now(UTC)
        for i, (ns, pod, uid) in enumerate(targets):
            sim.create_event(
                event(
                    f"{pod}.{i:x}",
                    namespace=ns,
                    involved_object={"uid": uid, "namespace": ns},
                    count=5,
                    first=now,
                    last=now,
                    message="m" * MESSAGE,
                )
            )

        async def all_published() -> tuple[int, int] | None:
            messages, size = await stream_state(nats_server.url)
            return (messages, size) if messages >= len(targets) else None

        messages, size = await eventually(all_published, 300, 1.0, what="every Event published")
        assert size / messages > 0.9 * MAX_PAYLOAD  # the premise: messages of about max_payload
        bridges.kill_all()  # what the worker reads is in the stream; the bridge's share is not

        config = shipped.subscriber(
            tmp_path,
            MODULE,
            nats_server.url,
            kubeconfig=kubeconfig,
            remediation={"namespaces": {"allow": namespaces()}},
        )
        worker = ConsumerProcess(config, tmp_path / "remediation.log", module=MODULE).start()
        try:
            await worker.wait_ready(60)

            async def acted() -> float | None:
                n = await worker.metric("actions_total", 'result="acted"')
                return n if n >= len(targets) else None

            await eventually(acted, 300, 1.0, what="an action for every Pod")
            peak = worker.memory()["VmHWM"] * 1024
        finally:
            await worker.stop()
        bound = RemediationBudget.of(load(str(config)), max_payload=MAX_PAYLOAD)
        print(f"\nremediation worker: VmHWM {peak / MIB:.1f} MiB, bound {bound.total_mib:.1f} MiB")
        assert peak < LIMIT, f"VmHWM {peak / MIB:.1f} MiB over the shipped 128Mi"
        assert peak <= bound.total, (
            f"VmHWM {peak / MIB:.1f} MiB over the bound {bound.total_mib:.1f}"
        )
    finally:
        bridges.kill_all()
