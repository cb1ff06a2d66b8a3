"""The watch-line reader: a watch response's bytes → the watch events of each read.

What client-go's StreamWatcher and its decoder do, in two steps, neither with I/O of its own:

- ``split_lines``: the API server writes one JSON object per line; the socket hands over
  chunks that cut lines anywhere. Per chunk read, the complete lines in it, so a whole read is
  handed on as one batch.
- ``read_lines``: each line decoded by the resource's decoder (``bridge.core.resources``,
  e.g. ``bridge.core.events.from_line``) into a ``WatchEntry``, ``(type, object,
  resourceVersion)``. A line that is no usable watch event (not JSON, an unknown type, a
  change or BOOKMARK without a resourceVersion) is handed to ``skipped`` with its reason, in
  order, and left out. An ERROR ends the batch: nothing after it is read.

What the entries mean for where to resume (RV order, bookmarks, the ERROR's Status) is the
watcher's business (``bridge.runtime.watching``), as it is the reflector's in client-go.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from bridge.core import events
from bridge.core.events import Event, rv_of
from bridge.core.resources import Resource

# (watch event type, the object, its resourceVersion; None for an ERROR)
WatchEntry = tuple[str, Event, int | None]
# told of each input left out: (reason, the line or item as it came)
Skipped = Callable[[str, Any], None]

CHANGE_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})
MAX_LINE_BYTES = 4 * 2**20  # etcd stores objects up to 1.5 MiB; room for JSON escaping
OVERSIZE = b"\x00oversize"  # stands for a dropped line: no JSON, so reported as malformed


async def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    """Per chunk read, the complete lines in it (blank ones dropped); a line split across
    chunks is joined. A line longer than MAX_LINE_BYTES is dropped (the watcher is told with
    one marker line that no JSON parser takes), not buffered without bound."""
    parts: list[bytes] = []  # the line still open, in pieces
    held = 0
    skipping = False
    async for chunk in chunks:
        if b"\n" not in chunk:
            if not skipping:
                parts.append(chunk)
                held += len(chunk)
                if held > MAX_LINE_BYTES:
                    parts, held, skipping = [], 0, True
                    yield [OVERSIZE]
            continue
        if parts:
            chunk = b"".join([*parts, chunk])  # one copy of the line, not two
            parts, held = [], 0
        lines = chunk.split(b"\n")
        tail = lines.pop()
        if skipping:
            skipping = False
            lines[0] = b""  # the end of the oversize line
        if b"" in lines:
            lines = [line for line in lines if line]
        if lines:
            yield lines
        if tail:
            parts.append(tail)
            held = len(tail)
            if held > MAX_LINE_BYTES:
                parts, held, skipping = [], 0, True
                yield [OVERSIZE]
    last = b"".join(parts)
    if last.strip() and not skipping:
        yield [last]  # a last line without newline: the parser judges it


def decode_lines(lines: list[bytes], resource: Resource, skipped: Skipped) -> list[WatchEntry]:
    """The lines of one read → their watch events, up to and including an ERROR."""
    out: list[WatchEntry] = []
    from_line = resource.from_line
    for line in lines:
        try:
            kind, ev = from_line(line)
        except events.BadLine:
            skipped("malformed_line", line)
            continue
        if kind in CHANGE_TYPES or kind == "BOOKMARK":
            rv = rv_of(ev.view)
            if rv is None:
                skipped("no_resource_version", line)
            else:
                out.append((kind, ev, rv))
        elif kind == "ERROR":
            out.append((kind, ev, None))
            break  # the watch ends here
        else:
            skipped("unknown_type", line)
    return out


async def read_lines(
    batches: AsyncIterator[list[bytes]], resource: Resource, skipped: Skipped
) -> AsyncIterator[list[WatchEntry]]:
    """Per read of the watch, its watch events (``decode_lines``); a read of nothing usable
    still yields (an empty list): the watcher learns the watch is alive."""
    async for lines in batches:
        yield decode_lines(lines, resource, skipped)
