"""Watch response bytes → lines: pure, whatever the chunking.

The API server writes one JSON object per line; the socket hands over chunks that cut lines
anywhere. ``split_lines`` yields, per chunk read, the complete lines in it, so a whole read is
handed on as one batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

MAX_LINE_BYTES = 8 * 2**20  # far above etcd's 1.5 MiB object limit
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
            chunk = b"".join(parts) + chunk
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
