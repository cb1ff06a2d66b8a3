"""ADR-50 batch publishing on the nats-server the project runs: ``python -m bench.batching``.

A study, not a feature: does publishing in JetStream batches keep the bridge's promise (a
restart, relist or reconnect never loses or duplicates an Event) and does it save client CPU?
It starts its own ``nats-server -js`` (temporary store, free port) and talks to it with
nats-py's raw ``publish``/``request`` (nats-py has no batch API):

1. correctness: atomic batches (``allow_atomic``, headers ``Nats-Batch-Id``,
   ``Nats-Batch-Sequence``, ``Nats-Batch-Commit``) and fast-ingest batches (``allow_batched``,
   the batch in the reply subject ``<inbox>.<id>.<flow>.<gap>.<seq>.<op>.$FI``), each: a new
   batch, its replay with the same Msg-Ids (what the bridge sends after a restart from an older
   checkpoint), one already-stored Msg-Id in the middle, a Msg-Id twice in one batch, a client
   SIGKILLed in the middle of a batch and the replay after it, and the limits. Every outcome is
   compared with what the server's source says it should be (the ``expected`` column);
2. CPU: the same N messages of ~1.3 KB with a Nats-Msg-Id each, published (a) one by one with
   an ack each, pipelined in a window of 1024 (the bridge's publisher: HPUB frames written in
   groups of ``BATCH_MAX``, one reply token per message under one wildcard inbox, acks taken by
   ``bridge.jetstream.fastpath.AckTap``), (b) in atomic batches of 16/64/256 with one commit ack
   each, (c) in fast-ingest batches of 16/64/256 (one commit each) and as one long fast-ingest
   batch settled by its flow acks. Each through the bridge's fast path (``raw``) and through
   nats-py's public API (``public``: ``Client.publish`` and a subscription callback, the
   bridge's fallback). Client CPU is ``time.process_time()`` from the first send to the last
   ack, the server's from ``/proc``; median of ``--runs``, modes interleaved in each run.

Tables go to stdout (markdown). Exit 1 when a phase fails (an error, a timeout, a wrong count in
the stream) or when an outcome differs from the expected one (then bench/results/batching.md no
longer describes this server).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bridge.jetstream import fastpath
from bridge.jetstream.publishing import BATCH_MAX
from k8s_event_sim.natsserver import NatsCluster, NatsServer, binary

ROOT = Path(__file__).resolve().parent.parent
LATEST = ROOT / "bench" / "results" / "latest.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DUPLICATE_WINDOW_NS = 7200 * 10**9  # the bridge's default nats.duplicate_window (2 h)
WINDOW = 1024  # the bridge's default nats.max_inflight
FI = "$FI"  # the fast-ingest reply subject's last token
OP_START, OP_APPEND, OP_COMMIT = 0, 1, 2  # fast-ingest operations (op 3: commit EOB, 4: ping)


def log(msg: str) -> None:
    print(f"[batching {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def server_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds (``/proc/<pid>/stat``)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rfind(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


class Failed(Exception):
    """A measurement phase broke: the script exits 1."""


# ---------------------------------------------------------------------------------------------
# JetStream API (plain requests: the stream flags are newer than nats-py's StreamConfig)


async def api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(f"$JS.API.{subject}", data, timeout=10)
    out: dict[str, Any] = json.loads(msg.data)
    if "error" in out:
        raise Failed(f"{subject}: {out['error']}")
    return out


async def create_stream(
    nc: NATS,
    name: str,
    subjects: list[str],
    *,
    atomic: bool = False,
    batched: bool = False,
    max_msg_size: int = -1,
    replicas: int = 1,
) -> None:
    cfg: dict[str, Any] = {
        "name": name,
        "subjects": subjects,
        "storage": "file",  # as the bridge's stream
        "num_replicas": replicas,
        "duplicate_window": DUPLICATE_WINDOW_NS,
        "max_msg_size": max_msg_size,
        "allow_atomic": atomic,
        "allow_batched": batched,
    }
    got = (await api(nc, f"STREAM.CREATE.{name}", cfg))["config"]
    if bool(got.get("allow_atomic")) != atomic or bool(got.get("allow_batched")) != batched:
        raise Failed(f"stream {name}: the server did not take the batch flags: {got}")


async def delete_stream(nc: NATS, name: str) -> None:
    await api(nc, f"STREAM.DELETE.{name}")


async def stream_state(nc: NATS, name: str) -> dict[str, Any]:
    state: dict[str, Any] = (await api(nc, f"STREAM.INFO.{name}"))["state"]
    return state


async def stored_ids(nc: NATS, name: str) -> collections.Counter[str]:
    """Every Nats-Msg-Id in the stream, with how often it is there (small streams only)."""
    state = await stream_state(nc, name)
    ids: collections.Counter[str] = collections.Counter()
    if not state["messages"]:
        return ids
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        try:
            m = (await api(nc, f"STREAM.MSG.GET.{name}", {"seq": seq}))["message"]
        except Failed:
            continue  # a deleted sequence
        for line in base64.b64decode(m.get("hdrs", "")).decode().split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "nats-msg-id":
                ids[value.strip()] += 1
    return ids


# ---------------------------------------------------------------------------------------------
# Part 1: correctness


def describe(data: bytes) -> str:
    """One reply of the server, short."""
    if not data:
        return "empty ack"
    try:
        j = json.loads(data)
    except ValueError:
        return f"? {data[:60]!r}"
    kind = j.get("type")
    if kind == "ack":
        return f"flow ack seq={j.get('seq')} msgs={j.get('msgs')}"
    if kind == "gap":
        return f"gap last_seq={j.get('last_seq')} seq={j.get('seq')}"
    if kind == "err":
        return f"err seq={j.get('seq')} {j.get('error', {}).get('err_code')}"
    if "error" in j:
        return f"error {j['error'].get('err_code')}"
    out = f"pub ack seq={j.get('seq')}"
    if "count" in j:
        out += f" count={j['count']}"
    if j.get("duplicate"):
        out += " duplicate"
    return out


def codes(replies: list[str]) -> str:
    """The replies in order, repeats folded (``empty ack x50; error 10210``)."""
    out: list[str] = []
    for r in replies:
        if out and out[-1].split(" x")[0] == r:
            head, _, n = out[-1].partition(" x")
            out[-1] = f"{head} x{int(n or 1) + 1}"
        else:
            out.append(r)
    return "; ".join(out) or "none"


class Inbox:
    """One wildcard subscription that keeps what the server answers, in order."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self.got: list[tuple[str, bytes]] = []

    async def start(self) -> Inbox:
        async def cb(msg: Msg) -> None:
            self.got.append((msg.subject[len(self.prefix) + 1 :], msg.data))

        await self.nc.subscribe(self.prefix + ".>", cb=cb)
        return self

    async def collect(self, want: int, timeout: float = 5.0, quiet: float = 0.3) -> list[str]:
        """At least ``want`` replies (or the timeout), then whatever comes within ``quiet``."""
        await self.nc.flush()
        deadline = time.monotonic() + timeout
        while len(self.got) < want and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        n = -1
        while n != len(self.got):
            n = len(self.got)
            await asyncio.sleep(quiet)
        out = [describe(data) for _, data in self.got]
        self.got = []
        return out


