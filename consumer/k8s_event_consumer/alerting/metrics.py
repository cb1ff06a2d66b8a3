"""The subscriber's counters and gauges, in Prometheus' text format (prefix
``k8s_event_alerting_``), kept by hand: a few families, no client library needed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

PREFIX = "k8s_event_alerting_"
Labels = tuple[tuple[str, str], ...]


@dataclass
class _Family:
    name: str
    kind: str  # counter or gauge
    help: str
    values: dict[Labels, float] = field(default_factory=dict)


class Metrics:
    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._gauges: dict[str, Callable[[], Mapping[Labels, float]]] = {}
        for name, help_ in (
            ("events_total", "Kubernetes Events read, by result: alerted or ignored"),
            ("status_events_total", "status events of the bridge read, by what"),
            ("sends_total", "alert sends per Alertmanager, by result: ok, unavailable, rejected"),
            ("held_total", "messages held (nak'd) because no Alertmanager took their alerts"),
            ("resends_total", "rounds of the resend loop, by result: ok or failed"),
            ("replayed_total", "messages of the stream read back into the state at start"),
            ("adopted_total", "alerts taken back from Alertmanager at start"),
        ):
            self._families[name] = _Family(name, "counter", help_)

    def inc(self, name: str, n: float = 1.0, **labels: str) -> None:
        values = self._families[name].values
        key = tuple(sorted(labels.items()))
        values[key] = values.get(key, 0.0) + n

    def value(self, name: str, **labels: str) -> float:
        return self._families[name].values.get(tuple(sorted(labels.items())), 0.0)

    def gauge(self, name: str, help_: str, read: Callable[[], Mapping[Labels, float]]) -> None:
        """A gauge read when scraped."""
        self._families[name] = _Family(name, "gauge", help_)
        self._gauges[name] = read

    def render(self) -> str:
        lines: list[str] = []
        for fam in self._families.values():
            full = PREFIX + fam.name
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
