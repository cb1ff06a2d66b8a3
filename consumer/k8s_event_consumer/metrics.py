"""A subscriber's metrics, on prometheus_client as the bridge's are
(``k8s_event_common.metrics``): a registry of its own with the process' standard series, every
name ``k8s_event_<program>_<what>``, counters ending in ``_total``, labels from fixed sets
(docs/monitoring.md: the convention, and every series of the four programs).

A program declares its counters up front (``Counter``: the labels and the values known in
advance, each exported from 0 so that ``increase()`` sees its first step: a series born at 1
has no earlier sample, and an alert on it would miss the first time) and bumps them by name
(``inc``); a value kept elsewhere is read when scraped (``read``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from k8s_event_common import metrics as common

Labels = tuple[str, ...]  # label values, in the order of the family's label names


@dataclass(frozen=True)
class Counter:
    """A counter family: its name (``..._total``), help, label names, and the label values
    known in advance (exported from 0 on)."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    known: tuple[Labels, ...] = ()

    @classmethod
    def by(cls, name: str, help: str, label: str, values: Iterable[str]) -> Counter:
        """A counter of one label whose every value is known."""
        return cls(name, help, (label,), tuple((v,) for v in values))


class _Read(Collector):
    """A family read when scraped: ``read`` answers {label values: value}."""

    def __init__(
        self,
        name: str,
        help: str,
        labels: tuple[str, ...],
        read: Callable[[], Mapping[Labels, float]],
        kind: str,
    ) -> None:
        self.name, self.help, self.labels, self._read, self.kind = name, help, labels, read, kind

    def _family(self) -> CounterMetricFamily | GaugeMetricFamily:
        cls = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        return cls(self.name, self.help, labels=list(self.labels))

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, v in sorted(self._read().items()):
            family.add_metric(list(values), float(v))
        yield family

    def describe(self) -> Iterator[Metric]:
        yield self._family()


class Metrics:
    """One program's metrics: ``prefix`` (``k8s_event_alerting_``) and its counters."""

    def __init__(self, prefix: str, counters: Iterable[Counter] = ()) -> None:
        self.prefix = prefix
        self.registry = common.registry()
        self._counters: dict[str, prometheus_client.Counter] = {}
        for c in counters:
            self.counter(c)

    def counter(self, c: Counter) -> None:
        family = prometheus_client.Counter(
            self.prefix + c.name, c.help, list(c.labels), registry=self.registry
        )
        for values in c.known:
            family.labels(*values)
        self._counters[c.name] = family

    def inc(self, name: str, n: float = 1.0, **labels: str) -> None:
        family = self._counters[name]
        (family.labels(**labels) if labels else family).inc(n)

    def value(self, name: str, **labels: str) -> float:
        """A counter's value now (0 for a series not yet born)."""
        return self.registry.get_sample_value(self.prefix + name, labels) or 0.0

    def read(
        self,
        name: str,
        help: str,
        read: Callable[[], Mapping[Labels, float]],
        *,
        labels: tuple[str, ...] = (),
        kind: str = "gauge",
    ) -> None:
        """A family whose values are kept elsewhere, read when scraped (``kind="counter"``:
        a counter kept elsewhere)."""
        self.registry.register(_Read(self.prefix + name, help, labels, read, kind))

    def gauge(self, name: str, help: str, read: Callable[[], float]) -> None:
        """A gauge without labels, read when scraped."""
        self.read(name, help, lambda: {(): read()})

    def render(self) -> bytes:
        return common.render(self.registry)
