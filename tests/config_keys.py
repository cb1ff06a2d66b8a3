"""The keys of a settings model and of a YAML document, for the tests that check a config file
in config/ documents every key."""

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
