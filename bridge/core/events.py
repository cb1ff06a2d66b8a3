"""A watch line or list item → an ``Event``: the few fields the bridge reads, plus the bytes.

The hot path never builds the Event as Python dicts. msgspec decodes a line into small typed
views (``View``: the fields the filter, the checkpoint and the CloudEvent attributes need;
everything else is skipped while scanning) and the Event's own bytes are kept as they came.
The CloudEvent's ``data`` is then those bytes with ``metadata.managedFields`` cut out, not a
re-serialisation of the whole object.

Fields are decoded as ``Any`` and judged where they are used, so an odd value (a number for
a reason) is handled as before, not refused here. Anything the typed view can not take (an
object that is not a JSON object, metadata that is a list, ...) goes the slow way: a plain
decode, checked field by field. Both ways give the same ``Event``.

Cutting ``managedFields`` from the bytes: an unescaped ``"managedFields":`` can only be an
object key (inside a JSON string the quotes are escaped). When it occurs exactly once in the
Event and the decoded metadata has it, that occurrence is ``metadata.managedFields``; its
value's length is known from the decode, so the cut is exact. Any other case (twice, spaces
around the colon, ...) re-encodes the object without it.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

_MF_KEY: Final = b'"managedFields":'
_LIST_ITEM_HEAD: Final = b'{"apiVersion":"v1","kind":"Event",'


class Meta(msgspec.Struct):
    uid: Any = None
    resourceVersion: Any = None
    namespace: Any = None
    name: Any = None
    creationTimestamp: Any = None
    managedFields: msgspec.Raw = msgspec.Raw()


class Involved(msgspec.Struct):
    kind: Any = None
    name: Any = None
    namespace: Any = None  # read by the enrichment: which object to look up
    uid: Any = None
    apiVersion: Any = None


class View(msgspec.Struct):
    """What the bridge reads of an Event (or of a BOOKMARK's object). Not the message: it is
    the longest string of an Event and nothing reads it (``Event.status()`` for an ERROR)."""

    apiVersion: Any = None
    kind: Any = None
    metadata: Meta = msgspec.field(default_factory=Meta)
    involvedObject: Involved = msgspec.field(default_factory=Involved)
    reason: Any = None
    type: Any = None
    count: Any = None
    series: Any = None
    lastTimestamp: Any = None
    eventTime: Any = None
    related: Any = None  # judged with the involved object (k8s_event_common.tenancy)
    regarding: Any = None  # an events.k8s.io Event's involved object (``involved``)

    @property
    def involved(self) -> Involved:
        """The involved object: ``involvedObject`` (core/v1, what a watch of /api/v1 always
        has), else ``regarding`` (an Event in the events.k8s.io shape)."""
        inv = self.involvedObject
        reg = self.regarding
        if reg.__class__ is not dict or inv.kind is not None or inv.name is not None:
            return inv
        return Involved(
            kind=reg.get("kind"),
            name=reg.get("name"),
            namespace=reg.get("namespace"),
            uid=reg.get("uid"),
            apiVersion=reg.get("apiVersion"),
        )


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    """A watch line has these two keys; any other goes the slow way (never from a real
    server), so that the fast path below can take the object's bytes as a slice."""

    type: Any = None
    object: View | None = None


class _RawLine(msgspec.Struct):
    object: msgspec.Raw = msgspec.Raw()


_decode_line = msgspec.json.Decoder(_Line).decode
_decode_raw_line = msgspec.json.Decoder(_RawLine).decode
_decode_view = msgspec.json.Decoder(View).decode
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class BadLine(ValueError):
    """A watch line that is not a watch event (not JSON, no object, no type)."""


class Event:
    """One Event: its view and where its bytes are (``buf[start:end]``)."""

    __slots__ = ("buf", "cut", "end", "list_item", "start", "view")

    def __init__(
        self, view: View, buf: bytes, start: int, end: int, *, list_item: bool = False
    ) -> None:
        self.view = view
        self.buf = buf
        self.start = start
        self.end = end
        self.list_item = list_item  # a list item lacks kind/apiVersion: data gets them
        self.cut: tuple[int, int] | None = None

    def detached(self) -> Event:
        """The Event on a copy of its own bytes when it shares a much larger read: held a
        while (the enrichment's wait), it then holds its own size, not the read it came in."""
        size = self.end - self.start
        if len(self.buf) <= 2 * size:
            return self
        ev = Event(self.view, self.buf[self.start : self.end], 0, size, list_item=self.list_item)
        if self.cut is not None:
            ev.cut = (self.cut[0] - self.start, self.cut[1] - self.start)
        return ev

    def status(self) -> tuple[int, str, str]:
        """An ERROR's Status object: (code, message, reason); 500 when the code is missing."""
        try:
            obj = _decode_any(self.buf[self.start : self.end])
        except msgspec.DecodeError:
            obj = None
        if not isinstance(obj, dict):
            return 500, "", ""
        code, message, reason = obj.get("code"), obj.get("message"), obj.get("reason")
        return (
            code if isinstance(code, int) else 500,
            "" if message is None else str(message),
            "" if reason is None else str(reason),
        )

    def sample(self, n: int = 300) -> str:
        """The first bytes of the Event, for a log line."""
        return self.buf[self.start : min(self.end, self.start + n)].decode("utf-8", "replace")

    def data_parts(self) -> list[bytes]:
        """The Event as JSON without metadata.managedFields, in pieces to join.

        A list item gets the ``apiVersion`` and ``kind`` a watch object carries. (Slices, not
        memoryviews: for an Event's size joining views costs more than the copies.)"""
        v = self.view
        buf, start, end = self.buf, self.start, self.end
        parts: list[bytes] = []
        if self.list_item and (v.kind is None or v.apiVersion is None):
            # the head is spliced in before the first key: it must follow the "{" at once
            if v.kind is not None or v.apiVersion is not None or buf[start + 1 : start + 2] != b'"':
                return [self._reencoded()]
            parts.append(_LIST_ITEM_HEAD)
            start += 1  # past the "{": the head opens the object
        mf = v.metadata.managedFields
        if not mf:
            parts.append(buf[start:end])
            return parts
        cut = self.cut or self._find_cut(len(mf))
        if cut is None:
            return [self._reencoded()]
        parts.append(buf[start : cut[0]])
        parts.append(buf[cut[1] : end])
        return parts

    def _find_cut(self, value_len: int) -> tuple[int, int] | None:
        buf, start, end = self.buf, self.start, self.end
        k = buf.find(_MF_KEY, start, end)
        if k < 0 or buf.find(_MF_KEY, k + len(_MF_KEY), end) >= 0:
            return None
        if buf[k + len(_MF_KEY) : k + len(_MF_KEY) + 1] in (b" ", b"\t", b"\r", b"\n"):
            return None  # white space before the value: its length does not say where it ends
        j = k + len(_MF_KEY) + value_len
        after = buf[j : j + 1]
        if after == b",":
            self.cut = (k, j + 1)  # "managedFields":[...],
        elif after == b"}" and buf[k - 1 : k] == b",":
            self.cut = (k - 1, j)  # ,"managedFields":[...]
        elif after == b"}" and buf[k - 1 : k] == b"{":
            self.cut = (k, j)  # the only key
        return self.cut

    def _reencoded(self) -> bytes:
        """The Event decoded and encoded again, for a shape whose bytes can not be spliced.
        Raises ``BadLine`` for a number a double can not hold: spliced bytes carry it as it
        came, a decoded object can not."""
        try:
            obj = _decode_any(self.buf[self.start : self.end])
        except msgspec.DecodeError as exc:
            raise BadLine(f"can not be re-encoded: {exc}") from None
        return _encode(_plain(obj, self.list_item))


def _plain(obj: dict[str, Any], list_item: bool) -> dict[str, Any]:
    """The object as ``data`` wants it: no managedFields; kind/apiVersion on list items."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if list_item and ("apiVersion" not in obj or "kind" not in obj):
        obj = {**obj}
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Event")
    return obj


def _lenient_view(obj: dict[str, Any]) -> View:
    """The view of a decoded object whose shape the typed decode refused."""
    meta = obj.get("metadata")
    inv = obj.get("involvedObject")
    m = Meta()
    if isinstance(meta, dict):
        m = Meta(
            uid=meta.get("uid"),
            resourceVersion=meta.get("resourceVersion"),
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            creationTimestamp=meta.get("creationTimestamp"),
        )
    return View(
        apiVersion=obj.get("apiVersion"),
        kind=obj.get("kind"),
        metadata=m,
        involvedObject=(
            Involved(
                kind=inv.get("kind"),
                name=inv.get("name"),
                namespace=inv.get("namespace"),
                uid=inv.get("uid"),
                apiVersion=inv.get("apiVersion"),
            )
            if isinstance(inv, dict)
            else Involved()
        ),
        reason=obj.get("reason"),
        type=obj.get("type"),
        count=obj.get("count"),
        series=obj.get("series"),
        lastTimestamp=obj.get("lastTimestamp"),
        eventTime=obj.get("eventTime"),
        related=obj.get("related"),
        regarding=obj.get("regarding"),
    )


def _slow_event(obj: dict[str, Any], list_item: bool) -> Event:
    """An Event from a plain decoded object: its bytes re-encoded as ``data`` wants them."""
    obj = _plain(obj, list_item)
    buf = _encode(obj)
    return Event(_lenient_view(obj), buf, 0, len(buf))


def _check_utf8(buf: bytes) -> None:
    """The bytes are spliced into CloudEvents as they are: they must be UTF-8 throughout, also
    in the parts the typed decode skips (it does not check those). ASCII is, at C speed."""
    if not buf.isascii():
        try:
            buf.decode()
        except UnicodeDecodeError as exc:
            raise BadLine(f"not UTF-8: {exc}") from None


def from_line(line: bytes) -> tuple[str, Event]:
    """A watch line → (type, Event). Raises ``BadLine``."""
    _check_utf8(line)
    try:
        parsed = _decode_line(line)
    except msgspec.ValidationError:
        return _slow_line(line)
    except msgspec.DecodeError as exc:
        raise BadLine(f"not JSON: {exc}") from exc
    kind, view = parsed.type, parsed.object
    if kind.__class__ is not str or view is None:
        raise BadLine("no type or no object")
    # The API server writes {"type":"...","object":{...}}: the object's bytes are a slice.
    # Exactly that: no other key (the decode refused them), the object right after the type,
    # the line's end right after the object (a repeated "type" would end it with a quote),
    # and no repeated "object" (an unescaped '"object":' can only be a key; a nested one
    # just takes the exact way).
    prefix_len = 20 + len(kind)  # len('{"type":"') + len('","object":')
    if (
        line[prefix_len - 11 : prefix_len] == b'","object":'
        and line.startswith(b'{"type":"')
        and line[-2:] == b"}}"
        and line[9 : prefix_len - 11] == kind.encode()
        and line.rfind(b'"object":') == prefix_len - 9
    ):
        return kind, Event(view, line, prefix_len, len(line) - 1)
    raw = bytes(_decode_raw_line(line).object)
    return kind, Event(view, raw, 0, len(raw))


def _slow_line(line: bytes) -> tuple[str, Event]:
    try:
        doc = _decode_any(line)
    except msgspec.DecodeError as exc:
        raise BadLine(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadLine("not a JSON object")
    kind, obj = doc.get("type"), doc.get("object")
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise BadLine("no type or no object")
    return kind, _slow_event(obj, list_item=False)


def from_item(item: bytes | msgspec.Raw | dict[str, Any]) -> Event:
    """A list item (bytes as listed, or an already decoded dict) → Event. Raises ``BadLine``."""
    return _from_item(item, True)


def from_object(item: bytes | msgspec.Raw | dict[str, Any]) -> Event:
    """A list item of another resource than Events (``bridge.core.resources``): its metadata
    in the view, its bytes as listed (no Event's kind/apiVersion added). Raises ``BadLine``."""
    return _from_item(item, False)


def _from_item(item: bytes | msgspec.Raw | dict[str, Any], list_item: bool) -> Event:
    if isinstance(item, dict):
        return _slow_event(item, list_item)
    if not isinstance(item, bytes | msgspec.Raw):
        raise BadLine("list item is not a JSON object")
    buf = item if isinstance(item, bytes) else bytes(item)
    _check_utf8(buf)
    try:
        view = _decode_view(buf)
    except msgspec.ValidationError:
        try:
            obj = _decode_any(buf)
        except msgspec.DecodeError as exc:
            raise BadLine(f"not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise BadLine("list item is not a JSON object") from None
        return _slow_event(obj, list_item)
    except msgspec.DecodeError as exc:
        raise BadLine(f"not JSON: {exc}") from exc
    if list_item and not buf.startswith(b"{"):
        # whitespace first: the head can not be spliced in
        try:
            return _slow_event(_decode_any(buf), list_item)
        except msgspec.DecodeError as exc:
            raise BadLine(f"not JSON a decoder holds: {exc}") from None
    return Event(view, buf, 0, len(buf), list_item=list_item)


def from_obj(obj: dict[str, Any]) -> Event:
    """An Event from a decoded object, as a watch would give it (tests, status events)."""
    buf = _encode(obj)
    try:
        view = _decode_view(buf)
    except msgspec.ValidationError:
        return _slow_event(obj, list_item=False)
    return Event(view, buf, 0, len(buf))


def parse_rv(value: Any) -> int | None:
    """A resourceVersion as an int; None when it is not a string of ASCII decimal digits.

    The bridge parses resourceVersions as integers and compares them: an event is passed on
    only if it is newer than the last one (the resume point, the checkpoint), and a relist
    judges the history between two of them. Kubernetes long called resourceVersions opaque
    strings; KEP-5504 (Kubernetes 1.35) made them officially comparable as decimal integers
    within one resource, with a comparison helper in apimachinery. Before that it held in
    practice for every etcd-backed resource, Events among them: the value is etcd's revision.
    A value that does not parse (missing, a JSON number, an empty or non-decimal string) is
    never guessed at: the watch line or list item is skipped as ``no_resource_version``, and a
    list answer without one is a failed answer (``KubeUnavailable``)."""
    if value.__class__ is str and value.isascii() and value.isdigit():
        return int(value)
    return None


def rv_of(view: View) -> int | None:
    """``metadata.resourceVersion`` as an int (``parse_rv``)."""
    return parse_rv(view.metadata.resourceVersion)


def view_of(ev: Event | View | dict[str, Any]) -> View:
    """The view of an Event, a view, or a decoded object (taken as a watch would give it)."""
    if isinstance(ev, View):
        return ev
    if isinstance(ev, Event):
        return ev.view
    return from_obj(ev).view
