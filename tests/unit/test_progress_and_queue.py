import asyncio

import pytest

from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue


def test_checkpoint_not_moved_before_ack():
    p = Progress(10)
    a = p.pending(11)
    p.done(12)  # filtered out, after a pending one
    assert p.safe_rv == 10
    a.settle()
    assert p.safe_rv == 12


def test_acks_out_of_order_move_only_the_done_prefix():
    p = Progress(None)
    a, b, c = p.pending(1), p.pending(2), p.pending(3)
    c.settle()
    b.settle()
    assert p.safe_rv is None
    a.settle()
    assert p.safe_rv == 3
    assert len(p) == 0


def test_bookmark_moves_checkpoint_when_nothing_in_flight():
    p = Progress(5)
    p.done(50)
    assert p.safe_rv == 50


def test_list_items_do_not_move_checkpoint_only_list_end_does():
    p = Progress(None)
    items = [p.pending(None) for _ in range(3)]
    p.done(100)  # the list's resourceVersion
    for e in items[:2]:
        e.settle()
    assert p.safe_rv is None
    items[2].settle()
    assert p.safe_rv == 100


def test_done_entries_fold_so_memory_stays_bounded():
    p = Progress(0)
    first = p.pending(1)
    for rv in range(2, 100_000):
        p.done(rv)
    assert len(p) == 2
    first.settle()
    assert p.safe_rv == 99_999


async def turns(n: int = 3) -> None:
    """A few turns of the loop: what is not blocked has run."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_queue_put_waits_when_full_and_drops_nothing():
    q: BoundedQueue[int] = BoundedQueue(max_items=2, max_bytes=1000)
    await q.put(1, 10)
    await q.put(2, 10)
    blocked = asyncio.ensure_future(q.put(3, 10))
    await turns()
    assert not blocked.done() and q.full
    assert await q.get() == 1
    await asyncio.wait_for(blocked, 1)
    assert [await q.get(), await q.get()] == [2, 3]


async def test_queue_bounded_in_bytes():
    q: BoundedQueue[str] = BoundedQueue(max_items=100, max_bytes=100)
    await q.put("a", 60)
    blocked = asyncio.ensure_future(q.put("b", 60))
    await turns()
    assert not blocked.done()
    await q.get()
    await asyncio.wait_for(blocked, 1)
    assert q.bytes == 60


async def test_queue_takes_one_oversized_item_when_empty():
    q: BoundedQueue[str] = BoundedQueue(max_items=10, max_bytes=100)
    await asyncio.wait_for(q.put("big", 500), 1)
    assert len(q) == 1


@pytest.mark.parametrize("n", [1, 7])
def test_in_flight_counts_pending(n):
    p = Progress(None)
    for i in range(n):
        p.pending(i)
    assert p.in_flight == n


def test_acks_behind_a_stuck_publish_fold_so_memory_stays_bounded():
    p = Progress(10)
    stuck = p.pending(11)
    for rv in range(12, 100_012):
        e = p.pending(rv)
        e.settle()
    assert len(p) <= 130  # not one entry per acked event
    assert p.safe_rv == 10 and p.in_flight == 1
    stuck.settle()
    assert p.safe_rv == 100_011 and len(p) == 0


def test_folding_keeps_pending_entries_in_order():
    p = Progress(0)
    entries = [p.pending(rv) for rv in range(1, 301)]
    for e in entries[::2][1:]:  # ack every other one except the first
        e.settle()
    assert p.safe_rv == 0
    entries[0].settle()
    assert p.safe_rv == 1  # entry 2 (rv 2) is still pending
    for e in entries[1::2]:
        e.settle()
    assert p.safe_rv == 300 and p.in_flight == 0
