"""Every program's HTTP port against hostile clients, the same attacks on each: the bridge, the
alerting subscriber, the remediation worker and the OTLP subscriber as real processes, each with
the file limit a container gets (``nofile_1024``: containerd 2.x's default soft limit, which
the shipped manifests leave as it is) and its shipped config, pointed at a simulated API server,
a real nats-server, the bridge's stream, a closed Alertmanager port and an OTLP endpoint
(tests/hostile_http.py is the kit; issue 39 found the subscribers' probes dead under the first
attack).

One world for the module: the four processes start once and take every attack in turn, as a
Pod would; each test reads what it needs of them first. The server's bounds (HEAD_TIMEOUT,
WRITE_TIMEOUT: 10 s each, k8s_event_common.http) are waited on with generous deadlines: the
tests assert what the programs do, never how fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import pytest_asyncio
import yaml

from k8s_event_common import http
from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.natsserver import NatsServer
from tests import provisioning, shipped
from tests.hostile_http import (
    NOFILE,
    exchange,
    idle_flood,
    nofile_1024,
    nofile_limit,
    open_fds,
    peak_fds,
    probe,
    status_of,
    trickle,
    unread,
)
from tests.integration.harness import (
    BridgeProcess,
    ChildProcess,
    ConsumerProcess,
    bridge_config,
    eventually,
    write_kubeconfig,
)
from tests.otlp_endpoint import Endpoint
from tests.support import event

pytestmark = pytest.mark.integration
# every attack runs on the loop of the module's world (its simulated API server runs there)
in_world = pytest.mark.asyncio(loop_scope="module")

HOST = "127.0.0.1"
FLOOD = 1100  # more connections than the process may open files
PROBES = (("/healthz", b"ok\n"), ("/readyz", b"ready\n"))


@dataclass(frozen=True)
class Program:
    name: str
    module: str | None  # a subscriber's module; None: the bridge
    consumed: str  # the metric that moves when a message reaches it (without its prefix)


PROGRAMS = (
    Program("k8s-event-bridge", None, "events_published"),
    Program("k8s-event-alerting", "k8s_event_consumer.alerting", "events_total"),
    Program("k8s-event-remediation", "k8s_event_consumer.remediation", "events_total"),
    Program("k8s-event-otlp", "k8s_event_consumer.otlp", "records_total"),
    Program("k8s-event-digests", "k8s_event_consumer.digests", "versions_total"),
)


@dataclass
class World:
    sim: SimApiServer
    procs: dict[str, ChildProcess]
    events: int = 0

    def write_event(self) -> None:
        """A Warning BackOff Event about a Pod in ``default``: the bridge publishes it, and
        every subscriber's filter takes it."""
        self.events += 1
        now = datetime.now(UTC)
        self.sim.create_event(
            event(
                f"hostile-{self.events}.{self.events:x}",
                namespace="default",
                involved_object={"uid": f"pod-uid-{self.events}", "namespace": "default"},
                count=1,
                first=now,
                last=now,
                message="Back-off restarting failed container",
            )
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("hostile")
    sim = SimApiServer()
    await sim.start()
    nats = NatsServer(store_dir=str(tmp / "nats")).start()
    endpoint = await Endpoint().start()
    procs: dict[str, ChildProcess] = {}
    try:
        kubeconfig = write_kubeconfig(tmp / "kubeconfig", sim.url)
        bridge = BridgeProcess(
            bridge_config(tmp, nats.url, kubeconfig, defaults=True),
            tmp / "bridge.log",
            preexec_fn=nofile_1024,
        ).start()
        procs[PROGRAMS[0].name] = bridge
        await bridge.wait_ready(60)  # the stream the subscribers read is the bridge's
        for p in PROGRAMS[1:]:
            assert p.module is not None
            config = shipped.subscriber(
                tmp, p.module, nats.url, kubeconfig=kubeconfig, otlp_endpoint=endpoint.url
            )
            if p.module == "k8s_event_consumer.digests":  # its stream and consumer, made first
                await provisioning.subscriber(p.module, config, [nats.url])
            procs[p.name] = ConsumerProcess(
                config, tmp / f"{p.name}.log", module=p.module, preexec_fn=nofile_1024
            ).start()
        for proc in procs.values():
            await proc.wait_ready(60)
            assert nofile_limit(proc.pid) == NOFILE
        yield World(sim, procs)
    finally:
        for proc in procs.values():
            proc.kill()
        await endpoint.stop()
        nats.stop()
        await sim.stop()


@pytest.fixture(params=PROGRAMS, ids=[p.name for p in PROGRAMS])
def program(request: pytest.FixtureRequest, world: World) -> Program:
    p: Program = request.param
    assert world.procs[p.name].running(), world.procs[p.name].logs()[-3000:]
    return p


def running(world: World, p: Program) -> ChildProcess:
    proc = world.procs[p.name]
    assert proc.running(), proc.logs()[-3000:]
    return proc


async def answered(port: int, path: str) -> tuple[int, bytes]:
    """A fresh client's probe, answered (retried while a flood's connections are being let
    go: a connection the cap turned away is not yet a failure)."""
    return await eventually(
        lambda: probe(HOST, port, path),
        30,
        retry_on=(TimeoutError, OSError),
        what=f"{path} answered",
    )


@in_world
async def test_1100_idle_half_heads_at_a_1024_file_limit_leave_the_probes_answering_and_are_closed(
    world: World, program: Program
) -> None:
    """Peers that send half a request head and wait, more of them than the program may hold
    files: a new client's /healthz and /readyz are answered while they are held, the
    program's open files stay under its limit, and it closes every one of them (evicted by the
    connection cap, or cut off by the head timeout)."""
    proc = running(world, program)
    async with peak_fds(proc.pid) as peak:
        flood = await idle_flood(HOST, proc.port, FLOOD)
        try:
            assert flood.opened == FLOOD, f"{flood.failed} connections not even opened"
            for path, body in PROBES:
                assert await answered(proc.port, path) == (200, body), path
            await eventually(
                lambda: flood.closed() == flood.opened,
                60,
                what=f"every flood connection closed by {program.name}",
            )
        finally:
            await flood.close()
    assert peak.value < NOFILE, f"{program.name} reached {peak.value} open files"
    running(world, program)
    assert (await probe(HOST, proc.port, "/readyz"))[0] == 200


@in_world
async def test_events_written_during_and_after_a_flood_still_reach_it(
    world: World, program: Program
) -> None:
    """While 1,100 half heads are held, and once their peers dropped them, the program takes
    what comes (the bridge publishes a new Event, a subscriber consumes it from the stream)
    and its /metrics shows it: its NATS and API connections not starved of files, its port
    not lost to the flood."""
    proc = running(world, program)

    async def consumed(more_than: float) -> bool:
        return await proc.metric(program.consumed) > more_than

    before = await proc.metric(program.consumed)
    flood = await idle_flood(HOST, proc.port, FLOOD)
    try:
        assert flood.opened == FLOOD, f"{flood.failed} connections not even opened"
        world.write_event()
        await eventually(
            lambda: consumed(before), 60, what=f"{program.consumed} moved during the flood"
        )
    finally:
        await flood.close()
    during = await proc.metric(program.consumed)
    world.write_event()
    await eventually(lambda: consumed(during), 60, what=f"{program.consumed} moved after the flood")
    assert (await answered(proc.port, "/readyz")) == (200, b"ready\n")


@in_world
async def test_a_head_trickled_a_byte_a_second_is_cut_off_at_the_head_timeout(
    world: World, program: Program
) -> None:
    """A slow-loris (each byte within any per-read timeout, the head never done): the
    program answers 408 and ends the connection before the head is whole, and answers
    others meanwhile."""
    proc = running(world, program)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40 + b"\r\n\r\n"
    assert len(head) > 3 * http.HEAD_TIMEOUT  # a byte a second: three times the bound
    slow = asyncio.create_task(trickle(HOST, proc.port, head, interval=1.0, timeout=100))
    try:
        assert await answered(proc.port, "/healthz") == (200, b"ok\n")
    finally:
        done = await slow
    assert not done.whole, f"{program.name} waited for the whole head ({done.sent} bytes)"
    assert done.ended, f"{program.name} kept the connection"
    assert status_of(done.answer) == 408, done.answer[:200]


@in_world
async def test_a_head_over_8_kib_is_answered_431_and_closed(world: World, program: Program) -> None:
    proc = running(world, program)
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (http.HEAD_LIMIT + 1024)
    answer = await exchange(HOST, proc.port, big + b"\r\n\r\n")  # to the server's end
    assert status_of(answer) == 431, answer[:200]
    assert (await probe(HOST, proc.port, "/healthz"))[0] == 200


@in_world
async def test_clients_that_never_read_their_answer_are_let_go_and_others_answered(
    world: World, program: Program
) -> None:
    """100 clients ask for /metrics (the largest answer) and never read it, the smallest
    receive buffer the kernel allows: the program lets every connection go (its open files
    back where they were, within the write timeout) while they still hold theirs, and answers
    the probes meanwhile."""
    proc = running(world, program)
    before = open_fds(proc.pid)
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"  # keep-alive, as HTTP/1.1 is
    socks = await unread(HOST, proc.port, request, 100)
    try:
        for path, body in PROBES:
            assert await answered(proc.port, path) == (200, body), path
        await eventually(
            lambda: open_fds(proc.pid) <= before + 8,  # a NATS or HTTP client's own, passing
            3 * http.WRITE_TIMEOUT,
            what=f"{program.name} let the 100 unread connections go",
        )
    finally:
        for sock in socks:
            sock.close()
    running(world, program)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"b" * 1000, 200),
        # a body announced and never sent
        (b"GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"b" * 10, 200),
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 405),
        (b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", 405),
    ],
    ids=["get-with-body", "get-body-never-sent", "post", "post-chunked-unfinished"],
)
@in_world
async def test_a_body_sent_with_a_get_or_a_post_is_answered_and_the_connection_ends(
    world: World, program: Program, request_bytes: bytes, status: int
) -> None:
    """The body is never read: the answer comes and the connection ends, whatever the body
    announced (HTTP/1.1, no ``Connection: close``: a server that reads bodies or keeps the
    connection waits here)."""
    proc = running(world, program)
    answer = await exchange(HOST, proc.port, request_bytes, timeout=30)
    assert status_of(answer) == status, answer[:200]


def test_every_program_deploy_ships_is_attacked_here() -> None:
    """The module's premise: the programs of deploy/consumers/ (their containers' command:
    ``python -m <module>`` or the program's own) are the subscribers above."""
    by_module = {p.module: p.name for p in PROGRAMS}
    ran = set()
    for path in (shipped.REPO / "deploy" / "consumers").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    command = c["command"]
                    module = command[command.index("-m") + 1] if "-m" in command else None
                    ran.add(by_module[module] if module else command[0])
    assert ran == {p.name for p in PROGRAMS if p.module}