def payload(msg_id: str, size: int = 200) -> bytes:
    body = json.dumps({"specversion": "1.0", "id": msg_id, "type": "io.k8s.event.normal"})
    return body.encode().ljust(size)


def atomic_msgs(
    subject: str, ids: list[str], bid: str, inbox: str, *, commit: bool = True, size: int = 200
) -> list[tuple[str, str, dict[str, str], bytes]]:
    """An atomic batch: the first a request (as ADR-50 says), the commit with a reply, the
    others without one."""
    out = []
    for i, mid in enumerate(ids, 1):
        last = commit and i == len(ids)
        h = {"Nats-Msg-Id": mid, "Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i)}
        if last:
            h["Nats-Batch-Commit"] = "1"
        reply = f"{inbox}.{bid}.{i}" if i == 1 or last else ""
        out.append((subject, reply, h, payload(mid, size)))
    return out


def fast_reply(inbox: str, bid: str, seq: int, op: int, flow: int = 10, gap: str = "fail") -> str:
    return f"{inbox}.{bid}.{flow}.{gap}.{seq}.{op}.{FI}"


def fast_msgs(
    subject: str,
    ids: list[str],
    bid: str,
    inbox: str,
    *,
    commit: bool = True,
    seqs: list[int] | None = None,
    sizes: dict[int, int] | None = None,
) -> list[tuple[str, str, dict[str, str], bytes]]:
    """A fast-ingest batch, gap mode ``fail``: op 0 starts (seq 1), 1 appends, 2 commits."""
    seqs = seqs or list(range(1, len(ids) + 1))
    out = []
    for n, (seq, mid) in enumerate(zip(seqs, ids, strict=True), 1):
        last = commit and n == len(ids)
        op = OP_COMMIT if last else (OP_START if seq == 1 else OP_APPEND)
        size = (sizes or {}).get(seq, 200)
        out.append(
            (subject, fast_reply(inbox, bid, seq, op), {"Nats-Msg-Id": mid}, payload(mid, size))
        )
    return out


async def send(nc: NATS, msgs: list[tuple[str, str, dict[str, str], bytes]]) -> None:
    for subject, reply, headers, data in msgs:
        await nc.publish(subject, data, reply=reply, headers=headers)
    await nc.flush()


async def send_fast(
    nc: NATS, inbox: Inbox, msgs: list[tuple[str, str, dict[str, str], bytes]]
) -> list[str]:
    """A fast batch as ADR-50 asks: wait for the first reply, then the rest."""
    await send(nc, msgs[:1])
    first = await inbox.collect(1, quiet=0.05)
    await send(nc, msgs[1:])
    return first + await inbox.collect(1)


CHILD = r"""
import asyncio, json, os, signal, sys
import nats

async def main():
    nc = await nats.connect(sys.argv[1])
    for subject, reply, headers, data in json.loads(sys.argv[2]):
        await nc.publish(subject, data.encode(), reply=reply, headers=headers)
    await nc.flush()  # the server has them all
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


async def killed_client(url: str, msgs: list[tuple[str, str, dict[str, str], bytes]]) -> None:
    """Another process publishes ``msgs`` and is SIGKILLed before it sends anything more."""
    arg = json.dumps([(s, r, h, d.decode()) for s, r, h, d in msgs])
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", CHILD, url, arg], timeout=60, check=False
    )
    if proc.returncode != -9:
        raise Failed(f"the client to kill exited {proc.returncode}, not by SIGKILL")


@dataclass
class Outcome:
    kind: str
    scenario: str
    replies: str
    stored: int  # messages the stream gained
    expected: str
    ok: bool


@dataclass
class Correctness:
    nc: NATS
    url: str
    inbox: Inbox
    outcomes: list[Outcome] = field(default_factory=list)

    async def count(self, stream: str) -> int:
        n: int = (await stream_state(self.nc, stream))["messages"]
        return n

    async def settled_count(self, stream: str) -> int:
        """The stream's count once it stopped moving (after a killed client)."""
        last = -1
        n = await self.count(stream)
        while n != last:
            last = n
            await asyncio.sleep(0.3)
            n = await self.count(stream)
        return n

    async def case(
        self,
        kind: str,
        stream: str,
        scenario: str,
        act: Callable[[], Awaitable[list[str]]],
        expected: str,
        check: Callable[[list[str], int], bool],
    ) -> list[str]:
        before = await self.count(stream)
        replies = await act()
        stored = await self.settled_count(stream) - before
        ok = check(replies, stored)
        self.outcomes.append(Outcome(kind, scenario, codes(replies), stored, expected, ok))
        log(f"{kind}: {scenario}: {codes(replies)}; +{stored} stored{'' if ok else ' UNEXPECTED'}")
        return replies

    async def no_id_twice(self, kind: str, stream: str) -> None:
        ids = await stored_ids(self.nc, stream)
        twice = sorted(i for i, n in ids.items() if n > 1)
        self.outcomes.append(
            Outcome(
                kind,
                f"end: every Msg-Id in stream {stream} at most once",
                f"{len(ids)} ids, {len(twice)} twice",
                0,
                "none twice",
                not twice,
            )
        )

    async def run(self) -> list[Outcome]:
        nc, inbox = self.nc, self.inbox.prefix
        await create_stream(nc, "ATOMIC", ["atomic.>"], atomic=True)
        await create_stream(nc, "FAST", ["fast.>"], batched=True)
        await create_stream(nc, "FASTSMALL", ["small.>"], batched=True, max_msg_size=2048)
        await create_stream(nc, "PLAIN", ["plain.>"])
        advisories: list[tuple[float, dict[str, Any]]] = []

        async def on_advisory(msg: Msg) -> None:
            advisories.append((time.monotonic(), json.loads(msg.data)))

        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", cb=on_advisory)

        def ids(tag: str, *ns: int) -> list[str]:
            return [f"{tag}/{n}" for n in ns]

        def has(replies: list[str], *wanted: str) -> bool:
            text = codes(replies) + " | " + "; ".join(replies)
            return all(w in text for w in wanted)

        r8 = range(1, 9)
        A, F = "atomic", "fast-ingest"

        async def publish_one(subject: str, mid: str) -> None:
            await nc.request(subject, payload(mid), headers={"Nats-Msg-Id": mid}, timeout=5)

        async def atomic(batch: list[tuple[str, str, dict[str, str], bytes]]) -> list[str]:
            await send(nc, batch)
            return await self.inbox.collect(1)

        # --- atomic ------------------------------------------------------------------------
        await self.case(
            A,
            "ATOMIC",
            "new batch of 8",
            lambda: atomic(atomic_msgs("atomic.ev", ids("a", *r8), "a1", inbox)),
            "commit ack count=8, +8",
            lambda r, s: s == 8 and has(r, "pub ack seq=8 count=8"),
        )
        await self.case(
            A,
            "ATOMIC",
            "replay of those 8 (same Msg-Ids, new batch id)",
            lambda: atomic(atomic_msgs("atomic.ev", ids("a", *r8), "a2", inbox)),
            "error 10201 (whole batch), +0",
            lambda r, s: s == 0 and has(r, "error 10201"),
        )
        await publish_one("atomic.ev", "b/4")
        await self.case(
            A,
            "ATOMIC",
            "8 with the 4th already stored",
            lambda: atomic(atomic_msgs("atomic.ev", ids("b", *r8), "a3", inbox)),
            "error 10201, +0: the 7 new ones are not stored",
            lambda r, s: s == 0 and has(r, "error 10201"),
        )
        await self.case(
            A,
            "ATOMIC",
            "8 with one Msg-Id twice",
            lambda: atomic(atomic_msgs("atomic.ev", ids("c", 1, 2, 3, 3, 5, 6, 7, 8), "a4", inbox)),
            "error 10201, +0",
            lambda r, s: s == 0 and has(r, "error 10201"),
        )

        killed_at: dict[str, float] = {}

        async def killed_then(
            bid: str, batch: list[tuple[str, str, dict[str, str], bytes]]
        ) -> list[str]:
            await killed_client(self.url, batch)
            killed_at[bid] = time.monotonic()
            return await self.inbox.collect(0, quiet=0.3)

        await self.case(
            A,
            "ATOMIC",
            "client SIGKILLed after 5 of 8 (no commit)",
            lambda: killed_then(
                "a5", atomic_msgs("atomic.ev", ids("d", 1, 2, 3, 4, 5), "a5", inbox, commit=False)
            ),
            "+0: the staged part is not stored",
            lambda r, s: s == 0,
        )
        await self.case(
            A,
            "ATOMIC",
            "its replay, new batch id",
            lambda: atomic(atomic_msgs("atomic.ev", ids("d", *r8), "a6", inbox)),
            "commit ack count=8, +8",
            lambda r, s: s == 8 and has(r, "count=8"),
        )
        await self.case(
            A,
            "ATOMIC",
            "client SIGKILLed after 5 of 8 again",
            lambda: killed_then(
                "a7", atomic_msgs("atomic.ev", ids("e", 1, 2, 3, 4, 5), "a7", inbox, commit=False)
            ),
            "+0",
            lambda r, s: s == 0,
        )
        await self.case(
            A,
            "ATOMIC",
            "its replay with the same batch id (within the 10 s timeout)",
            lambda: atomic(atomic_msgs("atomic.ev", ids("e", *r8), "a7", inbox)),
            "error 10176 (incomplete), +0",
            lambda r, s: s == 0 and has(r, "error 10176"),
        )
        await self.case(
            A,
            "ATOMIC",
            "then with a new batch id",
            lambda: atomic(atomic_msgs("atomic.ev", ids("e", *r8), "a8", inbox)),
            "commit ack count=8, +8",
            lambda r, s: s == 8 and has(r, "count=8"),
        )

        async def abandoned() -> list[str]:
            deadline = killed_at["a5"] + 15
            while time.monotonic() < deadline and not any(
                a.get("batch") == "a5" for _, a in advisories
            ):
                await asyncio.sleep(0.1)
            return [
                f"advisory {a.get('reason')} {at - killed_at['a5']:.1f} s after the kill"
                for at, a in advisories
                if a.get("batch") == "a5"
            ]

        await self.case(
            A,
            "ATOMIC",
            "the killed client's batch, later",
            abandoned,
            "advisory stream_batch_abandoned, reason timeout, ~10 s",
            lambda r, s: has(r, "advisory timeout"),
        )
        await self.case(
            A,
            "ATOMIC",
            "1001 messages in one batch",
            lambda: atomic(
                atomic_msgs("atomic.ev", ids("g", *range(1, 1002)), "a9", inbox, size=50)
            ),
            "error 10199 (too large: 1000), +0",
            lambda r, s: s == 0 and has(r, "error 10199"),
        )

        async def open_batches() -> list[str]:
            for k in range(1, 52):
                await send(
                    nc, atomic_msgs("atomic.ev", [f"h/{k}"], f"open{k}", inbox, commit=False)
                )
            return await self.inbox.collect(51)

        await self.case(
            A,
            "ATOMIC",
            "51 batches open at once",
            open_batches,
            "the 51st: error 10210 (50 per stream)",
            lambda r, s: s == 0 and has(r, "empty ack x50; error 10210"),
        )
        await self.case(
            A,
            "PLAIN",
            "a stream without allow_atomic",
            lambda: atomic(atomic_msgs("plain.ev", ids("i", 1, 2), "a10", inbox)),
            "error 10174, +0",
            lambda r, s: s == 0 and has(r, "error 10174"),
        )
        await self.no_id_twice(A, "ATOMIC")

        # --- fast ingest -------------------------------------------------------------------
        it = self.inbox
        await self.case(
            F,
            "FAST",
            "new batch of 8",
            lambda: send_fast(nc, it, fast_msgs("fast.ev", ids("f", *r8), "f1", inbox)),
            "flow ack, pub ack count=8, +8",
            lambda r, s: s == 8 and has(r, "flow ack seq=0", "pub ack seq=8 count=8"),
        )
        await self.case(
            F,
            "FAST",
            "replay of those 8 (same Msg-Ids, new batch id)",
            lambda: send_fast(nc, it, fast_msgs("fast.ev", ids("f", *r8), "f2", inbox)),
            "pub ack count=8 (seq=0: nothing new), +0, no error",
            lambda r, s: s == 0 and has(r, "count=8") and "err" not in "".join(r),
        )
        await publish_one("fast.ev", "g/4")
        await self.case(
            F,
            "FAST",
            "8 with the 4th already stored",
            lambda: send_fast(nc, it, fast_msgs("fast.ev", ids("g", *r8), "f3", inbox)),
            "pub ack count=8, +7",
            lambda r, s: s == 7 and has(r, "count=8"),
        )
        await self.case(
            F,
            "FAST",
            "8 with one Msg-Id twice",
            lambda: send_fast(
                nc, it, fast_msgs("fast.ev", ids("h", 1, 2, 3, 3, 5, 6, 7, 8), "f4", inbox)
            ),
            "pub ack count=8, +7",
            lambda r, s: s == 7 and has(r, "count=8"),
        )

        async def one(batch: list[tuple[str, str, dict[str, str], bytes]]) -> list[str]:
            await send(nc, batch)
            return await self.inbox.collect(1)

        await self.case(
            F,
            "FAST",
            "a batch of 1 (start = commit) already stored",
            lambda: one(fast_msgs("fast.ev", ids("f", 1), "f5", inbox)),
            "pub ack duplicate (as a plain publish), +0",
            lambda r, s: s == 0 and has(r, "duplicate"),
        )
        await self.case(
            F,
            "FAST",
            "client SIGKILLed after 5 of 8 (no commit)",
            lambda: killed_then(
                "f6", fast_msgs("fast.ev", ids("j", 1, 2, 3, 4, 5), "f6", inbox, commit=False)
            ),
            "+5: stored as they came",
            lambda r, s: s == 5,
        )
        await self.case(
            F,
            "FAST",
            "its replay, new batch id (the old one still open)",
            lambda: send_fast(nc, it, fast_msgs("fast.ev", ids("j", *r8), "f7", inbox)),
            "pub ack count=8, +3",
            lambda r, s: s == 3 and has(r, "count=8"),
        )
        await self.case(
            F,
            "FAST",
            "a gap: seq 1, 2, 4, then 5 (commit)",
            lambda: send_fast(
                nc, it, fast_msgs("fast.ev", ids("k", 1, 2, 4, 5), "f8", inbox, seqs=[1, 2, 4, 5])
            ),
            "gap, pub ack count=2, then 10208 (batch over), +2",
            lambda r, s: s == 2 and has(r, "gap last_seq=3 seq=4", "count=2", "10208"),
        )
        await self.case(
            F,
            "FASTSMALL",
            "6, the 4th over the stream's max_msg_size",
            lambda: send_fast(
                nc, it, fast_msgs("small.ev", ids("l", *range(1, 7)), "f9", inbox, sizes={4: 4096})
            ),
            "error 10054 (the size check comes before the batch's), so a gap at 5: "
            "pub ack count=3, then 10208, +3",
            lambda r, s: s == 3 and has(r, "error 10054", "gap last_seq=4 seq=5", "count=3"),
        )
        await self.case(
            F,
            "PLAIN",
            "a stream without allow_batched",
            lambda: one(fast_msgs("plain.ev", ids("m", 1, 2), "f10", inbox)[:1]),
            "error 10205, +0",
            lambda r, s: s == 0 and has(r, "error 10205"),
        )
        await self.no_id_twice(F, "FAST")
        return self.outcomes


def correctness_table(outcomes: list[Outcome]) -> str:
    lines = [
        "| kind | scenario | server's replies | stored | expected (source) | as expected |",
        "|---|---|---|---:|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.kind} | {o.scenario} | {o.replies} | +{o.stored} | {o.expected} | "
            f"{'yes' if o.ok else '**no**'} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Part 2: CPU


@dataclass(slots=True)
class Ev:
    subject: str
    msg_id: str
    head: bytes  # the header block, encoded once (as the bridge's converter does)
    headers: dict[str, str]  # the same for nats-py's public publish
    payload: bytes


def make_events(n: int, size: int, subject_prefix: str) -> list[Ev]:
    """CloudEvent-sized messages: structured mode, an ``<uid>/<resourceVersion>`` id each."""
    reasons = ("Scheduled", "Pulled", "Created", "Started", "BackOff", "Unhealthy")
    out = []
    for i in range(n):
        ns = f"ns{i % 7}"
        reason = reasons[i % len(reasons)]
        msg_id = f"6f0c2a4e-{i % 9973:04x}-4e7b-9c1d-{i:012x}/{1_000_000 + i}"
        attrs = (
            f'{{"specversion":"1.0","id":"{msg_id}","source":"k8s://bench/namespaces/{ns}",'
            f'"type":"io.k8s.event.normal","subject":"Pod/web-{i % 101}",'
            f'"time":"2026-12-02T10:00:00Z","datacontenttype":"application/json",'
            f'"k8scluster":"bench","k8snamespace":"{ns}","k8skind":"Pod",'
            f'"k8sname":"web-{i % 101}","k8sreason":"{reason}","k8scount":1,'
            f'"data":{{"metadata":{{"name":"web-{i}.{i:x}","namespace":"{ns}"}},"message":"'
        )
        tail = '"}}'
        body = attrs + "x" * max(0, size - len(attrs) - len(tail)) + tail
        headers = {"Content-Type": "application/cloudevents+json", "Nats-Msg-Id": msg_id}
        head = (
            "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        ).encode()
        out.append(Ev(f"{subject_prefix}.{ns}.Pod.{reason}", msg_id, head, headers, body.encode()))
    return out


# (subject, reply or "", header block (raw) or dict (public), payload)
Frame = tuple[str, str, Any, bytes]


class RawWire:
    """``fastpath.RawWriter``'s way: HPUB frames joined and queued at once; a frame without a
    reply (an atomic batch's middle) is framed without one."""

    raw = True

    def __init__(self, nc: NATS) -> None:
        self._nc = nc

    async def write(self, frames: list[Frame]) -> None:
        nc = self._nc
        parts: list[bytes] = []
        add = parts.append
        size = 0
        for subject, reply, head, data in frames:
            hl = len(head)
            n = hl + len(data)
            size += n
            if reply:
                add(f"HPUB {subject} {reply} {hl} {n}\r\n".encode())
            else:
                add(f"HPUB {subject} {hl} {n}\r\n".encode())
            add(head)
            add(data)
            add(b"\r\n")
        nc.stats["out_msgs"] += len(frames)
        nc.stats["out_bytes"] += size
        await nc._send_command(b"".join(parts))
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()


class PublicWire:
    """``publishing.PlainWriter``'s way: ``Client.publish`` per message."""

    raw = False

    def __init__(self, nc: NATS) -> None:
        self._nc = nc

    async def write(self, frames: list[Frame]) -> None:
        publish = self._nc.publish
        for subject, reply, headers, data in frames:
            await publish(subject, data, reply=reply, headers=headers)


class Reply(msgspec.Struct):
    """A JetStream pub ack, or a fast-ingest flow message (``type``: ack, gap, err)."""

    type: str | None = None
    stream: str | None = None
    seq: int = 0
    msgs: int = 0
    count: int = 0
    duplicate: bool = False
    error: Any = None


decode_reply = msgspec.json.Decoder(Reply).decode


class Mode:
    """Publishes ``events`` within a window of unacked messages; ``done`` once all are acked."""

    wildcard = "*"

    def __init__(self, name: str, events: list[Ev], window: int) -> None:
        self.name = name
        self.events = events
        self.window = window
        self.prefix = ""
        self.wire: RawWire | PublicWire | None = None
        self.inflight = 0
        self.acked = 0
        self.replies = 0
        self.errors: list[str] = []
        self.room = asyncio.Event()
        self.done = asyncio.Event()

    def settle(self, n: int) -> None:
        self.inflight -= n
        self.acked += n
        self.room.set()
        if self.acked >= len(self.events):
            self.done.set()

    def fail(self, what: str) -> None:
        self.errors.append(what)
        self.done.set()

    async def wait_room(self, need: int) -> None:
        while self.inflight + need > self.window:
            self.room.clear()
            await self.room.wait()

    async def send(self) -> None:
        raise NotImplementedError

    def on_ack(self, token: str, data: bytes, no_responders: bool) -> None:
        raise NotImplementedError


class Single(Mode):
    """The bridge today: one reply token per message, one ack per message."""

    def __init__(self, events: list[Ev], window: int) -> None:
        super().__init__("one by one", events, window)
        self.pending: dict[str, Ev] = {}

    async def send(self) -> None:
        assert self.wire is not None
        evs, n, i, token = self.events, len(self.events), 0, 0
        raw, prefix, pending, write = self.wire.raw, self.prefix, self.pending, self.wire.write
        while i < n:
            await self.wait_room(1)
            k = min(BATCH_MAX, self.window - self.inflight, n - i)
            frames: list[Frame] = []
            for ev in evs[i : i + k]:
                token += 1
                key = str(token)
                pending[key] = ev
                frames.append(
                    (ev.subject, prefix + key, ev.head if raw else ev.headers, ev.payload)
                )
            self.inflight += k
            i += k
            await write(frames)

    def on_ack(self, token: str, data: bytes, no_responders: bool) -> None:
        if self.pending.pop(token, None) is None:
            return
        self.replies += 1
        r = decode_reply(data)
        if no_responders or r.error is not None or r.stream is None:
            self.fail(f"{token}: {data[:200]!r}")
            return
        self.settle(1)


class Batched(Mode):
    """Batches of ``size`` (several to one write while the write has fewer than BATCH_MAX),
    one pub ack per batch settles all of its messages."""

    def __init__(self, name: str, events: list[Ev], window: int, size: int) -> None:
        super().__init__(name, events, window)
        self.size = size
        self.pending: dict[str, int] = {}
        self.batch_no = 0
        self.tag = os.urandom(4).hex()

    def frames(self, bid: str, batch: list[Ev]) -> list[Frame]:
        raise NotImplementedError

    async def send(self) -> None:
        assert self.wire is not None
        evs, n, i, size, write = self.events, len(self.events), 0, self.size, self.wire.write
        while i < n:
            await self.wait_room(min(size, n - i))
            frames: list[Frame] = []
            while i < n and len(frames) < BATCH_MAX:
                k = min(size, n - i)
                if self.inflight + k > self.window:
                    break
                self.batch_no += 1
                bid = f"{self.tag}{self.batch_no}"
                frames += self.frames(bid, evs[i : i + k])
                self.pending[bid] = k
                self.inflight += k
                i += k
            await write(frames)

    def settle_batch(self, bid: str, r: Reply, data: bytes) -> None:
        k = self.pending.pop(bid, None)
        if k is None:
            return
        if r.error is not None or r.stream is None or r.count != k:
            self.fail(f"batch {bid}: {data[:200]!r}")
            return
        self.settle(k)


class Atomic(Batched):
    """ADR-50 atomic batches: batch headers on every message, only the commit has a reply."""

    def __init__(self, events: list[Ev], window: int, size: int) -> None:
        super().__init__(f"atomic {size}", events, window, size)

    def frames(self, bid: str, batch: list[Ev]) -> list[Frame]:
        assert self.wire is not None
        raw, out, last = self.wire.raw, [], len(batch)
        commit_reply = self.prefix + bid
        for j, ev in enumerate(batch, 1):
            if raw:
                extra = f"Nats-Batch-Id: {bid}\r\nNats-Batch-Sequence: {j}\r\n"
                if j == last:
                    extra += "Nats-Batch-Commit: 1\r\n"
                hdrs: Any = ev.head[:-2] + extra.encode() + b"\r\n"
            else:
                hdrs = {**ev.headers, "Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(j)}
                if j == last:
                    hdrs["Nats-Batch-Commit"] = "1"
            out.append((ev.subject, commit_reply if j == last else "", hdrs, ev.payload))
        return out

    def on_ack(self, token: str, data: bytes, no_responders: bool) -> None:
        self.replies += 1
        if no_responders:
            self.fail(f"{token}: no responders")
            return
        self.settle_batch(token, decode_reply(data), data)


class FastBatches(Batched):
    """ADR-50 fast-ingest batches (gap ``fail``), one per ``size`` messages, each committed by
    its last message: a reply subject per message (it carries the batch), two replies per batch
    (the first message's flow ack, the commit's pub ack). Pipelined: the next batch does not
    wait for the previous one's first flow ack (ADR-50 asks a client to; that costs a round
    trip per batch)."""

    wildcard = ">"

    def __init__(self, events: list[Ev], window: int, size: int) -> None:
        super().__init__(f"fast {size}", events, window, size)

    def frames(self, bid: str, batch: list[Ev]) -> list[Frame]:
        assert self.wire is not None
        raw, out, last, size = self.wire.raw, [], len(batch), self.size
        base = f"{self.prefix}{bid}.{size}.fail."
        for j, ev in enumerate(batch, 1):
            op = OP_COMMIT if j == last else (OP_START if j == 1 else OP_APPEND)
            out.append(
                (ev.subject, f"{base}{j}.{op}.{FI}", ev.head if raw else ev.headers, ev.payload)
            )
        return out

    def on_ack(self, token: str, data: bytes, no_responders: bool) -> None:
        self.replies += 1
        if no_responders:
            self.fail(f"{token}: no responders")
            return
        r = decode_reply(data)
        if r.type == "ack":
            return  # the flow ack of a batch's first message
        if r.type is not None:
            self.fail(f"{token}: {data[:200]!r}")
            return
        self.settle_batch(token[: token.index(".")], r, data)


class FastStream(Mode):
    """One fast-ingest batch for everything (gap ``fail``): its flow acks ("persisted up to
    seq") settle what they cover, the commit's pub ack the rest. As ADR-50 asks, the client
    waits for the first reply before it goes on."""

    wildcard = ">"

    def __init__(self, events: list[Ev], window: int, flow: int) -> None:
        super().__init__(f"fast, one batch (flow {flow})", events, window)
        self.flow = flow
        self.first = asyncio.Event()

    async def send(self) -> None:
        assert self.wire is not None
        evs, n, raw, write = self.events, len(self.events), self.wire.raw, self.wire.write
        base = f"{self.prefix}{os.urandom(4).hex()}.{self.flow}.fail."
        seq = 0
        while seq < n:
            await self.wait_room(1)
            k = min(BATCH_MAX, self.window - self.inflight, n - seq) if seq else 1
            frames: list[Frame] = []
            for ev in evs[seq : seq + k]:
                seq += 1
                op = OP_COMMIT if seq == n else (OP_START if seq == 1 else OP_APPEND)
                frames.append(
                    (
                        ev.subject,
                        f"{base}{seq}.{op}.{FI}",
                        ev.head if raw else ev.headers,
                        ev.payload,
                    )
                )
            self.inflight += k
            await write(frames)
            if seq == 1:
                await self.first.wait()

    def on_ack(self, token: str, data: bytes, no_responders: bool) -> None:
        self.replies += 1
        self.first.set()
        if no_responders:
            self.fail(f"{token}: no responders")
            return
        r = decode_reply(data)
        if r.type == "ack":
            if r.seq > self.acked:
                self.settle(r.seq - self.acked)
        elif r.type is not None or r.error is not None or r.stream is None:
            self.fail(f"{token}: {data[:200]!r}")
        elif r.count != len(self.events):
            self.fail(f"commit: {data[:200]!r}")
        else:
            self.settle(len(self.events) - self.acked)


STREAM = "BENCH_BATCH"
SUBJECT_PREFIX = "bench.batch"


@dataclass
class Target:
    """Where the CPU runs publish: one server (R1, as the bench's) or a 3-node cluster (R3)."""

    name: str
    url: str
    pids: list[int]
    replicas: int = 1
    cluster: NatsCluster | None = None

    def cpu(self) -> float:
        return sum(server_cpu(pid) for pid in self.pids)


async def measure(target: Target, mode: Mode, path: str, timeout: float) -> dict[str, Any]:
    """One run of one mode on a fresh stream and a fresh connection."""
    nc = await nats.connect(target.url, max_reconnect_attempts=0)
    try:
        await create_stream(
            nc, STREAM, [SUBJECT_PREFIX + ".>"], atomic=True, batched=True, replicas=target.replicas
        )
        if target.cluster is not None:
            await asyncio.to_thread(target.cluster.wait_stream_current, STREAM, target.replicas)
        mode.prefix = nc.new_inbox() + "."

        async def on_reply(msg: Msg) -> None:  # the public path's callback
            hdrs = msg.headers
            mode.on_ack(
                msg.subject[len(mode.prefix) :],
                msg.data,
                bool(hdrs and hdrs.get("Status") == "503"),
            )

        sub = await nc.subscribe(mode.prefix + mode.wildcard, cb=on_reply)
        if path == "raw":
            missing = fastpath.problems(fastpath.RAW_WRITER_USES, nc) + fastpath.problems(
                fastpath.ACK_TAP_USES, nc, sub
            )
            if missing:
                raise Failed(f"nats-py lacks what the bridge's fast path uses: {missing}")
            fastpath.AckTap(nc, sub, mode.prefix, mode.on_ack).install()
            mode.wire = RawWire(nc)
        else:
            mode.wire = PublicWire(nc)
        await nc.flush()
        n = len(mode.events)
        in0 = nc.stats["in_msgs"]
        gc.collect()
        c0, w0, s0 = time.process_time(), time.perf_counter(), target.cpu()
        sender = asyncio.create_task(mode.send())
        try:
            await asyncio.wait_for(mode.done.wait(), timeout)
        except TimeoutError as exc:
            raise Failed(f"{mode.name} ({path}): {mode.acked} of {n} acked in {timeout} s") from exc
        finally:
            c1, w1, s1 = time.process_time(), time.perf_counter(), target.cpu()
            if not sender.done():
                sender.cancel()
            (sent,) = await asyncio.gather(sender, return_exceptions=True)
        if isinstance(sent, Exception):
            raise Failed(f"{mode.name} ({path}): send failed: {sent!r}")
        if mode.errors:
            raise Failed(f"{mode.name} ({path}): {mode.errors[:3]}")
        stored = (await stream_state(nc, STREAM))["messages"]
        if stored != n:
            raise Failed(f"{mode.name} ({path}): {stored} stored, {n} sent")
        return {
            "target": target.name,
            "mode": mode.name,
            "path": path,
            "client_ms_per_1k": (c1 - c0) * 1e6 / n,
            "server_ms_per_1k": (s1 - s0) * 1e6 / n,
            "msgs_per_s": n / (w1 - w0),
            "replies_per_1k": (nc.stats["in_msgs"] - in0) * 1000 / n,
        }
    finally:
        try:
            await delete_stream(nc, STREAM)
        finally:
            await nc.close()


def modes(events: list[Ev], window: int, sizes: list[int], flow: int) -> Iterator[Mode]:
    yield Single(events, window)
    for size in sizes:
        yield Atomic(events, window, size)
    for size in sizes:
        yield FastBatches(events, window, size)
    yield FastStream(events, window, flow)


def bridge_cpu_per_event_us() -> float | None:
    """The bridge's whole-process CPU per event in the last end-to-end benchmark."""
    try:
        runs = json.loads(LATEST.read_text())["throughput"]
        return float(statistics.median(r["cpu_s_per_1k"] for r in runs if r.get("complete")) * 1e3)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cpu_table(rows: list[dict[str, Any]], bridge_us: float | None) -> str:
    """Medians per (stream, path, mode); savings against one by one on the same stream and
    path."""
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        by[(r["target"], r["path"], r["mode"])].append(r)

    def med(key: tuple[str, str, str], field: str) -> float:
        return float(statistics.median(r[field] for r in by[key]))

    share_head = " | bridge CPU / event" if bridge_us else ""
    lines = [
        "| stream | path | mode | client CPU ms / 1k msgs (min-max) | vs one by one"
        + " | saved µs / msg"
        + share_head
        + " | msgs/s | server CPU ms / 1k | replies / 1k |",
        "|---|---|---|---:|---:|---:|" + ("---:|" if bridge_us else "") + "---:|---:|---:|",
    ]
    for key in by:
        target, path, mode = key
        c = med(key, "client_ms_per_1k")
        base = med((target, path, "one by one"), "client_ms_per_1k")
        saved = base - c  # ms per 1k messages = µs per message
        lo = min(r["client_ms_per_1k"] for r in by[key])
        hi = max(r["client_ms_per_1k"] for r in by[key])
        share = ""
        if bridge_us:
            share = f" | {-saved / bridge_us:+.0%}" if saved else " | 0%"
        lines.append(
            f"| {target} | {path} | {mode} | {c:.2f} ({lo:.2f}-{hi:.2f}) | "
            f"{(c - base) / base:+.0%} | {saved:.2f}"
            f"{share} | {med(key, 'msgs_per_s'):,.0f} | {med(key, 'server_ms_per_1k'):.1f} | "
            f"{med(key, 'replies_per_1k'):.1f} |"
        )
    return "\n".join(lines)


async def cpu_phase(
    target: Target, events: list[Ev], args: argparse.Namespace, paths: list[str]
) -> list[dict[str, Any]]:
    """Every mode on every path, ``--runs`` times, interleaved."""
    rows: list[dict[str, Any]] = []
    for run in range(1, args.runs + 1):
        for path in paths:
            for mode in modes(events, args.window, args.sizes, args.flow):
                row = await measure(target, mode, path, args.timeout)
                row["run"] = run
                rows.append(row)
                log(
                    f"{target.name} run {run} {path} {row['mode']}: "
                    f"{row['client_ms_per_1k']:.2f} ms/1k client, "
                    f"{row['msgs_per_s']:,.0f} msgs/s, {row['replies_per_1k']:.1f} replies/1k"
                )
    return rows


# ---------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, check=True)
    return {
        "date": time.strftime("%Y-%m-%d"),
        "nats_server": out.stdout.strip(),
        "nats_py": importlib.metadata.version("nats-py"),
        "msgspec": importlib.metadata.version("msgspec"),
        "python": platform.python_version(),
        "cores": str(os.cpu_count()),
    }


async def main(args: argparse.Namespace) -> int:
    info = versions()
    print("# ADR-50 batch publishing: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    bad = 0
    rows: list[dict[str, Any]] = []
    events = make_events(args.messages, args.payload, SUBJECT_PREFIX)
    size = statistics.mean(len(e.head) + len(e.payload) for e in events)
    with NatsServer() as server:
        assert server.proc is not None
        if not args.skip_correctness:
            nc = await nats.connect(server.url, max_reconnect_attempts=0)
            try:
                inbox = await Inbox(nc).start()
                outcomes = await Correctness(nc, server.url, inbox).run()
            finally:
                await nc.close()
            print("\n## Correctness (R1 file stream, gap mode fail)\n")
            print(correctness_table(outcomes))
            unexpected = [o.scenario for o in outcomes if not o.ok]
            if unexpected:
                bad += 1
                log(f"{len(unexpected)} outcome(s) not as expected: {unexpected}")
        if not args.skip_cpu:
            log(f"{args.messages} messages of {size:.0f} bytes (header block + payload)")
            r1 = Target("R1", server.url, [server.proc.pid])
            rows += await cpu_phase(r1, events, args, args.paths)
    if args.r3 and not args.skip_cpu:
        with NatsCluster(3) as cluster:
            await asyncio.to_thread(cluster.wait_ready)
            pids = [node.proc.pid for node in cluster.nodes if node.proc is not None]
            r3 = Target("R3", cluster.url(0), pids, 3, cluster)
            rows += await cpu_phase(r3, events, args, ["raw"])
    if rows:
        bridge_us = bridge_cpu_per_event_us()
        print(
            f"\n## CPU ({args.messages} messages of {size:.0f} bytes, window {args.window}, "
            f"median of {args.runs}; server CPU: all nodes)\n"
        )
        print(cpu_table(rows, bridge_us))
        if bridge_us:
            print(
                f"\nbridge CPU / event: the saving as a share of the bridge's whole CPU per event "
                f"in the last end-to-end benchmark ({LATEST.name}: {bridge_us:.1f} µs)."
            )
    return 1 if bad else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.batching", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--window", type=int, default=WINDOW)
    p.add_argument("--payload", type=int, default=1300, help="bytes of CloudEvent JSON")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256])
    p.add_argument("--flow", type=int, default=256, help="one long fast batch: ack every N")
    p.add_argument("--paths", type=lambda s: s.split(","), default=["raw", "public"])
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for one run")
    p.add_argument("--skip-correctness", action="store_true")
    p.add_argument("--skip-cpu", action="store_true")
    p.add_argument("--r3", action="store_true", help="the CPU runs on a 3-node R3 stream too")
    p.add_argument("--quick", action="store_true", help="5000 messages, one run")
    args = p.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 5000, 1
    return args


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except Failed as exc:
        log(f"FAILED: {exc}")
        sys.exit(1)
