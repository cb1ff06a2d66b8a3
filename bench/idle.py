"""What an idle bridge costs: RSS, CPU per minute, threads and file descriptors, per scope count.

``python -m bench.idle [--scopes 1,10,100] [--seconds 60] [--settle 10] [--out FILE]``

For each scope count a fresh bridge (a real child process, ``python -m bridge run``, every key
at its default but the addresses, ``log.level: warning`` and, for more than one scope,
``kubernetes.namespaces``: that many namespaces, one list and one watch each; 1 is the default
cluster-wide scope) starts against the simulated API server (a few Events in each namespace,
then no writes) and a real nats-server. After /readyz and ``--settle`` seconds, the bridge's
CPU seconds (utime + stime) are read over ``--seconds``, then its VmRSS, VmHWM, threads and
open descriptors. Nothing is written meanwhile: what is measured is the bridge's own timers
(checkpoints, health, leader election off), its watches (they end by their timeout and are
opened again) and NATS' pings. Results are printed as a table and, with ``--out``, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.configs import bridge_config
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.programs import BridgeProcess, memory_kb
from k8s_event_sim.workload import Workload


def namespaces(n: int) -> list[str]:
    return [f"team-{i:03d}" for i in range(n)]


async def measure(
    tmp: Path, nats: NatsServer, scopes: int, settle: float, seconds: float
) -> dict[str, Any]:
    sim = SimApiServer()
    await sim.start()
    work = Workload(sim, seed=scopes, namespaces=namespaces(max(scopes, 1)))
    for _ in range(3 * max(scopes, 1)):
        work.create(type="Warning", reason="BackOff")
    kubeconfig = write_kubeconfig(tmp / f"kubeconfig-{scopes}", sim.url)
    extra = {"namespaces": namespaces(scopes)} if scopes > 1 else {}
    config = bridge_config(
        tmp,
        nats.url,
        kubeconfig,
        defaults=True,
        name=f"bridge-{scopes}.yaml",
        cluster={"name": f"idle{scopes}"},
        kubernetes=extra,
    )
    bridge = BridgeProcess(config, tmp / f"bridge-{scopes}.log", keep_session=True).start()
    try:
        ready_s = await bridge.wait_ready(60, 0.01)
        await asyncio.sleep(settle)  # pacing: let start-up's work end, then measure idleness
        cpu0 = bridge.cpu()
        await asyncio.sleep(seconds)  # pacing: the measured idle interval
        cpu = bridge.cpu() - cpu0
        mem = memory_kb(bridge.pid)
        threads = len(os.listdir(f"/proc/{bridge.pid}/task"))
        fds = len(os.listdir(f"/proc/{bridge.pid}/fd"))
        published = (await bridge.metrics()).get("events_published_total", 0.0)
    finally:
        await bridge.stop()
        await sim.stop()
    return {
        "scopes": scopes,
        "ready_s": round(ready_s, 2),
        "events_published": int(published),
        "cpu_s_per_min": round(cpu * 60 / seconds, 3),
        "rss_mb": round(mem["VmRSS"] / 1024, 1),
        "peak_rss_mb": round(mem["VmHWM"] / 1024, 1),
        "threads": threads,
        "fds": fds,
        "seconds": seconds,
    }


async def amain(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bridge-idle-"))
    nats = NatsServer(store_dir=str(tmp / "nats")).start()
    rows = []
    try:
        for scopes in args.scopes:
            row = await measure(tmp, nats, scopes, args.settle, args.seconds)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    finally:
        nats.stop()
    print(
        "| scopes | idle RSS (MB) | peak RSS (MB) | CPU s / min | threads | fds | ready (s) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        print(
            f"| {r['scopes']} | {r['rss_mb']} | {r['peak_rss_mb']} | {r['cpu_s_per_min']} "
            f"| {r['threads']} | {r['fds']} | {r['ready_s']} |"
        )
    if args.out:
        args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--scopes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 10, 100],
        help="scope counts, comma-separated (default 1,10,100)",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="idle seconds measured")
    p.add_argument("--settle", type=float, default=10.0, help="seconds after /readyz first")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    return asyncio.run(amain(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
