"""``k8s-event-otlp`` at its limits, as a process on a real nats-server against a real
OpenTelemetry Collector (otelcol v0.139.0, tests/standins/otelcol.py):

- **the endpoint's**: a collector whose OTLP receiver takes 64 KiB at most
  (``max_request_body_size``, which it applies to the decompressed body too) behind the
  subscriber's shipped 4 MiB ``otlp.max_request_bytes``: ~2,000 versions of Events of realistic
  sizes, published as the bridge publishes them, all arrive, none is a dead letter, the log
  holds a handful of lines about it (the limit lowered), not one per record (before: 79 of
  1,986 in 210 s, 23,807 ``record_refused_unproven`` lines);
- **its own memory**: fed messages up to NATS' ``max_payload`` (1 MiB) with the shipped
  config (deploy/consumers/otlp.yaml), its peak RSS (VmHWM) under the shipped 256Mi limit and
  under the worst case computed from that config (bench/budget.py, ``OtlpBudget``)."""

from __future__ import annotations

import random
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.budget import MIB, OtlpBudget
from bridge.core.converting import Converter
from k8s_event_consumer.otlp import settings
from tests import shipped
from tests.integration.test_otlp_collector import ids_in
from tests.integration.test_otlp_flow import CLUSTER, Otlp, acked_all, event
from tests.integration.test_otlp_flow import config as otlp_config
from tests.integration.test_otlp_flow import nc as nc  # the fixture: the stream made first
from tests.standins.otelcol import Collector
from tests.support import eventually, free_port

pytestmark = pytest.mark.integration
GO_TOOLS = ("otelcol",)
ROOT = Path(__file__).resolve().parents[2]
KIB = 1024
SHIPPED_LIMIT = 256 * MIB  # deploy/consumers/otlp.yaml's memory limit
BIG_EVENTS = 120  # three in four of them near max_payload: ~70 MiB through the subscriber

# what Events say, with how long their messages run (the detail a controller adds)
REASONS = [
    ("BackOff", "Warning", "Back-off restarting failed container app in pod {name}"),
    ("Pulling", "Normal", 'Pulling image "registry.example.com/team/{name}:v1.42.7"'),
    ("Scheduled", "Normal", "Successfully assigned {ns}/{name} to node-{n}"),
    (
        "Unhealthy",
        "Warning",
        'Readiness probe failed: Get "http://10.1.{n}.7:8080/ready": '
        "dial tcp 10.1.{n}.7:8080: connect: connection refused",
    ),
    (
        "FailedMount",
        "Warning",
        'MountVolume.SetUp failed for volume "config-{name}" : configmap "config-{name}" not found',
    ),
    (
        "FailedCreatePodSandBox",
        "Warning",
        "Failed to create pod sandbox: rpc error: code = "
        "Unknown desc = failed to setup network for sandbox: plugin type=calico failed (add): ",
    ),
]


def realistic(rng: random.Random, i: int, version: int) -> dict[str, Any]:
    """Version ``version`` of the ``i``-th Event: a message of tens of bytes to a few KB (a
    sandbox or mount failure's detail runs long), one of 20 namespaces."""
    reason, type_, text = REASONS[i % len(REASONS)]
    ns, name = f"team-{i % 20}", f"web-{i}-{i * 7919 % 10**5:05d}"
    message = text.format(name=name, ns=ns, n=i % 250)
    roll = rng.random()
    if roll > 0.95:
        message += " " + secrets.token_hex(rng.randrange(750, 4000))  # 1.5-8 KB
    elif roll > 0.7:
        message += " " + secrets.token_hex(rng.randrange(100, 750))
    obj = event(f"u{i}", 1000 * i + version, message)
    obj["reason"], obj["type"], obj["count"] = reason, type_, version
    obj["metadata"]["namespace"] = obj["involvedObject"]["namespace"] = ns
    obj["involvedObject"]["name"] = name
    return obj


async def publish(nc: Any, objs: list[dict[str, Any]]) -> list[str]:
    """The Events as the bridge publishes them (its converter, structured mode); their ids."""
    conv = Converter(CLUSTER, "k8s.events", "structured")
    js = nc.jetstream()
    ids = []
    for obj in objs:
        msg = conv.convert(obj)  # type: ignore[arg-type]
        await js.publish(msg.subject, msg.payload, headers=msg.headers, timeout=30)
        ids.append(f"{obj['metadata']['uid']}/{obj['metadata']['resourceVersion']}")
    return ids


