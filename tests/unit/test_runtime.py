"""The subscriber runtime (k8s_event_consumer.runtime) on a fake program, NATS and durable, in
virtual time: the hooks in order, the exit codes, the one retry loop while the stream is
missing, readiness, the drain and its bound, a second signal. Every program runs on it as a
process in the integration tier."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine, Sequence
from types import SimpleNamespace
from typing import Any

import nats.js.errors
import pytest

from k8s_event_common.streams import ShapeMismatch
from k8s_event_consumer import runtime
from k8s_event_consumer.consuming import Consumer, Stats
from k8s_event_consumer.durables import ConsumerConflict
from k8s_event_consumer.metrics import Counter
from k8s_event_consumer.seen import NoSeen, Seen
from tests.virtualtime import LOOP, virtual_time


class FakeNats:
    is_connected = True
    max_payload = 1 << 20

    async def close(self) -> None:
        self.is_connected = False


class FakeConsumer:
    def __init__(self) -> None:
        self.stats = Stats()
        self.stopped = asyncio.Event()

    async def stop(self) -> None:
        self.stopped.set()


def settings() -> Any:
    nats = SimpleNamespace(
        stream="K8S_EVENTS",
        read_stream="K8S_EVENTS",
        reads="events",
        read_prefix="k8s.events",
        durable="d",
        filters=["k8s.events.>"],
        start="all",
        subject_prefix="k8s.events",
        options=lambda: None,
        consumer_options=lambda **kw: SimpleNamespace(**kw),
    )
    return SimpleNamespace(nats=nats, http=SimpleNamespace(host="127.0.0.1", port=None))


class Program(runtime.Subscriber):
    name = "fake"
    counters = (Counter("things_total", "things"),)
    calls: list[str]
    last: Program  # the one made last

    def __init__(self, ctx: runtime.Context) -> None:
        super().__init__(ctx)
        self.calls = []
        Program.last = self

    async def setup(self) -> None:
        self.calls.append("setup")

    async def provide(self, nc: Any) -> Seen:
        self.calls.append("provide")
        return NoSeen()

    async def prepare(self, nc: Any, consumer: Consumer) -> None:
        self.calls.append("prepare")

    async def consume(self, consumer: Consumer) -> None:
        self.calls.append("consume")
        await consumer.stopped.wait()  # type: ignore[attr-defined]
        self.calls.append("drained")

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        async def forever() -> None:
            await asyncio.Event().wait()

        return [forever()]

    async def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """NATS connects at once; the stream is there (unless ``missing`` says how often not);
    the durable binds (or raises ``bind_error``)."""
    state = SimpleNamespace(missing=0, checks=0, bind_error=None, consumer=FakeConsumer())

    async def connect_until(opts: Any, stopping: asyncio.Event, **kw: Any) -> FakeNats:
        return FakeNats()

    async def check(nc: Any, stream: str, prefix: str | None = None) -> None:
        state.checks += 1
        if state.missing:
            state.missing -= 1
            raise nats.js.errors.NotFoundError(description=f"stream {stream} not found")

    async def open_(nc: Any, **kw: Any) -> FakeConsumer:
        if state.bind_error is not None:
            raise state.bind_error
        return state.consumer

    monkeypatch.setattr(runtime, "connect_until", connect_until)
    monkeypatch.setattr(runtime.streams, "check_event_stream", check)
    monkeypatch.setattr(runtime.Consumer, "open", open_)
    return state


def run_in_loop(rt: runtime.Runtime, stop_after: float | None = 5.0) -> Any:
    """Run ``rt``; ``stop_after`` seconds of virtual time later, SIGTERM's handler."""

    async def go() -> int:
        if stop_after is not None:
            asyncio.get_running_loop().call_later(stop_after, rt.on_signal, signal.SIGTERM)
        return await rt.run()

    return go()


