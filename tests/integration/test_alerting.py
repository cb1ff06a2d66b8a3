"""The alerting subscriber end to end: the simulated API server → the real bridge process → a
real nats-server (JetStream) → ``python -m k8s_event_consumer.alerting`` as a real process → a
real Prometheus Alertmanager (tests/standins/alertmanager.py), whose ``GET /api/v2/alerts`` and
webhook notifications are the truth the tests check against what was written."""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from bridge.core.converting import Converter
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings as BridgeNatsSettings
from tests.integration.harness import ConsumerProcess, checkpoint, status_events
from tests.standins.alertmanager import (
    Alertmanager,
    AlertmanagerError,
    Webhook,
    ensure_alertmanager,
)
from tests.support import Workload, eventually, free_port

pytestmark = pytest.mark.integration

CLUSTER = "test"  # harness.bridge_config's cluster.name
KEPT = ["BackOff", "OOMKilling", "FailedScheduling"]


# ----------------------------------------------------------------------------- processes


@dataclass
class Subscriber(ConsumerProcess):
    """``python -m k8s_event_consumer.alerting run --config FILE`` as a real child process."""

    module: str = "k8s_event_consumer.alerting"

    def start(self) -> Subscriber:
        super().start()
        return self

    async def wait_ready(self, timeout: float = 30.0) -> None:
        await super().wait_ready(timeout)

    async def metric(self, name: str) -> float:
        _, text = await self.get("/metrics")
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(f"k8s_event_alerting_{name}")
        )

    async def stop(self) -> int:
        self.signal(signal.SIGTERM)
        return await self.wait_exit(15)


@pytest.fixture
async def webhook() -> AsyncIterator[Webhook]:
    w = await Webhook().start()
    yield w
    await w.stop()


@pytest.fixture
async def am(tmp_path: Path, webhook: Webhook) -> AsyncIterator[Alertmanager]:
    try:
        binary = ensure_alertmanager()
    except AlertmanagerError as exc:
        pytest.fail(f"Alertmanager unavailable: {exc}", pytrace=False)
    a = Alertmanager(tmp_path / "alertmanager", webhook.url, binary)
    await a.start()
    yield a
    a.stop()


@pytest.fixture
def run_alerting(
    tmp_path: Path, nats_server: Any, am: Alertmanager
) -> Iterator[Callable[..., Any]]:
    """Start subscriber processes (same config and durable unless told); all killed at the end."""
    procs: list[Subscriber] = []
    config: dict[str, Path] = {}

    def start(**sections: Any) -> Subscriber:
        if "path" not in config or sections:
            cfg: dict[str, Any] = {
                "nats": {"servers": [nats_server.url], "durable": "alerting", "ack_wait": "5s"},
                "alertmanager": {
                    "urls": [am.url],
                    "timeout": "2s",
                    "attempts": 2,
                    "retry_backoff": "100ms",
                    "hold": "1s",
                },
                "alerts": {"reasons": KEPT, "resolve_after": "10m", "resend_interval": "1s"},
                "http": {"host": "127.0.0.1", "port": free_port()},
                "log": {"level": "debug", "format": "json"},
            }
            for section, values in sections.items():
                cfg[section] = {**cfg.get(section, {}), **values}
            path = tmp_path / f"alerting-{random.randrange(1 << 30)}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            config["path"] = path
        p = Subscriber(config["path"], tmp_path / f"alerting-{len(procs)}.log").start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()


# ----------------------------------------------------------------------------- Events


@dataclass
class Events:
    """Writes Events through the one writer (the simulator's ``Workload``, stamped now) and
    keeps what Alertmanager must show: one alert per (namespace, kind, name, reason) of a kept
    Warning, with the newest count and the message written."""

    sim: Any
    expected: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    names: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    messages: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    workload: Workload = field(init=False)

    def __post_init__(self) -> None:
        self.workload = Workload(self.sim, seed=22, now=lambda: datetime.now(UTC))

    def create(
        self,
        namespace: str,
        kind: str,
        name: str,
        reason: str,
        *,
        type_: str = "Warning",
        series: bool = False,
    ) -> tuple[str, str, str, str]:
        """A first occurrence (count 1; ``series``: events.k8s.io style, a series once
        repeated) of ``reason`` about the ``kind`` named ``name``."""
        created = self.workload.create(
            namespace,
            reason=reason,
            kind=kind,
            name=name,
            count=1,
            style="events.k8s.io" if series else "core",
            type=type_,
        )
        key = (namespace, kind, name, reason)
        self.names[key] = created["metadata"]["name"]
        self.messages[key] = created["message"]
        if type_ == "Warning" and reason in KEPT:
            self.expected[key] = 1
        return key

    def bump(self, key: tuple[str, str, str, str]) -> int:
        obj = self.workload.bump(key[0], self.names[key])
        count = int((obj.get("series") or {}).get("count") or obj.get("count") or 1)
        if key in self.expected:
            self.expected[key] = count
        return count


