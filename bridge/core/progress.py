"""How far the checkpoint may move: the newest resourceVersion with nothing older in flight.

The watcher records every item in stream order: done at once (``done``: filtered out, a
bookmark, the end of a list) or pending (``pending``) until its entry is settled
(``Entry.settle``: JetStream acked it, or the stage found it can not be converted). The
safe resourceVersion is the last one of the longest done prefix. Consecutive done entries
are folded into one, also behind a message that waits long for its ack, so the record holds
about two entries per event in flight, whatever the event rate or how long one publish is
retried.

List items carry no resourceVersion of their own here: a list arrives in no RV order, so
only the list's own resourceVersion (its end marker) may move the checkpoint.
"""

from __future__ import annotations

from collections import deque


class Entry:
    __slots__ = ("done", "progress", "rv")

    def __init__(self, progress: Progress, rv: int | None, done: bool) -> None:
        self.progress = progress
        self.rv = rv
        self.done = done

    def settle(self) -> None:
        """This item needs nothing more: the one verb that settles an entry (once)."""
        self.progress._settle(self)


class Progress:
    def __init__(self, checkpoint: int | None = None) -> None:
        self.safe_rv: int | None = checkpoint
        self._entries: deque[Entry] = deque()
        self._in_flight = 0
        self._fold_at = 64

    def pending(self, rv: int | None) -> Entry:
        """An item handed on to be published; ``entry.settle()`` once JetStream has stored it."""
        entry = Entry(self, rv, False)
        self._entries.append(entry)
        self._in_flight += 1
        return entry

    def done(self, rv: int | None) -> None:
        """An item that needs no publish (filtered, bookmark, list end, bad input)."""
        if not self._entries:
            if rv is not None:
                self.safe_rv = rv
            return
        tail = self._entries[-1]
        if tail.done:
            if rv is not None:
                tail.rv = rv
            return
        self._entries.append(Entry(self, rv, True))

    def _settle(self, entry: Entry) -> None:
        if entry.done:
            return
        entry.done = True
        self._in_flight -= 1
        entries = self._entries
        while entries and entries[0].done:
            rv = entries.popleft().rv
            if rv is not None:
                self.safe_rv = rv
        if len(entries) > self._fold_at:
            self._fold()

    def _fold(self) -> None:
        """Merge runs of done entries stuck behind a pending one (amortised O(1) per ack)."""
        out: deque[Entry] = deque()
        for e in self._entries:
            if e.done and out and out[-1].done:
                if e.rv is not None:
                    out[-1].rv = e.rv
            else:
                out.append(e)
        self._entries = out
        self._fold_at = max(64, 2 * len(out))

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def __len__(self) -> int:
        return len(self._entries)
