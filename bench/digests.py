"""What the digests cost: the fold per 1,000 versions, the delay from a window's end to its
digests stored, and the memory of the program with N active series.

``python -m bench.digests [--versions 100000] [--series 1000] [--windows 8] [--quiet 5]
[--rss 1000,10000] [--runs 3] [--out FILE]``

1. **fold** (in this process, no I/O): ``--versions`` BackOff bumps of ``--series`` Pods as
   the bridge publishes them (the converter's structured CloudEvents), stored one millisecond
   apart (windows of 5 minutes); the time per 1,000 versions of ``events.decode`` then
   ``Projection.add`` (what the program does per message) and of ``Projection.add`` alone over
   the decoded versions. The median of ``--runs``.
2. **delay** (a real nats-server, ``k8s-event-digests`` as a real process, windows of 2 s,
   grace 300 ms): versions published at about 500/s over 50 Pods for ``--windows`` windows
   (each window closed by the next window's first version), then ``--quiet`` single bursts
   each followed by silence (each window closed by the server's clock: ``grace`` past its end
   and the read caught up). Per window, the time from its end (the server's clock) to its
   last digest's stored time (the server's clock too): median and max.
3. **rss**: for each N of ``--rss``, a fresh program, N Pods' versions published into one
   open window (a minute long), VmRSS once it has folded them all, against the same program
   folding nothing.

Prints the figures and, with ``--out``, writes them as JSON (docs/performance.md, "Digests",
gives one run). Nothing is asserted: the exit code is 0 unless the benchmark itself broke.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats

from bridge.core.converting import Converter
from bridge.jetstream.streams import wanted_config
from bridge.settings import NatsSettings
from k8s_event_common import cloudevents, digests, streams
from k8s_event_consumer import events
from k8s_event_consumer.digests.fold import Projection
from k8s_event_sim.configs import subscriber_config
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.programs import ConsumerProcess, memory_kb
from k8s_event_sim.waiting import eventually

STREAM, DIGESTS, PREFIX = "K8S_EVENTS", "K8S_DIGESTS", "k8s.digests"
MODULE = "k8s_event_consumer.digests"
CONVERT = Converter("bench", "k8s.events", "structured")
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def bump(pod: int, count: int, at: datetime) -> Any:
    """The bridge's message of Pod ``pod``'s BackOff Event at ``count`` (the old recorder's
    shape), first seen at ``at``."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return CONVERT.convert(
        {
            "metadata": {
                "name": f"web-{pod}.ev",
                "namespace": f"team-{pod % 50}",
                "uid": f"ev-{pod}",
                "resourceVersion": str(count),
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": f"team-{pod % 50}",
                "name": f"web-{pod}",
                "uid": f"pod-{pod}",
            },
            "reason": "BackOff",
            "message": f"Back-off restarting failed container web in pod web-{pod}",
            "type": "Warning",
            "count": count,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": "kubelet", "host": "node-1"},
        }
    )


# --- 1. the fold ------------------------------------------------------------------------------