def labels(key: tuple[str, str, str, str]) -> dict[str, str]:
    namespace, kind, name, reason = key
    return {
        "alertname": "KubernetesWarningEvent",
        "cluster": CLUSTER,
        "namespace": namespace,
        "kind": kind,
        "name": name,
        "reason": reason,
    }


async def event_alerts(am: Alertmanager) -> list[dict[str, Any]]:
    return await am.alerts(filters=['alertname="KubernetesWarningEvent"'])


async def shows_exactly(am: Alertmanager, expected: dict[tuple[str, str, str, str], int]) -> bool:
    """Alertmanager lists exactly one alert per expected key, with its exact labels and the
    newest count, and no other Event alert."""
    shown = await event_alerts(am)
    got = sorted((tuple(sorted(a["labels"].items())), a["annotations"].get("count")) for a in shown)
    want = sorted((tuple(sorted(labels(k).items())), str(c)) for k, c in expected.items())
    return got == want


async def wait_exactly(
    am: Alertmanager, events: Events, timeout: float = 30.0, settle: float = 2.5
) -> None:
    """Until Alertmanager shows exactly ``events.expected``; then still so after ``settle``
    seconds (two resend rounds: nothing more may come)."""
    try:
        await eventually(lambda: shows_exactly(am, events.expected), timeout=timeout)
    except AssertionError:
        shown = [(a["labels"], a["annotations"].get("count")) for a in await event_alerts(am)]
        raise AssertionError(f"expected {events.expected}\nshown {shown}") from None
    await asyncio.sleep(settle)
    assert await shows_exactly(am, events.expected)


# ----------------------------------------------------------------------------- tests


async def test_warning_events_become_one_alert_per_object_and_reason_with_the_newest_count(
    sim, nats_server, run_bridge, run_alerting, am, webhook
):
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sub = run_alerting()
    await sub.wait_ready()
    backoff = ev.create("shop", "Pod", "web-1", "BackOff")
    sched = ev.create("shop", "Pod", "api-0", "FailedScheduling", series=True)
    oom = ev.create("default", "Node", "node-1", "OOMKilling")
    ev.create("shop", "Pod", "web-2", "BackOff")
    ev.create("shop", "Pod", "web-1", "Pulled", type_="Normal")  # Normal: no alert
    ev.create("shop", "Pod", "web-3", "FailedMount")  # a reason not kept: no alert
    ev.create("shop", "Pod", "web-4", "BackOff", type_="Normal")  # kept reason, but Normal
    for _ in range(3):
        await asyncio.sleep(0.2)
        ev.bump(backoff)
        ev.bump(sched)
    ev.bump(oom)
    assert ev.expected == {
        backoff: 4,
        sched: 4,  # the events.k8s.io series: 2, 3, 4
        oom: 2,
        ("shop", "Pod", "web-2", "BackOff"): 1,
    }
    await wait_exactly(am, ev)
    shown = {a["labels"]["name"]: a for a in await event_alerts(am)}
    web1 = shown["web-1"]
    assert web1["annotations"]["message"] == ev.messages[backoff]
    assert "in pod web-1_shop(" in web1["annotations"]["message"]  # the workload's BackOff
    assert web1["annotations"]["first_seen"] <= web1["annotations"]["last_seen"]
    assert web1["generatorURL"] == "nats://K8S_EVENTS/alerting"
    assert shown["node-1"]["labels"]["namespace"] == "default"  # where Node Events are recorded
    # the webhook was told of these four and nothing else
    notified = {tuple(sorted(a["labels"].items())) for a in webhook.firing()}
    assert notified == {tuple(sorted(labels(k).items())) for k in ev.expected}
    assert await sub.stop() == 0  # SIGTERM: the batch in hand finished, exit 0
    assert '"event": "stopped"' in sub.logs()


