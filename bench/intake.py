"""The intake's hot path alone: ``python -m bench.intake [--events N] [--batch B] [--runs R]``.

N realistic Events (``k8s_event_sim.workload.make_event``, decoded from watch lines as the
watcher decodes them) go through ``Intake.items`` in batches of B (about one socket read),
with the default filter (keeps all), the plain stage (``bridge.runtime.staging.Converting``)
and a queue with room for all of them (drained between runs): filter, ledger entry,
conversion, queueing, no event loop work besides the awaits of ``items``.

The baseline is the loop of commit e9a8d2f (before the chain of stages): the intake filtered,
converted and queued in one loop, ported below verbatim (``Baseline``) over the same Converter,
Progress and queue, so only the loop differs. The two are alternated batch by batch (the order
flipped every batch) so the noise of a shared machine hits both alike; CPU time
(``time.process_time``) per Event, the garbage collector off while timed. Prints the best of
the runs of each and the ratios new/old: of the bests and the median of the runs' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from bridge.core import events
from bridge.core.converting import Converter
from bridge.core.filtering import Filter
from bridge.core.messages import Outgoing
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.metrics import Metrics
from bridge.runtime.intake import Intake
from bridge.runtime.ports import Item
from bridge.runtime.staging import Converting, skip_input
from bridge.settings import FilterSettings
from k8s_event_sim.workload import make_event

Run = Callable[[list[Item]], Coroutine[Any, Any, None]]


class Baseline:
    """``Intake.items`` of e9a8d2f, the plain path (no enricher): one loop that filters,
    converts and queues."""

    def __init__(
        self,
        progress: Progress,
        event_filter: Filter,
        converter: Converter,
        queue: BoundedQueue[Outgoing],
        metrics: Metrics,
    ) -> None:
        self.progress = progress
        self.filter = event_filter
        self.converter = converter
        self.queue = queue
        self.m = metrics

    async def items(self, batch: list[Item]) -> None:
        m = self.m
        accepts = self.filter.accepts
        convert = self.converter.convert
        progress = self.progress
        queue = self.queue
        filtered = taken = 0
        for watch_type, ev, rv in batch:
            taken += 1
            try:
                if not accepts(watch_type, ev):
                    filtered += 1
                    progress.done(rv)
                    continue
                msg = convert(ev)
            except Exception as exc:
                skip_input(m, exc, ev)
                progress.done(rv)
                continue
            out = Outgoing(msg, progress.pending(rv))
            if not queue.put_nowait(out, len(msg.payload)):
                m.received.inc(taken)
                taken = 0
                await queue.put(out, len(msg.payload))
        m.received.inc(taken)
        if filtered:
            m.filtered.inc(filtered)


def make_batches(n: int, size: int) -> list[list[Item]]:
    rng = random.Random(30)
    items: list[Item] = []
    for i in range(n):
        obj = make_event(rng, namespace=f"ns-{i % 20}", i=i)
        rv = 1000 + i
        obj["metadata"]["uid"] = f"{rng.getrandbits(128):032x}"
        obj["metadata"]["resourceVersion"] = str(rv)
        line = msgspec.json.encode({"type": "ADDED", "object": obj})
        watch_type, ev = events.from_line(line)
        items.append((watch_type, ev, rv))
    return [items[i : i + size] for i in range(0, n, size)]


def build(kind: str, converter: Converter, n: int) -> tuple[Run, BoundedQueue[Outgoing]]:
    m = Metrics()
    progress = Progress(1)
    queue: BoundedQueue[Outgoing] = BoundedQueue(n + 1, 1 << 40)
    keep_all = Filter(FilterSettings())
    if kind == "old":
        return Baseline(progress, keep_all, converter, queue, m).items, queue
    stage = Converting(converter, queue, m)
    return Intake("*", progress, keep_all, converter, stage, m).items, queue


async def one_run(converter: Converter, batches: list[list[Item]], n: int) -> dict[str, float]:
    """Both over the same batches, alternated batch by batch (the order flipped each batch)."""
    kinds = ("old", "new")
    built = {kind: build(kind, converter, n) for kind in kinds}
    cpu = dict.fromkeys(kinds, 0.0)
    clock = time.process_time
    gc.collect()
    gc.disable()
    try:
        for i, batch in enumerate(batches):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                run = built[kind][0]
                start = clock()
                await run(batch)
                cpu[kind] += clock() - start
    finally:
        gc.enable()
    for kind, (_, queue) in built.items():
        assert len(queue) == n, (kind, len(queue))
    return {kind: t / n * 1e6 for kind, t in cpu.items()}


async def main(n: int, size: int, runs: int) -> None:
    converter = Converter("bench", "k8s.events", "structured")
    batches = make_batches(n, size)
    n = sum(len(b) for b in batches)
    await one_run(converter, batches, n)  # warm: the converter's caches, the allocator
    per: dict[str, list[float]] = {"old": [], "new": []}
    ratios = []
    for r in range(runs):
        got = await one_run(converter, batches, n)
        for kind, us in got.items():
            per[kind].append(us)
        ratios.append(got["new"] / got["old"])
        print(
            f"run {r + 1:2}: old {got['old']:.3f} µs  new {got['new']:.3f} µs  "
            f"new/old {ratios[-1]:.3f}"
        )
    old, new = min(per["old"]), min(per["new"])
    print(
        f"{n} Events in batches of {size}, {runs} runs, alternated batch by batch: CPU per "
        f"Event, best: old (e9a8d2f) {old:.3f} µs, new {new:.3f} µs; new/old of the bests "
        f"{new / old:.3f}, median of the runs' ratios {statistics.median(ratios):.3f}"
    )


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--runs", type=int, default=15)
    a = p.parse_args()
    asyncio.run(main(a.events, a.batch, a.runs))


if __name__ == "__main__":
    cli()
