r"""``k8s-event-bridge tail``: read the stream and print events as a person wants to read them.

What it prints comes from messages, which anyone with publish rights on the stream's subjects
may write: no character of theirs reaches the terminal as a control. ``printable`` shows each
terminal control (C0 but tab and newline, which become a space; DEL; C1; the line and paragraph
separators; the bidirectional marks, embeddings, overrides and isolates) as its escape
(``\x1b``, ``\u202e``), so an ESC can not move the cursor, set a title or forge a colour, a CR
can not overwrite the line, and a right-to-left override can not reorder it. ``--json`` writes
them as JSON escapes (``\u001b``): the same document, no raw control.

``--digests`` reads the digests' stream (``nats.digest_stream``, ``<nats.digest_prefix>.>``)
instead: one line per digest (``k8s_event_common.digests.line``), each read back by the one
decoder of the format (``cloudevents.decode``, then ``digests.from_envelope``), so a message
there that is no digest is reported as one, naming what is wrong, never printed as one. A digest
names the versions stream's sequence numbers it folded: ``--from-seq N --to-seq M`` reads those
versions again (a bounded read that ends at ``M`` or at the end of the stream).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TextIO

import msgspec
import nats.errors
import nats.js.errors
from nats.js.api import ConsumerConfig, DeliverPolicy

from bridge.errors import NoStream
from bridge.jetstream import connection
from bridge.settings import NatsSettings, Settings
from k8s_event_common import cloudevents, digests, durations, subjects
from k8s_event_common.connecting import Connection

_YELLOW, _CYAN, _RESET = "\033[33m", "\033[36m", "\033[0m"

# what a terminal would take for a control rather than text
_CONTROLS = (
    *range(0x00, 0x20),  # C0: ESC, CR, BEL, backspace...
    0x7F,  # DEL
    *range(0x80, 0xA0),  # C1: CSI (0x9b), OSC (0x9d)... taken as ESC [ and ESC ] by some
    0x061C,  # Arabic letter mark
    0x200E,  # left-to-right and right-to-left marks
    0x200F,
    0x2028,  # line and paragraph separators
    0x2029,
    *range(0x202A, 0x202F),  # bidi embeddings and overrides, their pop
    *range(0x2066, 0x206A),  # bidi isolates, their pop
)
_TEXT = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _CONTROLS}
_TEXT.update({ord("\t"): " ", ord("\n"): " "})
_JSON = {c: f"\\u{c:04x}" for c in _CONTROLS}


def printable(text: str) -> str:
    """``text`` with every terminal control shown as its escape (tab and newline a space)."""
    return text.translate(_TEXT)


def json_printable(doc: str) -> str:
    """A JSON document with every terminal control as a JSON escape: the same value (they
    occur in strings only), nothing a terminal acts on."""
    return doc.translate(_JSON)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``30s``, ``10m``, ``2h``, ``1d`` ago (any duration with its unit, as the settings
    write them: ``1h30m``), or an RFC 3339 time. Raises ``ValueError``."""
    try:
        ago = durations.parse_with_unit(text)
    except ValueError:
        pass
    else:
        return (now or datetime.now(UTC)) - timedelta(seconds=ago)
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: not a duration (30s, 10m, 2h, 1d) nor an RFC 3339 time"
        ) from None
    if t.tzinfo is None:
        raise ValueError(f"--since {text!r}: an RFC 3339 time needs its offset (Z or +hh:mm)")
    return t


# where a template's own placeholder is in a CloudEvent (``type``: its suffix, lowercase)
_ATTRIBUTES = {
    "cluster": "k8scluster",
    "namespace": "k8snamespace",
    "kind": "k8skind",
    "reason": "k8sreason",
}


def where_names(settings: Settings) -> list[str]:
    """What ``--where`` may name: the template's own placeholders and every extension of
    ``enrich`` (usable in the template whether or not it is there)."""
    names = [*subjects.FIELDS, *subjects.placeholders(settings.nats.subject_template)]
    names += settings.enrich.extensions
    return list(dict.fromkeys(names))


def digest_where_names() -> list[str]:
    """What ``--where`` may name with ``--digests``: a digest's own placeholders (its series'
    cluster, namespace, kind, reason and type); a digest carries no enrichment."""
    return list(subjects.FIELDS)


_UNKNOWN = "neither a placeholder of nats.subject_template nor an extension of enrich"
DIGEST_UNKNOWN = "not a value of a digest's series, which carries no enrichment"


