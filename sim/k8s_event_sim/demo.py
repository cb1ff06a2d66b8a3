"""The demo (``make demo``, ``k8s-event-bridge-demo``, ``python -m k8s_event_sim.demo``): the
real pipeline between an embedded nats-server and a simulated cluster, through a stop and a
restart, then the stream checked against what was written; last, the digests
(``k8s-event-digests`` as a process on the same stream): one line per series per window, the
versions they folded counted against the stream's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nats

from bridge import logs
from bridge.app import Bridge
from bridge.errors import EXIT_CONFIG, ConfigError
from bridge.jetstream import tailing
from bridge.settings import Settings
from k8s_event_common import cloudevents, digests
from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.kubeconfig import write_kubeconfig
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.waiting import NotMet, eventually
from k8s_event_sim.workload import Workload


async def show(reader: tailing.Tail, received: list[str], quiet: bool, indent: str = "") -> None:
    """Print each message of the stream as one line (unless ``quiet``) and keep each Event's
    id in ``received``."""
    async for msg in reader:
        if "._bridge." not in msg.subject and msg.headers:
            received.append(msg.headers.get("Nats-Msg-Id", ""))
        if not quiet:
            try:
                text = tailing.line(tailing.decode(msg.headers, msg.data))
            except ValueError:  # the decoder's BadMessage
                text = f"(not a CloudEvent: {msg.subject} {msg.data[:80]!r})"
            print(indent + text[:150], flush=True)


async def stop_showing(showing: asyncio.Task[None] | None, reader: tailing.Tail | None) -> None:
    if showing is not None:
        showing.cancel()
        await asyncio.gather(showing, return_exceptions=True)
    if reader is not None:
        await reader.close()


async def start_listed(settings: Settings) -> tuple[Bridge, asyncio.Task[int]]:
    """A bridge started, returned once every scope has listed (its watch has a
    resourceVersion), or once it stopped (the task is then done)."""
    bridge = Bridge(settings)
    run = asyncio.create_task(bridge.run())
    while not run.done() and (
        not bridge.scopes or any(sc.watcher.rv is None for sc in bridge.scopes)
    ):
        await asyncio.sleep(0.05)
    return bridge, run


async def stored(url: str, stream: str) -> int:
    """How many messages the stream holds now."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages or 0)
    finally:
        await nc.close()


def _start(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, stdout=log, stderr=log)


DIGEST_WINDOW = 2.0  # seconds: short, so that the demo sees its windows close


async def show_digests(url: str, tmp: Path, versions: int, quiet: bool) -> bool:
    """Run ``k8s-event-digests`` on the stream until every version is in a digest; print the
    busiest series and whether the digests folded each version once."""
    config = tmp / "digests.json"  # JSON is YAML
    config.write_text(json.dumps({
        "nats": {"servers": [url]},
        "digests": {"window": f"{DIGEST_WINDOW:g}s", "grace": "500ms"},
        "http": {"port": None},
        "log": {"level": "error"},
    }))  # fmt: skip
    cmd = [sys.executable, "-m", "k8s_event_consumer.digests", "run", "--config", str(config)]
    proc = _start(cmd, tmp / "digests.log")
    got: list[digests.Digest] = []
    try:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()

            async def folded() -> bool:
                got.clear()
                with contextlib.suppress(Exception):
                    info = await js.stream_info(digests.DEFAULT_STREAM)
                    for seq in range(info.state.first_seq, info.state.last_seq + 1):
                        raw = await js.get_msg(digests.DEFAULT_STREAM, seq=seq)
                        env = cloudevents.decode(raw.headers, raw.data or b"")
                        got.append(digests.from_envelope(env))
                return sum(d.versions for d in got) >= versions or proc.poll() is not None

            with contextlib.suppress(NotMet):
                await eventually(folded, 30, 0.5)
        finally:
            await nc.close()
    finally:
        proc.terminate()
        proc.wait()
    busiest = sorted(got, key=lambda d: (-d.occurrences, d.id))
    for d in busiest[: 0 if quiet else 8]:
        print("   " + digests.line(d)[:150], flush=True)
    folded_n = sum(d.versions for d in got)
    series = len({d.series.key for d in got})
    print(f"   digests                         : {len(got)} ({series} series)")
    print(f"   occurrences they count          : {sum(d.occurrences for d in got)}")
    print(f"   versions they folded            : {folded_n} of {versions}")
    return folded_n == versions


def _say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


