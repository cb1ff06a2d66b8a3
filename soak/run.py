"""The soak test: the real bridge process for minutes, steady Events and a fault schedule.

``python -m soak.run [--seconds 600] [--rate 300]`` (``make soak``; CI runs 120 s of it as
tests/integration/test_soak.py). A simulated API server in this process, a real nats-server,
the bridge as a child process; Events written at a steady rate (new ones and count bumps),
while a schedule scaled to the run's length injects, after a warm-up:

1. watch drops: every watch reset mid-stream after some lines, then ended cleanly after some;
2. a quiet period: no Events for 2.5 read timeouts (the watch closes quietly and reopens);
3. a NATS restart: nats-server killed, started again on the same port and store;
4. a 410: connections refused while Events keep coming, history compacted, accepted again;
   the bridge's next watch gets 410 Expired, it relists and reports one ``gap``;
5. JetStream silent: a plain nats-server on the same port, a subscriber taking the publishes
   and answering none (an R3 stream without quorum), a minute in the 10-minute run; then
   JetStream back.

Every 2 s: the bridge's RSS and open descriptors (/proc) and every number of ``/status``
``internals``. At the end the writer stops, the bridge catches up, the last sample is taken,
SIGTERM, and the stream is read back. The verdict (soak/verdict.py): flat after warm-up, stream
= truth. Results: a report on stdout, ``soak/results/<timestamp>-<seconds>s.json`` (every sample)
and ``latest-<seconds>s.json``; exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats

from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.configs import bridge_config
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.programs import BridgeProcess, memory_kb
from k8s_event_sim.readback import stream_messages
from k8s_event_sim.waiting import NotMet, eventually
from k8s_event_sim.workload import Workload
from soak import verdict
from soak.verdict import Bounds, Version

RESULTS = Path(__file__).parent / "results"
REASONS = ("BackOff", "OOMKilling", "FailedScheduling", "Unhealthy")  # README's example filter
EXCLUDED_NAMESPACES = ("kube-system",)
CLUSTER = "soak"
SCOPE = "*"


@dataclass
class Settings:
    seconds: float = 600.0
    rate: float = 300.0  # Events written per second (new ones and count bumps)
    bump_ratio: float = 0.3
    read_timeout: float = 3.0
    sample_every: float = 2.0
    warmup: float = 0.2  # the first fifth of the run is warm-up
    event_ttl: float = 180.0  # the simulated API server deletes Events this long after a write
    seed: int = 1
    queue_events: int = 1000
    queue_bytes: int = 4 * 1024 * 1024
    inflight: int = 256
    inflight_bytes: int = 2 * 1024 * 1024
    out_dir: Path = RESULTS

    @property
    def silence(self) -> float:
        """How long JetStream answers nothing: a minute in 10, at least 20 s."""
        return max(20.0, self.seconds / 10)

    def bounds(self) -> Bounds:
        return Bounds(self.queue_events, self.queue_bytes, self.inflight, self.inflight_bytes)


@dataclass
class FaultRecord:
    name: str
    start: float
    end: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


def kept(obj: dict[str, Any]) -> bool:
    """What the bridge's filter (the soak's config) keeps, written out independently."""
    return obj.get("reason") in REASONS and obj["metadata"]["namespace"] not in EXCLUDED_NAMESPACES


class Writer:
    """Steady Events into the simulated API server (the workload of ``k8s_event_sim.workload``);
    every version written is recorded with what the filter keeps."""

    def __init__(self, sim: SimApiServer, rate: float, bump_ratio: float, seed: int) -> None:
        self.rate = rate
        self.workload = Workload(sim, seed, bump_ratio=bump_ratio)
        self.versions: list[Version] = []
        self.paused = False

    def one(self) -> None:
        obj = self.workload.step()
        if obj is not None:
            meta = obj["metadata"]
            rv = int(meta["resourceVersion"])
            self.versions.append(Version(f"{meta['uid']}/{rv}", meta["uid"], rv, kept(obj)))

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        owed = 0.0
        while not stop.is_set():
            await asyncio.sleep(0.02)
            now = loop.time()
            if not self.paused:
                owed += (now - last) * self.rate
                while owed >= 1:
                    self.one()
                    owed -= 1
            last = now


class Soak:
    def __init__(self, settings: Settings, work: Path) -> None:
        self.s = settings
        self.work = work
        self.sim = SimApiServer(event_ttl=settings.event_ttl)
        self.nats = NatsServer(store_dir=str(work / "nats"))
        self.writer = Writer(self.sim, settings.rate, settings.bump_ratio, settings.seed)
        self.bridge: BridgeProcess | None = None
        self.samples: list[dict[str, Any]] = []
        self.faults: list[FaultRecord] = []
        self.phase = "warm-up"
        self.t0 = 0.0
        self.checks: list[verdict.Check] = []
        self.expired_at: tuple[int, int] | None = None  # (bridge rv before, compacted to)

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- the parts -------------------------------------------------------------------------

    def config(self) -> Path:
        """The tests' bridge_config (test-sized), with the soak's changes."""
        s = self.s
        kubeconfig = write_kubeconfig(self.work / "kubeconfig", self.sim.url)
        return bridge_config(
            self.work,
            self.nats.url,
            kubeconfig,
            name="bridge.yaml",
            cluster={"name": CLUSTER},
            kubernetes={
                "read_timeout": f"{s.read_timeout}s",
                "watch_timeout_min": "1m",
                "watch_timeout_max": "2m",
                "backoff": {"initial": "100ms", "max": "2s", "reset_after": "30s"},
            },
            filter={
                "reasons": list(REASONS),
                "exclude_namespaces": list(EXCLUDED_NAMESPACES),
            },
            nats={"max_inflight": s.inflight, "max_inflight_bytes": s.inflight_bytes},
            queue={"max_events": s.queue_events, "max_bytes": s.queue_bytes},
            checkpoint={"interval": "500ms"},
            http={"unready_after": "5s"},
            log={"level": "info"},
        )

    async def status(self) -> dict[str, Any] | None:
        assert self.bridge is not None
        try:
            code, text = await self.bridge.get("/status")
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None
        if code not in (200, 503):
            return None
        doc: dict[str, Any] = json.loads(text)
        return doc

    async def metrics(self) -> dict[str, float]:
        assert self.bridge is not None
        return await self.bridge.metrics()

    async def sample(self) -> dict[str, Any]:
        assert self.bridge is not None
        pid = self.bridge.pid
        row: dict[str, Any] = {"t": round(self.now(), 2), "phase": self.phase}
        try:
            row["rss_kib"] = memory_kb(pid)["VmRSS"]
            row["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, KeyError):
            row["rss_kib"] = row["fds"] = None
        status = await self.status()
        row["internals"] = None if status is None else status.get("internals")
        row["ready"] = None if status is None else status.get("ready")
        row["written"] = len(self.writer.versions)
        self.samples.append(row)
        return row

    async def sampling(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.s.sample_every)

    async def compacting(self, stop: asyncio.Event) -> None:
        """Keep the simulator's history short: compact to the bridge's saved checkpoint, which
        the bridge has passed on, so this alone never expires its watch."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 10)
            status = await self.status()
            saved = status and status["scopes"].get(SCOPE, {}).get("checkpoint")
            if isinstance(saved, int) and saved <= self.sim.resource_version:
                self.sim.compact(saved)

    # -- the faults ------------------------------------------------------------------------

    async def fault(self, name: str, body: Callable[[FaultRecord], Awaitable[None]]) -> None:
        record = FaultRecord(name, round(self.now(), 1))
        self.phase = name
        print(f"  {record.start:7.1f}s  {name} ...", flush=True)
        try:
            await body(record)
        finally:
            record.end = round(self.now(), 1)
            self.faults.append(record)
            self.phase = "steady"

    async def watch_drops(self, rec: FaultRecord) -> None:
        span = max(6.0, self.s.seconds * 0.04)
        lines = max(50, int(self.s.rate * 0.7))  # about one a second at the rate written
        self.sim.faults.reset_watches_after = lines
        await asyncio.sleep(span)
        self.sim.faults.reset_watches_after = None
        self.sim.faults.drop_watches_after = lines
        await asyncio.sleep(span)
        self.sim.faults.drop_watches_after = None
        rec.detail = {
            "after_lines": lines,
            "resets": self.sim.faults.injected["reset_watch"],
            "drops": self.sim.faults.injected["drop_watch"],
        }

    async def quiet(self, rec: FaultRecord) -> None:
        before = (await self.metrics()).get('watch_restarts_total{cause="quiet"}', 0.0)
        # nothing changes: no writes, and no Event expires (a deletion is a change too)
        self.writer.paused = True
        ttl, self.sim.event_ttl = self.sim.event_ttl, float("inf")
        await asyncio.sleep(2.5 * self.s.read_timeout)
        self.sim.event_ttl = ttl
        self.writer.paused = False
        after = (await self.metrics()).get('watch_restarts_total{cause="quiet"}', 0.0)
        rec.detail = {"seconds": 2.5 * self.s.read_timeout, "quiet_rewatches": after - before}
        self.checks.append(
            verdict.Check(
                "quiet_is_a_normal_close",
                after - before >= 1,
                f"{after - before:g} quiet re-watches in {2.5 * self.s.read_timeout:g} s",
            )
        )

    async def nats_restart(self, rec: FaultRecord) -> None:
        down = max(3.0, self.s.seconds / 100)
        self.nats.kill()
        await asyncio.sleep(down)
        self.nats.start()
        rec.detail = {"down_seconds": down, "signal": "SIGKILL"}

    async def expired(self, rec: FaultRecord) -> None:
        """Connections refused while Events (and count bumps) keep coming, history compacted to
        now, connections accepted: the bridge's watch resumes from a compacted version: 410."""
        status = await self.status()
        before = status["scopes"][SCOPE]["resource_version"] if status else None
        await self.sim.refuse_connections()
        await asyncio.sleep(max(3.0, self.s.seconds / 100))
        self.sim.compact()
        compacted = self.sim.compacted
        await self.sim.accept_connections()
        self.expired_at = (before, compacted) if isinstance(before, int) else None
        rec.detail = {"bridge_rv_before": before, "compacted_to": compacted}

    async def jetstream_silent(self, rec: FaultRecord) -> None:
        self.nats.kill()
        plain = NatsServer(
            store_dir=self.nats.store_dir + "-plain", port=self.nats.port, jetstream=False
        ).start()
        taken = 0
        try:
            nc = await nats.connect(plain.url)

            async def take(msg: Any) -> None:
                nonlocal taken
                taken += 1

            await nc.subscribe("k8s.events.>", cb=take)
            await asyncio.sleep(self.s.silence)
            await nc.close()
        finally:
            plain.cleanup()
            shutil.rmtree(plain.store_dir, ignore_errors=True)
        self.nats.start()
        rec.detail = {"seconds": self.s.silence, "publishes_unanswered": taken}

    async def schedule(self) -> None:
        """The faults after the warm-up, each at its share of the run (or after the one
        before it has ended)."""
        d = self.s.seconds
        plan: list[tuple[float, str, Callable[[FaultRecord], Awaitable[None]]]] = [
            (0.22, "watch_drops", self.watch_drops),
            (0.34, "quiet", self.quiet),
            (0.42, "nats_restart", self.nats_restart),
            (0.50, "expired_410", self.expired),
            (0.58, "jetstream_silent", self.jetstream_silent),
        ]
        for share, name, body in plan:
            wait = share * d - self.now()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.fault(name, body)
            await asyncio.sleep(2)
        self.phase = "steady"

    # -- the run ---------------------------------------------------------------------------

    async def caught_up(self, timeout: float = 120.0) -> bool:
        """The checkpoint is past everything written and nothing is held."""
        top = self.sim.resource_version

        async def done() -> bool:
            status = await self.status()
            if not status:
                return False
            saved = status["scopes"].get(SCOPE, {}).get("checkpoint")
            internals = status.get("internals") or {}
            return (
                isinstance(saved, int)
                and saved >= top
                and internals.get("queue") == 0
                and internals.get("publisher_pending") == 0
            )

        try:
            return await eventually(done, timeout, 0.5, retry_on=())
        except NotMet:
            return False

    async def run(self) -> dict[str, Any]:
        s = self.s
        await self.sim.start()
        self.nats.start()
        self.bridge = BridgeProcess(self.config(), self.work / "bridge.log")
        # one connection to the bridge's HTTP server whatever asks: its handler is one of the
        # tasks counted, its socket one of the descriptors
        self.bridge.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1), timeout=aiohttp.ClientTimeout(total=5)
        )
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        try:
            self.t0 = time.monotonic()
            self.bridge.start()
            await self.bridge.wait_ready(timeout=30)
            tasks = [
                asyncio.create_task(self.writer.run(stop)),
                asyncio.create_task(self.sampling(stop)),
                asyncio.create_task(self.compacting(stop)),
            ]
            schedule = asyncio.create_task(self.schedule())
            await asyncio.sleep(max(0.0, s.seconds - self.now()))
            if not schedule.done():
                print("  the schedule ran past the end: waiting for it", flush=True)
            await schedule
            written_until = round(self.now(), 1)
            self.writer.paused = True  # stop writing; keep sampling
            self.phase = "catch-up"
            up = await self.caught_up()
            self.checks.append(
                verdict.Check(
                    "caught_up", up, f"checkpoint past revision {self.sim.resource_version}"
                )
            )
            stop.set()
            await asyncio.gather(*tasks)
            self.phase = "end"
            await self.sample()  # the last sample: healthy, caught up
            end_metrics = await self.metrics()
            code = await self.bridge.stop()
            self.checks.append(verdict.Check("sigterm_exit_0", code == 0, f"exit {code}"))
            ids, gaps = await read_stream(self.nats.url)
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            if self.bridge is not None:
                self.bridge.kill()
                if self.bridge.session is not None:
                    await self.bridge.session.close()
            self.nats.cleanup()
            await self.sim.stop()
        return self.verdicts(written_until, ids, gaps, end_metrics)

    def verdicts(
        self,
        written_until: float,
        ids: list[str],
        gaps: list[tuple[int, int]],
        end_metrics: dict[str, float],
    ) -> dict[str, Any]:
        s = self.s
        warmup_end = s.warmup * s.seconds
        last_fault = max((f.end for f in self.faults), default=warmup_end)
        flat = verdict.flat(self.samples, warmup_end, s.bounds(), tail_from=last_fault + 10)
        expirations = end_metrics.get('watch_restarts_total{cause="expired"}', 0.0)
        stream_checks, figures = verdict.truth(
            self.writer.versions, ids, gaps, expired_faults=1 if self.expired_at else 0
        )
        checks = [*self.checks, *flat.checks, *stream_checks.checks]
        if self.expired_at is not None:
            before, compacted = self.expired_at
            # the gap starts where the bridge was when its watch ended, before the compaction,
            # and ends at the relist, after it
            one = len(gaps) == 1 and before <= gaps[0][0] < compacted <= gaps[0][1]
            checks.append(
                verdict.Check(
                    "the_410_made_one_gap",
                    expirations >= 1 and one,
                    f"{expirations:g} 410s met, gaps {gaps}, bridge at {before}, "
                    f"compacted to {compacted}",
                )
            )
        return {
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items()},
            "warmup_end": warmup_end,
            "written_until": written_until,
            "duration": round(self.now(), 1),
            "faults": [asdict(f) for f in self.faults],
            "stream": figures,
            "metrics": {
                k: v
                for k, v in end_metrics.items()
                if k.startswith(
                    (
                        "events_",
                        "watch_restarts_total",
                        "relists_total",
                        "gaps_total",
                        "publish_retries_total",
                        "publish_duplicates_total",
                    )
                )
            },
            "checks": [asdict(c) for c in checks],
            "ok": all(c.ok for c in checks),
            "samples": self.samples,
        }


