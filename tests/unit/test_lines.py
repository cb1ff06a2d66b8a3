"""bridge.kube.lines: a watch response's chunks → the lines of each read, whatever the cuts."""

from __future__ import annotations

import msgspec
import pytest

from bridge.core.resources import EVENTS
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


def watch_line(kind, rv=None, **obj):
    meta = {} if rv is None else {"resourceVersion": rv}
    return msgspec.json.encode({"type": kind, "object": {"metadata": meta, **obj}})


def decode(batch):
    skipped = []
    got = lines.decode_lines(batch, EVENTS, lambda reason, sample: skipped.append((reason, sample)))
    return [(kind, rv) for kind, _, rv in got], skipped


def test_each_line_becomes_its_watch_event_with_its_resource_version():
    got, skipped = decode(
        [watch_line("ADDED", "11"), watch_line("MODIFIED", "12"), watch_line("BOOKMARK", "20")]
    )
    assert got == [("ADDED", 11), ("MODIFIED", 12), ("BOOKMARK", 20)] and skipped == []


def test_lines_that_are_no_watch_event_are_skipped_in_order_with_their_reason():
    no_rv, odd_rv, weird = watch_line("ADDED"), watch_line("DELETED", "x12"), watch_line("WEIRD")
    got, skipped = decode([OVERSIZE, no_rv, watch_line("ADDED", "11"), odd_rv, weird])
    assert got == [("ADDED", 11)]
    assert skipped == [
        ("malformed_line", OVERSIZE),  # the marker of a dropped oversize line
        ("no_resource_version", no_rv),
        ("no_resource_version", odd_rv),  # not a decimal integer: never guessed at
        ("unknown_type", weird),
    ]


def test_an_error_ends_the_read_nothing_after_it_is_decoded():
    status = {"kind": "Status", "code": 410, "reason": "Expired"}
    error = msgspec.json.encode({"type": "ERROR", "object": status})
    got, skipped = decode([watch_line("ADDED", "11"), error, b"garbage", watch_line("ADDED", "12")])
    assert got == [("ADDED", 11), ("ERROR", None)] and skipped == []


async def test_every_read_is_handed_on_even_when_nothing_in_it_is_usable():
    async def reads():
        yield [b"garbage"]
        yield [watch_line("ADDED", "11")]

    skipped = []
    got = [
        [rv for _, _, rv in entries]
        async for entries in lines.read_lines(reads(), EVENTS, lambda *a: skipped.append(a))
    ]
    assert got == [[], [11]] and len(skipped) == 1
