"""Run the simulated API server with a workload: ``python -m k8s_event_sim --port 8001``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.workload import run_workload


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m k8s_event_sim", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--rate", type=float, default=50.0, help="operations/s, 0 = flat out")
    parser.add_argument("--total", type=int, default=1000, help="operations to write")
    parser.add_argument("--bump-ratio", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=None,
        metavar="S",
        help="send bookmarks every S s, as a watch cache would (default: none, as a default "
        "kube-apiserver sends for Event watches)",
    )
    parser.add_argument("--event-ttl", type=float, default=None, metavar="S")
    parser.add_argument(
        "--compaction-interval", type=float, default=300.0, metavar="S", help="0 = never"
    )
    parser.add_argument("--token", action="append", default=None, help="accepted bearer token")
    parser.add_argument(
        "--linger", type=float, default=0.0, metavar="S", help="keep serving S s after the "
        "workload (negative: until a signal)"
    )  # fmt: skip
    return parser.parse_args(argv)


async def serving(args: argparse.Namespace) -> int:
    sim = SimApiServer(
        bookmark_interval=args.bookmark_interval,
        event_ttl=args.event_ttl,
        tokens=set(args.token) if args.token else None,
        compaction_interval=args.compaction_interval or None,
    )
    await sim.start(args.host, args.port)
    print(sim.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    workload = asyncio.create_task(
        run_workload(
            sim,
            total=args.total,
            rate=args.rate or None,
            bump_ratio=args.bump_ratio,
            seed=args.seed,
        )
    )
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({workload, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if workload.done():
            stats = workload.result()
            print(
                f"workload done: created={stats.created} bumped={stats.bumped} "
                f"revision={sim.resource_version} in {stats.elapsed:.1f}s",
                file=sys.stderr,
                flush=True,
            )
            if args.linger < 0:
                await stopping
            elif args.linger > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping, args.linger)
    finally:
        for task in (workload, stopping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await sim.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(serving(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
