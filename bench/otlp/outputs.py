"""What each path's collector wrote so far, read as the files grow: the run's conditions ("the
output carries a version written after the fault") look here. The final count reads the files
whole (``matching``, tests/standins/otelcol.py's ``parse``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.otlp import matching
from bench.otlp.load import Version
from tests.standins.otelcol import Record, parse


@dataclass
class Tail:
    """What the files of a path hold so far, read incrementally: the keys (``key`` of each
    record) seen in each file. Only whole lines are read; a torn one is skipped here (the final
    count reads the files whole, tests/standins/otelcol.py's ``parse``)."""

    files: Callable[[], list[Path]]
    key: Callable[[Record], str | None]
    offsets: dict[Path, int] = field(default_factory=dict)
    seen: dict[Path, set[str]] = field(default_factory=dict)

    def poll(self) -> None:
        for path in self.files():
            at = self.offsets.get(path, 0)
            try:
                with path.open("rb") as f:
                    f.seek(at)
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = at + end + 1
            keys = self.seen.setdefault(path, set())
            for record in parse(data[: end + 1].decode("utf-8", errors="replace")).records:
                k = self.key(record)
                if k is not None:
                    keys.add(k)

    def has(self, key: str, path: Path | None = None) -> bool:
        if path is not None:
            return key in self.seen.get(path, set())
        return any(key in keys for keys in self.seen.values())


def receiver_key(r: Record) -> str | None:
    uid = r["attributes"].get(matching.UID)
    return None if uid is None else f"{uid}#{r['attributes'].get(matching.COUNT) or 0}"


def bridge_key(r: Record) -> str | None:
    got = r["attributes"].get(matching.EVENT_ID)
    return None if got is None else str(got)


def key_a(v: Version) -> str:
    return f"{v.uid}#{v.count}"