async def test_an_unreachable_control_plane_fires_and_its_return_resolves_it(
    sim, nats_server, run_bridge, run_alerting, am, webhook
):
    bridge = run_bridge()
    await bridge.wait_ready()
    sub = run_alerting()
    await sub.wait_ready()
    await sim.refuse_connections()

    async def firing() -> list[dict[str, Any]]:
        return await am.alerts(filters=['alertname="KubernetesControlPlaneUnreachable"'])

    [alert] = await eventually(firing, timeout=30)
    [published] = await status_events(nats_server.url, "apiserver_unreachable")
    assert alert["labels"] == {
        "alertname": "KubernetesControlPlaneUnreachable",
        "cluster": CLUSTER,
        "scope": published["data"]["scope"],
    }
    assert alert["annotations"]["summary"] == f"control plane unreachable for cluster {CLUSTER}"
    await asyncio.sleep(5)  # fires past the 4 s end of each send: it is sent again
    assert len(await firing()) == 1
    await sim.accept_connections()

    async def resolved() -> bool:
        return not await firing() and bool(
            webhook.resolved(alertname="KubernetesControlPlaneUnreachable")
        )

    await eventually(resolved, timeout=30)
    assert await status_events(nats_server.url, "apiserver_reachable")
    assert len(webhook.firing(alertname="KubernetesControlPlaneUnreachable")) >= 1


async def test_a_gap_raises_the_events_gap_alert(sim, nats_server, run_bridge, run_alerting, am):
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sub = run_alerting(alerts={"reasons": KEPT, "resend_interval": "1h"})  # sent as it comes
    await sub.wait_ready()
    key = ev.create("shop", "Pod", "web-1", "BackOff")
    await wait_exactly(am, ev, settle=0)
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit() == 0
    cp = await checkpoint(nats_server.url)
    for _ in range(5):
        ev.bump(key)  # versions the bridge will never read: compacted below
    sim.compact()
    again = run_bridge()
    await again.wait_ready()

    async def gap_alert() -> list[dict[str, Any]]:
        return await am.alerts(filters=['alertname="KubernetesEventsGap"'])

    [alert] = await eventually(gap_alert, timeout=30)
    [gap] = await status_events(nats_server.url, "gap")
    assert alert["labels"] == {
        "alertname": "KubernetesEventsGap",
        "cluster": CLUSTER,
        "scope": gap["data"]["scope"],
    }
    assert alert["annotations"]["from_resource_version"] == str(cp)
    assert alert["annotations"]["to_resource_version"] == gap["data"]["toResourceVersion"]
    assert alert["annotations"]["certainty"] == "likely"
    # the relist brought the newest version: the Event alert has the newest count
    await wait_exactly(am, ev)


async def test_event_alerts_resolve_after_their_quiet_time_each_on_its_own(
    sim, nats_server, run_bridge, run_alerting, am, webhook
):
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sub = run_alerting(alerts={"reasons": KEPT, "resolve_after": "5s", "resend_interval": "1s"})
    await sub.wait_ready()
    quiet = ev.create("shop", "Pod", "web-1", "BackOff")
    busy = ev.create("shop", "Pod", "web-2", "BackOff")
    await wait_exactly(am, ev, settle=0)
    # Event times have whole seconds: created in second T, both end at T+5 (>= 4 s from now);
    # seen again 2.5 s on, the busy one ends at T+7 at the earliest
    await asyncio.sleep(2.5)
    ev.bump(busy)  # seen again: its quiet time starts again

    async def quiet_resolved() -> bool:
        names = {a["labels"]["name"] for a in await event_alerts(am)}
        return "web-1" not in names

    await eventually(quiet_resolved, timeout=15, interval=0.05)
    [left] = await event_alerts(am)
    assert left["labels"] == labels(busy) and left["annotations"]["count"] == "2"
    await eventually(lambda: _none(am), timeout=15)
    # and the webhook is told of both resolutions (within group_interval)
    await eventually(lambda: _resolved(webhook, {quiet[2], busy[2]}), timeout=10)


async def _none(am: Alertmanager) -> bool:
    return not await event_alerts(am)


async def _resolved(webhook: Webhook, names: set[str]) -> bool:
    got = {a["labels"]["name"] for a in webhook.resolved(alertname="KubernetesWarningEvent")}
    return got == names