def parse_where(
    pairs: Iterable[str], known: Iterable[str], unknown: str = _UNKNOWN
) -> dict[str, frozenset[str]]:
    """``--where NAME=VALUE`` (repeatable; values of one name are or-ed) → name → values.
    Raises ``ValueError`` naming a pair that is not NAME=VALUE or a name not in ``known``
    (saying it is ``unknown``)."""
    names = list(known)
    out: dict[str, set[str]] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"--where {pair!r}: NAME=VALUE expected")
        if name not in names:
            raise ValueError(f"--where {name}: {unknown} (known: {', '.join(names)})")
        out.setdefault(name, set()).add(value.lower() if name == "type" else value)
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class Filters:
    """What ``tail`` prints: Events of these namespaces, reasons, kinds and types, and of these
    values by name (``where``: a template placeholder or an enrichment extension; ``""`` takes
    the Events without it); an empty set: any. The bridge's own status events only when no
    Event filter is set."""

    namespaces: frozenset[str] = frozenset()
    reasons: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()  # lowercase: warning, normal
    where: Mapping[str, frozenset[str]] = field(default_factory=dict, hash=False)

    def _values(self) -> dict[str, frozenset[str]]:
        out = {k: v for k, v in self.where.items() if v}
        for name, given in (
            ("namespace", self.namespaces),
            ("reason", self.reasons),
            ("kind", self.kinds),
            ("type", self.types),
        ):
            if given:  # --namespace x is --where namespace=x
                out[name] = out.get(name, frozenset()) | given
        return out

    @property
    def active(self) -> bool:
        return bool(self._values())

    def keeps(self, ce: dict[str, Any]) -> bool:
        type_ = str(ce.get("type", ""))
        if type_.startswith("io.k8s.bridge."):
            return not self.active
        for name, values in self._values().items():
            if name == "type":
                value = type_.removeprefix("io.k8s.event.")
            else:
                raw = ce.get(_ATTRIBUTES.get(name, name))
                value = raw if isinstance(raw, str) else ""
            if value not in values:
                return False
        return True

    def subject(self, prefix: str, template: str = subjects.DEFAULT_TEMPLATE) -> str:
        """The narrowest subject JetStream can filter on: the template with a token for each
        name given a single value, ``*`` for the others; ``<prefix>.>`` when no name of the
        template is given. ``type`` is left to ``keeps`` (the subject has the Event's spelling),
        and ``keeps`` still decides (a long value's token is cut)."""
        values = self._values()
        in_template = [
            name for name in subjects.placeholders(template) if name in values and name != "type"
        ]
        if not in_template:
            return f"{prefix}.>"
        one = {name: next(iter(values[name])) for name in in_template if len(values[name]) == 1}
        return subjects.subject_filter(prefix, template, **one)

    def keeps_digest(self, d: digests.Digest) -> bool:
        """The same filters on a digest's series (its ``type`` is the series', ``Warning``
        kept by ``--type warning``), one rule with ``keeps``."""
        s = d.series
        return self.keeps(
            {
                "type": cloudevents.EVENT_TYPE_PREFIX + s.type.lower(),
                "k8scluster": s.cluster,
                "k8snamespace": s.namespace,
                "k8skind": s.kind,
                "k8sreason": s.reason,
            }
        )

    def digest_subject(self, prefix: str) -> str:
        """The narrowest subject of the digests' stream: a digest's subject is
        ``<prefix>.<cluster>.<namespace>.<kind>.<reason>`` (``digests.subject``), the default
        template's shape, its tokens made as the bridge makes them."""
        return self.subject(prefix, subjects.DEFAULT_TEMPLATE)


def decode(headers: dict[str, str] | None, body: bytes) -> dict[str, Any]:
    """A CloudEvent message (structured or binary mode) → its attributes and ``data``, read by
    the subscribers' decoder (``k8s_event_common.cloudevents``). Raises its ``BadMessage`` (a
    ``ValueError``)."""
    return cloudevents.decode(headers, body).document()


def line(ce: dict[str, Any]) -> str:
    """``time  namespace  Kind/name  Reason  xN  [name=value ...]  message`` (status events
    marked ``bridge``), the enrichment extensions (``team=payments``, and ``[partial:
    object:timeout]`` when some are missing) before the message, every part from the message
    ``printable``."""
    return printable(_line(ce))


