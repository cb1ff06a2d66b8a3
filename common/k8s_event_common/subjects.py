"""The bridge's subject template, for the bridge and for whoever subscribes.

An Event's subject is ``<prefix>.`` followed by ``nats.subject_template`` filled in, by default
``{cluster}.{namespace}.{kind}.{reason}``. Each token of the template is a literal or one
``{placeholder}``: ``cluster``, ``namespace``, ``kind``, ``reason``, ``type`` or the name of an
enrichment extension (``team``...). Every value is made a token by ``token``, so no value adds
a level or a wildcard, and distinct values give distinct tokens (``untoken`` reads one back):

- a value of ``A-Za-z0-9_-`` starting with a letter or digit (DNS labels, kinds, reasons such
  as ``BackOff``, cluster names, most label values) is its own token, as it always was;
- a missing or empty value is ``_`` (Kubernetes omits an empty string: the two are one);
- any other value is escaped: ``_`` then the value with ``A-Za-z0-9-`` kept, ``.`` written
  ``__``, and every other byte of its UTF-8 ``_`` and two lowercase hex digits
  (``pay.ments`` → ``_pay__ments``, ``pay*ments`` → ``_pay_2aments``, ``pay ments`` →
  ``_pay_20ments``, ``_`` → ``__5f``);
- a token longer than ``MAX_TOKEN`` characters is cut: its escaped start, then ``_-`` and 16
  hex digits of the value's SHA-256 (``untoken`` refuses it: the value is not all there).

So a token never holds ``.``, ``*``, ``>``, white space or a control character, an escaped or
cut token starts with ``_`` and a value's own token with a letter or digit, and no value's
token is ``_bridge``: status events are at ``<prefix>.<cluster>._bridge.<what>`` and never
meet an Event's subject.

``subject_filter`` is how a subscriber takes a slice of the stream with one filter: the
template with the values it names, ``*`` for every other token, e.g. one team's Events of
every cluster: ``subject_filter("k8s.events", template, team="payments")``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

DEFAULT_TEMPLATE: Final = "{cluster}.{namespace}.{kind}.{reason}"
FIELDS: Final = ("cluster", "namespace", "kind", "reason", "type")
STATUS_TOKEN: Final = "_bridge"
MAX_TOKEN: Final = 128  # characters of one token (see ``token``)
MISSING: Final = "_"  # the token of a missing or empty value
MAX_TOKENS: Final = 16  # tokens of a template: with the prefix, a subject stays under 4 KiB

_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_HEX = frozenset("0123456789abcdef")
_CUT = "_-"  # then 16 hex digits of the value's SHA-256
_PLACEHOLDER = re.compile(r"\{([a-z0-9]+)\}")
_LITERAL = re.compile(r"[A-Za-z0-9-][A-Za-z0-9_-]*")

__all__ = [
    "DEFAULT_TEMPLATE",
    "FIELDS",
    "STATUS_TOKEN",
    "parse_template",
    "placeholders",
    "status_filter",
    "subject_filter",
    "token",
    "untoken",
]


def token(value: str | None) -> str:
    """One value as a subject token (the rules in the module's docstring): a value of
    ``A-Za-z0-9_-`` starting with a letter or digit is itself, none is ``_``, any other is
    escaped, and a token over MAX_TOKEN characters is cut with a hash of the value, so a subject
    never passes nats-server's control line (4 KiB: a longer one would cut the connection on
    every attempt). Distinct values give distinct tokens."""
    if not value:
        return MISSING
    if (
        len(value) <= MAX_TOKEN
        and value.isascii()
        and value[0].isalnum()
        and value.replace("-", "").replace("_", "").isalnum()
    ):
        return value
    escaped = "_" + _escape(value)
    if len(escaped) <= MAX_TOKEN:
        return escaped
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{_whole(escaped, MAX_TOKEN - len(_CUT) - len(digest))}{_CUT}{digest}"


def _whole(escaped: str, limit: int) -> str:
    """The longest start of ``escaped`` of at most ``limit`` characters that ends on a whole
    escape (never inside ``_5f`` or ``__``)."""
    i = end = 1  # after the leading "_"
    while i < len(escaped):
        i += 1 if escaped[i] != "_" else 2 if escaped[i + 1] == "_" else 3
        if i > limit:
            break
        end = i
    return escaped[:end]


def _escape(value: str) -> str:
    out: list[str] = []
    for b in value.encode("utf-8", "surrogatepass"):
        if b in _KEPT:
            out.append(chr(b))
        elif b == 0x2E:  # "."
            out.append("__")
        else:
            out.append(f"_{b:02x}")
    return "".join(out)


def untoken(tok: str) -> str | None:
    """The value ``tok`` was made from (``token``'s inverse): None for ``_`` (a missing or
    empty value). Raises ``ValueError`` for a cut token (the value is not all in it) or a
    string that is no value's token."""
    if tok == MISSING:
        return None
    if not tok:
        raise ValueError("an empty string is no token")
    if not tok.startswith("_"):
        if token(tok) != tok:
            raise ValueError(f"{tok!r} is no value's token")
        return tok
    raw = bytearray()
    i = 1
    while i < len(tok):
        c = tok[i]
        if c != "_":
            if ord(c) not in _KEPT:
                raise ValueError(f"{tok!r} is no value's token (character {i})")
            raw.append(ord(c))
            i += 1
            continue
        nxt = tok[i + 1 : i + 2]
        if nxt == "_":
            raw.append(0x2E)
            i += 2
        elif nxt == "-":
            raise ValueError(f"{tok!r} is cut (a long value): its value is not all in it")
        elif len(tok) >= i + 3 and nxt in _HEX and tok[i + 2] in _HEX:
            raw.append(int(tok[i + 1 : i + 3], 16))
            i += 3
        else:
            raise ValueError(f"{tok!r} is no value's token (a bad escape at {i})")
    value = raw.decode("utf-8", "surrogatepass")
    if token(value) != tok:  # e.g. "_abc": "abc" is its own token, never escaped
        raise ValueError(f"{tok!r} is no value's token")
    return value


