"""The one Clock (k8s_event_common.clock): the system's by default; a manual one for tests."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from k8s_event_common.clock import SYSTEM, Clock, ManualClock


def test_the_system_clock_is_the_systems():
    assert SYSTEM.monotonic is time.monotonic and SYSTEM.wall is time.time
    assert SYSTEM.sleep is asyncio.sleep and SYSTEM.random is random.random


def test_one_part_replaced_the_others_stay_the_systems():
    c = Clock(monotonic=lambda: 5.0)
    assert c.monotonic() == 5.0 and c.sleep is asyncio.sleep and c.wall is time.time


async def test_a_manual_clock_moves_only_when_slept_or_advanced():
    c = ManualClock(100.0, wall_at_zero=1_000.0, rand=0.25)
    assert (c.monotonic(), c.wall(), c.random()) == (100.0, 1_100.0, 0.25)
    await c.sleep(2.5)
    c.advance(1.5)
    assert (c.monotonic(), c.wall()) == (104.0, 1_104.0)
    assert c.slept == [2.5]


async def test_a_manual_sleep_lets_other_tasks_run():
    c, ran = ManualClock(), []

    async def other():
        ran.append(True)

    task = asyncio.create_task(other())
    await c.sleep(60)
    assert ran == [True]
    await task


async def test_the_start_up_steps_wait_on_the_clock_they_are_given():
    """Found in review: the start-up retries and the stream's re-creation slept on the
    system's time whatever clock the bridge was given."""
    from bridge import errors
    from bridge.jetstream.streams import recreating
    from bridge.runtime.starting import jetstream_step
    from bridge.settings import NatsSettings

    clock = ManualClock(0.0, rand=0.0)
    answers = [errors.JetStreamUnavailable("down"), errors.JetStreamUnavailable("down"), 7]

    async def step() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await jetstream_step("open", step, clock) == 7
    assert clock.slept == [0.5, 1.0]  # Backoff(0.5, cap 10), no jitter: on the given clock
    await recreating(None, NatsSettings(create_stream=False), clock)()  # type: ignore[arg-type]
    assert clock.slept == [0.5, 1.0, 1.0]


def test_the_system_clock_times_out_as_asyncio_does_and_stamps_the_wall_time():
    assert SYSTEM.timeout is asyncio.timeout
    assert ManualClock(0.25, wall_at_zero=1_700_000_000.0).timestamp() == (
        "2023-11-14T22:13:20.250000Z"
    )


async def test_a_manual_timeout_fires_only_when_time_passes_its_deadline():
    c = ManualClock()
    never = asyncio.Event()
    waiting = asyncio.create_task(c.wait_for(never.wait(), 5.0))
    for _ in range(3):
        await asyncio.sleep(0)
    c.advance(4.9)
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiting.done()  # 4.9 s of 5: still waiting, however many turns of the loop
    await c.sleep(0.1)  # a sleep moves time too
    for _ in range(3):
        await asyncio.sleep(0)
    assert waiting.done()
    with pytest.raises(TimeoutError):
        await waiting
    assert await c.wait_for(asyncio.sleep(0, "done"), 1.0) == "done"
    assert not c._timeouts  # nothing left registered


async def test_a_manual_timeout_already_past_fires_at_once():
    with pytest.raises(TimeoutError):
        await ManualClock().wait_for(asyncio.Event().wait(), 0)


def test_virtual_time_jumps_to_the_next_timer_when_nothing_is_ready():
    import time as _time

    from tests.virtualtime import LOOP, virtual_time

    @virtual_time
    async def waits() -> tuple[float, float]:
        t0, real = LOOP.monotonic(), _time.monotonic()
        with pytest.raises(TimeoutError):
            await LOOP.wait_for(asyncio.Event().wait(), 30.0)
        await asyncio.sleep(100)
        return LOOP.monotonic() - t0, _time.monotonic() - real

    virtual, real = waits()
    assert virtual == 130.0 and real < 30.0
