"""The alerting subscriber reading digests (``nats.reads: digests``), end to end: a real
nats-server with the K8S_DIGESTS stream as ``provision`` makes it, digests published as
``k8s-event-digests`` publishes them (``k8s_event_common.digests``: the bytes, the headers, the
subject), ``python -m k8s_event_consumer.alerting`` as a real process, and a real Prometheus
Alertmanager (tests/standins/alertmanager.py) whose alerts and webhook notifications are what
the tests check.

The figure for issue 41 (the same storm, read twice): the storm's every Event version is
published to K8S_EVENTS as the bridge's converter writes it, and its digests to K8S_DIGESTS; an
Event-reading alerting and a digest-reading one run side by side against one Alertmanager, and
the test counts what each sent and what Alertmanager paged."""

from __future__ import annotations

import random
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from bridge.core.converting import Converter
from bridge.jetstream.streams import ensure_stream
from bridge.settings import NatsSettings as BridgeNatsSettings
from k8s_event_common import digests, streams
from k8s_event_common.digests import Digest, Series
from tests.integration.harness import ConsumerProcess
from tests.standins.alertmanager import (
    Alertmanager,
    AlertmanagerError,
    Webhook,
    ensure_alertmanager,
)
from tests.support import eventually, free_port

pytestmark = pytest.mark.integration

CLUSTER = "test"
SERIES = 'alertname="KubernetesWarningEventSeries"'
EVENT = 'alertname="KubernetesWarningEvent"'
WINDOW = 300  # seconds: the digests' window


@dataclass
class Subscriber(ConsumerProcess):
    module: str = "k8s_event_consumer.alerting"

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
async def digest_stream(nats_server: Any) -> str:
    """K8S_DIGESTS, made as ``k8s-event-digests provision`` makes it."""
    nc = await nats.connect(nats_server.url)
    try:
        await streams.provision(
            nc, streams.digest_stream("K8S_DIGESTS", "k8s.digests", max_age=86400.0)
        )
    finally:
        await nc.close()
    return "K8S_DIGESTS"


@pytest.fixture
def run_alerting(
    tmp_path: Path, nats_server: Any, am: Alertmanager
) -> Iterator[Callable[..., Subscriber]]:
    """Start alerting processes, each with its own config; all killed at the end."""
    procs: list[Subscriber] = []

    def start(reads: str = "digests", config: Path | None = None, **sections: Any) -> Subscriber:
        if config is None:
            cfg: dict[str, Any] = {
                "nats": {
                    "servers": [nats_server.url],
                    "reads": reads,
                    "durable": f"alerting-{reads}",
                    "ack_wait": "5s",
                },
                "alertmanager": {
                    "urls": [am.url],
                    "timeout": "2s",
                    "attempts": 2,
                    "retry_backoff": "100ms",
                    "hold": "1s",
                },
                # the resend loop's first round after an hour: every send counted is a message's
                "alerts": {"reasons": ["BackOff", "OOMKilling"], "resend_interval": "1h"},
                "digests": {"min_occurrences": 3, "reasons": {"BackOff": 5, "OOMKilling": 1}},
                "http": {"host": "127.0.0.1", "port": free_port()},
                "log": {"level": "debug", "format": "json"},
            }
            for section, values in sections.items():
                cfg[section] = {**cfg.get(section, {}), **values}
            config = tmp_path / f"alerting-{reads}-{random.randrange(1 << 30)}.yaml"
            config.write_text(yaml.safe_dump(cfg))
        p = Subscriber(config, tmp_path / f"alerting-{len(procs)}.log").start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()


# ----------------------------------------------------------------------------- writing


def last_window(now: datetime, window: int = WINDOW, back: int = 1) -> datetime:
    """The start of the ``back``-th whole window before the one ``now`` is in."""
    epoch = int(now.timestamp()) // window * window - back * window
    return datetime.fromtimestamp(epoch, UTC)


def series(name: str, reason: str = "BackOff") -> Series:
    return Series(
        cluster=CLUSTER,
        namespace="shop",
        kind="Pod",
        name=name,
        uid=f"pod-{name}",
        reason=reason,
        type="Warning",
        reporting_component="kubelet",
    )


def digest(
    s: Series,
    start: datetime,
    occurrences: int,
    seqs: tuple[int, int] = (1, 1),
    window: int = WINDOW,
) -> Digest:
    end = start + timedelta(seconds=window)
    return Digest(
        series=s,
        start=start,
        end=end,
        occurrences=occurrences,
        versions=occurrences,
        first_seen=start + timedelta(seconds=1),
        last_seen=end - timedelta(seconds=1),
        count_from=0,
        count_to=occurrences,
        uids=(f"ev-{s.name}",),
        uids_omitted=0,
        first_message=f"Back-off restarting failed container app in pod {s.name}",
        last_message=f"Back-off restarting failed container app in pod {s.name}",
        sampled=False,
        combined=False,
        stream="K8S_EVENTS",
        first_seq=seqs[0],
        last_seq=seqs[1],
    )


