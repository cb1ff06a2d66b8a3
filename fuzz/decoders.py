"""Coverage-guided fuzzing (atheris) of what the bridge decodes from the API server: watch
lines, list items and list pages, and what it makes of them.

    python fuzz/decoders.py fuzz/corpus -max_total_time=60      (or: make fuzz)

Each input is tried as a watch line, as a list item and as a list page. What must hold:
- each decoder fails only in its own way (``BadLine``, ``KubeUnavailable``), never otherwise;
- of an Event that decodes: the resourceVersion check, the filter, the sample for a log line
  and an ERROR's Status never raise; the converter raises only ``ConversionError``;
- a message it makes is one the stream takes: a subject of six tokens without wildcards, an id
  ``uid/resourceVersion``, a payload that is JSON, whose ``data`` is the Event as it came
  minus ``metadata.managedFields`` (the bytes are spliced, not re-encoded: this checks it).
  JSON as the subscribers' decoder (Python's) reads it: a number beyond a double, which msgspec
  refuses and RFC 8259 lets a decoder refuse, is relayed as it came (docs/asyncapi.md).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import atheris

with atheris.instrument_imports():
    import msgspec

    from bridge.core import events
    from bridge.core.converting import Converter
    from bridge.core.events import BadLine, Event, rv_of
    from bridge.core.filtering import Filter
    from bridge.errors import ConversionError, KubeUnavailable
    from bridge.kube.client import decode_list_page
    from bridge.settings import FilterSettings

CONVERTER = Converter("fuzz", "k8s.events", "structured")
BINARY = Converter("fuzz", "k8s.events", "binary")
FILTERS = (
    Filter(FilterSettings()),
    Filter(FilterSettings(reasons=["BackOff"], types=["Warning"], kinds=["Pod"], min_count=2)),
    Filter(FilterSettings(exclude_namespaces=["kube-system"], include_deleted=True)),
)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_json(data: bytes) -> Any:
    """JSON as the subscribers read it: msgspec, else Python's json (a number beyond a double
    becomes inf) without NaN and Infinity, which are not JSON."""
    try:
        return msgspec.json.decode(data)
    except msgspec.ValidationError:
        return json.loads(data, parse_constant=_no_constant)


def _without_managed_fields(obj: Any, list_item: bool) -> Any:
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if list_item:
        obj = {"apiVersion": "v1", "kind": "Event", **obj} if "kind" not in obj else obj
    return obj


def check_event(kind: str, ev: Event, original: Any, list_item: bool) -> None:
    rv_of(ev.view)
    ev.sample()
    for f in FILTERS:
        assert f.accepts(kind, ev) in (True, False)
    if kind == "ERROR":
        code, message, reason = ev.status()
        assert isinstance(code, int) and isinstance(message, str) and isinstance(reason, str)
    try:
        data = b"".join(ev.data_parts())
    except BadLine:  # a shape that must be re-encoded, with a number a double can not hold
        for converter in (CONVERTER, BINARY):
            try:
                converter.convert(ev)
            except ConversionError:
                continue
            raise AssertionError("converted an Event whose data can not be made") from None
        return
    got = decode_json(data)
    if isinstance(original, dict) and not list_item:
        assert got == _without_managed_fields(original, list_item), (got, original)
    for converter in (CONVERTER, BINARY):
        try:
            msg = converter.convert(ev)
        except ConversionError:
            return
        tokens = msg.subject.split(".")
        assert len(tokens) == 6 and all(tokens) and "*" not in msg.subject
        assert ">" not in msg.subject and " " not in msg.subject
        assert msg.msg_id == f"{ev.view.metadata.uid}/{ev.view.metadata.resourceVersion}"
        if converter is CONVERTER:
            envelope = decode_json(msg.payload)
            assert envelope["id"] == msg.msg_id and envelope["data"] == got
        else:
            assert decode_json(msg.payload) == got


def test_one_input(data: bytes) -> None:
    try:
        kind, ev = events.from_line(data)
    except BadLine:
        pass
    else:
        try:
            original = decode_json(data).get("object")
        except (ValueError, AttributeError):
            original = None
        check_event(kind, ev, original, list_item=False)
    try:
        item = events.from_item(data)
    except BadLine:
        pass
    else:
        check_event("ADDED", item, None, list_item=True)
    try:
        page = decode_list_page(data)
    except KubeUnavailable:
        return
    for raw in page["items"] or ():
        try:
            check_event("ADDED", events.from_item(raw), None, list_item=True)
        except BadLine:
            pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
