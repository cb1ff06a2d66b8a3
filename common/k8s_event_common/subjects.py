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

import re
from typing import Final

DEFAULT_TEMPLATE: Final = "{cluster}.{namespace}.{kind}.{reason}"
FIELDS: Final = ("cluster", "namespace", "kind", "reason", "type")
STATUS_TOKEN: Final = "_bridge"

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
    """One value as a subject token: ``A-Za-z0-9_-`` kept, anything else ``_``; none is ``_``."""
    if not value:
        return "_"
    if value.isascii() and value.replace("-", "").replace("_", "").isalnum():
        return value
    return _UNSAFE.sub("_", value)


def parse_template(template: str) -> list[tuple[bool, str]]:
    """The template's tokens, each ``(is a placeholder, its name or the literal)``. Raises
    ``ValueError`` naming the token that is neither."""
    out: list[tuple[bool, str]] = []
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
    bridge sanitises them); any other token is ``*``. A trailing run of ``*`` stays ``*``
    tokens (never ``>``), so the filter takes Events only, never a status event. Raises
    ``ValueError`` for a name the template does not hold."""
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