def fold_cost(versions: int, series: int, runs: int) -> dict[str, Any]:
    msgs = [bump(i % series, 1 + i // series, T0) for i in range(versions)]
    stored = [T0 + timedelta(milliseconds=i) for i in range(versions)]
    decoded = [events.decode(m.subject, m.headers, m.payload).event for m in msgs]
    with_decode, alone, out = [], [], 0
    for _ in range(runs):
        p = Projection(window=300, idle=7200, max_series=20000, stream=STREAM)
        t = time.perf_counter()
        for seq, (m, when) in enumerate(zip(msgs, stored, strict=True), start=1):
            out += len(p.add(seq, when, events.decode(m.subject, m.headers, m.payload).event))
        out += len(p.close(datetime(9999, 1, 1, tzinfo=UTC), 0))
        with_decode.append((time.perf_counter() - t) / versions * 1e6)  # ms per 1,000
        p = Projection(window=300, idle=7200, max_series=20000, stream=STREAM)
        t = time.perf_counter()
        for seq, (ev, when) in enumerate(zip(decoded, stored, strict=True), start=1):
            out += len(p.add(seq, when, ev))
        out += len(p.close(datetime(9999, 1, 1, tzinfo=UTC), 0))
        alone.append((time.perf_counter() - t) / versions * 1e6)  # ms per 1,000
    return {
        "versions": versions,
        "series": series,
        "message_bytes": round(statistics.mean(len(m.payload) for m in msgs)),
        "digests_per_run": out // (2 * runs),
        "ms_per_1000_with_decode": round(statistics.median(with_decode), 2),
        "ms_per_1000_fold_alone": round(statistics.median(alone), 2),
        "runs_with_decode": [round(x, 2) for x in with_decode],
        "runs_fold_alone": [round(x, 2) for x in alone],
    }


# --- 2. and 3. the program on a real nats-server ----------------------------------------------


async def prepared(url: str) -> Any:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(wanted_config(NatsSettings()))
    await streams.provision(nc, streams.digest_stream(DIGESTS, PREFIX, max_age=30 * 86400.0))
    return nc


def program(tmp: Path, url: str, n: int, **digest: Any) -> ConsumerProcess:
    cfg = subscriber_config(
        tmp,
        MODULE,
        {"servers": [url]},
        tmp / "none",
        name=f"digests-{n}.yaml",
        digests=digest,
        log={"level": "warning", "format": "json"},
    )
    return ConsumerProcess(cfg, tmp / f"digests-{n}.log", module=MODULE, keep_session=True)


async def publish(nc: Any, msgs: list[Any]) -> None:
    js = nc.jetstream()
    for i in range(0, len(msgs), 500):
        await asyncio.gather(
            *(js.publish(m.subject, m.payload, headers=m.headers) for m in msgs[i : i + 500])
        )


async def stored_digests(nc: Any) -> list[tuple[digests.Digest, datetime]]:
    """Every digest stored, with the time the server stored it."""
    js = nc.jetstream()
    info = await js.stream_info(DIGESTS)
    out: list[tuple[digests.Digest, datetime]] = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await js.get_msg(DIGESTS, seq=seq)
        env = cloudevents.decode(raw.headers, raw.data or b"")
        assert raw.time is not None
        out.append((digests.from_envelope(env), raw.time))
    return out


async def last_seq(nc: Any) -> int:
    return int((await nc.jetstream().stream_info(STREAM)).state.last_seq)


async def covered(nc: Any, seq: int) -> None:
    """Until the digests stored name the versions up to ``seq``: their windows are closed."""

    async def done() -> bool:
        got = await stored_digests(nc)
        return bool(got) and max(x.last_seq for x, _ in got) >= seq

    await eventually(done, 30, 0.1, what=f"the digests up to sequence {seq}")


def quantiles(values: list[float]) -> dict[str, float]:
    return {
        "windows": len(values),
        "median_s": round(statistics.median(values), 3),
        "max_s": round(max(values), 3),
    }


async def delay(url: str, tmp: Path, windows: int, quiet: int) -> dict[str, Any]:
    nc = await prepared(url)
    d = program(tmp, url, 0, window="2s", grace="300ms").start()
    counts: dict[int, int] = {}

    def next_bumps(n: int, offset: int) -> list[Any]:
        now = datetime.now(UTC)
        out = []
        for i in range(n):
            pod = (offset + i) % 50
            counts[pod] = counts.get(pod, 0) + 1
            out.append(bump(pod, counts[pod], now))
        return out

    try:
        await d.wait_ready(30)
        # busy: a version every 2 ms for ``windows`` windows of 2 s
        began = time.monotonic()
        n = 0
        while time.monotonic() - began < 2.0 * windows:
            await publish(nc, next_bumps(10, n))
            n += 10
            await asyncio.sleep(0.02)
        busy_through = await last_seq(nc)
        await covered(nc, busy_through)  # the last busy window closed by the clock: not counted
        # quiet: a burst, then nothing until its window's digests are stored
        for _ in range(quiet):
            await publish(nc, next_bumps(20, n))
            n += 20
            await covered(nc, await last_seq(nc))
        got = await stored_digests(nc)
    finally:
        await d.stop()
        await nc.close()
    last: dict[datetime, datetime] = {}
    closed_by: dict[datetime, str] = {}
    for x, when in got:
        last[x.end] = max(last.get(x.end, when), when)
        closed_by[x.end] = "busy" if x.last_seq <= busy_through else "quiet"
    ends = sorted(last)
    busy_ends = [e for e in ends if closed_by[e] == "busy"][1:-1]  # not the first: partial
    quiet_ends = [e for e in ends if closed_by[e] == "quiet"]
    return {
        "window_s": 2,
        "grace_s": 0.3,
        "versions": n,
        "digests": len(got),
        "busy": quantiles([(last[e] - e).total_seconds() for e in busy_ends]),
        "quiet": quantiles([(last[e] - e).total_seconds() for e in quiet_ends]),
    }


async def rss(tmp: Path, sizes: list[int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for k, n in enumerate([0, *sizes]):
        server = NatsServer(store_dir=str(tmp / f"nats-{k}")).start()  # a fresh stream each
        url = server.url
        nc = await prepared(url)
        d = program(tmp, url, 100 + k, window="60s", grace="1s").start()
        try:
            await d.wait_ready(30)
            now = datetime.now(UTC)
            await publish(nc, [bump(p, c, now) for c in (1, 2) for p in range(n)])

            async def folded(want: int = 2 * n, d: ConsumerProcess = d) -> bool:
                m = await d.metrics()
                return m.get("versions_total", 0) >= want and (
                    want > 0 or m.get("read_sequence", -1) >= 0
                )

            await eventually(folded, 120, 0.2, what=f"{n} series folded")
            await asyncio.sleep(1.0)
            m = await d.metrics()
            mem = memory_kb(d.pid)
            rows.append(
                {
                    "series": n,
                    "versions": 2 * n,
                    "series_held": m.get("series_held"),
                    "rss_mb": round(mem["VmRSS"] / 1024, 1),
                    "peak_mb": round(mem["VmHWM"] / 1024, 1),
                }
            )
        finally:
            await d.stop()
            await nc.close()
            server.stop()
    base = rows[0]["rss_mb"]
    for r in rows[1:]:
        r["kb_per_series"] = round((r["rss_mb"] - base) * 1024 / r["series"], 2)
    return rows


async def on_server(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-digests-"))
    with NatsServer(store_dir=str(tmp / "nats")) as server:
        out: dict[str, Any] = {"delay": await delay(server.url, tmp, args.windows, args.quiet)}
    out["rss"] = await rss(tmp, args.rss)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.digests", description=__doc__.split("\n")[0])
    p.add_argument("--versions", type=int, default=100_000)
    p.add_argument("--series", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--windows", type=int, default=8, help="busy windows of 2 s")
    p.add_argument("--quiet", type=int, default=5, help="quiet windows, each a burst")
    p.add_argument("--rss", default="1000,10000", help="active series, comma-separated")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    args.rss = [int(x) for x in args.rss.split(",") if x]
    result: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(timespec="seconds")}
    result["fold"] = fold_cost(args.versions, args.series, args.runs)
    print(json.dumps({"fold": result["fold"]}), flush=True)
    result.update(asyncio.run(on_server(args)))
    print(json.dumps({k: result[k] for k in ("delay", "rss")}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
