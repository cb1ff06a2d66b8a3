"""``python -m k8s_event_consumer.remediation [run|check-config] [--config FILE]``
(console script ``k8s-event-remediation``): the remediation worker (worker.py).

A config error prints one line naming the key and exits 2; SIGTERM or SIGINT stops after the
message in hand (what is not acked comes again to the next worker)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import yaml

from k8s_event_consumer import logs
from k8s_event_consumer.configuring import ConfigError, redacted
from k8s_event_consumer.connecting import connect
from k8s_event_consumer.consuming import Consumer, Handlers, KVSeen, Start
from k8s_event_consumer.remediation import settings as settings_mod
from k8s_event_consumer.remediation.kube import Kube
from k8s_event_consumer.remediation.settings import Settings
from k8s_event_consumer.remediation.worker import Worker

log = logs.get("remediation")


async def run(settings: Settings) -> int:
    nats = settings.nats
    nc = await connect(nats.options())
    kube = Kube(settings.kubernetes)
    await kube.connect()
    seen = await KVSeen.open(nc, nats.seen_bucket)
    consumer = await Consumer.open(
        nc,
        stream=nats.stream,
        durable=nats.durable,
        subjects=nats.subjects,
        # held messages are never given up on: max_deliver -1
        options=nats.consumer_options(max_deliver=-1),
        start=Start.all() if nats.start == "all" else Start.new(),
        seen=seen,
    )
    worker = Worker(settings, kube)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(consumer.stop()))
    log.info(
        "started",
        cluster=settings.kubernetes.cluster,
        dry_run=settings.remediation.dry_run,
        durable=nats.durable,
        stream=nats.stream,
    )
    try:
        await consumer.run(Handlers(on_event=worker.on_event))
    finally:
        log.info("stopped", **vars(worker.counts), **vars(consumer.stats))
        await kube.close()
        with contextlib.suppress(Exception):
            await nc.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="k8s-event-remediation",
        description="Act on the API server on Events from k8s-event-bridge's stream.",
    )
    parser.add_argument("command", nargs="?", default="run", choices=["run", "check-config"])
    parser.add_argument("--config", help="YAML file (or $REMEDIATION_CONFIG_FILE)")
    args = parser.parse_args(argv)
    try:
        settings = settings_mod.load(args.config)
    except ConfigError as exc:
        print(f"k8s-event-remediation: {exc}", file=sys.stderr)
        return 2
    if args.command == "check-config":
        print(yaml.safe_dump(redacted(settings), sort_keys=False), end="")
        return 0
    logs.setup(settings.log.level, settings.log.format)
    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
