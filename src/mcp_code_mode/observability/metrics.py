"""A small metrics registry of our own, rendered in the Prometheus text exposition format 0.0.4.

Counters and histograms are fed by the engine after each run (``RunMetrics.run_ended``); gauges are read at
scrape time from callbacks (pool sizes, admission load, sessions). Every label value comes from a bounded
set the host defines: runner names, the servers file's server and tool names, decisions, error types the
host names. Nothing a script says becomes a label (an error type a sandbox reported is counted as
``ScriptError``), so a script cannot grow the registry.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

Labels = tuple[str, ...]

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Seconds: the run duration histogram's upper bounds (``+Inf`` is added)."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


@dataclass
class Counter:
    name: str
    help: str
    labels: tuple[str, ...] = ()
    values: dict[Labels, float] = field(default_factory=dict[Labels, float])

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for key, value in sorted(self.values.items()):
            yield f"{self.name}{_labels(self.labels, key)} {_number(value)}"


@dataclass
class Histogram:
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = DURATION_BUCKETS
    counts: dict[Labels, list[int]] = field(default_factory=dict[Labels, list[int]])
    sums: dict[Labels, float] = field(default_factory=dict[Labels, float])

    def observe(self, value: float, *labels: str) -> None:
        counts = self.counts.setdefault(labels, [0] * (len(self.buckets) + 1))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
        counts[-1] += 1  # +Inf: every observation
        self.sums[labels] = self.sums.get(labels, 0.0) + value

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for key, counts in sorted(self.counts.items()):
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                le = 'le="' + _number(bound) + '"'
                yield f"{self.name}_bucket{_labels(self.labels, key, le)} {count}"
            yield f"{self.name}_sum{_labels(self.labels, key)} {_number(self.sums[key])}"
            yield f"{self.name}_count{_labels(self.labels, key)} {counts[-1]}"


@dataclass
class Gauge:
    """Read at scrape time: ``read`` returns ``(label values, value)`` pairs."""

    name: str
    help: str
    read: Callable[[], Iterable[tuple[Labels, float]]]
    labels: tuple[str, ...] = ()

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        for key, value in sorted(self.read()):
            yield f"{self.name}{_labels(self.labels, key)} {_number(value)}"


Metric = Counter | Histogram | Gauge
M = TypeVar("M", Counter, Histogram, Gauge)


class Registry:
    """Metrics by name; ``render`` is the body of ``GET /metrics``. Updates and renders hold one lock (the
    engine updates from the event loop, a scrape may render from a thread)."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self.lock = threading.Lock()

    def add(self, metric: M) -> M:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name!r} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def render(self) -> str:
        with self.lock:
            lines = [line for metric in self._metrics.values() for line in metric.render()]
        return "\n".join(lines) + "\n"


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "Counter", "Gauge", "Histogram", "Registry"]
