"""The configuration reference, generated from the settings models.

    python -m tools.configref           # write docs/configuration.md and the config/ examples
    python -m tools.configref --check   # exit 1 naming each file that is out of date

Every key of the bridge (``bridge.settings``) and of the subscribers
(``k8s_event_consumer.alerting.settings``, ``k8s_event_consumer.remediation.settings``) is read
from its pydantic model, so the reference can not drift from the code:

- the **description** is the docstring under the field (``use_attribute_docstrings``); a field
  that only overrides a default takes its base class's; a section's is the docstring under its
  field, else its class docstring. A key without one is refused (``Undocumented``);
- the **type** is read from the annotation: ``str``, ``int``, ``Literal``, ``list``, ``dict``,
  ``SecretStr``, ``| None`` and pydantic's constraints (``ge``, ``le``, ``min_length``, ...).
  Where a validator decides what a key accepts (a duration, a size, a file that must exist),
  the type carries ``annotated_types.doc("duration, > 0")`` saying how it reads; a validator
  without one is refused, as is a type or a constraint this module can not put into words;
- the **default** is the model's, written as a person would (``2m``, ``16MiB``) and checked to
  read back as the same value; a secret's default is not shown; a required key shows
  ``required`` in the docs and its first ``examples`` value in a YAML file;
- the **environment variable** is the model's ``env_prefix`` and ``env_nested_delimiter``.

Output is deterministic: fields in their definition order, nothing from the clock or the
environment. This is a repository tool: it imports both packages, neither imports it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    PlainValidator,
    SecretStr,
    WrapValidator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from bridge import settings as bridge_settings
from k8s_event_common import durations
from k8s_event_consumer.alerting import settings as alerting_settings
from k8s_event_consumer.digests import settings as digests_settings
from k8s_event_consumer.otlp import settings as otlp_settings
from k8s_event_consumer.remediation import settings as remediation_settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs/configuration.md"
COMMAND = "python -m tools.configref"
WIDTH = 100  # of the YAML files' lines, as the code's

_VALIDATORS = (AfterValidator, BeforeValidator, PlainValidator, WrapValidator)
_PLAIN = {str: "string", bool: "boolean", int: "integer", float: "number"}
_PLURAL = {str: "strings", bool: "booleans", int: "integers", float: "numbers"}
_SIZE_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_DURATION_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


class Undocumented(Exception):
    """A key the reference can not describe: no description, or a type it can not read."""


# -- what a key is ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One leaf of the settings: ``kubernetes.backoff.initial``."""

    path: tuple[str, ...]
    type: str  # as a person reads it: "duration, > 0", "list of strings", "one of all|new"
    default: str | None  # in YAML, as the file would hold it; None: required
    example: str | None  # a required key's example value, in YAML
    env: str  # BRIDGE_KUBERNETES__BACKOFF__INITIAL
    env_value: str | None  # a list's or map's JSON, to show how the variable is written
    description: str
    secret: bool

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class Section:
    """A mapping of keys and sections, in the model's order; the top is the settings class."""

    path: tuple[str, ...]
    description: str
    items: tuple[Key | Section, ...]

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    def keys(self) -> list[Key]:
        return [item for item in self.items if isinstance(item, Key)]

    def sections(self) -> list[Section]:
        return [item for item in self.items if isinstance(item, Section)]

    def walk(self) -> Iterator[Section]:
        yield self
        for sub in self.sections():
            yield from sub.walk()


@dataclass(frozen=True)
class Program:
    """One program's settings and how its configuration is loaded."""

    title: str  # the docs' heading
    command: str
    settings: type[BaseSettings]
    intro: str  # the docs' paragraph under the heading
    yaml_path: str | None  # the example file generated next to the docs, if any
    yaml_preamble: str  # that file's header (comment lines)


def reference(settings: type[BaseSettings]) -> Section:
    """Every section and key of a settings class, described."""
    prefix = str(settings.model_config.get("env_prefix") or "")
    delimiter = str(settings.model_config.get("env_nested_delimiter") or "__")

    def env(path: tuple[str, ...]) -> str:
        return prefix + delimiter.join(path).upper()

    return _section(settings, (), "", env)


