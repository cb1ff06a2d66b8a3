"""What the enrichment costs: throughput with and without it, and memory with many objects.

``python -m bench.enrich [--events 20000] [--pods 200] [--distinct 50000] [--out FILE]``

A real nats-server, the simulated API server (serving the Namespaces and the objects Events
are about) and the bridge as a real child process, every key at its default but the
addresses and ``enrich``. Three runs, each on a fresh stream:

1. ``plain``: ``--events`` Events about ``--pods`` Pods, written before the bridge starts; the
   time from ready to the last ack;
2. ``enriched``: the same with the team label of the namespace and the top controller
   (Pod → ReplicaSet → Deployment): each object read once, then from the cache;
3. ``distinct``: ``--distinct`` Events each about another Pod that does not exist (a read per
   Event, each ``notfound``): the peak RSS against the bound computed from the configuration
   (``bench.budget``), and the cache's size at the end against ``enrich.cache_entries``.

Prints a table and, with ``--out``, writes it as JSON. Exits 1 when the bound was exceeded or
an Event is missing or doubled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
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
from k8s_event_sim.workload import make_event

ENRICH = {
    "enrich": {
        "namespace": {"labels": {"team": "team"}},
        "object": {"owner_kind": "ownerkind", "owner_name": "ownername"},
    },
    "nats": {"subject_template": "{cluster}.{team}.{namespace}.{kind}.{reason}"},
}
NAMESPACES = {"shop": "payments", "blog": "content"}


def objects(sim: SimApiServer, pods: int) -> list[tuple[str, str, str]]:
    """Per namespace a Deployment → ReplicaSet → Pods; the (namespace, pod, uid) of each."""
    out = []
    for ns, team in NAMESPACES.items():
        sim.set_namespace(ns, {"team": team})
        for pod, uid in sim.put_deployment(ns, "web", pods // len(NAMESPACES)):
            out.append((ns, pod, uid))
    return out


async def one(
    name: str, events: list[tuple[str, str, str]], sections: dict[str, Any], pods: int
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bridge-enrich-{name}-"))
    server = NatsServer(store_dir=str(tmp / "nats")).start()
    sim = SimApiServer()
    await sim.start()
    objects(sim, pods)
    rng = random.Random(1)
    for i, (ns, pod, uid) in enumerate(events):
        ev = make_event(rng, namespace=ns, reason="BackOff", kind="Pod", name=pod, i=i)
        ev["involvedObject"]["uid"] = uid
        sim.create_event(ev)
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", sim.url)
    config = bridge_config(
        tmp,
        server.url,
        kubeconfig,
        defaults=True,
        name="bridge.yaml",
        cluster={"name": name},
        **sections,
    )
    budget = Budget.of(load(str(config)))
    bridge = BridgeProcess(config, tmp / "bridge.log", keep_session=True).start()
    try:
        await bridge.wait_ready(60)
        began = time.monotonic()

        async def all_published() -> bool:
            m = await bridge.metrics()
            return m.get("events_published_total", 0) >= len(events) + 1  # and `started`

        await eventually(all_published, 1800, 0.05, what=f"{name}: every Event published")
        seconds = time.monotonic() - began
        status = json.loads((await bridge.get("/status"))[1])
        metrics = await bridge.metrics()
        peak_mb = memory_kb(bridge.pid)["VmHWM"] / 1024
        ids = await event_ids(server.url)
    finally:
        await bridge.stop()
        await sim.stop()
        server.stop()
    internals = status.get("internals", {})
    return {
        "run": name,
        "events": len(events),
        "seconds": round(seconds, 2),
        "events_per_second": round(len(events) / seconds),
        "peak_rss_mb": round(peak_mb, 1),
        "bound_mb": round(budget.total_mib, 1),
        "within_bound": peak_mb * 2**20 <= budget.total,
        "cache_entries": internals.get("enrich_cache"),
        "cache_bytes": internals.get("enrich_cache_bytes"),
        "object_reads": len(sim.object_reads),
        "enrich": {
            k.removeprefix("enrich_"): v
            for k, v in metrics.items()
            if k.startswith(("enrich_missing_total", "enrich_reads_total")) and v
        },
        "exactly_once": len(ids) == len(set(ids)) == len(events),
    }


async def main(args: argparse.Namespace) -> int:
    rng = random.Random(5)
    pods = args.pods
    known = objects(SimApiServer(), pods)  # the names and uids only
    flow = [known[rng.randrange(len(known))] for _ in range(args.events)]
    distinct = [("shop", f"gone-{i}", f"g{i}") for i in range(args.distinct)]
    rows = [
        await one("plain", flow, {}, pods),
        await one("enriched", flow, ENRICH, pods),
        await one("distinct", distinct, ENRICH, pods),
    ]
    ratio = rows[1]["events_per_second"] / rows[0]["events_per_second"]
    print(f"{'run':<10} {'events':>7} {'s':>7} {'ev/s':>7} {'peak MB':>8} {'bound':>6} reads")
    for r in rows:
        print(
            f"{r['run']:<10} {r['events']:>7} {r['seconds']:>7} {r['events_per_second']:>7} "
            f"{r['peak_rss_mb']:>8} {r['bound_mb']:>6} {r['object_reads']}"
        )
    print(f"enriched / plain throughput: {ratio:.2f}")
    print(f"distinct: cache {rows[2]['cache_entries']} entries, {rows[2]['cache_bytes']} bytes")
    for r in rows[1:]:
        print(f"{r['run']}: {r['enrich']}")
    if args.out:
        text = json.dumps({"rows": rows, "ratio": ratio}, indent=2)
        await asyncio.to_thread(Path(args.out).write_text, text)
    ok = all(r["within_bound"] and r["exactly_once"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--pods", type=int, default=200)
    p.add_argument("--distinct", type=int, default=50000)
    p.add_argument("--out")
    sys.exit(asyncio.run(main(p.parse_args())))
