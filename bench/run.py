"""The end-to-end benchmark: ``python -m bench.run [--events N] [--quick]`` (``make bench``).

One run, one real nats-server (JetStream, file storage), one simulated API server in this
process, the bridge as a real child process (``python -m bridge run``):

1. throughput: the bridge is stopped, N Events are written into the simulated API server
   (untimed), the bridge is started and resumes its watch from its checkpoint, so the N changes
   stream from history as fast as it reads them. Rate from its first to its N-th ack
   (``events_published_total`` polled at 20 Hz), CPU seconds of the bridge process over that
   window, peak RSS (VmHWM) and RSS after the run (VmRSS). Repeated ``--runs`` times;
2. the reference pipelines over the same N changes, right after each bridge run, each a child
   process reading the watch from the same start resourceVersion into its own stream: the
   Python one (``bench/reference.py``, stream ``BENCH_REF`` on ``ref.>``), then the Go one
   (``bench/goref``, built and cached by ``e2e/build-go-tool.sh goref`` through
   ``tests/standins/gotools.py``; stream ``BENCH_GOREF`` on ``goref.>``); the ratios
   bridge/reference.
   Without a Go binary (no ``go``, the module proxy refusing) the Go figures say why and the
   rest runs;
3. latency at a steady rate (default 1k events/s): publish latency from the bridge's
   histogram, and end to end from the write into the API server to a JetStream subscriber;
4. time from process start to the first 200 on /readyz (every start);
5. memory during a NATS outage: nats-server killed, Events written at 2k/s, RSS and queue
   depth sampled each second, nats-server restarted on the same port and store, the stream
   read back: every version exactly once.

Results: a table on stdout, ``bench/results/<timestamp>.json``, ``latest.json`` and
``latest.png``. Targets are reported, never enforced: the exit code is 0 unless the benchmark
itself broke.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import gc
import importlib.metadata
import importlib.util
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import nats
import yaml
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from bench import report
from bench.procs import histogram, histogram_quantile, machine_busy_seconds
from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.configs import bridge_config
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import NatsServer, binary
from k8s_event_sim.programs import BridgeProcess, cpu_seconds
from k8s_event_sim.waiting import NotMet, eventually
from k8s_event_sim.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CLUSTER = "bench"
STREAM = "K8S_EVENTS"
EVENT_SUBJECTS = f"k8s.events.{CLUSTER}.*.*.*"  # events; status events have one token less
REF_STREAM = "BENCH_REF"
GOREF_STREAM = "BENCH_GOREF"
# each reference pipeline (bench/reference.py: python, bench/goref: go): its stream, subjects
REFERENCES = {"python": (REF_STREAM, "ref.>"), "go": (GOREF_STREAM, "goref.>")}
LATENCY_METRIC = "publish_latency_seconds"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1)."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def feed_op(feed: Workload) -> str:
    """One operation of the feed (``k8s_event_sim.workload``: ~30 % count bumps of a recent Event,
    else a new one); the id of the version written (``<uid>/<resourceVersion>`` = the
    CloudEvent id = ``Nats-Msg-Id``). A name drawn twice is drawn again."""
    while feed.step() is None:
        pass
    return feed.ids[-1]


def encode_history(sim: SimApiServer) -> None:
    """Serialise the new history's watch lines now (untimed): the simulator does it once per
    change on first use and caches it, so without this the bridge, which reads first, would
    pay for the feed's encoding and the reference would not."""
    for change in getattr(sim, "_log", ()):
        change.line()


def quiet_gc() -> None:
    """Collect once, then move everything alive out of the collector's way: the simulated API
    server holds hundreds of thousands of Events and a full collection would stall it."""
    gc.collect()
    gc.freeze()


async def event_count(js: Any) -> int:
    info = await js.stream_info(STREAM, subjects_filter=EVENT_SUBJECTS)
    return sum((info.state.subjects or {}).values())