async def main(events: int = 300, rate: float = 150.0, quiet: bool = False) -> int:
    logs.setup("error", "text")
    tmp = Path(tempfile.mkdtemp(prefix="bridge-demo-"))
    server = NatsServer(store_dir=str(tmp / "nats")).start()
    sim = SimApiServer()  # no bookmarks on Event watches, as a default kube-apiserver
    await sim.start()
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", sim.url, token="demo", user="demo")
    settings = Settings(
        cluster={"name": "demo"},
        kubernetes={"kubeconfig": str(kubeconfig)},
        nats={"servers": [server.url]},
        checkpoint={"interval": 0.2},
        http={"host": "127.0.0.1", "port": 0},
    )
    # the simulated cluster's Events, stamped now; every version's id in cluster.ids
    cluster = Workload(sim, 7, now=lambda: datetime.now(UTC), recent=40)
    received: list[str] = []
    reader: tailing.Tail | None = None
    showing: asyncio.Task[None] | None = None

    try:
        print(f"nats-server {server.url} (JetStream, store {server.store_dir})")
        print(f"simulated API server {sim.url}")
        await cluster.write(40, bump_ratio=0.0)
        _say(
            f"1. the cluster already holds {len(cluster.ids)} Events; the bridge starts, "
            "lists them, then watches"
        )
        # A first start lists the Events as they are then: a version overwritten before that
        # list is never seen (the list has only the newest). Write only once it has listed.
        bridge, run = await start_listed(settings)
        if run.done():
            return await run
        reader = await tailing.Tail.open(settings.nats, None, from_start=True)
        showing = asyncio.create_task(show(reader, received, quiet))
        first = events // 2
        await cluster.write(first, rate)
        _say("2. the bridge stops (as on SIGTERM): in-flight acks drained, checkpoint saved")
        await asyncio.sleep(0.5)
        bridge.request_stop()
        code = await run
        cp = {sc.key: sc.saved for sc in bridge.scopes}
        print(f"   exit code {code}, checkpoint {cp}")
        down = events // 4
        _say(
            f"3. while the bridge is down the cluster writes {down} more versions "
            "(new Events and count bumps)"
        )
        await cluster.write(down, rate * 4)
        _say("4. the bridge starts again and resumes the watch from its checkpoint")
        bridge = Bridge(settings)
        run = asyncio.create_task(bridge.run())
        await cluster.write(events - first - down, rate)
        with contextlib.suppress(NotMet):  # the summary says what is missing
            await eventually(lambda: set(cluster.ids) <= set(received), 30)
        await asyncio.sleep(0.5)
        bridge.request_stop()
        await run
        held = await stored(server.url, settings.nats.stream)
        missing = set(cluster.ids) - set(received)
        dups = len(received) - len(set(received))
        _say("summary")
        print(f"   versions written to the cluster : {len(cluster.ids)}")
        print(
            f"   CloudEvents in the stream       : {len(set(received))} "
            f"(+ status events; stream holds {held} messages)"
        )
        print(f"   missing                         : {len(missing)}")
        print(f"   duplicates                      : {dups}")
        ok = not missing and not dups
        print("   " + ("OK: nothing lost, nothing duplicated" if ok else "FAILED"))
        _say(
            "5. k8s-event-digests reads the same stream: one digest per series (an object and "
            f"a reason) per window of {DIGEST_WINDOW:g}s"
        )
        started = time.monotonic()
        folded_all = await show_digests(server.url, tmp, len(set(received)), quiet)
        print(
            "   "
            + ("OK: every version in one digest" if folded_all else "FAILED")
            + f" ({time.monotonic() - started:.1f}s)"
        )
        return 0 if ok and folded_all else 1
    finally:
        await stop_showing(showing, reader)
        await sim.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="k8s-event-bridge-demo",
        description="k8s-event-bridge between an embedded nats-server and a simulated cluster: "
        "see events flow, a restart, and the stream checked",
    )
    parser.add_argument("--events", type=int, default=300, help="events to write (default 300)")
    parser.add_argument("--rate", type=float, default=150.0, help="events per second")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    return parser.parse_args(argv)


def cli(argv: list[str] | None = None) -> int:
    """The console script ``k8s-event-bridge-demo``."""
    args = parse_args(argv)
    try:
        return asyncio.run(main(events=args.events, rate=args.rate, quiet=args.quiet))
    except ConfigError as exc:
        print(f"k8s-event-bridge-demo: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(cli())
