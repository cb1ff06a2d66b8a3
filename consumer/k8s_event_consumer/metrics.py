"""A subscriber's counters and gauges, in Prometheus' text format (each subscriber its own
prefix: ``k8s_event_alerting_``, ``k8s_event_remediation_``), kept by hand: a few families,
no client library needed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]


@dataclass
class _Family:
    name: str
    kind: str  # counter or gauge
    help: str
    values: dict[Labels, float] = field(default_factory=dict)


class Metrics:
    """``counters``: (name, help) of each counter family; gauges are added with ``gauge``.
    ``unlabelled``: the counters without labels, exported from 0 on, so that ``increase()``
    sees their first step (a series born at 1 has no earlier sample: an alert on it would
    miss the first time, deploy/monitoring/)."""

    def __init__(
        self,
        prefix: str,
        counters: Iterable[tuple[str, str]],
        unlabelled: Iterable[str] = (),
    ) -> None:
        self.prefix = prefix
        self._families: dict[str, _Family] = {}
        self._gauges: dict[str, Callable[[], Mapping[Labels, float]]] = {}
        for name, help_ in counters:
            self._families[name] = _Family(name, "counter", help_)
        for name in unlabelled:
            self._families[name].values[()] = 0.0

    def inc(self, name: str, n: float = 1.0, **labels: str) -> None:
        values = self._families[name].values
        key = tuple(sorted(labels.items()))
        values[key] = values.get(key, 0.0) + n

    def value(self, name: str, **labels: str) -> float:
        return self._families[name].values.get(tuple(sorted(labels.items())), 0.0)

    def gauge(
        self,
        name: str,
        help_: str,
        read: Callable[[], Mapping[Labels, float]],
        kind: str = "gauge",
    ) -> None:
        """A gauge read when scraped (or, ``kind="counter"``, a counter kept elsewhere)."""
        self._families[name] = _Family(name, kind, help_)
        self._gauges[name] = read

    def render(self) -> str:
        lines: list[str] = []
        for fam in self._families.values():
            full = self.prefix + fam.name
            lines.append(f"# HELP {full} {fam.help}")
            lines.append(f"# TYPE {full} {fam.kind}")
            values = self._gauges[fam.name]() if fam.name in self._gauges else fam.values
            for labels, v in sorted(values.items()):
                lines.append(f"{full}{_labels(labels)} {float(v):g}")
        return "\n".join(lines) + "\n"


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