@pytest.mark.parametrize("recover_window", [None, 0], ids=["read-back", "durable-only"])
async def test_a_subscriber_killed_mid_stream_resumes_with_no_alert_missing_or_doubled(
    sim, nats_server, run_bridge, run_alerting, am, recover_window
):
    """With the stream read back at start (the default) and without (``recover_window: 0``:
    only the durable consumer resuming can bring what came while it was dead)."""
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    alerts = {"reasons": KEPT, "resend_interval": "1s", "recover_window": recover_window}
    sub = run_alerting(alerts=alerts)
    await sub.wait_ready()
    rng = random.Random(7)
    keys = [
        ev.create(f"ns-{i % 3}", "Pod", f"pod-{i}", KEPT[i % len(KEPT)], series=i % 5 == 0)
        for i in range(30)
    ]
    for step in range(240):
        ev.bump(rng.choice(keys))
        if step == 80:
            assert await sub.metric("events_total") > 0
            sub.kill()  # SIGKILL while messages are in flight
        if step == 160:
            sub = run_alerting()
        if step % 20 == 0:
            await asyncio.sleep(0.05)
    await sub.wait_ready()
    await wait_exactly(am, ev, timeout=60)
    replayed = await sub.metric("replayed_total")
    assert replayed > 0 if recover_window is None else replayed == 0


async def test_alertmanager_stopped_while_events_flow_gets_every_alert_once_it_is_back(
    sim, nats_server, run_bridge, run_alerting, am
):
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sub = run_alerting()
    await sub.wait_ready()
    before = [ev.create("shop", "Pod", f"early-{i}", "BackOff") for i in range(3)]
    await wait_exactly(am, ev, settle=0)
    am.stop()  # Alertmanager keeps alerts in memory only: these three are gone with it
    later = [ev.create("shop", "Pod", f"late-{i}", "OOMKilling") for i in range(3)]
    for key in [before[0], *later]:  # early-1 and early-2 come back only by being re-sent
        ev.bump(key)
    await eventually(lambda: _held(sub), timeout=20)
    await asyncio.sleep(2)
    await am.start()
    await wait_exactly(am, ev, timeout=30)


async def _held(sub: Subscriber) -> bool:
    return await sub.metric("held_total") >= 1


async def test_alertmanager_and_subscriber_down_together_lose_no_alert(
    sim, nats_server, run_bridge, run_alerting, am
):
    """Alertmanager stopped, Events flow (held), the subscriber SIGKILLed, then both back: the
    held messages come again to the new subscriber (the durable) and what was sent before is
    read back from the stream (the replay at start) and sent again."""
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    sub = run_alerting()
    await sub.wait_ready()
    before = [ev.create("shop", "Pod", f"early-{i}", "BackOff") for i in range(3)]
    await wait_exactly(am, ev, settle=0)
    am.stop()
    later = [ev.create("shop", "Pod", f"late-{i}", "FailedScheduling") for i in range(3)]
    ev.bump(before[0])
    ev.bump(later[0])
    await eventually(lambda: _held(sub), timeout=20)
    sub.kill()
    await am.start()
    sub = run_alerting()
    await sub.wait_ready()
    await wait_exactly(am, ev, timeout=30)


async def test_messages_held_while_alertmanager_hangs_come_again_to_a_restarted_subscriber(
    sim, nats_server, run_bridge, run_alerting, am
):
    """No read-back of the stream (``recover_window: 0``): only the durable's redelivery of
    the held messages can bring their alerts to Alertmanager. Alertmanager is frozen (SIGSTOP:
    it keeps its memory, every request times out) while Events flow and the subscriber is
    SIGKILLed; both come back."""
    ev = Events(sim)
    bridge = run_bridge()
    await bridge.wait_ready()
    alerts = {"reasons": KEPT, "resolve_after": "10m", "resend_interval": "1s"}
    sub = run_alerting(alerts={**alerts, "recover_window": 0})
    await sub.wait_ready()
    early = ev.create("shop", "Pod", "early-0", "BackOff")
    await wait_exactly(am, ev, settle=0)
    assert am.proc is not None
    am.proc.send_signal(signal.SIGSTOP)
    try:
        later = [ev.create("shop", "Pod", f"late-{i}", "OOMKilling") for i in range(3)]
        ev.bump(early)
        ev.bump(later[0])
        await eventually(lambda: _held(sub), timeout=20)
        sub.kill()
    finally:
        am.proc.send_signal(signal.SIGCONT)
    sub = run_alerting()
    await sub.wait_ready()
    await wait_exactly(am, ev, timeout=30)
    assert await sub.metric("replayed_total") == 0


