import pytest

from bridge.core.backoff import Backoff, retrying
from bridge.core.watchstate import Outcome, Transition, WatchState, next_state
from k8s_event_common.clock import ManualClock

L, W, B, S = WatchState.LISTING, WatchState.WATCHING, WatchState.BACKING_OFF, WatchState.STOPPED


@pytest.mark.parametrize(
    ("state", "outcome", "can_watch", "expected"),
    [
        (L, Outcome.LISTED, True, Transition(W)),
        (W, Outcome.CLOSED, True, Transition(W)),
        (W, Outcome.QUIET, True, Transition(W)),  # no bookmarks: quiet is not down
        # a 410 backs off, then lists: never a relist loop faster than the back-off
        (W, Outcome.EXPIRED, False, Transition(B)),
        (L, Outcome.EXPIRED, False, Transition(B)),  # continue token
        (B, Outcome.RETRY, False, Transition(L)),  # the relist is due (ResumePoint.expired)
        (L, Outcome.RETRIABLE, False, Transition(B)),  # list failed
        (L, Outcome.AUTH, False, Transition(B, reload_credentials=True)),
        (W, Outcome.RETRIABLE, True, Transition(B)),
        (W, Outcome.AUTH, True, Transition(B, reload_credentials=True)),
        (B, Outcome.RETRY, True, Transition(W)),  # keep the resourceVersion
        (W, Outcome.STOP, True, Transition(S)),
        (B, Outcome.STOP, False, Transition(S)),
    ],
)
def test_next_state(state, outcome, can_watch, expected):
    assert next_state(state, outcome, can_watch=can_watch) == expected


def test_backoff_follows_reflector_numbers_without_jitter():
    b = Backoff(clock=ManualClock(1000.0, rand=0.0))
    delays = [b.next_delay() for _ in range(8)]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


def test_backoff_jitter_stays_between_base_and_cap():
    b = Backoff(clock=ManualClock(1000.0, rand=1.0))
    delays = [b.next_delay() for _ in range(7)]
    assert delays == [1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


def test_backoff_resets_after_two_healthy_minutes():
    clock = ManualClock(1000.0, rand=0.0)
    b = Backoff(clock=clock)
    for _ in range(5):
        b.next_delay()
    clock.advance(119)
    assert b.next_delay() == 25.6  # not yet healthy long enough
    clock.advance(121)
    assert b.next_delay() == 0.8


def test_backoff_honours_retry_after():
    b = Backoff(clock=ManualClock(1000.0, rand=0.0))
    assert b.next_delay(retry_after=7) == 7
    assert b.next_delay(retry_after=0.1) == 1.6


@pytest.mark.parametrize("asked", [float("inf"), 1e9, 31.0])
def test_a_retry_after_beyond_the_schedules_cap_waits_the_cap(asked):
    """Found in review: ``Retry-After: inf`` (or a year) from a server, or anything between,
    was the delay as asked: the bridge waited for ever. The operator's cap bounds it."""
    b = Backoff(clock=ManualClock(1000.0, rand=0.0))  # cap 30 s
    assert b.next_delay(retry_after=asked) == 30.0


class Flaky:
    """Fails with the given exceptions in turn, then returns "done"."""

    def __init__(self, *failures):
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


class Throttled(Exception):
    retry_after = 9.0


async def test_retrying_sleeps_off_passing_failures_on_the_schedule():
    step, clock, seen = Flaky(OSError("a"), Throttled(), OSError("b")), ManualClock(1000.0), []

    async def failed(exc, delay):
        seen.append((type(exc).__name__, delay))

    result = await retrying(
        step,
        Backoff(clock=clock),
        passing=lambda exc: isinstance(exc, OSError | Throttled),
        on_failure=failed,
        clock=clock,
    )
    assert result == "done" and step.calls == 4
    # the schedule, with a retry_after on the failure as the floor of its delay
    assert seen == [("OSError", 0.8), ("Throttled", 9.0), ("OSError", 3.2)]
    assert clock.slept == [0.8, 9.0, 3.2]


async def test_retrying_raises_a_final_failure_at_once():
    step, clock = Flaky(OSError("a"), ValueError("final"), OSError("b")), ManualClock(1000.0)

    async def failed(exc, delay):
        pass

    with pytest.raises(ValueError, match="final"):
        await retrying(
            step,
            Backoff(clock=clock),
            passing=lambda exc: isinstance(exc, OSError),
            on_failure=failed,
            clock=clock,
        )
    assert step.calls == 2 and clock.slept == [0.8]
