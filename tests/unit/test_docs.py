"""The documentation says each fact once, and only what is in the repository.

- A default is written in one place, the generated docs/configuration.md: a doc that names a
  setting together with its default value (``the duplicate window (2 h by default)``) fails,
  so that changing a default in the settings can not leave a page saying the old one.
- Everything that cites the design cites docs/design.md; nothing cites a path outside the
  repository.
- Every doc is one link away from the README, and every file docs/design.md names exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from tools import perftable

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"

# Pages a person writes by hand. The reference itself is generated; bench/results/ keeps dated
# runs as they were measured (a default of that day is part of the record).
PAGES = sorted(
    [ROOT / "README.md", ROOT / "consumer" / "README.md", ROOT / "model" / "README.md"]
    + [p for p in (ROOT / "docs").glob("*.md") if p != REFERENCE]
    + ([ROOT / "common" / "README.md"] if (ROOT / "common" / "README.md").exists() else [])
)

# A value written on purpose that happens to equal the default: (page, key) -> why.
EXEMPT = {
    ("docs/performance.md", "checkpoint.interval"): "the benchmark's config sets it explicitly",
}

# How people write a setting besides its dotted key: a generic last part (`max`, `initial`)
# needs its section's words, and a few settings have a phrase of their own.
ALIASES: dict[str, tuple[str, ...]] = {
    "kubernetes.backoff": ("backoff", "back-off", "back off", "backs off"),
    "nats.ping_interval": ("pings every",),
    "kubernetes.event_ttl": ("event ttl",),
}

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_WORDS = {
    "ms": ("ms", "milliseconds?"),
    "s": ("s", "seconds?", "sec"),
    "m": ("m", "min", "minutes?"),
    "h": ("h", "hours?"),
    "d": ("d", "days?"),
}
_SIZE = re.compile(r"^(\d+)(KiB|MiB|GiB|KB|MB|GB)$")
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_INT = re.compile(r"^-?\d+$")


def _number(value: float) -> str | None:
    """``value`` as people write it (``2``, ``0.8``), or None when it needs more digits."""
    if value == int(value):
        return str(int(value))
    text = f"{value:.1f}"
    return text if float(text) == value else None


def value_pattern(default: str) -> re.Pattern[str] | None:
    """The ways a doc writes this default, or None for a default too plain to look for (null,
    true, an empty list, a name, 0 or 1)."""
    forms: list[str] = []
    if m := _DURATION.match(default):
        seconds = int(m.group(1)) * _UNITS[m.group(2)]
        for unit, size in _UNITS.items():
            n = _number(seconds / size)
            if n is not None and (unit != "ms" or seconds < 1) and float(n) < 1000:
                forms += [rf"{re.escape(n)}\s?{word}" for word in _WORDS[unit]]
    elif m := _SIZE.match(default):
        forms.append(rf"{m.group(1)}\s?{m.group(2)}")
    elif _INT.match(default) and int(default) >= 2:
        whole = int(default)
        forms += [str(whole), f"{whole:,}"] if whole >= 1000 else [str(whole)]
    if not forms:
        return None
    return re.compile(rf"(?<![\w.,]){'(?:' + '|'.join(forms) + ')'}(?![\w]|[.,]\d)")


@dataclass(frozen=True)
class Setting:
    key: str
    default: str
    value: re.Pattern[str]
    names: tuple[re.Pattern[str], ...]


def _name_patterns(key: str) -> tuple[re.Pattern[str], ...]:
    parts = key.split(".")
    leaf, section = parts[-1], ".".join(parts[:-1])
    names = [re.escape(key)]
    if "_" in leaf:  # distinctive: `duplicate_window`, "duplicate window", "read timeout"
        names += [re.escape(leaf), re.escape(leaf).replace("_", " ")]
    else:  # generic: "checkpoint interval", `checkpoint: {..., interval: 1s}`
        names.append(rf"{re.escape(parts[-2] if len(parts) > 1 else leaf)}[ _-]{re.escape(leaf)}")
    for prefix in (key, section):
        names += [re.escape(alias) for alias in ALIASES.get(prefix, ())]
    return tuple(re.compile(rf"(?<![\w.]){n}(?!\w)", re.IGNORECASE) for n in names)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def settings(reference: str) -> list[Setting]:
    """Every setting of docs/configuration.md whose default is worth looking for."""
    found: dict[tuple[str, str], Setting] = {}
    for line in reference.splitlines():
        if not line.startswith("| `"):
            continue
        cells = _cells(line)
        key, default = cells[0].strip("`"), cells[2]
        if not (default.startswith("`") and default.endswith("`")):
            continue  # a secret (—), a required key, an enum written without backticks
        default = default.strip("`")
        value = value_pattern(default)
        if value is not None:
            found[(key, default)] = Setting(key, default, value, _name_patterns(key))
    return list(found.values())


def _yaml_restates(setting: Setting, unit: str) -> bool:
    """`section: {..., leaf: value}` on one line (a flow-style YAML example)."""
    parts = setting.key.split(".")
    if len(parts) < 2 or not re.search(rf"(?<![\w.]){re.escape(parts[-2])}:", unit):
        return False
    return bool(re.search(rf"\b{re.escape(parts[-1])}:\s*`?{setting.value.pattern}", unit))


_REACH = 80  # how far after a setting's name its value is looked for
_ASSIGNED = re.compile(r"`?\s*[:=]\s*([^,;`}]+)")
_ANOTHER_SETTING = re.compile(r"`[\w.]*[_.][\w.]*`|\b[a-z]+_[a-z_]+:")


def restates(setting: Setting, unit: str) -> bool:
    """Whether this sentence, table row or code line names ``setting`` and, right after it
    (before any other setting is named), its default."""
    if _yaml_restates(setting, unit):
        return True
    for name in setting.names:
        for m in name.finditer(unit):
            after = unit[m.end() : m.end() + _REACH]
            if assigned := _ASSIGNED.match(after):  # `key: value`: only that value counts
                after = assigned.group(1)
            for other in _ANOTHER_SETTING.finditer(after):
                named = other.group().strip("`:")
                if not (setting.key + ".").startswith(named + "."):  # not its own section
                    after = after[: other.start()]
                    break
            if setting.value.search(after):
                return True
    return False


_GENERATED = re.compile(r"<!-- perftable -->.*?<!-- /perftable -->", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z`\[*(])")


def units(markdown: str) -> list[str]:
    """The page cut where a fact ends: sentences of prose, table rows, lines of code."""
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.extend(_SENTENCE_END.split(" ".join(paragraph)))
            paragraph.clear()

    in_code = False
    for line in _GENERATED.sub("", markdown).splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            in_code = not in_code
        elif in_code or stripped.startswith("|"):
            out.append(stripped)
        elif (
            not stripped
            or stripped.startswith(("#", "- ", "* ", "<!--"))
            or stripped[:3].rstrip(". ").isdigit()
        ):
            flush()
            if stripped:
                paragraph.append(stripped)
        else:
            paragraph.append(stripped)
    flush()
    return out


def restatements(page: Path, all_settings: list[Setting]) -> list[str]:
    name = page.relative_to(ROOT).as_posix()
    found = []
    for unit in units(page.read_text()):
        for s in all_settings:
            if (name, s.key) not in EXEMPT and restates(s, unit):
                found.append(f"{name}: {s.key} = {s.default} in {unit[:160]!r}")
    return found


@pytest.fixture(scope="module")
def reference_settings() -> list[Setting]:
    return settings(REFERENCE.read_text())


def test_the_reference_gives_the_defaults_to_look_for(reference_settings: list[Setting]) -> None:
    keys = {s.key for s in reference_settings}
    for key in ("nats.duplicate_window", "kubernetes.backoff.max", "http.port", "queue.max_bytes"):
        assert key in keys
    assert "cluster.name" not in keys  # null: nothing to restate


@pytest.mark.parametrize(
    ("text", "key"),
    [
        # each of these was in a page before the defaults moved to the reference
        (
            "Anything published twice (ack timeout, reconnect, relist, restart) is dropped by "
            "the stream's duplicate window (2 h by default).",
            "nats.duplicate_window",
        ),
        (
            "Retries back off like client-go's reflector (0.8 s, x2, jitter, 30 s cap, reset "
            "after 2 min healthy) and honour `Retry-After`.",
            "kubernetes.backoff.initial",
        ),
        (
            "the warm standby takes the Lease once it has seen it unrenewed for "
            "`lease_duration` (15 s), resumes from the checkpoint",
            "leader_election.lease_duration",
        ),
        ("checkpoint: {bucket: k8s_event_bridge, interval: 1s}", "checkpoint.interval"),
        ("http:       {host: 0.0.0.0, port: 8080}", "http.port"),
        (
            "nats: {servers: [...], create_stream: true, duplicate_window: 2h}",
            "nats.duplicate_window",
        ),
        (
            "The p95 is taken over the last `latency_samples` (20) response times.",
            "kubernetes.breaker.latency_samples",
        ),
        ("a watchdog, pings every 5 s, counting the connection stale", "nats.ping_interval"),
        (
            "The breaker shares the watcher's back-off (`kubernetes.backoff`: 0.8 s doubling to "
            "30 s, jittered)",
            "kubernetes.backoff.max",
        ),
        (
            "every other key at its default (`max_inflight: 1024`, queue 4096 events)",
            "nats.max_inflight",
        ),
    ],
)
def test_a_default_written_beside_its_setting_is_found(
    text: str, key: str, reference_settings: list[Setting]
) -> None:
    assert any(s.key == key and restates(s, text) for s in reference_settings), text


@pytest.mark.parametrize(
    "text",
    [
        # a value that is not the default, a measurement, a link instead of the value
        "`nats.ack_timeout: 1s`, short back-offs, `read_timeout: 5s`",
        "the stream's [duplicate window](configuration.md#nats) drops it",
        "RSS 59.9 MB before, max 67.7 MB during, queue depth max 4096",
        "Page size (`limit`) of a list request, the 2 h of etcd history",
        "the API server's `--event-ttl` (1h by default) in the test's control plane",
    ],
)
def test_other_numbers_beside_a_setting_are_not_taken_for_its_default(
    text: str, reference_settings: list[Setting]
) -> None:
    assert [s.key for s in reference_settings if restates(s, text)] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_restates_a_default_the_reference_holds(
    page: Path, reference_settings: list[Setting]
) -> None:
    found = restatements(page, reference_settings)
    assert found == [], "link to docs/configuration.md instead of restating:\n" + "\n".join(found)


def _texts() -> list[Path]:
    skip = {".git", ".venv", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
    out = []
    for path in ROOT.rglob("*"):
        if path.suffix in {".md", ".py", ".yaml", ".yml", ".toml", ".sh", ".pml"} and not (
            skip & set(path.relative_to(ROOT).parts)
        ):
            out.append(path)
    return out


def test_the_design_is_cited_in_the_repository_and_nothing_outside_it() -> None:
    this = Path(__file__).resolve()
    bad = []
    for path in _texts():
        if path.resolve() == this:
            continue
        text = path.read_text(errors="replace")
        for pattern in (r"\bDESIGN\.md\b", r"\.\./shared\b", r"/work/shared\b"):
            if re.search(pattern, text):
                bad.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert bad == []


def _links(page: Path) -> set[Path]:
    out = set()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" not in target:
            out.add((page.parent / target).resolve())
    return out


def test_every_doc_is_one_link_from_the_readme() -> None:
    linked = _links(ROOT / "README.md")
    docs = [p for p in PAGES if p.name != "README.md" or p.parent != ROOT]
    missing = [p.relative_to(ROOT).as_posix() for p in docs if p.resolve() not in linked]
    assert missing == []


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "model" / "README.md"],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_relative_links_lead_to_files_that_exist(page: Path) -> None:
    assert [str(p) for p in _links(page) if not p.exists()] == []


def test_every_file_and_test_the_design_names_exists() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    missing = []
    for path in set(re.findall(r"`((?:bridge|common|consumer|tests|tools)/[\w/.-]+\.py)", design)):
        if not (ROOT / path).exists():
            missing.append(path)
    for path, name in re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", design):
        source = ROOT / path
        if not source.exists() or not re.search(rf"def {name}\(", source.read_text()):
            missing.append(f"{path}::{name}")
    # tests named in a list after their file: `tests/x.py` (`test_a`, `test_b`)
    for path, names in re.findall(r"`(tests/[\w/]+\.py)` \(((?:`test_\w+`,?\s*)+)\)", design):
        source = ROOT / path
        text = source.read_text() if source.exists() else ""
        for name in re.findall(r"`(test_\w+)`", names):
            if not re.search(rf"def {name}\(", text):
                missing.append(f"{path}::{name}")
    assert missing == []


# --------------------------------------------------------- the latest benchmark figures (tools)


def _bench_root(tmp_path: Path, page: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "performance.md").write_text(page)
    latest = ROOT / "bench" / "results" / "latest.json"
    (tmp_path / "bench" / "results" / "latest.json").write_bytes(latest.read_bytes())
    return tmp_path


def test_the_performance_page_shows_the_latest_run() -> None:
    assert perftable.main(["--check"]) == 0
    page = (ROOT / "docs" / "performance.md").read_text()
    latest = msgspec.json.decode((ROOT / "bench" / "results" / "latest.json").read_bytes())
    assert latest["started_at"] in page and latest["machine"]["git_commit"] in page


def test_a_stale_table_is_named_and_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _bench_root(
        tmp_path, "# Performance\n\n<!-- perftable -->\nold figures\n<!-- /perftable -->\n"
    )
    assert perftable.main(["--check", "--root", str(root)]) == 1
    assert "docs/performance.md is out of date" in capsys.readouterr().err
    assert perftable.main(["--root", str(root)]) == 0
    assert perftable.main(["--check", "--root", str(root)]) == 0
    page = (root / "docs" / "performance.md").read_text()
    assert "old figures" not in page and page.startswith("# Performance\n\n<!-- perftable -->")


def test_a_page_without_the_markers_is_refused(tmp_path: Path) -> None:
    root = _bench_root(tmp_path, "# Performance\n")
    assert perftable.main(["--check", "--root", str(root)]) == 2