@virtual_time
async def test_the_hooks_run_in_order_and_a_stop_drains_then_exits_0(fakes: Any) -> None:
    rt = runtime.Runtime(Program, settings(), False, LOOP)
    seen_ready: list[list[str]] = []
    asyncio.get_running_loop().call_later(4.0, lambda: seen_ready.append(rt.problems()))
    assert await run_in_loop(rt) == runtime.EXIT_OK
    assert Program.last.calls == ["setup", "provide", "prepare", "consume", "drained", "close"]
    assert seen_ready == [[]]  # ready while consuming
    assert rt.problems() == ["not consuming yet"]  # not after the stop
    assert rt.nc is not None and not rt.nc.is_connected  # closed
    text = rt.metrics.render().decode()
    assert "k8s_event_fake_things_total 0.0" in text
    assert 'k8s_event_fake_messages_total{result="handled"} 0.0' in text


@virtual_time
async def test_a_missing_stream_is_waited_for_in_one_loop_then_consumed(
    fakes: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fakes.missing = 3
    rt = runtime.Runtime(Program, settings(), False, LOOP)
    start = LOOP.monotonic()
    assert await run_in_loop(rt, stop_after=30.0) == runtime.EXIT_OK
    assert fakes.checks == 4
    assert Program.last.calls[:3] == ["setup", "provide", "prepare"]
    assert [r.getMessage() for r in caplog.records].count("stream_unavailable") == 3
    assert LOOP.monotonic() - start >= 3 * runtime.OPEN_RETRY


@virtual_time
async def test_a_stop_while_the_stream_is_missing_exits_0_without_consuming(fakes: Any) -> None:
    fakes.missing = 1_000
    rt = runtime.Runtime(Program, settings(), False, LOOP)
    assert await run_in_loop(rt, stop_after=7.0) == runtime.EXIT_OK
    assert "consume" not in Program.last.calls and Program.last.calls[-1] == "close"


@pytest.mark.parametrize(
    "error", [ConsumerConflict("durable d exists with another config"), ShapeMismatch("S", [])]
)
@virtual_time
async def test_a_durable_or_a_stream_in_another_shape_exits_1(fakes: Any, error: Exception) -> None:
    fakes.bind_error = error
    rt = runtime.Runtime(Program, settings(), False, LOOP)
    assert await run_in_loop(rt, stop_after=None) == runtime.EXIT_FAILED
    assert "consume" not in Program.last.calls and Program.last.calls[-1] == "close"


@virtual_time
async def test_a_program_that_can_not_start_exits_2_before_nats(fakes: Any) -> None:
    class Broken(Program):
        async def setup(self) -> None:
            raise runtime.Unusable("alertmanager.tls.ca_file: not a PEM file")

    rt = runtime.Runtime(Broken, settings(), False, LOOP)
    assert await run_in_loop(rt, stop_after=None) == runtime.EXIT_CONFIG
    assert rt.nc is None and Program.last.calls == ["close"]


@virtual_time
async def test_a_provision_run_makes_what_is_missing_and_exits_without_consuming(
    fakes: Any,
) -> None:
    rt = runtime.Runtime(Program, settings(), True, LOOP)
    assert await run_in_loop(rt, stop_after=None) == runtime.EXIT_OK
    assert Program.last.calls == ["setup", "provide", "close"]


@virtual_time
async def test_a_task_that_ends_by_itself_fails_the_program(fakes: Any) -> None:
    class Ends(Program):
        async def consume(self, consumer: Consumer) -> None:
            raise RuntimeError("the handler's loop broke")

    rt = runtime.Runtime(Ends, settings(), False, LOOP)
    assert await run_in_loop(rt, stop_after=None) == runtime.EXIT_FAILED


@virtual_time
async def test_the_drain_is_bounded_by_the_programs_timeout(fakes: Any) -> None:
    class Stuck(Program):
        stop_timeout = 20.0

        async def consume(self, consumer: Consumer) -> None:
            await asyncio.Event().wait()  # never lets the batch in hand go

    rt = runtime.Runtime(Stuck, settings(), False, LOOP)
    t0 = LOOP.monotonic()
    assert await run_in_loop(rt, stop_after=5.0) == runtime.EXIT_OK
    assert LOOP.monotonic() - t0 == pytest.approx(25.0)


def test_a_second_signal_exits_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = runtime.Runtime(Program, settings(), False, LOOP)
    exits: list[int] = []
    monkeypatch.setattr(runtime.os, "_exit", exits.append)
    rt.on_signal(signal.SIGTERM)
    assert rt.stopping.is_set() and exits == []
    rt.on_signal(signal.SIGINT)
    assert exits == [128 + signal.SIGINT]