async def read_stream(url: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Every Event message's id, and the (from, to] of every ``gap`` status event."""
    ids: list[str] = []
    gaps: list[tuple[int, int]] = []
    for subject, headers, body in await stream_messages(url, timeout=5):
        if "._bridge." in subject:
            if subject.endswith("._bridge.gap"):
                data = msgspec.json.decode(body)["data"]
                gaps.append((int(data["fromResourceVersion"]), int(data["toResourceVersion"])))
            continue
        ids.append(headers["Nats-Msg-Id"])
    return ids, gaps


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def summary(result: dict[str, Any]) -> str:
    """The short report ``make soak`` prints."""
    samples = result["samples"]
    warm_end = result["warmup_end"]
    after = [x for x in samples if x["t"] >= warm_end and x.get("rss_kib")]
    warm = [x for x in samples if x["t"] < warm_end and x.get("rss_kib")]
    end = samples[-1]
    st = result["stream"]
    s = result["settings"]
    lines = [
        f"soak: {s['seconds']:g} s at {s['rate']:g} Events/s, warm-up {warm_end:g} s; "
        f"written for {result['written_until']:g} s, {result['duration']:g} s in all",
        f"  events: {st['written_versions']} versions written, {st['kept_versions']} kept by "
        f"the filter; stream: {st['stream_event_messages']} Event messages "
        f"({st['stream_distinct']} distinct), {st['duplicates']} duplicates, "
        f"{st['missing_in_gap']} missing inside the gap, {st['missing_unexplained']} lost, "
        f"{st['gaps']} gap",
        "  faults:",
    ]
    for f in result["faults"]:
        detail = ", ".join(f"{k}={v}" for k, v in f["detail"].items())
        lines.append(f"    {f['start']:7.1f}-{f['end']:7.1f} s  {f['name']:<17} {detail}")
    rss_after = [x["rss_kib"] for x in after]
    lines += [
        f"  RSS MiB: warm-up peak {mib(max(x['rss_kib'] for x in warm))}, after warm-up "
        f"min {mib(min(rss_after))} max {mib(max(rss_after))}, end {mib(end['rss_kib'])}",
        f"  fds: warm-up max {max(x['fds'] for x in warm)}, after max "
        f"{max(x['fds'] for x in after)}, end {end['fds']}",
    ]
    keys = verdict.internal_keys(samples)
    maxima = []
    for k in keys:
        vals = [x["internals"][k] for x in samples if x.get("internals") and k in x["internals"]]
        maxima.append(f"{k} {max(vals)}/{end['internals'].get(k)}")
    lines.append("  internals max/end: " + ", ".join(maxima))
    failed = [c for c in result["checks"] if not c["ok"]]
    lines.append(
        f"  checks: {len(result['checks']) - len(failed)}/{len(result['checks'])} passed"
        + ("" if not failed else "; FAILED:")
    )
    for c in failed:
        lines.append(f"    {c['name']}: {c['detail']}")
    lines.append("  PASS" if result["ok"] else "  FAIL")
    return "\n".join(lines)


def save(result: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    seconds = int(result["settings"]["seconds"])
    path = out_dir / f"{stamp}-{seconds}s.json"
    text = json.dumps(result, indent=1)
    path.write_text(text)
    (out_dir / f"latest-{seconds}s.json").write_text(text)
    return path


async def soak(settings: Settings) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bridge-soak-") as tmp:
        work = Path(tmp)
        runner = Soak(settings, work)
        try:
            return await runner.run()
        except BaseException:
            log = work / "bridge.log"
            if log.exists():
                print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
            raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak.run", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    parser.add_argument("--rate", type=float, default=float(os.environ.get("SOAK_RATE", 300)))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    settings = Settings(seconds=args.seconds, rate=args.rate, out_dir=args.out)
    print(f"soak: {settings.seconds:g} s at {settings.rate:g} Events/s", flush=True)
    result = asyncio.run(soak(settings))
    path = save(result, settings.out_dir)
    print(summary(result))
    print(f"  samples: {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