async def publish_digests(url: str, ds: list[Digest]) -> int:
    """As the digest program publishes: its bytes, its headers (Nats-Msg-Id), its subject.
    Answers the last stream sequence."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        seq = 0
        for d in ds:
            ack = await js.publish(
                digests.subject("k8s.digests", d.series),
                digests.encode(d),
                headers=digests.headers(d),
            )
            seq = int(ack.seq)
        return seq
    finally:
        await nc.close()


def event_version(name: str, count: int, at: datetime) -> dict[str, Any]:
    """One core/v1 version of the BackOff Event of Pod shop/<name>, as a watch gives it."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.18a2b3c4d5e6f7a8",
            "namespace": "shop",
            "uid": f"ev-{name}",
            "resourceVersion": str(1000 + count),
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "shop",
            "name": name,
            "uid": f"pod-{name}",
        },
        "reason": "BackOff",
        "message": f"Back-off restarting failed container app in pod {name}",
        "type": "Warning",
        "count": count,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": "kubelet", "host": "node-1"},
        "reportingComponent": "kubelet",
    }


async def publish_events(url: str, versions: list[dict[str, Any]]) -> list[int]:
    """Every version into K8S_EVENTS as the bridge's converter writes it; their sequences."""
    conv = Converter(CLUSTER, "k8s.events", "structured")
    nc = await nats.connect(url)
    try:
        await ensure_stream(nc, BridgeNatsSettings(servers=[url]))
        js = nc.jetstream()
        seqs = []
        for v in versions:
            msg = conv.convert(v)
            ack = await js.publish(msg.subject, msg.payload, headers=msg.headers)
            seqs.append(int(ack.seq))
        return seqs
    finally:
        await nc.close()


async def acked(url: str, stream: str, durable: str, seq: int) -> bool:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().consumer_info(stream, durable)
    finally:
        await nc.close()
    return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= seq


async def names(am: Alertmanager, which: str) -> list[str]:
    return sorted(a["labels"].get("name", "") for a in await am.alerts(filters=[which]))


async def shows(am: Alertmanager, which: str, want: list[str]) -> bool:
    """Alertmanager lists exactly the alerts ``which`` of these names."""
    return await names(am, which) == sorted(want)


# ----------------------------------------------------------------------------- tests


async def test_a_storm_over_the_threshold_pages_once_and_a_single_restart_not_at_all(
    nats_server, digest_stream, run_alerting, am, webhook
):
    start = last_window(datetime.now(UTC))
    storm, once = digest(series("web-1"), start, 57), digest(series("web-2"), start, 1)
    oom = digest(series("db-0", "OOMKilling"), start, 1)  # its threshold: 1
    sub = run_alerting()
    await sub.wait_ready()
    last = await publish_digests(nats_server.url, [storm, once, oom])
    await eventually(lambda: acked(nats_server.url, digest_stream, "alerting-digests", last))
    await eventually(lambda: shows(am, SERIES, ["db-0", "web-1"]))
    [alert] = await am.alerts(filters=[SERIES, 'name="web-1"'])
    assert alert["labels"] == {
        "alertname": "KubernetesWarningEventSeries",
        "cluster": CLUSTER,
        "namespace": "shop",
        "kind": "Pod",
        "name": "web-1",
        "reason": "BackOff",
    }
    n = alert["annotations"]
    assert n["summary"] == "BackOff: Pod shop/web-1 57 times in 5m (cluster test)"
    assert n["occurrences"] == "57" and n["threshold"] == "5" and n["digest"] == storm.id
    assert alert["generatorURL"] == "nats://K8S_DIGESTS/alerting-digests"
    assert await sub.metric("digests_total", 'result="alerted"') == 2
    assert await sub.metric("digests_total", 'result="under"') == 1
    # the webhook was paged for the two and never for the single restart
    await eventually(lambda: len({a["labels"]["name"] for a in webhook.firing()}) == 2)
    assert not webhook.firing(name="web-2")
    assert await sub.stop() == 0


