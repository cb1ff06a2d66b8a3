"""The worst case of memory, proven: JetStream silent for minutes while large Events keep coming.

``python -m bench.silence [--seconds 180] [--event-kb 48] [--rate 100] [--out FILE]``

A real nats-server (JetStream, file store), the simulated API server and the bridge as a real
child process with every key at its default but the addresses. Events of about
``--event-kb`` KB each (a long ``message``: near what etcd and the API server let an Event be
in practice) are written at ``--rate`` per second throughout. After the flow is steady, the
nats-server is stopped with SIGSTOP: its sockets stay open and it reads and answers nothing,
the way a hung node is silent. The bridge fills its publish window, finds the connection
stale, holds the window, fills its queue and stops reading the watch; once the queue is full
the silence and the writes go on for ``--seconds``. The bridge's RSS is sampled every 0.5 s
and checked against the bound computed from its configuration (``bench.budget``). Then the
server is resumed (SIGCONT) and the stream read back: every version written must be there
exactly once.

Prints a table and, with ``--out``, writes the samples and the verdict as JSON. Exits 1 when
the bound was exceeded or an Event is missing or doubled, 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.budget import Budget
from bridge.settings import load
from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.configs import bridge_config
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.programs import BridgeProcess, memory_kb
from k8s_event_sim.readback import event_ids
from k8s_event_sim.waiting import eventually
from k8s_event_sim.workload import Workload


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bridge-silence-"))
    server = NatsServer(store_dir=str(tmp / "nats")).start()
    sim = SimApiServer()
    await sim.start()
    message = "x" * (args.event_kb * 1024)
    work = Workload(sim, seed=7, bump_ratio=0.0)
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", sim.url)
    config = bridge_config(
        tmp,
        server.url,
        kubeconfig,
        defaults=True,
        name="bridge.yaml",
        cluster={"name": "silence"},
    )
    budget_settings = load(str(config))
    budget = Budget.of(budget_settings, line_bytes=len(message) + 1500)
    bridge = BridgeProcess(config, tmp / "bridge.log", keep_session=True).start()
    samples: list[dict[str, Any]] = []
    written = 0
    stop_writing = asyncio.Event()

    async def writer() -> None:
        nonlocal written
        began = time.monotonic()
        while not stop_writing.is_set():
            work.create(type="Warning", reason="BackOff", message=message)
            written += 1
            delay = began + written / args.rate - time.monotonic()
            await asyncio.sleep(max(0.0, delay))  # pacing at --rate

    async def sampler(phase: str, until: asyncio.Event) -> None:
        while not until.is_set():
            m = await bridge.metrics() if phase != "silent" or bridge.running() else {}
            mem = memory_kb(bridge.pid)
            samples.append(
                {
                    "t": round(time.monotonic() - t0, 2),
                    "phase": phase,
                    "rss_mb": mem["VmRSS"] / 1024,
                    "queue_bytes": m.get("queue_bytes"),
                    "queue_depth": m.get("queue_depth"),
                    "inflight": m.get("publish_inflight"),
                }
            )
            await asyncio.sleep(0.5)  # pacing: the sample interval

    t0 = time.monotonic()
    try:
        await bridge.wait_ready(60)
        writing = asyncio.create_task(writer())
        steady = asyncio.Event()
        sampling = asyncio.create_task(sampler("flowing", steady))

        async def flowing() -> bool:
            return (await bridge.metrics()).get("events_published_total", 0) >= 3 * args.rate

        await eventually(flowing, 120, 0.2, what="a steady flow before the silence")
        steady.set()
        await sampling
        rss_before = memory_kb(bridge.pid)["VmRSS"] / 1024
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        silent_until = asyncio.Event()
        sampling = asyncio.create_task(sampler("silent", silent_until))
        queue_max = budget_settings.queue.max_bytes - len(message) - 4096

        async def queue_full() -> bool:
            return (await bridge.metrics()).get("queue_bytes", 0) >= queue_max

        # the worst case: the window held and the queue full (however long that takes on a
        # busy machine), then the silence goes on
        await eventually(queue_full, 300, 0.2, what="the queue full while JetStream is silent")
        full_at = time.monotonic() - t0
        await asyncio.sleep(args.seconds)  # pacing: the silence, once the queue is full
        silent_until.set()
        await sampling
        stop_writing.set()
        await writing
        server.proc.send_signal(signal.SIGCONT)
        thawed = time.monotonic()
        recovered = asyncio.Event()
        sampling = asyncio.create_task(sampler("recovering", recovered))

        async def all_published() -> bool:
            m = await bridge.metrics()
            return m.get("events_published_total", 0) >= written

        await eventually(all_published, 600, 0.5, what="every Event published after the thaw")
        recovered.set()
        await sampling
        recovered_s = time.monotonic() - thawed
        peak_mb = memory_kb(bridge.pid)["VmHWM"] / 1024  # the peak between samples too
        ids = await event_ids(server.url)
    finally:
        await bridge.stop()
        await sim.stop()
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
        server.stop()
    silent = [s for s in samples if s["phase"] == "silent"]
    max_silent = max(s["rss_mb"] for s in silent)
    max_all = max(peak_mb, *(s["rss_mb"] for s in samples))
    wanted = set(work.ids)
    result = {
        "parameters": {"seconds": args.seconds, "event_kb": args.event_kb, "rate": args.rate},
        "written": written,
        "stored": len(ids),
        "distinct": len(set(ids)),
        "missing": len(wanted - set(ids)),
        "duplicates": len(ids) - len(set(ids)),
        "rss_before_mb": round(rss_before, 1),
        "max_rss_silent_mb": round(max_silent, 1),
        "max_rss_mb": round(max_all, 1),
        "max_queue_bytes": max((s["queue_bytes"] or 0) for s in silent),
        "recovered_s": round(recovered_s, 1),
        "queue_full_after_s": round(full_at - silent[0]["t"], 1) if silent else None,
        "bound_mb": round(budget.total_mib, 1),
        "budget": budget.rows(),
        "within_bound": max_all <= budget.total_mib,
        "samples": samples,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.silence", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seconds", type=float, default=180.0, help="how long JetStream is silent")
    p.add_argument("--event-kb", type=int, default=48, help="size of each Event's message")
    p.add_argument("--rate", type=float, default=100.0, help="Events written per second")
    p.add_argument("--out", type=Path, help="write the result (with the samples) as JSON")
    args = p.parse_args(argv)
    r = asyncio.run(run(args))
    print("| what | value |\n|---|---:|")
    for key in (
        "written", "stored", "missing", "duplicates", "rss_before_mb",
        "max_rss_silent_mb", "max_rss_mb", "bound_mb", "max_queue_bytes", "recovered_s",
    ):  # fmt: skip
        print(f"| {key} | {r[key]} |")
    print("\n| budget part | MiB |\n|---|---:|")
    for name, mib in r["budget"]:
        print(f"| {name} | {mib:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(r, indent=2) + "\n")
    ok = r["within_bound"] and r["missing"] == 0 and r["duplicates"] == 0
    print("\nverdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
