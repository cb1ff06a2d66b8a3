"""The bridge's subject template, for the bridge and for whoever subscribes.

An Event's subject is ``<prefix>.`` followed by ``nats.subject_template`` filled in, by default
``{cluster}.{namespace}.{kind}.{reason}``. Each token of the template is a literal or one
``{placeholder}``: ``cluster``, ``namespace``, ``kind``, ``reason``, ``type`` or the name of an
enrichment extension (``team``...). Every value is sanitised by ``token`` (characters outside
``A-Za-z0-9_-`` become ``_``, a missing or empty value is ``_``), so no value adds a level or
a wildcard. Status events are at ``<prefix>.<cluster>._bridge.<what>``: the template's second
token never starts with ``_`` (the bridge's settings check it), so the two never meet.

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
MAX_TOKENS: Final = 16  # tokens of a template: with the prefix, a subject stays under 4 KiB

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
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
]


def token(value: str | None) -> str:
    """One value as a subject token: ``A-Za-z0-9_-`` kept, anything else ``_``; none is ``_``.

    At most MAX_TOKEN characters: a longer value (an Event's reason, kind or an owner's name
    have no limit in the API server) keeps its start and ends in ``_`` and 8 hex digits of its
    hash, so different values stay apart and a subject never passes nats-server's control line
    (4 KiB: a longer one would cut the connection on every attempt)."""
    if not value:
        return "_"
    if not (value.isascii() and value.replace("-", "").replace("_", "").isalnum()):
        value = _UNSAFE.sub("_", value)
    if len(value) > MAX_TOKEN:
        digest = hashlib.sha256(value.encode()).hexdigest()[:8]
        value = f"{value[: MAX_TOKEN - 9]}_{digest}"
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
