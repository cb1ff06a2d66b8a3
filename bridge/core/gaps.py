"""The gap decision after a 410 relist: did the bridge miss history, and how sure is it.

Pure: the watcher gathers what it knows (``bridge.core.resume.Expiry``, the list) and acts on
the answer (a ``history_gap`` status event, or a log line that nothing was missed).

The API server serves Event watches from etcd (no watch cache, no bookmarks), so a quiet scope
or a narrow selector lets the resourceVersion fall behind etcd's compaction and the next watch
gets 410 though nothing happened. A list shows what exists, never what was deleted, so the
proof that nothing happened needs all of:

- no listed Event is newer than ``from_rv`` (nothing created or changed since and still there);
- ``from_rv`` was seen less than ``kubernetes.event_ttl`` ago (nothing written after it has
  expired yet: an Event's TTL starts at its last write);
- the bridge watched the scope without a break up to the 410 (a list or a watch that ended
  normally, then the 410 at once): a watch shows deletions, so nothing can have been created
  and deleted unseen (a namespace deleted, an explicit delete), but for the instant between
  that watch's end and the relist;
- deletions are not published (``filter.include_deleted`` off): the list can not show the
  expiries of older Events, which happen all the time.

Otherwise the gap is reported, with how sure: ``likely`` when the list shows changes since, the
TTL has passed or deletions are published; ``possible`` when only Events created and deleted
while the bridge was not watching could be missing.
"""

from __future__ import annotations

from dataclasses import dataclass

LIKELY = "likely"
POSSIBLE = "possible"


@dataclass(frozen=True)
class Gap:
    """Versions between ``from_rv`` and ``to_rv`` may have been compacted away unread; the
    relist passed on the newest version of every Event that still exists.
    ``certainty`` is None when the relist proves nothing was missed."""

    from_rv: int
    to_rv: int
    newer: int  # listed Events newer than from_rv
    age: float  # seconds since from_rv was seen
    certainty: str | None
    why: str

    @property
    def missed(self) -> bool:
        return self.certainty is not None


def after_relist(
    from_rv: int,
    to_rv: int,
    *,
    newer: int,
    age: float,
    covered: bool,
    event_ttl: float,
    include_deleted: bool,
) -> Gap | None:
    """The verdict on the history between the resourceVersion that expired (``from_rv``,
    seen ``age`` seconds ago, ``covered``: watched without a break up to the 410) and the
    relist's (``to_rv``, which listed ``newer`` Events newer than ``from_rv``). None when the
    list is not past ``from_rv``: no history lies between them."""
    if to_rv <= from_rv:
        return None
    likely = []
    if newer:
        likely.append(
            f"{newer} Events were created or changed since: versions of them in between may be gone"
        )
    if age >= event_ttl:
        likely.append(
            f"the last resourceVersion was seen {age:.0f}s ago, longer than the event "
            "TTL: Events written after it may have expired unseen"
        )
    if include_deleted:
        likely.append("deletions are published, and a list shows none")
    if likely:
        return Gap(from_rv, to_rv, newer, age, LIKELY, "; ".join(likely))
    if not covered:
        why = (
            "nothing listed is newer, but the bridge was not watching in between (a "
            "restart or a failed watch): Events created and deleted meanwhile (a namespace "
            "deleted, an explicit delete) leave nothing in a list"
        )
        return Gap(from_rv, to_rv, newer, age, POSSIBLE, why)
    return Gap(from_rv, to_rv, newer, age, None, "nothing listed is newer, watched throughout")