def _section(
    model: type[BaseModel],
    path: tuple[str, ...],
    description: str,
    env: Callable[[tuple[str, ...]], str],
) -> Section:
    items: list[Key | Section] = []
    for name, info in model.model_fields.items():
        sub = (*path, name)
        section = _model_of(info.annotation)
        if section is not None:
            text = _description(model, name) or _class_doc(section)
            items.append(_section(section, sub, text, env))
        else:
            items.append(_key(model, name, info, sub, env))
    return Section(path, description, tuple(items))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _description(model: type[BaseModel], name: str) -> str:
    """The field's docstring; a field that only overrides a base's default has the base's."""
    for cls in model.__mro__:
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            info = cls.model_fields.get(name)
            if info is not None and info.description:
                return info.description
    return ""


def _class_doc(model: type[BaseModel]) -> str:
    """A section's class docstring, or its nearest base's (never pydantic's own)."""
    for cls in model.__mro__:
        if cls in (BaseModel, BaseSettings) or not issubclass(cls, BaseModel):
            break
        doc = cls.__dict__.get("__doc__")
        if doc:
            return inspect.cleandoc(doc)
    return ""


def _key(
    model: type[BaseModel],
    name: str,
    info: FieldInfo,
    path: tuple[str, ...],
    env: Callable[[tuple[str, ...]], str],
) -> Key:
    dotted = ".".join(path)
    description = _description(model, name)
    if not description:
        raise Undocumented(
            f"{dotted}: no description; write a docstring under the field "
            f"({model.__module__}.{model.__qualname__}.{name})"
        )
    try:
        shape = _shape(info.annotation, info.metadata)
    except Undocumented as exc:
        raise Undocumented(f"{dotted}: {exc}") from None
    default: str | None = None
    example: str | None = None
    if info.is_required():
        if not info.examples:
            raise Undocumented(f"{dotted}: required, so it needs Field(examples=[...])")
        example = _value(info.examples[0], shape.format)
        value: Any = info.examples[0]
    else:
        value = info.get_default(call_default_factory=True)
        if shape.secret and value not in (None, {}):
            raise Undocumented(f"{dotted}: a secret can not have a default")
        default = _value(value, shape.format)
    env_value = None
    if shape.json:
        shown = info.examples[0] if info.examples else value
        env_value = json.dumps(shown, separators=(",", ":"))
    return Key(
        path=path,
        type=shape.text,
        default=default,
        example=example,
        env=env(path),
        env_value=env_value,
        description=description,
        secret=shape.secret,
    )


# -- types as a person reads them ------------------------------------------------------------


@dataclass(frozen=True)
class _Shape:
    text: str
    format: str = ""  # "duration" or "size": how the default is written
    secret: bool = False
    json: bool = False  # a list or a map: JSON in an environment variable


