"""Helpers shared by the benchmarks and the command line: a progress line, timing, units,
and taking turns with a baseline (:func:`alternate`, :func:`per_round`, :func:`figures`).

:class:`Progress` prints a carriage-return status line on stderr for long jobs (appending
a file, running a benchmark) and stays silent when stderr is not a terminal, unless it is
forced on; it never writes to stdout, so it does not disturb ``--json`` output.

Not thread-safe: one Progress is advanced by one thread.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TextIO

MB = 1_000_000
"""Benchmarks report MB/s in decimal megabytes (10**6 bytes)."""

DEFAULT_RECORDS = 200_000
"""Records per run of the local benchmarks by default (1 KiB each: about 200 MB)."""
DEFAULT_BATCH = 1000
"""Records per batch (append) and per page (read)."""
DEFAULT_REPEAT = 3
"""Runs per system; the best one counts."""
DEFAULT_LATENCY_ROUNDS = 5
"""Rounds of ``perf produce-latency`` (each runs its three phases once)."""


class Progress:
    """A ``label: done/total unit (pct%) rate/s`` line on stderr, redrawn in place.

    Redraws at most every ``interval`` seconds (default 0.2 s, i.e. about 5 times a
    second), so calling :meth:`advance` once per batch costs next to nothing. ``total``
    may be None when the amount of work is not known in advance (e.g. lines on stdin).

    ``enabled=None`` (the default) prints only when ``stream`` is a terminal; True forces
    the line on (``--progress``), False turns it off. Use as a context manager or call
    :meth:`close`, which ends the line with a newline if anything was drawn.

    Not thread-safe: advance it from one thread.
    """

    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        unit: str = "records",
        enabled: bool | None = None,
        stream: TextIO | None = None,
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.label = label
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self._stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self._interval = interval
        self._clock = clock
        self._start = clock()
        self._next_draw = self._start + interval
        self._drawn = False
        self._width = 0

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units done; redraw if the last redraw is old enough."""
        self.done += n
        if self.enabled and self._clock() >= self._next_draw:
            self._draw()

    def update(self, done: int) -> None:
        """Set the units done so far (absolute), redrawing if due."""
        self.done = done
        if self.enabled and self._clock() >= self._next_draw:
            self._draw()

    def set_label(self, label: str) -> None:
        """Change the label (e.g. the phase of a benchmark); shown at the next redraw."""
        self.label = label

    def line(self) -> str:
        """The status text as it would be drawn now (without the carriage return)."""
        elapsed = max(self._clock() - self._start, 1e-9)
        rate = self.done / elapsed
        if self.total:
            pct = 100.0 * self.done / self.total
            return (
                f"{self.label}: {self.done:,}/{self.total:,} {self.unit} ({pct:.0f}%) {rate:,.0f}/s"
            )
        return f"{self.label}: {self.done:,} {self.unit} {rate:,.0f}/s"

    def _draw(self) -> None:
        text = self.line()
        pad = max(0, self._width - len(text))
        self._width = len(text)
        try:
            self._stream.write("\r" + text + " " * pad)
            self._stream.flush()
        except (OSError, ValueError):
            self.enabled = False  # stderr went away; keep working silently
            return
        self._drawn = True
        self._next_draw = self._clock() + self._interval

    def close(self) -> None:
        """Draw the final state and end the line (only if something was drawn before)."""
        if self.enabled and self._drawn:
            self._draw()
            try:
                self._stream.write("\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def say(message: str, *, enabled: bool = True) -> None:
    """One status line on stderr (``[perf] message``); a no-op when not ``enabled``."""
    if enabled:
        print(f"[perf] {message}", file=sys.stderr, flush=True)


def rate(amount: float, seconds: float) -> float:
    """``amount`` per second, guarding against a zero duration."""
    return amount / max(seconds, 1e-9)


def ratio(ours: float, baseline: float) -> float:
    """``ours / baseline`` (0.0 if the baseline is 0, which a finished run never gives)."""
    return ours / baseline if baseline > 0 else 0.0


def alternate(
    rounds: int, jobs: dict[str, Callable[[int], float]], show: bool, label: str
) -> dict[str, list[float]]:
    """Run ``jobs`` (name -> round -> MB/s) ``rounds`` times, their order reversed every
    other round (so neither side always goes first on a warmer or busier machine);
    every figure by name. Each figure is said on stderr as ``label: round i/n name``."""
    runs: dict[str, list[float]] = {k: [] for k in jobs}
    for i in range(rounds):
        for name in list(jobs) if i % 2 == 0 else list(reversed(jobs)):
            runs[name].append(jobs[name](i))
            say(
                f"{label}: round {i + 1}/{rounds} {name}: {runs[name][-1]:,.1f} MB/s",
                enabled=show,
            )
    return runs


def per_round(runs: dict[str, list[float]], ours: str, base: str) -> list[float]:
    """Each round's ratio of rates ``ours / base`` (rounded; 0.0 for a zero baseline)."""
    return [round(a / b, 3) if b > 0 else 0.0 for a, b in zip(runs[ours], runs[base], strict=True)]


def figures(runs: Sequence[float]) -> dict[str, Any]:
    """A side's MB/s over the rounds: the best, the median and every run's."""
    return {
        "mb_per_s": round(max(runs), 1),
        "median_mb_per_s": round(statistics.median(runs), 1),
        "runs_mb_per_s": [round(x, 1) for x in runs],
    }


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system, every thread) used so far by process ``pid`` (from
    ``/proc``, in clock ticks), or by this process when None (to the nanosecond)."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def environment() -> dict[str, Any]:
    """Where a benchmark ran, for its JSON report."""
    import platform
    import sqlite3

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
    }


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file (or directory) by path, opening it read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_RECORDS",
    "DEFAULT_REPEAT",
    "MB",
    "Progress",
    "alternate",
    "environment",
    "figures",
    "fsync_path",
    "per_round",
    "rate",
    "ratio",
    "say",
]