def _line(ce: dict[str, Any]) -> str:
    raw = ce.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    t = str(ce.get("time", ""))[:19].replace("T", " ")
    if str(ce.get("type", "")).startswith("io.k8s.bridge."):
        what = str(ce.get("type", "")).removeprefix("io.k8s.bridge.")
        detail = " ".join(f"{k}={v}" for k, v in data.items() if k != "meaning")
        return f"{t}  {'-':<16} {'bridge':<40} {what.upper():<22} {detail}"
    # each as text: a message is not the bridge's until it is read, and an attribute that is
    # an object or a list must not end tail in a format spec
    ns = str(ce.get("k8snamespace", ""))
    subject = str(ce.get("subject", ""))
    reason = str(ce.get("k8sreason", ""))
    count = str(ce.get("k8scount", 1))
    kind = "W" if str(ce.get("type", "")).endswith("warning") else " "
    msg = str(data.get("message", ""))
    extra = "".join(f" {k}={v}" for k, v in cloudevents.enrichment(ce).items())
    missing = cloudevents.missing(ce)
    if missing:
        extra += f" [partial: {','.join(f'{p}:{w}' for p, w in missing)}]"
    return f"{t}  {ns:<16} {subject:<40} {kind} {reason:<20} x{count:<4}{extra} {msg}"


def read_digest(headers: dict[str, str] | None, body: bytes) -> tuple[digests.Digest, Any]:
    """A message of the digests' stream → its ``Digest`` and its CloudEvent document (what
    ``--json`` prints). Raises ``cloudevents.BadMessage`` naming what is wrong: not a
    CloudEvent, a CloudEvent of another type, or a digest not in the format's shape."""
    envelope = cloudevents.decode(headers, body)
    if envelope.type != digests.TYPE:
        raise cloudevents.BadMessage(
            f"type {cloudevents.quoted(envelope.type)} is not {digests.TYPE}"
        )
    return digests.from_envelope(envelope), envelope.document()


def digest_line(d: digests.Digest) -> str:
    """The digest's line (``k8s_event_common.digests.line``: when, how long, the reason, the
    object, how many times in how many versions, the counts, the sequence range to drill down
    into, the last message), every part from the message ``printable``."""
    return printable(digests.line(d))


def not_a_digest(subject: str, exc: Exception) -> str:
    """What ``tail --digests`` prints for a message that is no digest: its subject and what
    is wrong, both cut (``cloudevents.cut``), one line."""
    return printable(f"(not a digest: {cloudevents.cut(subject)}: {cloudevents.cut(str(exc))})")


def check_range(from_seq: int | None, to_seq: int | None, subject: str | None) -> None:
    """``--from-seq`` and ``--to-seq`` as a read can take them. Raises ``ValueError``."""
    if from_seq is not None and to_seq is not None and to_seq < from_seq:
        raise ValueError(f"--to-seq {to_seq} is before --from-seq {from_seq}")
    if to_seq is not None and subject:
        # a narrowed consumer may deliver nothing at or past M: the read would never end
        raise ValueError("--to-seq reads every subject of the stream: leave out --subject")


class Received(NamedTuple):
    subject: str
    headers: dict[str, str] | None
    data: bytes
    seq: int = 0  # the stream's sequence number
    pending: int = -1  # what the stream holds for the consumer after it (-1: not known)


class Tail:
    """The stream read in order by an ordered consumer: from its start, or from now on."""

    def __init__(self, conn: Connection, sub: Any, end: int | None = None, start: int = 1) -> None:
        self._conn = conn
        self._sub = sub
        self._end = end  # the last sequence a bounded read takes (None: it follows)
        self._start = start

    @classmethod
    async def open(
        cls,
        settings: NatsSettings,
        subject: str | None,
        *,
        from_start: bool,
        since: datetime | None = None,
        stream: str | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
    ) -> Tail:
        """From the start, from ``since`` (JetStream seeks by time), from the stream's sequence
        ``from_seq``, or from now on, of ``stream`` (default: the Events' ``nats.stream``).
        With ``to_seq`` the read ends after that sequence, or at the stream's last message when
        it ends before (asked once, here). Raises ``NoStream`` when the stream does not
        exist."""
        stream = stream or settings.stream
        conn = await connection.connect(settings)
        nc = conn.nc
        js = nc.jetstream(domain=settings.domain)
        config = None
        policy: DeliverPolicy | None = DeliverPolicy.ALL if from_start else DeliverPolicy.NEW
        if since is not None:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since
            )
            policy = None
        elif from_seq is not None:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=from_seq
            )
            policy = None
        end: int | None = None
        try:
            if to_seq is not None:
                info = await js.stream_info(stream)
                end = min(to_seq, info.state.last_seq)
            sub = await js.subscribe(
                subject or f"{settings.subject_prefix}.>",
                stream=stream,
                ordered_consumer=True,
                deliver_policy=policy,
                config=config,
            )
        except nats.js.errors.NotFoundError:
            await conn.close()
            raise NoStream(f"no stream {stream} on {settings.servers}") from None
        except (nats.errors.TimeoutError, TimeoutError):
            await conn.close()
            # a user without the consumer API (the bridge's own, least privilege) gets no
            # answer at all: the server refuses the request and says so in the log above
            raise NoStream(
                f"JetStream did not answer for stream {stream}: may these credentials "
                "create a consumer? (tail needs a reader's user, docs/deploy.md)"
            ) from None
        return cls(conn, sub, end, start=from_seq or 1)

    def __aiter__(self) -> AsyncIterator[Received]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Received]:
        if self._end is not None and self._end < self._start:
            return  # nothing in the range: the stream ends before it
        while True:
            try:
                msg = await self._sub.next_msg(timeout=3600)
            except TimeoutError:
                continue
            meta = msg.metadata
            seq, pending = meta.sequence.stream, meta.num_pending
            if self._end is not None and seq > self._end:
                return  # a bounded read reads every subject: the range is over
            yield Received(msg.subject, msg.headers, msg.data, seq, pending)
            if self._end is not None and (seq >= self._end or pending == 0):
                return

    async def close(self) -> None:
        await self._conn.close()


