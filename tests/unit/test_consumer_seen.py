"""The ids a subscriber keeps in memory cost the same whatever their length: an id is its
publisher's word (a forged message may carry one of up to the server's max_payload)."""

from __future__ import annotations

import tracemalloc

from k8s_event_consumer.seen import MemorySeen, digest


async def test_memory_seen_keeps_a_digest_not_the_id() -> None:
    seen = MemorySeen(limit=100)
    ids = [f"{i}:" + "x" * 100_000 for i in range(100)]  # 10 MB of ids
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for id_ in ids:
            await seen.add(id_)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 100 * 1024, f"{kept} bytes kept for 100 ids"
    assert all([await seen.contains(id_) for id_ in ids])
    assert not await seen.contains("0:" + "x" * 99_999)


async def test_memory_seen_forgets_the_oldest_past_its_limit() -> None:
    seen = MemorySeen(limit=3)
    for id_ in "abcd":
        await seen.add(id_)
    assert len(seen) == 3
    assert [await seen.contains(i) for i in "abcd"] == [False, True, True, True]
    assert len(digest("a" * 1_000_000)) == 16
