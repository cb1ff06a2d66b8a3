"""What every program's Prometheus metrics are made of (prometheus_client), in one copy.

    r = registry()  # process_* and python_info, as every Python exporter has them
    failures = labelled_counter(r, "x_failures", "Failures, by reason", "reason", ("a", "b"))
    refused = nats_refused(r, "x_nats_refused", read=connecting.refusals)
    body = render(r)  # what /metrics answers (k8s_event_common.http.METRICS)

Each program names its metrics with its own prefix and follows Prometheus' conventions:
counters end in ``_total``, a quantity with a unit says it (``_seconds``, ``_bytes``), labels
take a bounded set of values. A counter's known label values are exported from 0 on
(``labelled_counter``): ``increase()`` over a series born at 1 has no earlier sample and misses
its first step, so an alert on the first failure would never fire (docs/monitoring.md).

``HotCounter`` and ``HotHistogram`` are for what is counted once or more per event on a hot
path: a plain int or list bumped without prometheus_client's lock (one event loop), rendered as
prometheus_client's own would be. ``ReadCounter`` is a labelled counter kept elsewhere, read
when scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import (
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "NATS_REFUSALS",
    "NATS_REFUSED_HELP",
    "HotCounter",
    "HotHistogram",
    "ReadCounter",
    "labelled_counter",
    "nats_refused",
    "registry",
    "render",
]

# why a NATS connection was refused before CONNECT (k8s_event_common.connecting.refusals)
NATS_REFUSALS = ("tls", "redirect")
NATS_REFUSED_HELP = (
    "NATS connections refused before CONNECT (nothing of the credentials sent): "
    "tls (TLS wanted, the socket has none), redirect (the WebSocket upgrade redirected)"
)


def registry(process_collectors: bool = True) -> CollectorRegistry:
    """A registry of a program's own; with ``process_collectors``, ``process_*`` (memory, CPU,
    open fds, start time: restarts show as its changes) and ``python_info`` in it."""
    r = CollectorRegistry(auto_describe=True)
    if process_collectors:
        ProcessCollector(registry=r)
        r.register(PLATFORM_COLLECTOR)
    return r


def render(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format (0.0.4)."""
    return generate_latest(registry)


def labelled_counter(
    registry: CollectorRegistry, name: str, documentation: str, label: str, values: Iterable[str]
) -> Counter:
    """A counter with one label, each of its known ``values`` exported from 0 on (in their
    order), so that ``increase()`` sees a series' first step."""
    counter = Counter(name, documentation, [label], registry=registry)
    for value in values:
        counter.labels(value)
    return counter


def nats_refused(
    registry: CollectorRegistry,
    name: str,
    read: Callable[[], Mapping[str, int]] = dict,
) -> ReadCounter:
    """``<name>_total{reason}``: the NATS connections this process refused before CONNECT, by
    reason (``NATS_REFUSALS``), read when scraped from ``read``, which a program sets to
    ``k8s_event_common.connecting.refusals`` (here or on the ``read`` attribute later): this
    module does not import the NATS client, so that a program's metrics need none."""
    counter = ReadCounter(name, NATS_REFUSED_HELP, "reason", NATS_REFUSALS, registry)
    counter.read = read
    return counter


class HotCounter(Collector):
    """A counter bumped once or more per event: a plain int, no lock (one event loop)."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.value = 0
        registry.register(self)

    def inc(self, amount: int = 1) -> None:
        self.value += amount

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.value)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation)


class ReadCounter(Collector):
    """A labelled counter kept elsewhere (``read`` returns its values by label), read when
    scraped; each of ``values`` is exported, from 0 on."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label: str,
        values: tuple[str, ...],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.values = values
        self.read: Callable[[], Mapping[str, int]] = dict
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        counts = self.read()
        for value in self.values:
            family.add_metric([value], counts.get(value, 0))
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=[self.label])


class HotHistogram(Collector):
    """A histogram observed once per event: bucket counts in a list, no lock."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: tuple[float, ...],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above every bound
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def collect(self) -> Iterator[Metric]:
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=buckets, sum_value=self.sum
        )

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)
