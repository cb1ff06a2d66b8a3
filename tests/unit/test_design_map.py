"""docs/design.md is the map of the code and the one statement of each rule.

- Its section "The map" names every module (``*.py``) and every package (a folder with an
  ``__init__.py``; the package's row stands for it) of the bridge, the shared package, the
  subscribers and the simulator, as the first cell of a table row: `` `bridge/core/gaps.py` ``,
  `` `bridge/core/` ``. A module left out is named, and so is a row whose module is gone.
- The id rule and the checkpoint rule are written out once, in their sections of design.md;
  every other page says them in a few words and links there.
- Every link to a section of a page (``design.md#the-id-rule``) leads to a heading of that page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# The folders the map covers: each is a Python package and everything below it.
PACKAGES = (
    "bridge",
    "common/k8s_event_common",
    "consumer/k8s_event_consumer",
    "sim/k8s_event_sim",
)

# A package on its way to another folder: until the new folder exists, the modules still at the
# old places are not asked for, and the map's rows for the new folder are not checked.
MOVING = {"sim/k8s_event_sim": ("bridge/sim/", "bridge/demo.py")}


# ------------------------------------------------------------------------------------- the map


def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """Every module and package below ``packages``, as the map writes it: a module by its path,
    a package by its folder with a trailing ``/`` (its ``__init__.py``)."""
    found: set[str] = set()
    for package in packages:
        for path in (root / package).rglob("*.py"):
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts:
                continue
            if path.name == "__init__.py":
                found.add(rel.parent.as_posix() + "/")
            else:
                found.add(rel.as_posix())
    return found


def section(markdown: str, heading: str) -> str:
    """The text under ``## <heading>``, up to the next heading of that level or above."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^##? |\Z)", markdown, re.M | re.S)
    return m.group(1) if m else ""


