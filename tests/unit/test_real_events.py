"""Watch lines recorded from the real kube-apiserver of a living cluster (Kubernetes 1.32 and
1.37: tests/e2e/capture_events.py), one per shape the scheduler, the controllers and kwok's
kubelets wrote: events.k8s.io Events with and without a series, core/v1 Events with the
correlator's count bumps and "(combined from similar events)" messages, Events on Nodes in
``default``. Each goes through the bridge's decoder (the fast path) and converter in both
content modes, is parsed by the cloudevents SDK, and must be the CloudEvent docs/design.md
documents (tests/cloudevent_expected.py, written independently of the converter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary
from cloudevents.core.formats.json import JSONFormat

from bridge.core import events
from bridge.core.converting import Converter
from tests.cloudevent_expected import CLUSTER, expected_attributes

CORPUS = Path(__file__).resolve().parents[1] / "data" / "real-events"
FILES = sorted(CORPUS.glob("*.jsonl"))
LINES = [
    pytest.param(line, id=f"{path.stem}-{i}-{json.loads(line)['object']['reason']}")
    for path in FILES
    for i, line in enumerate(path.read_bytes().splitlines())
]


def test_the_corpus_has_both_versions_and_every_shape() -> None:
    assert [p.stem for p in FILES] == ["v1.32.9", "v1.37.2"]
    for path in FILES:
        objs = [json.loads(line)["object"] for line in path.read_bytes().splitlines()]
        assert any(o.get("series") for o in objs), path  # the scheduler's series
        assert any(o.get("eventTime") and not o.get("series") for o in objs), path
        assert any((o.get("count") or 0) > 1 for o in objs), path  # a correlator's bump
        assert any("(combined from similar events)" in o["message"] for o in objs), path
        assert any(o["involvedObject"]["kind"] == "Node" for o in objs), path


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


@pytest.mark.parametrize("line", LINES)
def test_a_real_event_becomes_the_documented_cloudevent(line: bytes) -> None:
    obj = json.loads(line)["object"]
    want = expected_attributes(obj, CLUSTER)
    kind, ev = events.from_line(line)
    assert kind == json.loads(line)["type"]
    assert ev.buf is line, "a real line did not take the fast path (its bytes spliced)"

    msg = Converter(CLUSTER, "k8s.events", "structured").convert(ev)
    doc = json.loads(msg.payload)
    JSONFormat().read(None, msg.payload)  # the SDK accepts it
    got = {k: str(v) for k, v in doc.items() if k != "data"}
    got["nats-subject"] = msg.subject
    assert got == want
    assert msg.msg_id == want["id"] == msg.headers["Nats-Msg-Id"]
    assert doc["data"] == _without_managed_fields(obj)

    msg = Converter(CLUSTER, "k8s.events", "binary").convert(ev)
    headers = {k: v for k, v in msg.headers.items() if k != "Nats-Msg-Id"}
    ce = from_binary(HTTPMessage(headers=headers, body=msg.payload), JSONFormat())
    assert ce.get_id() == want["id"]
    got = {k[3:]: unquote(v) for k, v in headers.items() if k.startswith("ce-")}
    got["datacontenttype"] = headers["Content-Type"]
    got["nats-subject"] = msg.subject
    assert got == want
    assert json.loads(msg.payload) == _without_managed_fields(obj)
