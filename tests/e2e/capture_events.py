"""Record real Events, as kube-apiserver's watch sends them, for the unit tests.

    python -m tests.e2e.capture_events [--version newest|oldest|v1.X.Y]

Runs the demo's workload (demo_cluster.workload) on a living cluster, watches every Event with
an independent raw watch, and keeps one watch line of each shape: reason, kind of the object,
who wrote it (``source.component`` or ``reportingComponent``), with or without a series, a
first version or a bumped count, a "(combined from similar events)" message. Written to
``tests/data/real-events/<version>.jsonl``, one line as the server sent it per line;
tests/unit/test_real_events.py runs each through the bridge's decoder and converter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.e2e.demo_cluster import workload
from tests.e2e.truth import Truth
from tests.standins.cluster import LivingCluster
from tests.standins.controlplane import REPO, kubernetes_version

OUT = REPO / "tests" / "data" / "real-events"


def shape(ev: dict[str, Any]) -> tuple[Any, ...]:
    count = (ev.get("series") or {}).get("count") or ev.get("count") or 1
    return (
        ev.get("reason"),
        ev.get("type"),
        ev.get("involvedObject", {}).get("kind"),
        ev.get("reportingComponent") or ev.get("source", {}).get("component"),
        bool(ev.get("series")),
        count > 1,
        "(combined from similar events)" in ev.get("message", ""),
    )


async def capture(version: str) -> Path:
    cluster = LivingCluster(version=version)
    cluster.start()
    try:
        async with Truth(cluster) as truth:
            await workload(cluster, truth, "capture", say=lambda text: print(f"== {text}"))
        picked: dict[tuple[Any, ...], str] = {}
        for mid, ev in truth.versions.items():
            picked.setdefault(shape(ev), mid)
    finally:
        cluster.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{version}.jsonl"
    lines = [truth.lines[mid].rstrip(b"\n") for mid in picked.values()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    for line in lines:
        ev = json.loads(line)["object"]
        print(shape(ev))
    print(f"{len(lines)} shapes of {len(truth.versions)} versions -> {path}")
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="newest", help="newest, oldest or v1.X.Y")
    asyncio.run(capture(kubernetes_version(parser.parse_args().version)))
    sys.exit(0)