def named(design: str, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """What the map names: the backticked paths below ``packages`` in the first cell of a table
    row of the section "The map". A path in prose or in another cell does not count."""
    out: set[str] = set()
    for line in section(design, "The map").splitlines():
        if not line.startswith("|"):
            continue
        first = re.split(r"(?<!\\)\|", line)[1]
        for path in re.findall(r"`([^`]+)`", first):
            if any(path == p + "/" or path.startswith(p + "/") for p in packages):
                out.add(path)
    return out


def map_problems(
    root: Path,
    design: str,
    packages: tuple[str, ...] = PACKAGES,
    moving: dict[str, tuple[str, ...]] = MOVING,
) -> list[str]:
    """Each module the map leaves out, and each row whose module is not in ``root``."""
    waiting = {new: old for new, old in moving.items() if not (root / new).is_dir()}
    not_asked = tuple(old for olds in waiting.values() for old in olds)
    not_checked = tuple(new + "/" for new in waiting)
    there = modules(root, packages)
    names = named(design, packages)
    missing = [
        f"{m}: not in the map of docs/design.md"
        for m in sorted(there - names)
        if not m.startswith(not_asked)
    ]
    stale = [
        f"{m}: in the map of docs/design.md, not in the repository"
        for m in sorted(names - there)
        if not m.startswith(not_checked)
    ]
    return missing + stale


def test_the_map_names_every_module_and_nothing_that_is_gone() -> None:
    problems = map_problems(ROOT, DESIGN.read_text())
    assert problems == [], "\n".join(problems)


def test_the_map_covers_the_runtime_and_the_core_today() -> None:
    """The modules the map once left out are in it (and the walk finds them at all)."""
    names = named(DESIGN.read_text())
    for m in (
        "bridge/runtime/enriching.py",
        "bridge/core/enrichment.py",
        "bridge/core/messages.py",
    ):
        assert m in names and m in modules(ROOT)
    assert "bridge/core/checkpoints.py" in names


def _tree(root: Path, files: list[str]) -> Path:
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text('"""A module."""\n')
    return root


def _design(*rows: str) -> str:
    table = "\n".join(f"| `{r}` | what it is for |" for r in rows)
    return f"# Design\n\n## The map\n\n| module | what |\n|---|---|\n{table}\n\n## Next\n"


@pytest.mark.parametrize(
    ("files", "rows", "problems"),
    [
        pytest.param(
            ["pkg/__init__.py", "pkg/a.py", "pkg/b.py"],
            ["pkg/", "pkg/a.py"],
            ["pkg/b.py: not in the map of docs/design.md"],
            id="a module left out",
        ),
        pytest.param(
            ["pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/x.py"],
            ["pkg/", "pkg/sub/x.py"],
            ["pkg/sub/: not in the map of docs/design.md"],
            id="a package without its row",
        ),
        pytest.param(
            ["pkg/__init__.py", "pkg/a.py"],
            ["pkg/", "pkg/a.py", "pkg/gone.py"],
            ["pkg/gone.py: in the map of docs/design.md, not in the repository"],
            id="a row whose module is gone",
        ),
        pytest.param(
            ["pkg/__init__.py", "pkg/a.py"],
            ["pkg/", "pkg/a.py"],
            [],
            id="complete",
        ),
    ],
)
def test_a_module_left_out_or_gone_is_named(
    tmp_path: Path, files: list[str], rows: list[str], problems: list[str]
) -> None:
    root = _tree(tmp_path, files)
    assert map_problems(root, _design(*rows), packages=("pkg",), moving={}) == problems


def test_a_module_named_only_in_prose_or_outside_the_map_does_not_count(tmp_path: Path) -> None:
    root = _tree(tmp_path, ["pkg/__init__.py", "pkg/a.py"])
    design = (
        "# Design\n\nThe data flow: `pkg/a.py` reads.\n\n## The map\n\n"
        "| module | what |\n|---|---|\n| `pkg/` | the package, with `pkg/a.py` |\n\n"
        "## Elsewhere\n\n| `pkg/a.py` | a table of another section |\n"
    )
    assert map_problems(root, design, packages=("pkg",), moving={}) == [
        "pkg/a.py: not in the map of docs/design.md"
    ]


def test_a_package_on_its_way_is_checked_once_it_has_arrived(tmp_path: Path) -> None:
    moving = {"new": ("old/",)}
    design = _design("old/", "new/", "new/a.py")
    root = _tree(tmp_path, ["old/__init__.py", "old/a.py"])
    assert map_problems(root, design, packages=("old", "new"), moving=moving) == []
    (tmp_path / "old" / "a.py").unlink()
    (tmp_path / "old" / "__init__.py").unlink()
    _tree(tmp_path, ["new/__init__.py", "new/b.py"])
    assert map_problems(root, design, packages=("old", "new"), moving=moving) == [
        "new/b.py: not in the map of docs/design.md",
        "new/a.py: in the map of docs/design.md, not in the repository",
        "old/: in the map of docs/design.md, not in the repository",
    ]


# ------------------------------------------------------------------------- each rule said once

# Pages a person reads; the JSON Schemas in docs/schemas/ describe a field's shape for machines.
PAGES = sorted(
    [ROOT / "README.md", ROOT / "docs" / "asyncapi.yaml"]
    + list((ROOT / "docs").glob("*.md"))
    + [p for d in ("consumer", "common", "model", "sim") if (p := ROOT / d / "README.md").exists()]
)

# The rule, its anchor in docs/design.md, and what only its full statement writes.
RULES = {
    "the-id-rule": re.compile(r"<(?:event )?uid>/<resourceVersion>"),
    # "checkpoint", then "moves past" within the sentence (no blank line, period or cell between)
    "the-checkpoint-rule": re.compile(
        r"\bcheckpoint\b(?:(?!\n\s*\n)[^.|]){0,60}?\bmoves? past\b", re.I
    ),
}


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a page: its headings' (a repeated one gets ``-1``, ``-2``... as on
    GitHub) and its ``<a id=...>``."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(f"{base}-{n}" if n else base)
    return out | set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", markdown))


