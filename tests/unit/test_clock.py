"""The one Clock (bridge.core.clock): the system's by default; a manual one for tests."""

from __future__ import annotations

import asyncio
import random
import time

from bridge.core.clock import SYSTEM, Clock, ManualClock


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