async def test_a_collector_taking_64_kib_gets_every_version_from_the_4_mib_default(
    tmp_path: Path, nats_server: Any, nc: Any
) -> None:
    collector = Collector(
        tmp_path / "otelcol", max_request_body_size=64 * KIB, debug_verbosity=None
    )
    await collector.start()
    rng = random.Random(39)
    objs = [realistic(rng, i, v) for i in range(400) for v in range(1, 6)]
    rng.shuffle(objs)
    truth = await publish(nc, objs)
    # the subscriber's defaults (batch 512, max_request_bytes 4 MiB, back-off 1 s to 30 s),
    # but the endpoint and info logs
    cfg = otlp_config(
        tmp_path,
        nats_server.url,
        collector.url,
        otlp={"flush_interval": "1s", "backoff_initial": "1s", "backoff_max": "30s"},
        nats={"batch": 512, "ack_wait": "30s"},
        log={"level": "info", "format": "json"},
    )
    assert settings.load(str(cfg)).otlp.max_request_bytes == 4 * MIB
    sub = Otlp(cfg, tmp_path / "otlp.log").start()
    try:
        await sub.wait_ready(30)
        started = time.monotonic()
        await eventually(lambda: set(ids_in(collector)) >= set(truth), 90, what="every version")
        took = time.monotonic() - started
        await eventually(lambda: acked_all(nc), 20, what="every message acked")
        got = ids_in(collector)
        # a refusal as too large took nothing: no copies from it; a 503 ("sending queue is
        # full") may have been taken by the pipeline all the same: one request's records again
        extra = sum(got[i] for i in truth) - len(truth)
        unavailable = await sub.metric("requests_total", 'result="unavailable"')
        assert extra <= 512 * unavailable, (extra, unavailable)
        info = await nc.jetstream().stream_info("K8S_EVENTS_DEAD")
        assert info.state.messages == 0
        assert await sub.metric("records_total", 'result="dead_lettered"') == 0
        assert await sub.metric("records_total", 'result="handed_back"') == 0
        # learned: under what the collector takes, and kept (a handful of lowerings)
        limit = await sub.metric("request_bytes_limit")
        assert 16 * KIB <= limit <= 64 * KIB
        lowered = sub.log_events("request_limit_lowered")
        assert 1 <= len(lowered) <= 10, lowered
        assert all("too large" in e["reason"] and e["status"] == 400 for e in lowered)
        assert await sub.metric("request_limit_changes_total", 'direction="lowered"') == len(
            lowered
        )
        errors = [e for e in sub.log_events() if e.get("level") == "error"]
        assert len(errors) <= 3, errors[:5]
        taken = await sub.metric("requests_total", 'result="accepted"')
        refused = await sub.metric("requests_total", 'result="refused"')
        print(
            f"\n{len(truth)} versions in {took:.1f} s; limit {limit:.0f} B; "
            f"{len(lowered)} lowered, {len(errors)} error lines, "
            f"{len(sub.log_events())} log lines; {taken:.0f} requests taken, {refused:.0f} refused"
        )
        sub.signal(signal.SIGTERM)
        assert await sub.wait_exit(30) == 0
    finally:
        sub.kill()
        collector.stop()


def shipped_config(tmp_path: Path, nats_url: str, endpoint: str) -> Path:
    """deploy/consumers/otlp.yaml's config as it ships, on this test's NATS and collector."""
    cfg = shipped.shipped("k8s_event_consumer.otlp")
    cfg["nats"]["servers"] = [nats_url]
    cfg["otlp"]["endpoint"] = endpoint
    cfg["http"] = {"host": "127.0.0.1", "port": free_port()}
    path = tmp_path / "otlp-shipped.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def test_fed_messages_up_to_max_payload_its_peak_rss_stays_under_the_bound(
    tmp_path: Path, nats_server: Any, nc: Any
) -> None:
    """Events whose messages nearly fill NATS' max_payload (1 MiB), among ordinary ones: the
    batch in hand is full in bytes at once, each request the largest the config allows, its
    gzip barely smaller (hex text: gzip takes half)."""
    collector = Collector(tmp_path / "otelcol", debug_verbosity=None)
    await collector.start()
    cfg = shipped_config(tmp_path, nats_server.url, collector.url)
    bound = OtlpBudget.of(settings.load(str(cfg)), max_payload=nc.max_payload)
    sub = Otlp(cfg, tmp_path / "otlp.log").start()
    try:
        await sub.wait_ready(30)
        idle = sub.memory()["VmRSS"] * KIB
        rng = random.Random(40)
        objs = []
        for i in range(BIG_EVENTS):
            if i % 4 == 3:
                objs.append(event(f"s{i}", i + 1))
                continue
            size = rng.randrange(nc.max_payload // 2, nc.max_payload - 8 * KIB)
            objs.append(event(f"b{i}", i + 1, secrets.token_hex(size // 2)))
        truth = await publish(nc, objs)
        await eventually(lambda: set(ids_in(collector)) >= set(truth), 90, what="every one")
        await eventually(lambda: acked_all(nc), 20)
        peak = sub.memory()["VmHWM"] * KIB
        print(
            f"\nidle RSS {idle / MIB:.1f} MiB, peak RSS {peak / MIB:.1f} MiB; bound "
            f"{bound.total_mib:.1f} MiB ({', '.join(f'{n} {v:.1f}' for n, v in bound.rows())})"
        )
        assert peak < SHIPPED_LIMIT
        assert peak < bound.total, f"{peak / MIB:.1f} MiB over the bound {bound.total_mib:.1f}"
    finally:
        sub.kill()
        collector.stop()
