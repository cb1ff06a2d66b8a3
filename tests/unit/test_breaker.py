"""The circuit breaker in front of the API server, on an injected clock."""

from __future__ import annotations

import pytest

from bridge.core.backoff import Backoff
from bridge.core.breaker import Breaker, BreakerState
from bridge.settings import BreakerSettings
from k8s_event_common.clock import ManualClock


def make(**settings):
    clock = ManualClock()
    backoff = Backoff(initial=1.0, factor=2.0, cap=30.0, jitter=0.0, clock=clock)
    return Breaker(BreakerSettings(**settings), backoff, clock=clock), clock


def test_three_failures_in_a_row_open_it_a_success_between_does_not():
    b, _ = make()
    assert b.failure("503") is None and b.failure("503") is None
    assert b.success(0.1) is None  # the run is broken
    assert b.failure("503") is None and b.failure("503") is None
    change = b.failure("reset")
    assert change is not None and change.opened and change.reason == "failures"
    assert "3 requests in a row" in change.detail and "reset" in change.detail
    assert b.state is BreakerState.OPEN


def test_p95_latency_over_the_limit_opens_it():
    b, _ = make(latency_samples=20)
    for _ in range(19):
        assert b.success(0.1) is None
    assert b.success(2.5) is None  # one slow in 20: below the 95th percentile
    change = b.success(2.5)  # two in 20: the 95th percentile is slow
    assert change is not None and change.opened and change.reason == "latency"
    assert b.p95() == 2.5


def test_too_few_samples_do_not_open_it():
    b, _ = make()
    for _ in range(4):
        assert b.success(9.0) is None  # 4 < MIN_SAMPLES
    assert b.success(9.0) is not None


def test_open_waits_a_back_off_step_then_lets_one_probe_through():
    b, clock = make()
    for _ in range(3):
        b.failure("503")
    assert b.ready_in() == 1.0  # the first step
    clock.now = 0.5
    assert b.ready_in() == 0.5
    clock.now = 1.0
    assert b.ready_in() == 0.0
    assert b.begin() is True and b.state is BreakerState.HALF_OPEN
    assert b.failure("503") is None  # still degraded: nothing new to tell
    assert b.state is BreakerState.OPEN and b.ready_in() == 2.0  # the next, longer step
    clock.now = 3.0
    assert b.begin()
    assert b.success(2.5) is None  # answered, but slowly: open again
    assert b.state is BreakerState.OPEN and b.ready_in() == 4.0
    clock.now = 7.0
    assert b.begin()
    change = b.success(0.2)
    assert change is not None and not change.opened and change.open_for == 7.0
    assert b.state is BreakerState.HEALTHY and b.ready_in() == 0.0 and b.p95() is None
    assert b.begin() is False  # healthy: requests are not probes


def test_steps_are_capped():
    b, clock = make()
    for _ in range(3):
        b.failure("503")
    steps = []
    for _ in range(8):
        steps.append(b.ready_in())
        clock.now += b.ready_in()
        b.begin()
        b.failure("503")
    assert steps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_retry_after_is_a_floor_for_the_step():
    b, _ = make(failures=1)
    b.failure("429", retry_after=12.0)
    assert b.ready_in() == 12.0


@pytest.mark.parametrize("samples", [1, 3])
def test_a_small_window_needs_all_its_samples(samples):
    b, _ = make(latency_samples=samples)
    for _ in range(samples - 1):
        assert b.success(5.0) is None
    assert b.success(5.0) is not None


def test_describe_is_what_status_shows():
    b, clock = make()
    assert b.describe()["state"] == "healthy"
    for _ in range(3):
        b.failure("503")
    clock.now = 0.25
    d = b.describe()
    assert d["state"] == "open" and d["consecutive_failures"] == 3
    assert d["next_probe_in_seconds"] == 0.8 and d["open_for_seconds"] == 0.2