async def test_a_restarted_subscriber_keeps_the_unreachable_alert_firing(
    sim, nats_server, run_bridge, run_alerting, am, webhook
):
    """The subscriber sends the open alert with an end 4 resend intervals ahead (4 s here). A
    subscriber restarted without reading the stream back takes it back from Alertmanager and
    keeps sending it: it is still firing long after its last end, until the API server is
    back.

    The restart as a rollout makes it: the new subscriber is ready (it has taken the alert
    back) before the old one is killed, so the alert is firing when it is taken back however
    long a start takes (killed first, a start slower than the 4 s left the alert to lapse
    before it was taken back: the test failed on a loaded machine)."""
    bridge = run_bridge()
    await bridge.wait_ready()
    alerts = {"reasons": KEPT, "resolve_after": "10m", "resend_interval": "1s"}
    old = run_alerting(alerts={**alerts, "recover_window": 0})
    await old.wait_ready()
    await sim.refuse_connections()

    async def firing() -> list[dict[str, Any]]:
        return await am.alerts(filters=['alertname="KubernetesControlPlaneUnreachable"'])

    await eventually(firing, timeout=30)
    sub = run_alerting(alerts={**alerts, "recover_window": 0})  # no replay; its own port
    await sub.wait_ready()
    assert await sub.metric("adopted_total") == 1
    old.kill()
    # the end the killed subscriber last sent is at most 4 resend intervals after its kill
    await asyncio.sleep(4 + 3)  # past that end (a point in time, not a wait on speed)
    assert len(await firing()) == 1
    assert not webhook.resolved(alertname="KubernetesControlPlaneUnreachable")
    await sim.accept_connections()
    await eventually(lambda: _gone(firing), timeout=30)


async def _gone(firing: Callable[[], Any]) -> bool:
    return not await firing()


# ----------------------------------------------------------------------------- forged statuses
#
# Status events published straight into the stream, in the documented CloudEvent form (the
# bridge's own converter writes them), as anyone with publish rights on the subject could: the
# "real" ones as the bridge writes them (``at`` = now), the forged one dated 2099. No bridge
# runs: the stream is created as the bridge creates it.

UNREACHABLE = 'alertname="KubernetesControlPlaneUnreachable"'


@dataclass
class Statuses:
    """Publishes the bridge's status events for cluster ``test``, scope ``*``."""

    url: str
    n: int = 0

    async def publish(self, what: str, at: datetime, time: datetime | None = None) -> int:
        """One status event, ``data.at`` = ``at`` and the CloudEvent's time ``time`` (or
        ``at``); its stream sequence."""
        self.n += 1
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        msg = Converter(CLUSTER, "k8s.events", "structured").status(
            what,
            f"{what}/test-host/*/{self.n}/{stamp}",
            {"scope": "*", "detail": f"{what} #{self.n}", "at": stamp},
            (time or at).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        )
        nc = await nats.connect(self.url)
        try:
            ack = await nc.jetstream().publish(msg.subject, msg.payload, headers=msg.headers)
        finally:
            await nc.close()
        return int(ack.seq)


@pytest.fixture
async def statuses(nats_server: Any) -> Statuses:
    nc = await nats.connect(nats_server.url)
    try:
        await ensure_stream(nc, BridgeNatsSettings(servers=[nats_server.url]))
    finally:
        await nc.close()
    return Statuses(nats_server.url)


