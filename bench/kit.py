"""The consumer kit's throughput on small messages: ``Consumer.run`` and ``Consumer.run_batches``.

``python -m bench.kit [--messages 20000] [--runs 3] [--size 1200] [--out FILE]``

A real nats-server; the bridge's stream (its wanted config); ``--messages`` Warning Events of
about ``--size`` bytes each written by the bridge's converter (structured mode) and published
into it; then, per run and way, a new durable reads the whole stream from its start with
every option at its default: ``run`` with a handler that counts, ``run_batches`` with a batch
handler that answers every message done (``max_bytes`` 4 MiB, as the OTLP subscriber's
default). Each figure is messages/s from the durable's creation to the last message settled;
the median of ``--runs`` is printed. What is measured is the kit's own work (fetch, decode,
the id check, settle), not a handler's.

To compare two versions of the kit, run this file with each one's interpreter, alternately
(``/path/to/other/.venv/bin/python -m bench.kit`` from this checkout reads the other's kit):
docs/performance.md gives the ratios measured so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import nats

from bridge.core.converting import Converter
from bridge.jetstream.streams import wanted_config
from bridge.settings import NatsSettings
from k8s_event_consumer import Consumer, ConsumerOptions, Delivery, Handlers, KubeEvent, Start
from k8s_event_sim.natsserver import NatsServer

STREAM = "K8S_EVENTS"
SUBJECTS = ["k8s.events.>"]


def event(i: int, size: int) -> dict[str, Any]:
    filler = "x" * max(size - 700, 16)  # the rest of an Event's JSON is about 700 bytes
    return {
        "metadata": {
            "name": f"web-{i}.1",
            "namespace": f"team-{i % 50}",
            "uid": f"uid-{i}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "involvedObject": {"kind": "Pod", "namespace": f"team-{i % 50}", "name": f"web-{i}"},
        "reason": "BackOff",
        "message": f"Back-off restarting failed container {filler}",
        "type": "Warning",
        "count": 1,
        "firstTimestamp": "2026-11-30T10:00:00Z",
        "lastTimestamp": "2026-11-30T10:00:00Z",
        "source": {"component": "kubelet"},
    }


async def fill(nc: Any, n: int, size: int) -> None:
    js = nc.jetstream()
    await js.add_stream(wanted_config(NatsSettings()))
    conv = Converter("bench", "k8s.events", "structured")
    for i in range(n):
        msg = conv.convert(event(i, size))
        await nc.publish(msg.subject, msg.payload, headers=msg.headers)
        if i % 1000 == 999:
            await nc.flush()
    await nc.flush()
    while (await js.stream_info(STREAM)).state.messages < n:
        await asyncio.sleep(0.05)


async def through_run(nc: Any, durable: str, n: int, options: ConsumerOptions) -> float:
    done = asyncio.Event()
    seen = 0

    async def on_event(ev: KubeEvent, d: Delivery) -> None:
        nonlocal seen
        seen += 1
        if seen >= n:
            done.set()

    t0 = time.perf_counter()
    consumer = await Consumer.open(
        nc, stream=STREAM, durable=durable, subjects=SUBJECTS, options=options, start=Start.all()
    )
    task = asyncio.create_task(consumer.run(Handlers(on_event=on_event)))
    await done.wait()
    elapsed = time.perf_counter() - t0
    await consumer.stop()
    await task
    return n / elapsed


async def through_batches(nc: Any, durable: str, n: int, options: ConsumerOptions) -> float:
    done = asyncio.Event()
    seen = 0

    async def on_batch(ds: list[Delivery]) -> list[None]:
        nonlocal seen
        seen += len(ds)
        if seen >= n:
            done.set()
        return [None] * len(ds)

    t0 = time.perf_counter()
    consumer = await Consumer.open(
        nc, stream=STREAM, durable=durable, subjects=SUBJECTS, options=options, start=Start.all()
    )
    task = asyncio.create_task(consumer.run_batches(on_batch, linger=0.2, max_bytes=4 << 20))
    await done.wait()
    elapsed = time.perf_counter() - t0
    await consumer.stop()
    await task
    return n / elapsed


async def main(messages: int, runs: int, size: int, batch: int | None) -> dict[str, Any]:
    options = ConsumerOptions(**({"batch": batch} if batch else {}))
    with NatsServer() as server:
        nc = await nats.connect(server.url)
        try:
            await fill(nc, messages, size)
            results: dict[str, list[float]] = {"run": [], "run_batches": []}
            for i in range(runs):
                results["run"].append(await through_run(nc, f"bench-run-{i}", messages, options))
                results["run_batches"].append(
                    await through_batches(nc, f"bench-batches-{i}", messages, options)
                )
        finally:
            await nc.close()
    defaults = options
    return {
        "messages": messages,
        "size": size,
        "batch": defaults.batch,
        "max_batch_bytes": getattr(defaults, "max_batch_bytes", None),
        "runs": {k: [round(v) for v in vs] for k, vs in results.items()},
        "median": {k: round(statistics.median(vs)) for k, vs in results.items()},
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", type=int, default=1200)
    parser.add_argument("--batch", type=int, help="nats.batch (default: its default)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = asyncio.run(main(args.messages, args.runs, args.size, args.batch))
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    cli()