def _shape(annotation: Any, metadata: Sequence[Any]) -> _Shape:
    members = [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        members = list(get_args(annotation))
    nullable = type(None) in members
    members = [m for m in members if m is not type(None)]
    if len(members) != 1:
        raise Undocumented(f"a union of {members} has no reading")
    inner = members[0]
    meta = list(metadata)
    if get_origin(inner) is Annotated:
        inner, *extra = get_args(inner)
        meta += extra
    named = [m for m in meta if isinstance(m, annotated_types.DocInfo)]
    if named:
        text = named[-1].documentation
    elif any(isinstance(m, _VALIDATORS) for m in meta):
        raise Undocumented(
            "a validator decides what it accepts: say how its type reads with "
            'annotated_types.doc("...") in the Annotated type'
        )
    else:
        text = _plain(inner)
    constraints = _constraints([m for m in meta if not isinstance(m, _VALIDATORS)], inner)
    parts = [text, *constraints]
    if nullable:
        parts.append("or null")
    first = text.split(",")[0]
    return _Shape(
        text=", ".join(parts),
        format=first if first in ("duration", "size") else "",
        secret=inner is SecretStr or (get_origin(inner) is dict and SecretStr in get_args(inner)),
        json=get_origin(inner) in (list, dict),
    )


def _plain(t: Any) -> str:
    if t in _PLAIN:
        return _PLAIN[t]
    if t is SecretStr:
        return "secret string"
    origin = get_origin(t)
    if origin is Literal:
        return "one of " + "|".join(str(a) for a in get_args(t))
    if origin is list:
        (item,) = get_args(t)
        if get_origin(item) is Literal:
            return "list of " + "|".join(str(a) for a in get_args(item))
        if item in _PLURAL:
            return "list of " + _PLURAL[item]
    if origin is dict:
        k, v = get_args(t)
        if k in _PLAIN and v in _PLAIN:
            return f"map of {_PLAIN[k]} to {_PLAIN[v]}"
        if k in _PLAIN and v is SecretStr:
            return f"map of {_PLAIN[k]} to secret string"
    raise Undocumented(f"the type {t!r} has no reading: teach tools/configref.py one")


def _constraints(meta: list[Any], inner: Any) -> list[str]:
    lo: tuple[str, Any] | None = None
    hi: tuple[str, Any] | None = None
    min_len: int | None = None
    max_len: int | None = None
    for m in meta:
        if isinstance(m, annotated_types.DocInfo):
            continue
        if isinstance(m, annotated_types.Ge):
            lo = (">=", m.ge)
        elif isinstance(m, annotated_types.Gt):
            lo = (">", m.gt)
        elif isinstance(m, annotated_types.Le):
            hi = ("<=", m.le)
        elif isinstance(m, annotated_types.Lt):
            hi = ("<", m.lt)
        elif isinstance(m, annotated_types.MinLen):
            min_len = m.min_length
        elif isinstance(m, annotated_types.MaxLen):
            max_len = m.max_length
        else:
            raise Undocumented(f"the constraint {m!r} has no reading: teach tools/configref.py")
    out = []
    if lo is not None and hi is not None and lo[0] == ">=" and hi[0] == "<=":
        out.append(f"{_number(lo[1])}..{_number(hi[1])}")
    else:
        out += [f"{op} {_number(v)}" for op, v in (b for b in (lo, hi) if b is not None)]
    if min_len is not None or max_len is not None:
        unit = "characters" if inner is str else "items"
        if min_len is not None and max_len is not None:
            out.append(f"{min_len}..{max_len} {unit}")
        elif min_len == 1:
            out.append("not empty")
        elif min_len is not None:
            out.append(f"at least {min_len} {unit}")
        else:
            out.append(f"at most {max_len} {unit}")
    return out


def _number(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


# -- values as a person writes them ----------------------------------------------------------


def format_duration(seconds: float) -> str:
    """``0.8`` → ``800ms``, ``120`` → ``2m``, ``604800`` → ``7d``: the largest whole unit, read
    back by the settings as the same number (else the plain number of seconds)."""
    ms = round(seconds * 1000)
    if ms == 0:
        text = "0s"
    elif math.isclose(ms, seconds * 1000, rel_tol=0, abs_tol=1e-6):
        text = next(f"{ms // n}{unit}" for unit, n in _DURATION_UNITS if ms % n == 0)
    else:
        text = repr(float(seconds))
    if durations.parse_duration(yaml.safe_load(text)) != seconds:
        text = repr(float(seconds))
    return text


def format_size(size: int) -> str:
    """``16777216`` → ``16MiB``; bytes when no binary unit divides it; ``-1`` stays."""
    for unit, n in _SIZE_UNITS:
        if size > 0 and size % n == 0:
            return f"{size // n}{unit}"
    return str(size)


def _value(value: Any, fmt: str) -> str:
    """A value as YAML would hold it: plain where that reads back the same, else JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if fmt == "duration":
        return format_duration(float(value))
    if fmt == "size":
        return format_size(int(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        try:
            plain = yaml.safe_load(value) == value and value == value.strip()
        except yaml.YAMLError:
            plain = False
        return value if plain else json.dumps(value)
    if isinstance(value, list | dict):
        return json.dumps(value)
    raise Undocumented(f"the value {value!r} has no YAML form")


# -- docs/configuration.md -------------------------------------------------------------------


MARKDOWN_HEAD = f"""\
# Configuration reference

<!-- Generated from the settings models by `{COMMAND}`: change a description in
the model (the docstring under the field), then run it. `{COMMAND} --check` (and
tests/unit/test_configref.py) fail when this file is out of date. -->

The bridge and the subscribers read their configuration the same way: a YAML file (`--config
FILE`, or the program's `*_CONFIG_FILE` variable) plus environment variables
`<PREFIX><SECTION>__<KEY>` (a double underscore between the levels, any case), which override
the file. An unknown key, a bad value or a missing config file prints one line naming the key,
and the program exits 2. A file that is not valid YAML is said by where (file, line, column)
and what is wrong, never by the text of the line (it may hold a password). `check-config
--config FILE` validates a file and prints the effective configuration, secrets shown as `***`.

Types, as the tables below write them:

- **duration**: a number of seconds (`90`, `1.5`) or units `ms`, `s`, `m`, `h`, `d`, also
  combined: `500ms`, `1s`, `2m`, `1h`, `1m30s`, `7d`.
- **size**: bytes (`1048576`) or with a unit: `KB`/`MB`/`GB`/`TB` (powers of 1000) or
  `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), e.g. `64MiB`, `1GB`.
- **list**, **map**: YAML in the file; JSON in an environment variable, e.g.
  `BRIDGE_FILTER__REASONS='["BackOff","OOMKilling"]'`,
  `ALERTING_ALERTS__LABELS='{{"severity":"warning"}}'`.
- **null**: the key is unset (YAML `null` or `~`); each description says what unset means.
- **secret string**: never printed by `check-config` or logged; no default is shown. Prefer the
  environment (from a Kubernetes Secret) to writing it in the file.
- Constraints follow the type: `1..10000` (both ends included), `>= 1`, `> 0`; a rule between
  keys is in the descriptions.
"""


def render_markdown(programs: Sequence[Program]) -> str:
    out = [MARKDOWN_HEAD.rstrip("\n")]
    for program in programs:
        top = reference(program.settings)
        out += ["", f"## {program.title}", "", program.intro.strip()]
        for section in top.walk():
            if section is top:
                continue
            out += ["", f"### `{section.dotted}`"]
            if section.description:
                out += ["", _md_text(section.description)]
            keys = section.keys()
            if not keys:
                continue
            out += [
                "",
                "| key | type | default | environment variable | description |",
                "|---|---|---|---|---|",
            ]
            for key in keys:
                out.append(
                    f"| `{key.dotted}` | {_md_cell(key.type)} | {_md_default(key)} | "
                    f"`{key.env}` | {_md_text(key.description)} |"
                )
    return "\n".join(out) + "\n"


def _md_default(key: Key) -> str:
    if key.default is None:
        return "**required**"
    if key.secret:
        return "—"
    return "`" + key.default.replace("|", "\\|") + "`"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_text(text: str) -> str:
    """A description as one Markdown line: `code` kept, < > * | escaped outside it."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    pieces = "<br><br>".join(paragraphs).split("`")
    for i in range(0, len(pieces), 2):  # outside code spans
        pieces[i] = (
            pieces[i]
            .replace("&", "&amp;")
            .replace("<br>", "\0")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace("\0", "<br>")
            .replace("*", "\\*")
            .replace("[", "\\[")
        )
    return "`".join(pieces).replace("|", "\\|")


# -- the YAML examples -----------------------------------------------------------------------


def render_yaml(program: Program) -> str:
    """Every key with its default (a required key with its example), each described in
    comments: a file that loads as the defaults."""
    top = reference(program.settings)
    out = [program.yaml_preamble.rstrip("\n")]
    for section in top.sections():
        out.append("")
        out += _yaml_section(section, 0)
    if top.keys():
        raise Undocumented(f"{program.command}: a key outside every section")
    return "\n".join(out) + "\n"


def _yaml_section(section: Section, depth: int) -> list[str]:
    indent = "  " * depth
    out = _comment(section.description, indent)
    out.append(f"{indent}{section.path[-1]}:")
    for i, item in enumerate(section.items):
        if i:
            out.append("")
        if isinstance(item, Section):
            out += _yaml_section(item, depth + 1)
        else:
            out += _yaml_key(item, depth + 1)
    return out


def _yaml_key(key: Key, depth: int) -> list[str]:
    indent = "  " * depth
    out = _comment(key.description, indent)
    env = f"{key.env}='{key.env_value}'" if key.env_value is not None else key.env
    if key.default is None:
        about = f"REQUIRED (example value); {key.type}; env: {env}"
        value = key.example
    else:
        about = f"{key.type}; env: {env}"
        value = key.default
    out += _comment(about, indent)
    assert value is not None
    line = f"{indent}{key.path[-1]}: {value}"
    if len(line) > WIDTH and value.startswith("["):
        out.append(f"{indent}{key.path[-1]}:")
        out += [f"{indent}  - {_value(item, '')}" for item in json.loads(value)]
    else:
        out.append(line)
    return out


def _comment(text: str, indent: str) -> list[str]:
    if not text:
        return []
    width = WIDTH - len(indent) - 2
    out = []
    for i, paragraph in enumerate(text.split("\n\n")):
        if i:
            out.append(f"{indent}#")
        lines = textwrap.wrap(
            " ".join(paragraph.split()),
            width,
            break_long_words=False,
            break_on_hyphens=False,
        )
        out += [f"{indent}# {line}" for line in lines]
    return out


# -- the programs ----------------------------------------------------------------------------


_FORMATS = """\
# Formats (docs/configuration.md):
#   duration  a number of seconds (90, 1.5) or units ms, s, m, h, d, also combined:
#             500ms, 1s, 2m, 1h, 1m30s, 7d
#   size      bytes (1048576) or with a unit: KB/MB/GB/TB (powers of 1000) or
#             KiB/MiB/GiB/TiB (powers of 1024), e.g. 64MiB, 1GB
#   null      the key is unset (YAML null / ~)
#   a list or a map is JSON in an environment variable
"""

BRIDGE = Program(
    title="The bridge (`k8s-event-bridge`)",
    command="k8s-event-bridge",
    settings=bridge_settings.Settings,
    intro="""\
`k8s-event-bridge run --config FILE` (or `BRIDGE_CONFIG_FILE`); environment variables
`BRIDGE_<SECTION>__<KEY>`. [config/bridge.yaml](../config/bridge.yaml) holds every key with its
default; `k8s-event-bridge check-config --config FILE` checks a file. The model:
`bridge/settings.py`.""",
    yaml_path="config/bridge.yaml",
    yaml_preamble=f"""\
# k8s-event-bridge — example configuration, every key with its default.
#
# Generated from bridge/settings.py by `{COMMAND}` (docs/configuration.md is
# the same as tables): change a description there, not here.
#
# Load it with:   k8s-event-bridge run --config config/bridge.yaml
#                 (or set BRIDGE_CONFIG_FILE=config/bridge.yaml)
# Check it with:  k8s-event-bridge check-config --config config/bridge.yaml
#                 (validates, then prints the effective config; secrets are never printed)
#
# Every key can also be set by an environment variable BRIDGE_<SECTION>__<KEY> (double
# underscore between the levels, any case), which overrides this file, e.g.
#   BRIDGE_NATS__STREAM=K8S_EVENTS
#   BRIDGE_KUBERNETES__BACKOFF__INITIAL=800ms       (nested sections add another __<KEY>)
#   BRIDGE_NATS__SERVERS='["nats://a:4222","nats://b:4222"]'   (lists are written as JSON)
# Each key's comment ends with its type and its variable.
#
{_FORMATS}#
# An unknown key, a missing --config file or a bad value is reported with the key's name and
# the bridge exits with code 2.
""",
)

ALERTING = Program(
    title="The alerting subscriber (`k8s-event-alerting`)",
    command="k8s-event-alerting",
    settings=alerting_settings.Settings,
    intro="""\
`k8s-event-alerting --config FILE` (or `ALERTING_CONFIG_FILE`); environment variables
`ALERTING_<SECTION>__<KEY>`. What it does with them: [consumers.md](consumers.md) (the alerting
subscriber); `deploy/consumers/alerting.yaml` has a ConfigMap to start from. The model:
`consumer/k8s_event_consumer/alerting/settings.py` (NATS, HTTP and log shared with the
remediation worker: `consumer/k8s_event_consumer/configuring.py`; the NATS connection's keys and
the loading with the bridge: `common/k8s_event_common/configuring.py`).""",
    yaml_path=None,
    yaml_preamble=f"""\
# k8s-event-alerting — every key with its default (generated by `{COMMAND}`).
#
{_FORMATS}""",
)

REMEDIATION = Program(
    title="The remediation worker (`k8s-event-remediation`)",
    command="k8s-event-remediation",
    settings=remediation_settings.Settings,
    intro="""\
`k8s-event-remediation run --config FILE` (or `REMEDIATION_CONFIG_FILE`); environment variables
`REMEDIATION_<SECTION>__<KEY>`. `kubernetes.cluster` is required.
[config/remediation.yaml](../config/remediation.yaml) holds every key with its default; what
the worker does: [consumers.md](consumers.md) (the remediation worker). The model:
`consumer/k8s_event_consumer/remediation/settings.py`.""",
    yaml_path="config/remediation.yaml",
    yaml_preamble=f"""\
# k8s-event-remediation — the remediation worker's configuration (docs/consumers.md), every key
# with its default; kubernetes.cluster is required (the value here is an example).
#
# Generated from consumer/k8s_event_consumer/remediation/settings.py by
# `{COMMAND}` (docs/configuration.md is the same as tables): change a description
# there, not here.
#
# Load it with:   k8s-event-remediation run --config config/remediation.yaml
#                 (or set REMEDIATION_CONFIG_FILE=config/remediation.yaml)
# Check it with:  k8s-event-remediation check-config --config config/remediation.yaml
#
# Environment variables REMEDIATION_<SECTION>__<KEY> override this file (nested:
# REMEDIATION_REMEDIATION__RESTART__MIN_COUNT=3). Each key's comment ends with its type and its
# variable.
#
{_FORMATS}#
# An unknown key or a bad value prints one line naming it and exits 2.
""",
)

OTLP = Program(
    title="The OTLP subscriber (`k8s-event-otlp`)",
    command="k8s-event-otlp",
    settings=otlp_settings.Settings,
    intro="""\
`k8s-event-otlp --config FILE` (or `OTLP_CONFIG_FILE`); environment variables
`OTLP_<SECTION>__<KEY>`. What it does with them: [consumers.md](consumers.md) (the OTLP
subscriber); `deploy/consumers/otlp.yaml` has a ConfigMap to start from. The model:
`consumer/k8s_event_consumer/otlp/settings.py`.""",
    yaml_path=None,
    yaml_preamble=f"""\
# k8s-event-otlp — every key with its default (generated by `{COMMAND}`).
#
{_FORMATS}""",
)

DIGESTS = Program(
    title="The digests' program (`k8s-event-digests`)",
    command="k8s-event-digests",
    settings=digests_settings.Settings,
    intro="""\
`k8s-event-digests --config FILE` (or `DIGESTS_CONFIG_FILE`); environment variables
`DIGESTS_<SECTION>__<KEY>`. What it does with them:
[design.md](design.md#digests-one-per-series-per-window) and [consumers.md](consumers.md)
(digests); `deploy/consumers/digests.yaml` has a ConfigMap to start from. The model:
`consumer/k8s_event_consumer/digests/settings.py`.""",
    yaml_path=None,
    yaml_preamble=f"""\
# k8s-event-digests — every key with its default (generated by `{COMMAND}`).
#
{_FORMATS}""",
)

PROGRAMS = (BRIDGE, ALERTING, REMEDIATION, OTLP, DIGESTS)


def outputs(programs: Sequence[Program] = PROGRAMS) -> dict[str, str]:
    """Each generated file (its path from the repository's root) and what it must hold."""
    out = {DOCS: render_markdown(programs)}
    for program in programs:
        if program.yaml_path is not None:
            out[program.yaml_path] = render_yaml(program)
    return out


def stale(root: Path = ROOT, programs: Sequence[Program] = PROGRAMS) -> list[str]:
    """The generated files that are missing or differ from what the models say."""
    return [
        path
        for path, text in outputs(programs).items()
        if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text
    ]


def write(root: Path = ROOT, programs: Sequence[Program] = PROGRAMS) -> list[str]:
    """Write the files that changed; returns their paths."""
    changed = []
    for path, text in outputs(programs).items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Generate the configuration reference from the settings."
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is out of date"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.check:
            out_of_date = stale(args.root)
            for path in out_of_date:
                print(f"{path} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1 if out_of_date else 0
        for path in write(args.root):
            print(f"wrote {path}")
    except Undocumented as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
