"""The reference pipeline: the least one Python process can do to move watch lines into JetStream.

``python -m bench.reference --api URL --nats URL --rv RV --count N`` watches the (simulated)
API server from resourceVersion RV with aiohttp, splits the raw chunks into lines, decodes each
line with msgspec into a typed Struct of the three fields it needs (the fastest parse
installed: the rest of the line is only scanned), and publishes the Event's bytes to JetStream
subject ``ref.<namespace>`` with a ``Nats-Msg-Id`` header and a reply inbox of its own, keeping
up to ``--window`` acks outstanding (pipelined: one wildcard subscription counts the acks).
Nothing else: no filter, no CloudEvent envelope, no checkpoint, no metrics, no retries.

It stops after N acks and prints one JSON line: when the first and the N-th ack came
(``time.monotonic()``, comparable with the parent's on Linux), its CPU seconds and peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import aiohttp
import msgspec
import nats


def peak_rss_kb() -> int:
    """This process's peak RSS in kB (``VmHWM`` of ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class _Meta(msgspec.Struct):
    namespace: str
    uid: str
    resourceVersion: str


class _Object(msgspec.Struct):
    metadata: _Meta


class _Line(msgspec.Struct):
    object: _Object


async def run(args: argparse.Namespace) -> dict[str, object]:
    nc = await nats.connect(args.nats, max_reconnect_attempts=0, pending_size=8 * 2**20)
    window = args.window
    count = args.count
    state = {"sent": 0, "acked": 0, "errors": 0, "first_ack": 0.0, "last_ack": 0.0}
    room = asyncio.Event()
    room.set()
    done = asyncio.Event()
    inbox = nc.new_inbox() + "."

    async def on_ack(msg: nats.aio.msg.Msg) -> None:
        if b'"error"' in msg.data:
            state["errors"] += 1
        acked = state["acked"] = state["acked"] + 1
        if acked == 1:
            state["first_ack"] = time.monotonic()
        if acked >= count:
            state["last_ack"] = time.monotonic()
            done.set()
        if state["sent"] - acked < window:
            room.set()

    await nc.subscribe(inbox + "*", cb=on_ack, pending_msgs_limit=1 << 20)
    url = f"{args.api}/api/v1/events?watch=true&resourceVersion={args.rv}"
    cpu0 = time.process_time()
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=None, sock_read=args.timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
        resp.raise_for_status()
        buf = b""
        loads = msgspec.json.Decoder(_Line).decode
        publish = nc.publish
        sent = 0
        async for chunk in resp.content.iter_any():
            lines = (buf + chunk).split(b"\n")
            buf = lines.pop()
            for line in lines:
                if not line:
                    continue
                meta = loads(line).object.metadata
                sent += 1
                state["sent"] = sent
                await publish(
                    "ref." + meta.namespace,
                    line,
                    reply=inbox + str(sent),
                    headers={"Nats-Msg-Id": f"{meta.uid}/{meta.resourceVersion}"},
                )
                if sent - state["acked"] >= window:
                    room.clear()
                    await room.wait()
                if sent >= count:
                    break
            if sent >= count:
                break
        await nc.flush()
        await asyncio.wait_for(done.wait(), args.timeout)
    cpu = time.process_time() - cpu0
    await nc.close()
    return {
        "count": state["acked"],
        "errors": state["errors"],
        "started": started,
        "first_ack": state["first_ack"],
        "last_ack": state["last_ack"],
        "cpu_s": cpu,
        # VmHWM, not getrusage's ru_maxrss: Linux keeps that across execve (the parent's peak)
        "peak_rss_kb": peak_rss_kb(),
        "window": window,
    }


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.reference", description=__doc__)
    p.add_argument("--api", required=True)
    p.add_argument("--nats", required=True)
    p.add_argument("--rv", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    try:  # the same event loop as the bridge (bridge.cli): uvloop when it is installed
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:
        result = asyncio.run(run(args))
    result["uvloop"] = "uvloop" in sys.modules
    print(msgspec.json.encode(result).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