def statements(pattern: re.Pattern[str], pages: dict[str, str]) -> list[str]:
    """Where a page writes the rule out: ``page#anchor of the heading above it``."""
    found = []
    for name, text in pages.items():
        for m in pattern.finditer(text):
            above = re.findall(r"^#{1,6} (.+)$", text[: m.start()], re.M)
            found.append(f"{name}#{slug(above[-1]) if above else ''}")
    return found


def _pages() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in PAGES}


@pytest.mark.parametrize("anchor", sorted(RULES))
def test_each_rule_is_written_out_once_in_its_section_of_the_design(anchor: str) -> None:
    assert anchor in anchors(DESIGN.read_text())
    assert statements(RULES[anchor], _pages()) == [f"docs/design.md#{anchor}"]


@pytest.mark.parametrize(
    ("anchor", "text"),
    [
        # each of these was in a page before the rules were written once
        (
            "the-id-rule",
            "Every CloudEvent has a **deterministic id**, `<event uid>/<resourceVersion>`, also "
            "sent as `Nats-Msg-Id`",
        ),
        (
            "the-id-rule",
            "the test also checks that the id is `<uid>/<resourceVersion>` of the data",
        ),
        (
            "the-checkpoint-rule",
            "The\n  checkpoint moves past an event only after JetStream acked it (or the filter "
            "dropped it)",
        ),
        (
            "the-checkpoint-rule",
            "acked; the checkpoint moves past an Event only once it is stored.",
        ),
    ],
)
def test_a_rule_written_out_again_is_found(anchor: str, text: str) -> None:
    pages = {"docs/design.md": DESIGN.read_text(), "README.md": f"# Promise\n\n{text}\n"}
    assert "README.md#promise" in statements(RULES[anchor], pages)


@pytest.mark.parametrize(
    ("anchor", "text"),
    [
        ("the-id-rule", "a **deterministic id** ([the id rule](docs/design.md#the-id-rule))"),
        ("the-checkpoint-rule", "the checkpoint does not pass an Event before it is stored"),
        ("the-checkpoint-rule", "checkpoint writes never move backwards"),
    ],
)
def test_a_short_mention_with_its_link_is_not_a_restatement(anchor: str, text: str) -> None:
    assert statements(RULES[anchor], {"README.md": f"# Promise\n\n{text}\n"}) == []


# ----------------------------------------------------------------------- links to a section


def broken_section_links(pages: dict[Path, str]) -> list[str]:
    """Each ``page.md#anchor`` link (or ``#anchor`` within a page) whose anchor is no heading."""
    broken = []
    for page, text in pages.items():
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            if "://" in target:
                continue
            dest = (page.parent / target).resolve() if target else page
            if dest.suffix != ".md" or not dest.exists():
                continue  # a file that does not exist is test_docs.py's to find
            if anchor not in anchors(dest.read_text() if dest != page else text):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    return broken


def test_every_link_to_a_section_leads_to_a_heading() -> None:
    broken = broken_section_links({p: p.read_text() for p in PAGES})
    assert broken == [], "\n".join(broken)


def test_a_link_to_a_section_that_is_not_there_is_named() -> None:
    page = ROOT / "README.md"
    text = (
        "# Title\n\n[ok](docs/design.md#the-id-rule) [gone](docs/design.md#the-old-rule) "
        "[here](#title) [not here](#nothing)"
    )
    assert broken_section_links({page: text}) == [
        "README.md: docs/design.md#the-old-rule",
        "README.md: #nothing",
    ]


def test_anchors_are_made_as_github_makes_them() -> None:
    assert slug("1. No loss") == "1-no-loss"
    assert slug("The circuit breaker in front of the API server") == (
        "the-circuit-breaker-in-front-of-the-api-server"
    )
    assert slug("The bridge: `bridge/` (the wheel `k8s-event-bridge`)") == (
        "the-bridge-bridge-the-wheel-k8s-event-bridge"
    )
    assert anchors("# nats\n\n## nats\n\n## nats\n") == {"nats", "nats-1", "nats-2"}