async def test_a_window_under_the_threshold_resolves_the_alert(
    nats_server, digest_stream, run_alerting, am, webhook
):
    w = 10  # short windows, both already over
    first = last_window(datetime.now(UTC), w, back=2)
    sub = run_alerting(digests={"grace": "1h"})  # only the digest under it can resolve it
    await sub.wait_ready()
    await publish_digests(nats_server.url, [digest(series("web-1"), first, 9, window=w)])
    await eventually(lambda: shows(am, SERIES, ["web-1"]))
    second = first + timedelta(seconds=w)
    await publish_digests(nats_server.url, [digest(series("web-1"), second, 2, window=w)])
    await eventually(lambda: webhook.resolved(alertname="KubernetesWarningEventSeries"))
    assert await names(am, SERIES) == []
    [resolved] = webhook.resolved(alertname="KubernetesWarningEventSeries")
    assert resolved["endsAt"].startswith(second.strftime("%Y-%m-%dT%H:%M:%S"))


async def test_the_start_reads_the_digests_stream_back_for_an_alertmanager_that_forgot(
    nats_server, digest_stream, run_alerting, am
):
    start = last_window(datetime.now(UTC))
    cfg = {"alerts": {"reasons": ["BackOff", "OOMKilling"], "resend_interval": "1s"}}
    sub = run_alerting(**cfg)
    await sub.wait_ready()
    last = await publish_digests(nats_server.url, [digest(series("web-1"), start, 57)])
    await eventually(lambda: acked(nats_server.url, digest_stream, "alerting-digests", last))
    await eventually(lambda: shows(am, SERIES, ["web-1"]))
    assert await sub.stop() == 0
    am.stop()  # Alertmanager keeps alerts in memory only: all gone
    await am.start()
    assert await names(am, SERIES) == []
    again = run_alerting(config=sub.config)  # the durable has nothing new to deliver
    await again.wait_ready()
    assert await again.metric("replayed_total") == 1
    await eventually(lambda: shows(am, SERIES, ["web-1"]))


async def test_the_same_storm_read_as_events_and_as_digests(
    nats_server, digest_stream, run_alerting, am, webhook
):
    """10 Pods crash-looping (60 BackOff versions each, counts 1..60) and 10 Pods restarted
    once (one version, count 1), all in one window: the Event-reading alerting pages all 20
    and sends an alert for every version; the digest-reading one pages the 10 storms once."""
    now = datetime.now(UTC)
    start = last_window(now)
    stormy = [f"crash-{i}" for i in range(10)]
    calm = [f"once-{i}" for i in range(10)]
    bumps = 60
    versions = [event_version(n, c, now) for c in range(1, bumps + 1) for n in stormy]
    versions += [event_version(n, 1, now) for n in calm]
    seqs = await publish_events(nats_server.url, versions)
    by_name: dict[str, list[int]] = {}
    for v, seq in zip(versions, seqs, strict=True):
        by_name.setdefault(v["involvedObject"]["name"], []).append(seq)
    ds = [digest(series(n), start, len(s), (min(s), max(s))) for n, s in sorted(by_name.items())]
    assert sum(d.occurrences for d in ds) == len(versions)
    last = await publish_digests(nats_server.url, ds)

    events_sub = run_alerting(reads="events")
    digests_sub = run_alerting(reads="digests")
    await events_sub.wait_ready()
    await digests_sub.wait_ready()
    await eventually(
        lambda: acked(nats_server.url, "K8S_EVENTS", "alerting-events", seqs[-1]), timeout=60
    )
    await eventually(lambda: acked(nats_server.url, digest_stream, "alerting-digests", last))
    await eventually(lambda: shows(am, EVENT, sorted(stormy + calm)))
    await eventually(lambda: shows(am, SERIES, sorted(stormy)))

    def paged(alertname: str) -> set[str]:
        return {a["labels"]["name"] for a in webhook.firing(alertname=alertname)}

    await eventually(lambda: len(paged("KubernetesWarningEvent")) == 20)
    await eventually(lambda: len(paged("KubernetesWarningEventSeries")) == 10)
    events_sends = await events_sub.metric("sends_total", 'result="ok"')
    digests_sends = await digests_sub.metric("sends_total", 'result="ok"')
    figure = {
        "versions": len(versions),
        "digests": len(ds),
        "event_alert_sends": events_sends,
        "digest_alert_sends": digests_sends,
        "event_alerts_paged": len(paged("KubernetesWarningEvent")),
        "digest_alerts_paged": len(paged("KubernetesWarningEventSeries")),
    }
    print(f"\nthe same storm, alerts before and after digests: {figure}")
    assert events_sends == len(versions)  # one send per version
    assert digests_sends == len(stormy)  # one per series over the threshold
    assert paged("KubernetesWarningEventSeries") == set(stormy)  # no single restart paged
    assert paged("KubernetesWarningEvent") == set(stormy + calm)
