"""The keys of a settings model, of a YAML document and of docs/configuration.md, for the tests
that check a config file in config/ and the reference document every key."""

from __future__ import annotations

from typing import Any


def model_keys(model: Any, prefix: str = "") -> set[str]:
    """``section.key`` (nested: ``a.b.c``) of every field of a pydantic settings instance."""
    out = set()
    for name in type(model).model_fields:
        value = getattr(model, name)
        if hasattr(type(value), "model_fields"):
            out |= model_keys(value, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


def doc_keys(doc: dict[str, Any], prefix: str = "") -> set[str]:
    """The same for a YAML document (an empty mapping counts as a key)."""
    out = set()
    for k, v in doc.items():
        if isinstance(v, dict) and v:
            out |= doc_keys(v, f"{prefix}{k}.")
        else:
            out.add(f"{prefix}{k}")
    return out


def reference_keys(markdown: str, command: str) -> set[str]:
    """The keys docs/configuration.md's tables name under the heading of ``command`` (``## ...
    (`k8s-event-alerting`)``), up to the next program's heading."""
    out: set[str] = set()
    inside = False
    for line in markdown.splitlines():
        if line.startswith("## "):
            inside = f"`{command}`" in line
        elif inside and line.startswith("| `"):
            out.add(line.split("`")[1])
    return out
