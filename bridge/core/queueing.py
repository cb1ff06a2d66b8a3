"""The bounded queue between the watcher and the publisher.

Bounded in events and in bytes. ``put`` waits while the queue is full, so the watcher stops
reading the watch stream and TCP pushes back on the API server; nothing is dropped to make
room. One item larger than the byte bound is still let in when the queue is empty.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedQueue(Generic[T]):
    def __init__(self, max_items: int, max_bytes: int) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: deque[tuple[T, int]] = deque()
        self._not_empty = asyncio.Event()
        self._not_full = asyncio.Event()
        self._not_full.set()

    def __len__(self) -> int:
        return len(self._items)

    def _full(self, size: int) -> bool:
        if not self._items:
            return False
        return len(self._items) >= self.max_items or self.bytes + size > self.max_bytes

    @property
    def full(self) -> bool:
        return not self._not_full.is_set()

    def put_nowait(self, item: T, size: int) -> bool:
        """Put without waiting; False (and nothing put) when the queue is full."""
        if self._full(size):
            return False
        self._items.append((item, size))
        self.bytes += size
        self._not_empty.set()
        return True

    async def put(self, item: T, size: int) -> None:
        while self._full(size):
            self._not_full.clear()
            await self._not_full.wait()
        self._items.append((item, size))
        self.bytes += size
        self._not_empty.set()

    async def get(self) -> T:
        while not self._items:
            self._not_empty.clear()
            await self._not_empty.wait()
        item, size = self._items.popleft()
        self.bytes -= size
        self._not_full.set()
        return item

    def get_nowait(self) -> T | None:
        if not self._items:
            return None
        item, size = self._items.popleft()
        self.bytes -= size
        self._not_full.set()
        return item
