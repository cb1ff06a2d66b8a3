"""``python -m k8s_event_consumer.remediation [run|check-config|provision] [--config FILE]``
(console script ``k8s-event-remediation``): the remediation worker (worker.py). ``provision``
makes its durable and its bucket with exactly their shapes (run with an operator's NATS
credentials) and exits.

A config error prints one line naming the key and exits 2; SIGTERM or SIGINT stops after the
message in hand (what is not acked comes again to the next worker)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import nats.errors
import nats.js.errors
import yaml

from k8s_event_common.connecting import CredentialError, TLSGuardUnavailable
from k8s_event_common.kube.errors import KubeConfigError
from k8s_event_common.streams import ShapeMismatch
from k8s_event_consumer import logs
from k8s_event_consumer.configuring import ConfigError, redacted
from k8s_event_consumer.connecting import connect_until
from k8s_event_consumer.consuming import (
    Consumer,
    ConsumerConflict,
    Handlers,
    KVSeen,
    Start,
    check_stream,
)
from k8s_event_consumer.metrics import Metrics
from k8s_event_consumer.remediation import settings as settings_mod
from k8s_event_consumer.remediation.kube import Kube
from k8s_event_consumer.remediation.settings import Settings
from k8s_event_consumer.remediation.worker import COUNTERS, METRICS_PREFIX, UNLABELLED, Worker
from k8s_event_consumer.serving import HttpServer

log = logs.get("remediation")


async def run(settings: Settings, provision: bool = False) -> int:
    """Run until SIGTERM or SIGINT; ``provision``: only make the durable and the bucket (with
    an operator's credentials: the worker's own may not), then exit. The exit code."""
    nats_cfg = settings.nats
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    kube = Kube(settings.kubernetes)
    try:
        if not provision:
            await kube.connect()
    except Exception as exc:  # a kubeconfig that can not be used: nothing to retry
        log.error("kubernetes_config_unusable", error=f"{type(exc).__name__}: {exc}")
        return 2 if isinstance(exc, KubeConfigError) else 1
    metrics = Metrics(METRICS_PREFIX, COUNTERS, UNLABELLED)
    worker = Worker(settings, kube, metrics=metrics)
    http = HttpServer(metrics)
    if settings.http.port is not None and not provision:  # a provision run serves nothing
        await http.start(settings.http.host, settings.http.port)
    try:
        nc = await connect_until(nats_cfg.options(), stopping)
    except (CredentialError, TLSGuardUnavailable) as exc:  # a TLS file that does not load
        log.error("config_error", error=f"nats: {exc}")
        await http.stop()
        await kube.close()
        return 2
    try:
        if nc is None:
            return 0
        http.watch(nc)
        try:
            # the stream first: what it is matters more than a missing bucket
            await check_stream(nc, nats_cfg.stream, nats_cfg.subject_prefix)
            consumer = await Consumer.open(
                nc,
                stream=nats_cfg.stream,
                durable=nats_cfg.durable,
                subjects=nats_cfg.filters,
                # held messages are never given up on: max_deliver -1
                options=nats_cfg.consumer_options(max_deliver=-1),
                start=Start.all() if nats_cfg.start == "all" else Start.new(),
                seen=await KVSeen.open(nc, nats_cfg.seen_bucket),
                subject_prefix=nats_cfg.subject_prefix,
            )
        except ShapeMismatch as exc:  # each key logged by the kit: stream_config_differs
            log.error("stream_refused", stream=exc.stream, error=str(exc))
            return 1
        except ConsumerConflict as exc:
            log.error("consumer_conflict", durable=nats_cfg.durable, error=str(exc))
            return 1
        except (nats.js.errors.NotFoundError, nats.errors.TimeoutError) as exc:
            # missing, or these credentials may not create it: provisioned first
            log.error("stream_unavailable", stream=nats_cfg.stream, error=str(exc))
            return 1
        if provision:
            log.info("provisioned", durable=nats_cfg.durable, bucket=nats_cfg.seen_bucket)
            return 0
        stopper = loop.create_task(_stop_on(stopping, consumer))
        consumer.stats.export(metrics)
        http.ready = True
        log.info(
            "started",
            cluster=settings.kubernetes.cluster,
            dry_run=settings.remediation.dry_run,
            durable=nats_cfg.durable,
            stream=nats_cfg.stream,
            subjects=nats_cfg.filters,
        )
        try:
            await consumer.run(Handlers(on_event=worker.on_event))
        finally:
            stopper.cancel()
            log.info("stopped", **vars(worker.counts), **vars(consumer.stats))
    finally:
        http.ready = False
        await http.stop()
        await kube.close()
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
    return 0


async def _stop_on(stopping: asyncio.Event, consumer: Consumer) -> None:
    await stopping.wait()
    await consumer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="k8s-event-remediation",
        description="Act on the API server on Events from k8s-event-bridge's stream.",
    )
    parser.add_argument(
        "command", nargs="?", default="run", choices=["run", "check-config", "provision"]
    )
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
    return asyncio.run(run(settings, provision=args.command == "provision"))


if __name__ == "__main__":
    sys.exit(main())
