"""bridge.kube.lines: a watch response's chunks → the lines of each read, whatever the cuts."""

from __future__ import annotations

import pytest

from bridge.kube import lines
from bridge.kube.lines import OVERSIZE, split_lines


async def split(chunks: list[bytes]) -> list[list[bytes]]:
    async def source():
        for c in chunks:
            yield c

    return [batch async for batch in split_lines(source())]


@pytest.mark.parametrize(
    ("chunks", "batches"),
    [
        ([b"a\nb\n"], [[b"a", b"b"]]),  # one read, one batch
        ([b"a\nb", b"c\n"], [[b"a"], [b"bc"]]),  # a line cut across reads is joined
        ([b"ab", b"cd", b"e\nf\n"], [[b"abcde", b"f"]]),  # cut across three reads
        ([b"a\n\n\nb\n"], [[b"a", b"b"]]),  # blank lines dropped
        ([b"\n\n"], []),  # nothing but blank lines: no batch
        ([b"a\nlast"], [[b"a"], [b"last"]]),  # a last line without newline is still handed on
        ([b"a\n", b"  \n"], [[b"a"], [b"  "]]),  # whitespace is a line: the parser judges it
    ],
)
async def test_lines_of_each_read(chunks, batches):
    assert await split(chunks) == batches


async def test_an_oversize_line_is_dropped_with_one_marker_and_the_next_line_kept(monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 10)
    # the long line arrives in reads without a newline, then ends inside the next read
    got = await split([b"ok\n0123456", b"789abcdef", b"0123", b"end\nnext\n"])
    assert got == [[b"ok"], [OVERSIZE], [b"next"]]


async def test_an_oversize_tail_is_not_buffered_past_the_bound(monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 10)
    got = await split([b"a\n" + b"x" * 20, b"y" * 5, b"z\nb\n"])
    assert got == [[b"a"], [OVERSIZE], [b"b"]]


async def test_an_oversize_last_line_without_newline_is_not_handed_on(monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 10)
    assert await split([b"a\n", b"x" * 30]) == [[b"a"], [OVERSIZE]]