async def tail(
    settings: Settings,
    subject: str | None,
    *,
    all_: bool,
    count: int | None,
    out: TextIO = sys.stdout,
    filters: Filters = Filters(),
    since: datetime | None = None,
    as_json: bool = False,
    color: str = "auto",
    from_seq: int | None = None,
    to_seq: int | None = None,
    digests_: bool = False,
    at_least: int = 0,
) -> int:
    """``k8s-event-bridge tail``: one readable line per message (or one JSON CloudEvent with
    ``as_json``), only what ``filters`` keeps; ``count`` counts what is printed. Colour (Warning
    yellow, the bridge's own events cyan) when ``color`` is ``always``, or ``auto`` on a
    terminal without ``NO_COLOR``. With ``digests_``, the digests' stream, one line per digest
    of at least ``at_least`` occurrences. With ``to_seq``, every subject is read (``filters``
    alone decide) and the read ends after that sequence."""
    paint = not as_json and (
        color == "always" or (color == "auto" and out.isatty() and "NO_COLOR" not in os.environ)
    )
    nats_ = settings.nats
    prefix = nats_.digest_prefix if digests_ else nats_.subject_prefix
    if to_seq is not None:
        subject = f"{prefix}.>"
    elif not subject:
        subject = (
            filters.digest_subject(prefix)
            if digests_
            else filters.subject(prefix, nats_.subject_template)
        )
    try:
        reader = await Tail.open(
            nats_,
            subject,
            from_start=all_,
            since=since,
            stream=nats_.digest_stream if digests_ else nats_.stream,
            from_seq=from_seq,
            to_seq=to_seq,
        )
    except NoStream as exc:
        print(f"k8s-event-bridge: {exc}", file=sys.stderr)
        return 1
    show = _digest_text if digests_ else _event_text
    seen = 0
    try:
        if count is not None and count <= 0:
            return 0
        async for msg in reader:
            text = show(msg, filters, as_json, paint, at_least)
            if text is None:
                continue
            print(text, file=out, flush=True)
            seen += 1
            if count is not None and seen >= count:
                break
    finally:
        await reader.close()
    return 0


def _event_text(
    msg: Received, filters: Filters, as_json: bool, paint: bool, at_least: int
) -> str | None:
    """What tail prints for a message of the Events' stream; None: nothing."""
    try:
        ce = decode(msg.headers, msg.data)
    except cloudevents.BadMessage:
        if filters.active:
            return None
        return printable(f"(not a CloudEvent: {msg.subject} {msg.data[:80]!r})")
    if not filters.keeps(ce):
        return None
    if as_json:
        return json_printable(msgspec.json.encode(ce).decode())
    text = line(ce)
    if paint:
        type_ = str(ce.get("type", ""))
        if type_.startswith("io.k8s.bridge."):
            text = f"{_CYAN}{text}{_RESET}"
        elif type_ == "io.k8s.event.warning":
            text = f"{_YELLOW}{text}{_RESET}"
    return text


def _digest_text(
    msg: Received, filters: Filters, as_json: bool, paint: bool, at_least: int
) -> str | None:
    """What tail prints for a message of the digests' stream; None: nothing. A message that
    is no digest is reported as one (as the Events' tail reports one that is no CloudEvent),
    unless a filter is set."""
    try:
        d, doc = read_digest(msg.headers, msg.data)
    except cloudevents.BadMessage as exc:
        if filters.active or at_least:
            return None
        return not_a_digest(msg.subject, exc)
    if d.occurrences < at_least or not filters.keeps_digest(d):
        return None
    if as_json:
        return json_printable(msgspec.json.encode(doc).decode())
    text = digest_line(d)
    if paint and d.series.type.lower() == "warning":
        text = f"{_YELLOW}{text}{_RESET}"
    return text
