"""``python -m bench.otlp [--quick]`` (``make bench-otlp``): the collector's ``k8s_events``
receiver and the bridge's path to the same collector, side by side on one real API server
through the same faults (bench/otlp/__init__.py; docs/performance.md)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.otlp import log, phases, report
from bench.run import RESULTS, machine_facts
from tests.standins.controlplane import ControlPlane, ensure_binaries, kubernetes_version
from tests.standins.otelcol import ensure_otelcol


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.otlp", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter phases (under 3 minutes)")
    p.add_argument("--rate", type=float, help="Event writes a second")
    p.add_argument(
        "--outage", type=float, help="seconds the OTLP collector, the API server are away"
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    p.add_argument("--keep", action="store_true", help="keep the working folder (logs, outputs)")
    return p.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    # SIGINT and SIGTERM end the run through its cleanup (every process it started stopped)
    main = asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, main.cancel)
    plan = phases.QUICK if args.quick else phases.FULL
    if args.rate is not None:
        plan = dataclasses.replace(plan, rate=args.rate)
    if args.outage is not None:
        plan = dataclasses.replace(plan, outage=args.outage)
    version = kubernetes_version("newest")
    log(f"the control plane {version} and otelcol (built once, cached)")
    bin_path = await asyncio.to_thread(ensure_binaries, version)
    otelcol = await asyncio.to_thread(ensure_otelcol)
    done = await asyncio.to_thread(
        subprocess.run, [str(otelcol), "--version"], capture_output=True, text=True, check=False
    )
    otelcol_version = done.stdout.strip().removeprefix("otelcol version ")  # "0.139.0"
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    workdir = Path(tempfile.mkdtemp(prefix="bench-otlp-"))
    cp = ControlPlane(bin_path=bin_path, version=version)
    await asyncio.to_thread(cp.start)
    try:
        result = await phases.Comparison(cp, workdir, plan).run()
    finally:
        await asyncio.to_thread(cp.stop)
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "started_at": started,
        "quick": args.quick,
        "kubernetes": version,
        "otelcol": otelcol_version,
        "machine": machine_facts(),
        **result,
    }
    report.finish(result, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
