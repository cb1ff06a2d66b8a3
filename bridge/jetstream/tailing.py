r"""``k8s-event-bridge tail``: read the stream and print events as a person wants to read them.

What it prints comes from messages, which anyone with publish rights on the stream's subjects
may write: no character of theirs reaches the terminal as a control. ``printable`` shows each
terminal control (C0 but tab and newline, which become a space; DEL; C1; the line and paragraph
separators; the bidirectional marks, embeddings, overrides and isolates) as its escape
(``\x1b``, ``\u202e``), so an ESC can not move the cursor, set a title or forge a colour, a CR
can not overwrite the line, and a right-to-left override can not reorder it. ``--json`` writes
them as JSON escapes (``\u001b``): the same document, no raw control.
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
from k8s_event_common import cloudevents, durations, subjects
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


def parse_where(pairs: Iterable[str], known: Iterable[str]) -> dict[str, frozenset[str]]:
    """``--where NAME=VALUE`` (repeatable; values of one name are or-ed) → name → values.
    Raises ``ValueError`` naming a pair that is not NAME=VALUE or a name not in ``known``."""
    names = list(known)
    out: dict[str, set[str]] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"--where {pair!r}: NAME=VALUE expected")
        if name not in names:
            raise ValueError(
                f"--where {name}: neither a placeholder of nats.subject_template nor an "
                f"extension of enrich (known: {', '.join(names)})"
            )
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


class Received(NamedTuple):
    subject: str
    headers: dict[str, str] | None
    data: bytes


class Tail:
    """The stream read in order by an ordered consumer: from its start, or from now on."""

    def __init__(self, conn: Connection, sub: Any) -> None:
        self._conn = conn
        self._sub = sub

    @classmethod
    async def open(
        cls,
        settings: NatsSettings,
        subject: str | None,
        *,
        from_start: bool,
        since: datetime | None = None,
    ) -> Tail:
        """From the start, from ``since`` (JetStream seeks by time) or from now on. Raises
        ``NoStream`` when the stream does not exist."""
        conn = await connection.connect(settings)
        nc = conn.nc
        config = None
        policy: DeliverPolicy | None = DeliverPolicy.ALL if from_start else DeliverPolicy.NEW
        if since is not None:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since
            )
            policy = None
        try:
            sub = await nc.jetstream(domain=settings.domain).subscribe(
                subject or f"{settings.subject_prefix}.>",
                stream=settings.stream,
                ordered_consumer=True,
                deliver_policy=policy,
                config=config,
            )
        except nats.js.errors.NotFoundError:
            await conn.close()
            raise NoStream(f"no stream {settings.stream} on {settings.servers}") from None
        except (nats.errors.TimeoutError, TimeoutError):
            await conn.close()
            # a user without the consumer API (the bridge's own, least privilege) gets no
            # answer at all: the server refuses the request and says so in the log above
            raise NoStream(
                f"JetStream did not answer for stream {settings.stream}: may these credentials "
                "create a consumer? (tail needs a reader's user, docs/deploy.md)"
            ) from None
        return cls(conn, sub)

    def __aiter__(self) -> AsyncIterator[Received]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Received]:
        while True:
            try:
                msg = await self._sub.next_msg(timeout=3600)
            except TimeoutError:
                continue
            yield Received(msg.subject, msg.headers, msg.data)

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
) -> int:
    """``k8s-event-bridge tail``: one readable line per message (or one JSON CloudEvent with
    ``as_json``), only what ``filters`` keeps; ``count`` counts what is printed. Colour (Warning
    yellow, the bridge's own events cyan) when ``color`` is ``always``, or ``auto`` on a
    terminal without ``NO_COLOR``."""
    paint = not as_json and (
        color == "always" or (color == "auto" and out.isatty() and "NO_COLOR" not in os.environ)
    )
    try:
        reader = await Tail.open(
            settings.nats,
            subject
            or filters.subject(settings.nats.subject_prefix, settings.nats.subject_template),
            from_start=all_,
            since=since,
        )
    except NoStream as exc:
        print(f"k8s-event-bridge: {exc}", file=sys.stderr)
        return 1
    seen = 0
    try:
        if count is not None and count <= 0:
            return 0
        async for msg in reader:
            try:
                ce = decode(msg.headers, msg.data)
            except cloudevents.BadMessage:
                if filters.active:
                    continue
                print(printable(f"(not a CloudEvent: {msg.subject} {msg.data[:80]!r})"), file=out)
            else:
                if not filters.keeps(ce):
                    continue
                if as_json:
                    text = json_printable(msgspec.json.encode(ce).decode())
                else:
                    text = line(ce)
                    if paint:
                        type_ = str(ce.get("type", ""))
                        if type_.startswith("io.k8s.bridge."):
                            text = f"{_CYAN}{text}{_RESET}"
                        elif type_ == "io.k8s.event.warning":
                            text = f"{_YELLOW}{text}{_RESET}"
                print(text, file=out, flush=True)
            seen += 1
            if count is not None and seen >= count:
                break
    finally:
        await reader.close()
    return 0