def parse_template(template: str) -> list[tuple[bool, str]]:
    """The template's tokens, each ``(is a placeholder, its name or the literal)``. Raises
    ``ValueError`` naming the token that is neither."""
    out: list[tuple[bool, str]] = []
    if template.count(".") >= MAX_TOKENS:
        raise ValueError(f"more than {MAX_TOKENS} tokens (a subject must stay under 4 KiB)")
    for tok in template.split("."):
        m = _PLACEHOLDER.fullmatch(tok)
        if m:
            out.append((True, m.group(1)))
        elif _LITERAL.fullmatch(tok):
            out.append((False, tok))
        else:
            raise ValueError(
                f"token {tok!r} is neither a {{placeholder}} (a-z 0-9) nor a literal of "
                "A-Z a-z 0-9 _ - not starting with _"
            )
    return out


def placeholders(template: str) -> list[str]:
    """The names the template fills in, in order."""
    return [name for is_placeholder, name in parse_template(template) if is_placeholder]


def subject_filter(prefix: str, template: str = DEFAULT_TEMPLATE, **values: str) -> str:
    """The NATS subject filter of the Events whose values are those given (sanitised as the
    bridge sanitises them); any other token is ``*``, never ``>`` (the filter has the
    template's length). It takes no status event when its second token is given, or when the
    template has other than three tokens (status subjects have three after the prefix: the
    kit refuses a filter that would take some of them). Raises ``ValueError`` for a name the
    template does not hold."""
    tokens = parse_template(template)
    names = {name for is_placeholder, name in tokens if is_placeholder}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: not in the subject template {template!r} "
            f"(it holds {', '.join(sorted(names))})"
        )
    parts = [prefix]
    for is_placeholder, name in tokens:
        if not is_placeholder:
            parts.append(name)
        elif name in values:
            parts.append(token(values[name]))
        else:
            parts.append("*")
    return ".".join(parts)


def status_filter(prefix: str, cluster: str | None = None, what: str | None = None) -> str:
    """The filter of the bridge's status events (of one cluster, of one kind)."""
    c = token(cluster) if cluster else "*"
    return f"{prefix}.{c}.{STATUS_TOKEN}.{token(what) if what else '*'}"
