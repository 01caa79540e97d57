"""A small metrics registry that writes the Prometheus text exposition format (0.0.4).

Counters and gauges with labels, plus *collectors*: callables run at scrape time that
return samples read from elsewhere (the partition logs' ``stats()``). No dependency on
``prometheus_client``: the service needs a dozen series and the format is simple.

Thread-safety: every metric guards its samples with a lock, so ``inc``/``set`` may be
called from any thread or task; :meth:`Registry.render` may run in a worker thread.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1 << 53:
        return str(int(v))
    return repr(v)


def _fmt_labels(names: tuple[str, ...], values: LabelValues) -> str:
    if not names:
        return ""
    inner = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + inner + "}"


@dataclass(frozen=True, slots=True)
class Family:
    """Samples of one metric as a collector returns them."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    labelnames: tuple[str, ...]
    samples: tuple[tuple[LabelValues, float], ...]


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help: str, labelnames: Iterable[str] = ()) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._values: dict[LabelValues, float] = {}
        self._lock = threading.Lock()

    def _key(self, labels: Iterable[str]) -> LabelValues:
        key = tuple(str(v) for v in labels)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {key}")
        return key

    def get(self, *labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def remove_matching(self, index: int, value: str) -> None:
        """Drop every series whose label ``index`` equals ``value`` (a deleted topic)."""
        with self._lock:
            for k in [k for k in self._values if k[index] == value]:
                del self._values[k]

    def family(self) -> Family:
        with self._lock:
            samples = tuple(sorted(self._values.items()))
        return Family(self.name, self.kind, self.help, self.labelnames, samples)


class Counter(_Metric):
    """A monotonically increasing value per label set."""

    kind = "counter"

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Metric):
    """A value that goes up and down, per label set."""

    kind = "gauge"

    def set(self, *labels: str, value: float) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = value


class Registry:
    """Metrics and scrape-time collectors, rendered together by :meth:`render`."""

    def __init__(self) -> None:
        self._metrics: list[_Metric] = []
        self._collectors: list[Callable[[], Iterable[Family]]] = []
        self._lock = threading.Lock()

    def counter(self, name: str, help: str, labelnames: Iterable[str] = ()) -> Counter:
        c = Counter(name, help, labelnames)
        with self._lock:
            self._metrics.append(c)
        return c

    def gauge(self, name: str, help: str, labelnames: Iterable[str] = ()) -> Gauge:
        g = Gauge(name, help, labelnames)
        with self._lock:
            self._metrics.append(g)
        return g

    def add_collector(self, collect: Callable[[], Iterable[Family]]) -> None:
        with self._lock:
            self._collectors.append(collect)

    def remove_label_value(self, label: str, value: str) -> None:
        """Drop the series of every metric whose label ``label`` is ``value`` (metrics
        without that label keep theirs, whatever their labels hold)."""
        with self._lock:
            metrics = list(self._metrics)
        for m in metrics:
            if label in m.labelnames:
                m.remove_matching(m.labelnames.index(label), value)

    def render(self, *, only: tuple[str, Callable[[str], bool]] | None = None) -> str:
        """Every metric in the Prometheus text format (may block in collectors).

        ``only=(label, keep)``: of the families that have ``label``, only the samples
        whose value of it passes ``keep`` (the service keeps a caller to the topics it
        may see); families without that label are rendered whole.
        """
        with self._lock:
            families = [m.family() for m in self._metrics]
            collectors = list(self._collectors)
        for collect in collectors:
            families.extend(collect())
        lines: list[str] = []
        for f in families:
            samples = f.samples
            if only is not None and only[0] in f.labelnames:
                at, keep = f.labelnames.index(only[0]), only[1]
                samples = tuple(s for s in samples if keep(s[0][at]))
            lines.append(f"# HELP {f.name} {_escape(f.help)}")
            lines.append(f"# TYPE {f.name} {f.kind}")
            for labels, value in samples:
                lines.append(f"{f.name}{_fmt_labels(f.labelnames, labels)} {_fmt_value(value)}")
        return "\n".join(lines) + "\n"


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

__all__ = ["CONTENT_TYPE", "Counter", "Family", "Gauge", "Registry"]
