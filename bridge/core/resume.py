"""Where a watch scope resumes, and what the bridge knows about the history behind that point.

client-go's reflector keeps ``lastSyncResourceVersion`` and a flag that it became unavailable
(a 410); ``relistResourceVersion`` answers from the two which resourceVersion the next list
asks for. The bridge always lists with a consistent read (no resourceVersion: etcd's current
state), so the question left is the one ``ResumePoint`` answers:

- ``rv``: the resourceVersion to watch from, the last one passed on (None: list first);
- ``expired``: set by a 410 (the history after ``rv`` is compacted away) until a list
  succeeds; the next list is a relist, and ``bridge.core.gaps`` judges what may be missing.
  It is the one owner of "a relist is due": ``can_watch`` is what the next state
  (``bridge.core.watchstate.next_state``) reads;
- ``seen_at``, ``covered``: what that judgement needs (how old ``rv`` is; whether this
  process saw every change after it).

Which resourceVersion is "the last one passed on": a watch event's own (they come in RV
order); a BOOKMARK's (the watch has synced there); a list's ``metadata.resourceVersion``,
never one of its items' (they come in no order).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Expiry:
    """What was known when the 410 came: the history after ``rv`` is gone."""

    rv: int
    seen_at: float  # wall time rv was seen
    covered: bool  # watched without a break up to the 410, and nothing failed since


class ResumePoint:
    def __init__(self, checkpoint: int | None, saved_at: float | None, now: float) -> None:
        """From a checkpoint (saved at wall time ``saved_at``, when known) or from nothing."""
        self.rv: int | None = checkpoint
        # When rv was seen (epoch s): a relist can prove nothing was missed only while no
        # Event written after it can have expired (kubernetes.event_ttl).
        self.seen_at = (saved_at if saved_at is not None else now) - (
            0.0 if checkpoint is None else 1.0
        )
        # Whether this process has seen every change in scope after rv: true after a list or
        # a watch that ended normally (a watch shows deletions too); false from a checkpoint
        # (the bridge was away) and after any failure (an outage of unknown length).
        self.covered = False
        self.expired: Expiry | None = None

    @property
    def can_watch(self) -> bool:
        """A watch can resume: there is a resourceVersion, and no 410 made it useless (then
        only a list helps, until one succeeds)."""
        return self.rv is not None and self.expired is None

    def moved_on(self, now: float) -> None:
        """A read of the watch moved ``rv`` on (set as each item was taken): seen ``now``."""
        self.seen_at = now

    def synced(self) -> None:
        """A list finished, or a watch ended normally: every change up to ``rv`` was seen."""
        self.covered = True

    def broken(self) -> None:
        """A request failed: for all this process knows, changes went by unseen."""
        self.covered = False
        if self.expired is not None:
            self.expired.covered = False

    def expire(self) -> None:
        """A 410: the history after ``rv`` is gone (with no ``rv``, a list was due anyway).
        The first one counts, until a list succeeds (a 410 on the relist's continue token
        keeps the older start)."""
        if self.expired is None and self.rv is not None:
            self.expired = Expiry(self.rv, self.seen_at, self.covered)

    def listed(self, rv: int, now: float) -> None:
        """A list succeeded at ``rv``: resume from there; the 410 it answered is dealt with."""
        self.expired = None
        self.rv = rv
        self.seen_at = now