async def acked(url: str, durable: str, seq: int) -> bool:
    """The durable has acked the stream up to ``seq``: its handler has sent what it made."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().consumer_info("K8S_EVENTS", durable)
    finally:
        await nc.close()
    return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= seq


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _notified(webhook: Webhook) -> list[dict[str, Any]]:
    """The firing notifications of the outage alert (Alertmanager tells of a resolution only
    what it told as firing)."""
    return webhook.firing(alertname="KubernetesControlPlaneUnreachable")


def _now_ms() -> datetime:
    """Now in whole milliseconds: what Alertmanager keeps of a time."""
    t = datetime.now(UTC)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


async def test_a_forged_future_dated_reachable_does_not_silence_a_real_outage(
    nats_server, statuses, run_alerting, am, webhook
):
    sub = run_alerting()
    await sub.wait_ready()

    async def firing() -> list[dict[str, Any]]:
        return await am.alerts(filters=[UNREACHABLE])

    down = _now_ms()
    await statuses.publish("apiserver_unreachable", down)
    [alert] = await eventually(firing, timeout=30)
    assert _time(alert["startsAt"]) == down
    await eventually(lambda: _notified(webhook), timeout=30)  # someone was told it fires
    # the forger's apiserver_reachable, dated 2099 (data.at and the CloudEvent's time)
    forged_at = datetime(2099, 1, 1, tzinfo=UTC)
    forged = await statuses.publish("apiserver_reachable", forged_at)
    await eventually(lambda: acked(nats_server.url, "alerting", forged), timeout=30)
    # handled and acked: whatever it made was sent before the ack. The outage still fires.
    [still] = await firing()
    assert _time(still["startsAt"]) == down
    assert not webhook.resolved(alertname="KubernetesControlPlaneUnreachable")
    [line] = sub.log_events("future_dated")
    assert line["claimed"] == "2099-01-01T00:00:00Z" and line["stream_sequence"] == forged
    assert await sub.metric("future_dated_total") == 1
    # the real end of the outage resolves it, endsAt = when the bridge saw the API server again
    up = _now_ms()
    await statuses.publish("apiserver_reachable", up)

    async def resolved() -> list[dict[str, Any]]:
        gone = not await firing()
        return webhook.resolved(alertname="KubernetesControlPlaneUnreachable") if gone else []

    [done] = await eventually(resolved, timeout=30)
    assert _time(done["endsAt"]) == up
    # and a later real outage fires again: the 2099 message made nothing look stale
    again = _now_ms()
    await statuses.publish("apiserver_unreachable", again)

    async def fires_again() -> list[dict[str, Any]]:
        return [a for a in await firing() if _time(a["startsAt"]) == again]

    await eventually(fires_again, timeout=30)
    assert sub.running()


# ----------------------------------------------------------------------------- two replicas


async def test_two_replicas_one_killed_alertmanager_holds_one_alert_resolved_on_time(
    nats_server, statuses, run_alerting, am, webhook
):
    """The StatefulSet of deploy/consumers/alerting.yaml: two replicas, each its own durable
    (its Pod's name), the same generatorURL; both send every alert, Alertmanager keeps one per
    label set. One is SIGKILLed while the outage alert fires; the other resolves it."""
    shared = {"reasons": KEPT, "resend_interval": "1s",
              "generator_url": "nats://K8S_EVENTS/k8s-event-alerting"}  # fmt: skip
    durables = ["k8s-event-alerting-0", "k8s-event-alerting-1"]
    replicas = [run_alerting(nats={"durable": d}, alerts=shared) for d in durables]
    for r in replicas:
        await r.wait_ready()

    async def firing() -> list[dict[str, Any]]:
        return await am.alerts(filters=[UNREACHABLE])

    down = _now_ms()
    seq = await statuses.publish("apiserver_unreachable", down)
    for d in durables:  # both have sent it
        await eventually(lambda d=d: acked(nats_server.url, d, seq), timeout=30)
    [alert] = await firing()
    assert alert["labels"] == {
        "alertname": "KubernetesControlPlaneUnreachable",
        "cluster": CLUSTER,
        "scope": "*",
    }
    assert _time(alert["startsAt"]) == down
    await eventually(lambda: _notified(webhook), timeout=30)
    replicas[1].kill()  # SIGKILL while it fires: its last send holds the alert 4 s more
    up = _now_ms()
    await statuses.publish("apiserver_reachable", up)

    async def resolved() -> list[dict[str, Any]]:
        gone = not await firing()
        return webhook.resolved(alertname="KubernetesControlPlaneUnreachable") if gone else []

    notified = await eventually(resolved, timeout=30)
    assert {_time(a["endsAt"]) for a in notified} == {up}
    # one alert all along: every notification of it carries the one label set
    told = webhook.firing(alertname="KubernetesControlPlaneUnreachable") + notified
    assert {tuple(sorted(a["labels"].items())) for a in told} == {
        tuple(sorted(alert["labels"].items()))
    }
    assert {_time(a["startsAt"]) for a in told} == {down}
    assert not await firing()
    assert replicas[0].running()
