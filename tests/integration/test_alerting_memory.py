"""The alerting subscriber's memory under hostile sizes, on a real nats-server: Warning Events
with messages up to the server's max_payload, published into the stream as the bridge
publishes them (its converter), about many objects in many namespaces (past the per-namespace
and the total bound), read by ``k8s-event-alerting`` as a process with the shipped config's
bounds: back at start (the read-back), then through its durable; its alerts sent again by the
resend loop. Its peak RSS (VmHWM) stays under the shipped memory limit and under the bound
bench/budget.py computes for the config; the refusals are counted and told; the alerts under
the bounds reach Alertmanager (an in-process stand-in that takes the POSTs: what is measured
is the subscriber, not Alertmanager)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from aiohttp import web

from bench.budget import MIB, AlertingBudget
from bridge.core.converting import Converter
from k8s_event_consumer.alerting import settings
from k8s_event_consumer.alerting.alertmanager import MAX_POST_BYTES
from tests import shipped
from tests.integration.harness import ConsumerProcess
from tests.streams import k8s_events
from tests.support import eventually, free_port

pytestmark = pytest.mark.integration

CLUSTER = "hostile"
HUGE = 200  # Events of messages near the server's max_payload, one after another
NOISY = 700  # objects of one namespace (its bound: 500)
MANY = (110, 90)  # namespaces, objects each: with the rest, past the total bound (10,000)


def event(namespace: str, name: str, message: str) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": f"{name}.18a2b3c4d5e6f7a8",
            "namespace": namespace,
            "uid": f"{namespace}-{name}",
            "resourceVersion": "1000",
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": name},
        "reason": "BackOff",
        "message": message,
        "type": "Warning",
        "count": 7,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "kubelet", "host": "node-1"},
    }


async def publish(url: str) -> tuple[int, int]:
    """The hostile stream: the huge Events first (a fetch meets them together), then one
    namespace past its bound, then many namespaces past the total bound. How many, and the
    server's max_payload."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(k8s_events())
    convert = Converter(CLUSTER, "k8s.events", "structured").convert
    max_payload = nc.max_payload
    near_max = max_payload - 4096  # the envelope around the message: ~1 KB
    n = 0
    try:
        for i in range(HUGE):
            msg = convert(event(f"huge-{i % 10}", f"web-{i}", chr(0x41 + i % 26) * near_max))
            await js.publish(msg.subject, msg.payload, headers=msg.headers)
            n += 1
        acks = []
        for i in range(NOISY):
            msg = convert(event("noisy", f"web-{i}", "n" * 2000))
            acks.append(await js.publish_async(msg.subject, msg.payload, headers=msg.headers))
        namespaces, objects = MANY
        for ns in range(namespaces):
            for i in range(objects):
                msg = convert(event(f"team-{ns:03d}", f"api-{i}", "t" * 1500))
                acks.append(await js.publish_async(msg.subject, msg.payload, headers=msg.headers))
        for ack in acks:
            await ack
        n += len(acks)
    finally:
        await nc.close()
    return n, max_payload


@dataclass
class StandIn:
    """Alertmanager's POST /api/v2/alerts: what each alert said last, and each body's size."""

    alerts: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    url: str = ""

    async def post(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.sizes.append(len(body))
        for a in json.loads(body):
            labels = a["labels"]
            key = (labels["alertname"], labels.get("namespace", ""), labels.get("name", ""))
            self.alerts[key] = a
        return web.Response()

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response([])  # nothing to take back: a first start

    def named(self, alertname: str, namespace: str) -> list[dict[str, Any]]:
        return [a for (n, ns, _), a in self.alerts.items() if n == alertname and ns == namespace]


@pytest.fixture
async def stand_in() -> AsyncIterator[StandIn]:
    am = StandIn()
    app = web.Application(client_max_size=1 << 30)  # takes what comes: measured, not refused
    app.router.add_post("/api/v2/alerts", am.post)
    app.router.add_get("/api/v2/alerts", am.get)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    am.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield am
    await runner.cleanup()


def config(tmp_path: Path, nats_url: str, am_url: str) -> Path:
    """deploy/consumers/alerting.yaml's config: its bounds, this test's addresses, and a
    resend every few seconds (a round of the whole state within the test)."""
    cfg = shipped.shipped("k8s_event_consumer.alerting")
    cfg["nats"]["servers"] = [nats_url]
    cfg["nats"].pop("user")  # a server without auth
    cfg["alertmanager"]["urls"] = [am_url]
    cfg["alerts"]["resend_interval"] = "3s"
    cfg["http"] = {"host": "127.0.0.1", "port": free_port()}
    path = tmp_path / "alerting.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.timeout(600)
async def test_hostile_sizes_keep_the_alerting_subscriber_under_its_limit_and_its_bound(
    tmp_path: Path, nats_server: Any, stand_in: StandIn
) -> None:
    total, max_payload = await publish(nats_server.url)
    path = config(tmp_path, nats_server.url, stand_in.url)
    sub = ConsumerProcess(path, tmp_path / "alerting.log", module="k8s_event_consumer.alerting")
    sub.start()
    try:
        await sub.wait_ready(300)  # after the read-back of the whole stream
        await eventually(
            lambda: _at_least(sub, "messages_total", total, 'result="handled"'),
            timeout=400,
            interval=1.0,
        )
        rounds = await sub.metric("resends_total", 'result="ok"')
        await eventually(
            lambda: _at_least(sub, "resends_total", rounds + 2, 'result="ok"'), 60, 0.5
        )
        peak = sub.memory()["VmHWM"] * 1024
        refused = {
            why: await sub.metric("alerts_refused_total", f'why="{why}"')
            for why in ("namespace_alerts", "alerts")
        }
        events_refused = await sub.metric("events_total", 'result="refused"')
    finally:
        await sub.stop()

    _, limit = shipped.memory("alerting")
    bound = AlertingBudget.of(settings.load(str(path)), max_payload).total
    assert peak < limit, f"{peak / MIB:.1f} MiB over the shipped {limit / MIB:.0f} MiB"
    assert peak < bound, f"{peak / MIB:.1f} MiB over the bound {bound / MIB:.1f} MiB"

    # the refusals: counted (each message twice: read back, then through the durable), told
    assert refused["namespace_alerts"] >= NOISY - 500
    assert refused["alerts"] >= 1 and events_refused >= NOISY - 500
    [noisy] = stand_in.named("KubernetesWarningEventsRefused", "noisy")
    assert int(noisy["annotations"]["refused"]) >= NOISY - 500
    assert stand_in.named("KubernetesWarningEventsRefused", "*")
    # the alerts under the bounds reached Alertmanager, their messages cut
    assert len(stand_in.named("KubernetesWarningEvent", "noisy")) == 500
    assert all(stand_in.named("KubernetesWarningEvent", f"huge-{i}") for i in range(10))
    for a in stand_in.named("KubernetesWarningEvent", "huge-0"):
        assert len(a["annotations"]["message"].encode()) <= 1024
        assert "...[cut: " in a["annotations"]["message"]
    events = [k for k in stand_in.alerts if k[0] == "KubernetesWarningEvent"]
    assert len(events) == 10_000  # the total bound, reached
    assert max(stand_in.sizes) <= MAX_POST_BYTES


async def _at_least(sub: ConsumerProcess, name: str, n: float, labels: str) -> bool:
    return await sub.metric(name, labels) >= n
