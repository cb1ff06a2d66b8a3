"""The watch state machine, modelled on client-go's Reflector.

The choice of the next state is a pure function of the current state and what happened,
so it is tested without I/O; ``bridge.runtime.watching.Watcher`` performs the I/O each state
asks for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class WatchState(enum.Enum):
    LISTING = "listing"  # paging through a consistent list to learn the current state
    WATCHING = "watching"  # streaming changes from a known resourceVersion
    BACKING_OFF = "backing_off"  # waiting before trying again after a failure
    STOPPED = "stopped"  # asked to stop; nothing more is read


class Outcome(enum.Enum):
    LISTED = "listed"  # the list finished: its resourceVersion is known
    CLOSED = "closed"  # the server ended the watch normally (timeout, rollout)
    QUIET = "quiet"  # the watch sent nothing for the read timeout: a quiet scope, not a failure
    EXPIRED = "expired"  # 410: the resourceVersion or continue token is compacted away
    RETRIABLE = "retriable"  # 429, 5xx, refused, reset, read timeout, a watch that closed at once
    AUTH = "auth"  # 401/403: back off, then re-read the credentials
    RETRY = "retry"  # the back-off delay is over
    STOP = "stop"  # SIGTERM or the end of the program


@dataclass(frozen=True)
class Transition:
    state: WatchState
    reload_credentials: bool = False


def next_state(state: WatchState, outcome: Outcome, *, can_watch: bool) -> Transition:
    """What to do next.

    ``can_watch``: a resourceVersion to watch from is known and no 410 made it useless
    (``bridge.core.resume.ResumePoint.can_watch``, the one owner of "a relist is due": it holds
    through back-off until a list succeeds).
    """
    if outcome is Outcome.STOP or state is WatchState.STOPPED:
        return Transition(WatchState.STOPPED)
    if outcome is Outcome.LISTED:
        return Transition(WatchState.WATCHING)
    if outcome is Outcome.CLOSED or outcome is Outcome.QUIET:
        # A Bookmark or the last event means the watch has synced there: go on from it.
        return Transition(WatchState.WATCHING if can_watch else WatchState.LISTING)
    if outcome is Outcome.EXPIRED or outcome is Outcome.RETRIABLE:
        # After a 410 the history we would resume from is gone: relist, but after a back-off
        # like any failure (a list slower than the compaction interval would otherwise relist
        # for ever).
        return Transition(WatchState.BACKING_OFF)
    if outcome is Outcome.AUTH:
        return Transition(WatchState.BACKING_OFF, reload_credentials=True)
    if outcome is Outcome.RETRY:
        # Keep the resourceVersion: a server that was away still has the history.
        return Transition(WatchState.WATCHING if can_watch else WatchState.LISTING)
    raise ValueError(f"unknown outcome {outcome!r}")  # pragma: no cover
