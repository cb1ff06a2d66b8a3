"""``KVSeen``'s entries count only when this program wrote them: the value check on its own,
against a bucket stand-in (``tests/integration/test_handled_ids.py``: the same against a real
nats-server, with JetStream's answers written into the bucket from outside)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import nats.js.errors
import pytest

from k8s_event_common.clock import ManualClock
from k8s_event_consumer.seen import MARK, KVSeen

BUCKET = "k8s_event_remediation"
ID = "0f6a2b3c-uid/1234"


@dataclass
class Entry:
    value: bytes | None
    revision: int = 1


class Bucket:
    """A KV bucket's get and put, as nats-py's ``KeyValue`` answers them."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    async def get(self, key: str) -> Entry:
        if key not in self.values:
            raise nats.js.errors.KeyNotFoundError
        return Entry(self.values[key])

    async def put(self, key: str, value: bytes) -> int:
        self.values[key] = value
        return 1


def stream_info_answer() -> bytes:
    """What JetStream answers ``$JS.API.STREAM.INFO.K8S_EVENTS`` with (its shape)."""
    return json.dumps(
        {"type": "io.nats.jetstream.api.v1.stream_info_response", "config": {"name": "K8S_EVENTS"}}
    ).encode()


def test_the_value_names_the_version_the_bucket_and_the_key() -> None:
    seen = KVSeen(Bucket(), BUCKET)
    key = hashlib.sha256(ID.encode()).hexdigest()
    assert KVSeen.key(ID) == key  # the key of the previous version: its entries are found
    assert seen.value(ID) == b"k8s-event-seen/1 k8s_event_remediation " + key.encode()
    assert seen.value(ID).startswith(MARK + b" ")


async def test_an_entry_this_program_wrote_counts() -> None:
    bucket = Bucket()
    seen = KVSeen(bucket, BUCKET)
    assert not await seen.contains(ID)
    await seen.add(ID)
    assert bucket.values[KVSeen.key(ID)] == seen.value(ID)
    assert await seen.contains(ID)
    assert seen.forged == 0


def _others() -> dict[str, bytes]:
    """Values a third party can make JetStream write under the id's key."""
    other_key = KVSeen(Bucket(), BUCKET).value("another/1")
    return {
        "stream_info_answer": stream_info_answer(),
        "structured_cloudevent": json.dumps({"specversion": "1.0", "id": ID}).encode(),
        "pull_status": b"",
        "previous_version": b"1",  # also what many buckets hold, handed out raw by a direct get
        "another_keys_value": other_key,
        "another_buckets_value": KVSeen(Bucket(), "other_bucket").value(ID),
        "another_version": KVSeen(Bucket(), BUCKET).value(ID).replace(b"/1 ", b"/2 ", 1),
        "value_with_more": KVSeen(Bucket(), BUCKET).value(ID) + b"\n",
    }


@pytest.mark.parametrize("what", sorted(_others()))
async def test_an_entry_this_program_did_not_write_is_absent_counted_and_overwritten(
    what: str,
) -> None:
    bucket = Bucket()
    bucket.values[KVSeen.key(ID)] = _others()[what]
    seen = KVSeen(bucket, BUCKET)
    assert not await seen.contains(ID)
    assert seen.forged == 1
    await seen.add(ID)  # after the message is handled
    assert await seen.contains(ID)
    assert seen.forged == 1


async def test_a_forged_entry_is_logged_once_a_minute_with_its_value_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket = Bucket()
    clock = ManualClock()
    seen = KVSeen(bucket, BUCKET, clock)
    with caplog.at_level(logging.WARNING, logger="k8s_event_consumer.seen"):
        for i in range(4):
            bucket.values[KVSeen.key(f"id/{i}")] = b"{" + b"x" * 100_000
            assert not await seen.contains(f"id/{i}")
            clock.advance(25.0)
    lines = [r for r in caplog.records if r.getMessage() == "seen_forged"]
    assert seen.forged == 4 and len(lines) == 2  # at 0 s and at 75 s
    fields: dict[str, Any] = lines[0].fields  # type: ignore[attr-defined]
    assert fields["bucket"] == BUCKET and fields["size"] == 100_001
    assert fields["key"] == KVSeen.key("id/0") and len(fields["value"]) < 300
    assert lines[1].fields["suppressed"] == 2  # type: ignore[attr-defined]


def test_no_id_makes_the_key_raise() -> None:
    """A lone surrogate (the decoder refuses such an id; the key does not rely on it)."""
    assert len(KVSeen.key("\ud800x")) == 64