def bridge_source() -> str:
    """A short hash of bridge/'s Python sources: the tree may change between two starts."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def machine_facts() -> dict[str, Any]:
    def version(pkg: str) -> str | None:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return None

    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "loadavg_at_start": os.getloadavg(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "uvloop": importlib.util.find_spec("uvloop") is not None,
        "nats_server": run(binary(), "--version").strip(),
        "packages": {p: version(p) for p in ("nats-py", "msgspec", "aiohttp", "prometheus_client")},
        "git_commit": run("git", "rev-parse", "--short", "HEAD").strip(),
        "bridge_uncommitted_changes": bool(run("git", "status", "--porcelain", "bridge").strip()),
        "bridge_source": bridge_source(),
    }


def build_goref() -> dict[str, Any]:
    """bench/goref's binary, built when the cached one is missing or stale
    (tests/standins/gotools.py, ``e2e/build-go-tool.sh goref``: from the Go module proxy, cached
    outside the repo, keyed by a hash of its source): ``binary``, ``version`` (its ``--version``),
    ``build_s``; or ``binary`` None and ``error``, why it can not be built."""
    from tests.standins import gotools

    t = time.monotonic()
    info: dict[str, Any] = {"binary": None, "version": None, "error": None}
    try:
        path = gotools.ensure("goref")
    except gotools.ToolError as exc:
        text = str(exc)
        lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
        # the script's ERROR line and the last line of go's own (the cause)
        said = [line.split("ERROR: ", 1)[1] for line in lines if "ERROR: " in line]
        cause = [line for line in lines if not line.startswith(("build-go-tool:", "go: down"))]
        if gotools.go_missing():
            info["error"] = "go is not installed"
        else:
            info["error"] = "; ".join(said[-1:] + cause[-1:]) or text.splitlines()[0]
        info["error_detail"] = text[-4000:]
    else:
        info["binary"] = str(path)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [str(path), "--version"], capture_output=True, text=True, timeout=30
            )
            info["version"] = done.stdout.strip()
    info["build_s"] = time.monotonic() - t
    return info


def reference_figures(r: dict[str, Any], n: int) -> dict[str, Any]:
    """A reference's figures from its JSON line (bench/reference.py and bench/goref print the
    same fields): rate from its first to its N-th ack, its own CPU seconds per 1k events acked.
    The CPU shares are filled in by the caller, from its samples."""
    window = r["last_ack"] - r["first_ack"]
    return {
        "complete": r["count"] >= n and not r["errors"],
        "events_per_s": (r["count"] - 1) / window if window > 0 else None,
        "window_s": window,
        "cpu_s_per_1k": r["cpu_s"] / (r["count"] / 1000) if r["count"] else None,
        "peak_rss_mb": r["peak_rss_kb"] / 1024,
        "cpu_share": r["cpu_s"] / window if window > 0 else None,
        "feed_cpu_share": None,
        "nats_cpu_share": None,
        "other_cpu_share": None,
        "ack_errors": r["errors"],
        "window": r["window"],
    }


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="bridge-bench-"))
        self.nats = NatsServer(store_dir=str(self.tmp / "nats"))
        self.sim = SimApiServer(bookmark_interval=1.0)
        self.feed = Workload(self.sim, 42, bump_ratio=0.3)
        self.nc: Any = None
        self.js: Any = None
        self.bridge: BridgeProcess | None = None
        self.config: Path | None = None
        self.source = ""  # hash of bridge/'s sources when the bridge was last started
        self.starts: list[dict[str, Any]] = []
        self.result: dict[str, Any] = {}
        self.goref: dict[str, Any] = {"binary": None, "error": "not built yet"}

    # -- set-up ----------------------------------------------------------------------------

    async def setup(self) -> None:
        self.nats.start()
        await self.sim.start("127.0.0.1", 0)
        await self.connect_nats()
        for stream, subjects in REFERENCES.values():
            await self.js.add_stream(
                StreamConfig(
                    name=stream,
                    subjects=[subjects],
                    storage=StorageType.FILE,
                    duplicate_window=7200,
                )
            )
        self.goref = await asyncio.to_thread(build_goref)
        self.result["goref"] = self.goref
        if self.goref["binary"] is None:
            log(f"no Go reference: {self.goref['error']} (the Python reference still runs)")
        else:
            log(f"Go reference: {self.goref['version']} ({self.goref['build_s']:.1f}s to find)")
        kubeconfig = write_kubeconfig(self.tmp / "kubeconfig", self.sim.url, token="bench")
        # the tests' bridge_config (test-sized), with the benchmark's changes
        self.config = bridge_config(
            self.tmp,
            self.nats.url,
            kubeconfig,
            name="bridge.yaml",
            cluster={"name": CLUSTER},
            checkpoint={"interval": "1s"},
            log={"level": "warning"},
        )
        self.result["bridge_config"] = yaml.safe_load(self.config.read_text())

    async def connect_nats(self) -> None:
        self.nc = await nats.connect(self.nats.url, max_reconnect_attempts=-1)
        self.js = self.nc.jetstream()

    async def close_nats(self) -> None:
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.close(), 5)
            self.nc = None

    async def teardown(self) -> None:
        if self.bridge is not None:
            with contextlib.suppress(Exception):
                await self.bridge.stop(timeout=15)
            self.bridge.kill()
        await self.close_nats()
        with contextlib.suppress(Exception):
            await self.sim.stop()
        self.nats.stop()
        if self.args.keep:
            log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the bridge ------------------------------------------------------------------------

    async def start_bridge(self, why: str) -> BridgeProcess:
        assert self.config is not None
        b = BridgeProcess(self.config, self.tmp / "bridge.log", keep_session=True)
        self.source = bridge_source()
        self.bridge = b.start()
        ready = await b.wait_ready(30, 0.01)
        self.starts.append({"why": why, "ready_s": ready, "bridge_source": self.source})
        log(f"bridge pid {b.pid} ready {ready:.3f}s after start ({why})")
        return b

    async def stop_bridge(self) -> int | None:
        assert self.bridge is not None
        code = await self.bridge.stop()
        if code != 0:
            log(f"bridge exited {code}:\n{self.bridge.logs()[-3000:]}")
        self.bridge = None
        return code

    # -- 1 + 2: throughput -----------------------------------------------------------------

    async def throughput_run(self, k: int, n: int) -> dict[str, Any]:
        start_rv = self.sim.resource_version
        before = await event_count(self.js)
        t = time.perf_counter()
        for _ in range(n):
            feed_op(self.feed)
        write_s = time.perf_counter() - t
        encode_history(self.sim)
        quiet_gc()
        log(f"run {k}: wrote {n} operations in {write_s:.1f}s (untimed); starting the bridge")
        b = await self.start_bridge(f"throughput run {k}, {n} changes waiting")
        timeout = 60 + n / 1000
        # (monotonic, published, bridge cpu s, this process's cpu s, nats-server cpu s,
        #  busy cpu s of the whole machine)
        samples: list[tuple[float, float, float, float, float, float]] = []
        target = n + 1  # + the "started" status event
        max_rss_kb = 0

        async def published_all() -> bool:
            """One sample; whether every change is published."""
            nonlocal max_rss_kb
            max_rss_kb = max(max_rss_kb, b.memory().get("VmRSS", 0))
            m = await b.metrics()
            now = time.monotonic()
            published = m.get("events_published_total", 0.0)
            samples.append(
                (
                    now,
                    published,
                    b.cpu(),
                    time.process_time(),
                    self.nats_cpu(),
                    machine_busy_seconds(),
                )
            )
            return published >= target

        try:
            complete = await eventually(published_all, timeout, 0.05, retry_on=())
        except NotMet:
            complete = False
        mem_peak = b.memory()
        flowing = [s for s in samples if s[1] >= 2]
        first, last = (flowing[0], flowing[-1]) if flowing else (samples[0], samples[-1])
        window = last[0] - first[0]
        moved = last[1] - first[1]
        rate = moved / window if window > 0 else None
        cpu = last[2] - first[2]
        feed_share = (last[3] - first[3]) / window if window > 0 else None
        nats_share = (last[4] - first[4]) / window if window > 0 else None
        # whatever else ran on the machine meanwhile (other tenants, other sessions), in cores
        other_share = (
            ((last[5] - first[5]) - cpu - (last[3] - first[3]) - (last[4] - first[4])) / window
            if window > 0
            else None
        )
        await asyncio.sleep(1.0)
        mem_after = b.memory()
        m = await b.metrics()
        code = await self.stop_bridge()
        stored = await event_count(self.js) - before
        run: dict[str, Any] = {
            "run": k,
            "events": n,
            "complete": complete,
            "events_per_s": rate,
            "window_s": window,
            "events_in_window": moved,
            "seconds_to_all_from_start": last[0] - b.started_at,
            "cpu_s": cpu,
            "cpu_s_per_1k": cpu / (moved / 1000) if moved else None,
            "cpu_share": cpu / window if window > 0 else None,
            "feed_cpu_share": feed_share,
            "nats_cpu_share": nats_share,
            "other_cpu_share": other_share,
            # the kernel updates VmHWM lazily: a sampled VmRSS can be above it
            "peak_rss_mb": max(mem_peak.get("VmHWM", 0), max_rss_kb) / 1024,
            "vmhwm_mb": mem_peak.get("VmHWM", 0) / 1024,
            "rss_after_mb": mem_after.get("VmRSS", 0) / 1024,
            "stored_in_stream": stored,
            "retries": m.get("publish_retries_total", 0.0),
            "duplicates": m.get("publish_duplicates_total", 0.0),
            "ready_s": b.ready_after,
            "bridge_source": self.source,
            "exit_code": code,
            "write_s": write_s,
        }
        log(
            f"run {k}: bridge {rate or 0:,.0f} ev/s, cpu {run['cpu_s_per_1k'] or 0:.3f} s/1k, "
            f"feed cpu {feed_share or 0:.0%}, nats cpu {nats_share or 0:.0%}, "
            f"other load {other_share or 0:.0%}, peak RSS {run['peak_rss_mb']:.1f} MB, "
            f"after {run['rss_after_mb']:.1f} MB, "
            f"stored {stored}/{n}{'' if complete else ' (TIMED OUT)'}"
        )
        run["reference"] = await self.reference_run(start_rv, n, "python")
        run["goref"] = await self.reference_run(start_rv, n, "go")
        # the history both read is not needed any more: keep the simulator's memory flat
        self.sim.compact()
        return run

    def nats_cpu(self) -> float:
        assert self.nats.proc is not None
        try:
            return cpu_seconds(self.nats.proc.pid)
        except OSError:
            return 0.0

    def reference_command(self, impl: str) -> list[str] | None:
        """The reference's program (the arguments follow); None: no Go binary."""
        if impl == "python":
            return [sys.executable, "-m", "bench.reference"]
        binary = self.goref.get("binary")
        return [binary] if binary else None

    async def reference_run(self, start_rv: int, n: int, impl: str) -> dict[str, Any]:
        """One reference pipeline (``impl``: python or go) over the N changes from
        ``start_rv``, to its own stream."""
        label = {"python": "reference", "go": "Go reference"}[impl]
        program = self.reference_command(impl)
        if program is None:
            return {"complete": False, "unavailable": self.goref.get("error")}
        quiet_gc()
        # (monotonic, this process's cpu s, nats-server cpu s, reference cpu s, machine busy s)
        cpu_samples: list[tuple[float, float, float, float, float]] = []
        stop = asyncio.Event()
        ref_pid = 0

        def ref_cpu() -> float:
            try:
                return cpu_seconds(ref_pid) if ref_pid else 0.0
            except OSError:
                return 0.0

        async def sampling() -> None:  # at 20 Hz
            while not stop.is_set():
                cpu_samples.append(
                    (
                        time.monotonic(),
                        time.process_time(),
                        self.nats_cpu(),
                        ref_cpu(),
                        machine_busy_seconds(),
                    )
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.05)

        proc = await asyncio.create_subprocess_exec(
            *program,
            "--api",
            self.sim.url,
            "--nats",
            self.nats.url,
            "--rv",
            str(start_rv),
            "--count",
            str(n),
            "--window",
            str(self.args.ref_window),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        ref_pid = proc.pid
        sampler = asyncio.create_task(sampling())
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 60 + n / 1000)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            log(f"{label} pipeline timed out")
            return {"complete": False}
        finally:
            stop.set()
            await sampler
        if proc.returncode != 0:
            log(f"{label} pipeline failed:\n{err.decode()[-2000:]}")
            return {"complete": False}
        r = msgspec.json.decode(out.strip().splitlines()[-1])
        res = reference_figures(r, n)
        inside = [c for c in cpu_samples if r["first_ack"] <= c[0] <= r["last_ack"]]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            f, e = inside[0], inside[-1]
            span = e[0] - f[0]
            res["feed_cpu_share"] = (e[1] - f[1]) / span
            res["nats_cpu_share"] = (e[2] - f[2]) / span
            res["other_cpu_share"] = (
                (e[4] - f[4]) - (e[1] - f[1]) - (e[2] - f[2]) - (e[3] - f[3])
            ) / span
        log(
            f"       {label} {res['events_per_s'] or 0:,.0f} ev/s, "
            f"cpu {res['cpu_s_per_1k'] or 0:.3f} s/1k, "
            f"feed cpu {res['feed_cpu_share'] or 0:.0%}, "
            f"nats cpu {res['nats_cpu_share'] or 0:.0%}, "
            f"other load {res['other_cpu_share'] or 0:.0%}"
        )
        return res

    # -- 3: latency at a steady rate -------------------------------------------------------

    async def latency(self, rate: float, seconds: float) -> dict[str, Any]:
        b = self.bridge
        assert b is not None
        arrivals: dict[str, float] = {}

        async def on_msg(msg: Any) -> None:
            mid = (msg.headers or {}).get("Nats-Msg-Id")
            if mid and mid not in arrivals:
                arrivals[mid] = time.perf_counter()

        sub = await self.js.subscribe(
            EVENT_SUBJECTS,
            cb=on_msg,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            headers_only=True,
        )
        await asyncio.sleep(0.5)
        hist_before = histogram(await b.metrics(), LATENCY_METRIC)
        quiet_gc()
        written: dict[str, float] = {}
        total = int(rate * seconds)
        load0 = (machine_busy_seconds(), b.cpu(), time.process_time(), self.nats_cpu())
        t0 = time.perf_counter()
        for i in range(total):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            mid = feed_op(self.feed)
            written[mid] = time.perf_counter()
        elapsed = time.perf_counter() - t0
        achieved = total / elapsed
        load1 = (machine_busy_seconds(), b.cpu(), time.process_time(), self.nats_cpu())
        ours = sum(load1[i] - load0[i] for i in (1, 2, 3))
        other_share = ((load1[0] - load0[0]) - ours) / elapsed
        with contextlib.suppress(NotMet):  # what did not arrive is left out of e2e below
            await eventually(lambda: len(arrivals.keys() & written.keys()) >= total, 20)
        await asyncio.sleep(0.3)  # the last acks reach the histogram
        hist_after = histogram(await b.metrics(), LATENCY_METRIC)
        await sub.unsubscribe()
        buckets = [(le, a - c) for (le, a), (_, c) in zip(hist_after, hist_before, strict=True)]
        e2e = [arrivals[m] - t for m, t in written.items() if m in arrivals]
        res = {
            "rate_target": rate,
            "rate_achieved": achieved,
            "seconds": seconds,
            "events": total,
            "arrived": len(e2e),
            "other_cpu_share": other_share,
            "publish_p50_ms": _ms(histogram_quantile(buckets, 0.50)),
            "publish_p99_ms": _ms(histogram_quantile(buckets, 0.99)),
            "publish_observations": buckets[-1][1] if buckets else 0,
            "publish_buckets": [[le if le != float("inf") else "+Inf", c] for le, c in buckets],
            "e2e_p50_ms": _ms(pct(e2e, 0.50)),
            "e2e_p90_ms": _ms(pct(e2e, 0.90)),
            "e2e_p99_ms": _ms(pct(e2e, 0.99)),
            "e2e_max_ms": _ms(max(e2e) if e2e else None),
            "ids": list(written),
        }
        log(
            f"latency at {achieved:,.0f}/s: publish p50 {res['publish_p50_ms']:.2f} ms "
            f"p99 {res['publish_p99_ms']:.2f} ms (histogram), end to end p50 "
            f"{res['e2e_p50_ms']:.2f} ms p99 {res['e2e_p99_ms']:.2f} ms ({len(e2e)}/{total})"
        )
        return res

    # -- 5: memory during a NATS outage ----------------------------------------------------

    async def outage(
        self, rate: float, seconds: float, earlier_ids: list[str], start_seq: int
    ) -> dict[str, Any]:
        """``earlier_ids``: versions written since stream sequence ``start_seq`` (the latency
        phase's), checked with the outage's."""
        b = self.bridge
        assert b is not None
        expected_total = await event_count(self.js)
        samples: list[dict[str, Any]] = []
        t_kill = 0.0

        async def sample(phase: str) -> None:
            mem = b.memory()
            try:
                m = await b.metrics()
            except Exception:  # the bridge's HTTP server busy: leave the gauges empty
                m = {}
            samples.append(
                {
                    "t": time.monotonic() - t_kill,
                    "phase": phase,
                    "rss_mb": mem.get("VmRSS", 0) / 1024,
                    "queue_depth": m.get("queue_depth"),
                    "queue_bytes": m.get("queue_bytes"),
                    "inflight": m.get("publish_inflight"),
                    "published": m.get("events_published_total"),
                }
            )

        t_kill = time.monotonic() + 3.0
        for _ in range(3):
            await sample("before")
            await asyncio.sleep(1.0)
        rss_before = b.memory()["VmRSS"] / 1024
        hwm_before = b.memory()["VmHWM"] / 1024
        await self.close_nats()
        self.nats.kill()
        t_kill = time.monotonic()
        log(f"outage: nats-server killed; writing {rate:.0f} events/s for {seconds:.0f}s")
        written: list[str] = []
        quiet_gc()

        async def sampler(phase: str, stop: asyncio.Event) -> None:
            while not stop.is_set():
                await sample(phase)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

        stop = asyncio.Event()
        sampling = asyncio.create_task(sampler("outage", stop))
        total = int(rate * seconds)
        tick = 0.01
        per_tick = rate * tick
        t0 = time.perf_counter()
        i = 0
        while i < total:
            due = min(total, int((time.perf_counter() - t0) / tick * per_tick) + int(per_tick))
            while i < due:
                written.append(feed_op(self.feed))
                i += 1
            await asyncio.sleep(tick)
        write_elapsed = time.perf_counter() - t0
        stop.set()
        await sampling
        self.nats.start()
        t_restart = time.monotonic()
        log("outage: nats-server restarted on the same port and store")
        await self.connect_nats()
        stop = asyncio.Event()
        sampling = asyncio.create_task(sampler("recovery", stop))
        want = expected_total + len(written)
        have = 0

        async def all_stored() -> bool:
            nonlocal have
            with contextlib.suppress(Exception):
                have = await event_count(self.js)
            return have >= want

        with contextlib.suppress(NotMet):  # the result says how many are missing
            await eventually(all_stored, 60 + len(written) / 1000, 0.25, retry_on=())
        recovered_s = time.monotonic() - t_restart
        stop.set()
        await sampling
        for _ in range(2):
            await asyncio.sleep(1.0)
            await sample("after")
        log(f"outage: {have}/{want} events in the stream {recovered_s:.1f}s after the restart")
        ids = await self.read_ids(start_seq)
        check_ids = set(earlier_ids) | set(written)
        seen = collections.Counter(ids)
        outage_rss = [s["rss_mb"] for s in samples if s["phase"] == "outage"]
        recovery_rss = [s["rss_mb"] for s in samples if s["phase"] == "recovery"]
        depths = [s["queue_depth"] for s in samples if s["queue_depth"] is not None]
        half = outage_rss[len(outage_rss) // 2 :]
        res = {
            "rate": rate,
            "seconds": seconds,
            "write_elapsed_s": write_elapsed,
            "written": len(written),
            "rss_before_mb": rss_before,
            "peak_rss_before_mb": hwm_before,
            "max_rss_during_mb": max(outage_rss) if outage_rss else None,
            "rss_growth_second_half_mb": (max(half) - half[0]) if half else None,
            "max_rss_recovery_mb": max(recovery_rss) if recovery_rss else None,
            "peak_rss_after_mb": max([b.memory()["VmHWM"] / 1024, *(s["rss_mb"] for s in samples)]),
            "rss_after_mb": b.memory()["VmRSS"] / 1024,
            "max_queue_depth": max(depths) if depths else None,
            "recovered_s": recovered_s,
            "complete": have >= want,
            "checked_versions": len(check_ids),
            "stored_distinct": len(check_ids & seen.keys()),
            "missing": len(check_ids - seen.keys()),
            "duplicates": sum(c - 1 for c in seen.values() if c > 1),
            "unexpected": len(seen.keys() - check_ids),
            "samples": samples,
        }
        log(
            f"outage: RSS before {rss_before:.1f} MB, max during {res['max_rss_during_mb']:.1f} MB,"
            f" max queue depth {res['max_queue_depth'] or 0:.0f}; versions "
            f"{res['stored_distinct']}/{len(check_ids)} stored, {res['duplicates']} duplicates, "
            f"{res['missing']} missing"
        )
        return res

    async def read_ids(self, start_seq: int) -> list[str]:
        """Nats-Msg-Id of every Event message from ``start_seq`` on (headers only)."""
        info = await self.js.stream_info(STREAM)
        last = info.state.last_seq
        psub = await self.js.pull_subscribe(
            EVENT_SUBJECTS,
            stream=STREAM,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=start_seq,
                ack_policy=AckPolicy.NONE,
                headers_only=True,
                inactive_threshold=30,
            ),
        )
        ids: list[str] = []
        try:
            while True:
                try:
                    msgs = await psub.fetch(batch=2000, timeout=2)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                for m in msgs:
                    ids.append((m.headers or {}).get("Nats-Msg-Id", ""))
                if msgs and msgs[-1].metadata.sequence.stream >= last:
                    break
        finally:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()
        return ids

    # -- the whole run ---------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        a = self.args
        self.result.update(
            {
                "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": machine_facts(),
                "parameters": {
                    "events": a.events,
                    "runs": a.runs,
                    "quick": a.quick,
                    "latency_rate": a.latency_rate,
                    "latency_seconds": a.latency_seconds,
                    "outage_rate": a.outage_rate,
                    "outage_seconds": a.outage_seconds,
                    "reference_window": a.ref_window,
                    "bump_ratio": self.feed.bump_ratio,
                },
            }
        )
        began = time.monotonic()
        await self.setup()
        # first start against an empty cluster: it lists nothing, checkpoints, stops
        await self.start_bridge("first start, empty cluster")
        await asyncio.sleep(1.5)
        await self.stop_bridge()
        runs = [await self.throughput_run(k, a.events) for k in range(1, a.runs + 1)]
        self.result["throughput"] = runs
        if a.throughput_only:
            return self._finish(began)
        await self.start_bridge("latency and outage phases")
        await asyncio.sleep(1.0)
        start_seq = (await self.js.stream_info(STREAM)).state.last_seq + 1
        lat = await self.latency(a.latency_rate, a.latency_seconds)
        ids = lat.pop("ids")
        self.result["latency"] = lat
        self.result["outage"] = await self.outage(a.outage_rate, a.outage_seconds, ids, start_seq)
        self.result["outage"]["latency_phase_versions"] = len(ids)
        await self.stop_bridge()
        return self._finish(began)

    def _finish(self, began: float) -> dict[str, Any]:
        self.result["readyz"] = {
            "starts": self.starts,
            "median_s": statistics.median(s["ready_s"] for s in self.starts),
            "max_s": max(s["ready_s"] for s in self.starts),
        }
        stats = self.feed.stats
        self.result["writes"] = {"created": stats.created, "bumped": stats.bumped}
        self.result["duration_s"] = time.monotonic() - began
        return self.result


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, help="Events per throughput run (default 100000)")
    p.add_argument("--quick", action="store_true", help="20k events, 5 s latency, 15 s outage")
    p.add_argument("--runs", type=int, default=3, help="throughput runs (default 3)")
    p.add_argument("--latency-rate", type=float, default=1000.0)
    p.add_argument("--latency-seconds", type=float)
    p.add_argument("--outage-rate", type=float, default=2000.0)
    p.add_argument("--outage-seconds", type=float)
    p.add_argument("--ref-window", type=int, default=8192, help="reference's outstanding acks")
    p.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, store)")
    p.add_argument(
        "--throughput-only",
        action="store_true",
        help="only the throughput runs (a quick check while tuning; the report marks the rest)",
    )
    args = p.parse_args(argv)
    if args.events is None:
        args.events = 20_000 if args.quick else 100_000
    if args.latency_seconds is None:
        args.latency_seconds = 5.0 if args.quick else 10.0
    if args.outage_seconds is None:
        args.outage_seconds = 15.0 if args.quick else 60.0
    return args


async def amain(args: argparse.Namespace) -> int:
    bench = Bench(args)
    try:
        result = await bench.run()
    finally:
        await bench.teardown()
    if args.throughput_only:
        # not a full result: nothing written to the results folder
        goref = result.get("goref", {})
        if goref.get("binary") is None:
            print(f"no Go reference: {goref.get('error')}")
        for run in result["throughput"]:
            print(report.run_line(run))
        print(report.medians_line(report.summarise(result)))
        return 0
    report.finish(result, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
