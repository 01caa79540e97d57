"""Benchmarks of the local log, each measured against its baselines in the same run.

``perf append`` (:func:`run_append`) times appending ``N`` records in batches of 1,000:

- **tiered_log**: ``Log.append_batch`` per batch (one ``os.write`` per batch, no fsync),
  then one ``Log.flush`` (fsync) at the end;
- **plain_file**: the same values written with ``f.write`` to a buffered ``open(..., "wb")``
  file, ``f.flush()`` after each batch (the same durability: in the OS, not fsynced),
  then one ``os.fsync`` at the end;
- **sqlite_wal**: SQLite in WAL mode (``journal_mode=WAL``, ``synchronous=NORMAL``), table
  ``(offset INTEGER PRIMARY KEY, ts, key, value, headers)``, one ``executemany`` plus
  ``commit`` per batch, then one fsync of the WAL and database files at the end.

``perf read`` (:func:`run_read`) times reading every record from offset 0 in order:

- **tiered_log**: ``Log.read_range(offset, 1000, ...)`` page after page (checksums verified);
- **sqlite_wal**: ``SELECT ... WHERE offset >= ? ORDER BY offset LIMIT 1000`` page after page;
- **plain_file**: a buffered ``f.read(record_bytes)`` per record (the best case of a
  framing-free file of fixed-size values; for reference only).

Reads run with the files in the page cache for all three (the data was just written).
All three read on this process's one thread, so ``perf read`` also reports each one's CPU
time (``cpu_seconds``, the least over the runs) and ours against each (``cpu_ratios``,
baseline CPU / ours): on a machine other work keeps busy, wall times follow the
scheduler, CPU times the code.

Workloads: 1 KiB values (the main one: the targets apply to it) and 100-byte values
(reported as records/s). Generating the values, the batches and SQLite's row tuples
happens before the clock starts; opening and closing happen outside it too. Each system
runs ``repeat`` times and the best (shortest) run counts. Throughput counts the bytes of
record values (``MB`` = 10**6 bytes), the same for every system.

The result is one JSON-able dict: per workload and system ``seconds``, ``mb_per_s``,
``records_per_s`` and every run's seconds; the ratios ours/baseline; and ``targets``, each
with its minimum, the measured ratio and ``met``. Not thread-safe: run one at a time.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import TieredLogError
from ..local.log import Log, LogConfig
from .common import (
    DEFAULT_BATCH,
    DEFAULT_RECORDS,
    DEFAULT_REPEAT,
    MB,
    Progress,
    environment,
    fsync_path,
    rate,
    ratio,
    say,
)

OURS = "tiered_log"
PLAIN = "plain_file"
SQLITE = "sqlite_wal"

APPEND_TARGETS: dict[str, tuple[str, float]] = {
    "append_vs_plain_file": (PLAIN, 1.5),
    "append_vs_sqlite_wal": (SQLITE, 3.0),
}
"""Target name -> (baseline, minimum ratio ours/baseline) on the main workload."""
READ_TARGETS: dict[str, tuple[str, float]] = {
    # Kafka's batches: a varint walk per record where the former columnar format decoded
    # in a few C calls; the format's target is parity with SQLite.
    "read_vs_sqlite_wal": (SQLITE, 1.0),
}
MAIN_WORKLOAD = "1KiB"

_SQLITE_SCHEMA = (
    "CREATE TABLE records (offset INTEGER PRIMARY KEY, ts INTEGER, key BLOB, value BLOB, "
    "headers BLOB)"
)
_SQLITE_INSERT = "INSERT INTO records VALUES (?, ?, ?, ?, ?)"
_SQLITE_PAGE = (
    "SELECT offset, ts, key, value, headers FROM records WHERE offset >= ? "
    "ORDER BY offset LIMIT 1000"
)


@dataclass(frozen=True, slots=True)
class Workload:
    """``records`` values of ``record_bytes`` bytes each, appended ``batch`` at a time."""

    name: str
    record_bytes: int
    records: int
    batch: int

    @property
    def payload_bytes(self) -> int:
        return self.record_bytes * self.records


def workloads(records: int, small_records: int | None, batch: int) -> list[Workload]:
    """The standard workloads: 1 KiB values (main) and 100-byte values."""
    return [
        Workload(MAIN_WORKLOAD, 1024, records, batch),
        Workload("100B", 100, records if small_records is None else small_records, batch),
    ]


def make_batches(w: Workload, *, seed: int = 7) -> list[list[bytes]]:
    """The workload's values, grouped in batches (built before any clock starts).

    Values come from a pool of 1,024 distinct random byte strings, so memory stays small
    however many records there are; nothing here compresses, so repeats do not help anyone.
    """
    rnd = random.Random(seed)
    pool = [rnd.randbytes(w.record_bytes) for _ in range(1024)]
    out: list[list[bytes]] = []
    i = 0
    left = w.records
    while left > 0:
        n = min(w.batch, left)
        out.append([pool[(i + j) & 1023] for j in range(n)])
        i += n
        left -= n
    return out


def sqlite_rows(
    batches: Sequence[Sequence[bytes]], ts: int
) -> list[list[tuple[int, int, None, bytes, None]]]:
    """SQLite's row tuples ``(offset, ts, key, value, headers)`` for the same values."""
    out = []
    off = 0
    for b in batches:
        rows = []
        for v in b:
            rows.append((off, ts, None, v, None))
            off += 1
        out.append(rows)
    return out


# ---- the systems under test ------------------------------------------------------------
#
# Appenders return ``(seconds, fsync_seconds)``: the whole timed part and, of it, the final
# fsync. Readers return ``(seconds, records read)``.


def append_tiered_log(
    directory: Path, batches: Sequence[Sequence[bytes]], progress: Progress
) -> tuple[float, float]:
    """Append every batch with ``Log.append_batch``, then one ``flush`` (fsync).

    Segments sealed on the way are fsynced when they roll, inside the timed part.
    ``flush_messages=None``: no fsync per append (LogConfig's default is an fsync per
    append), the durability of the baselines, which fsync once at the end too.
    """
    log = Log.open(directory, LogConfig(flush_messages=None))
    try:
        append = log.append_batch
        adv = progress.advance
        t0 = time.perf_counter()
        for b in batches:
            append(b)
            adv(len(b))
        t1 = time.perf_counter()
        log.flush()
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1
    finally:
        log.close()


def append_plain_file(
    path: Path, batches: Sequence[Sequence[bytes]], progress: Progress
) -> tuple[float, float]:
    """``f.write`` every value, ``f.flush()`` after each batch, one fsync at the end."""
    with open(path, "wb") as f:
        write = f.write
        adv = progress.advance
        t0 = time.perf_counter()
        for b in batches:
            for v in b:
                write(v)
            f.flush()
            adv(len(b))
        t1 = time.perf_counter()
        os.fsync(f.fileno())
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level="DEFERRED")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def append_sqlite(
    path: Path, rows: Sequence[Sequence[tuple[Any, ...]]], progress: Progress
) -> tuple[float, float]:
    """One ``executemany`` + ``commit`` per batch (WAL, synchronous=NORMAL), fsync at the end."""
    conn = _sqlite_connect(path)
    try:
        conn.execute(_SQLITE_SCHEMA)
        conn.commit()
        ex = conn.executemany
        commit = conn.commit
        adv = progress.advance
        t0 = time.perf_counter()
        for r in rows:
            ex(_SQLITE_INSERT, r)
            commit()
            adv(len(r))
        # synchronous=NORMAL does not fsync the WAL on commit: do it once, as for the others.
        t1 = time.perf_counter()
        wal = Path(str(path) + "-wal")
        if wal.exists():
            fsync_path(wal)
        fsync_path(path)
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1
    finally:
        conn.close()


def read_tiered_log(directory: Path, progress: Progress) -> tuple[float, int]:
    """Read every record from the start, 1000 per ``read_range``; (seconds, records)."""
    log = Log.open(directory, LogConfig())
    try:
        off = log.log_start_offset
        end = log.next_offset
        n = 0
        read_range = log.read_range
        adv = progress.advance
        t0 = time.perf_counter()
        while off < end:
            recs = read_range(off, 1000, 64 << 20)
            n += len(recs)
            off = recs[-1].offset + 1
            adv(len(recs))
        return time.perf_counter() - t0, n
    finally:
        log.close()


def read_sqlite(path: Path, progress: Progress) -> tuple[float, int]:
    """Read every row in offset order, 1000 per query; (seconds, rows)."""
    conn = _sqlite_connect(path)
    try:
        ex = conn.execute
        adv = progress.advance
        off = 0
        n = 0
        t0 = time.perf_counter()
        while True:
            rows = ex(_SQLITE_PAGE, (off,)).fetchall()
            if not rows:
                break
            n += len(rows)
            off = rows[-1][0] + 1
            adv(len(rows))
        return time.perf_counter() - t0, n
    finally:
        conn.close()


def read_plain_file(path: Path, record_bytes: int, progress: Progress) -> tuple[float, int]:
    """Read the file one fixed-size value at a time (buffered); (seconds, records)."""
    n = 0
    with open(path, "rb") as f:
        read = f.read
        adv = progress.advance
        t0 = time.perf_counter()
        while True:
            k = 0
            while k < 1000:
                v = read(record_bytes)
                if len(v) < record_bytes:
                    break
                k += 1
            n += k
            adv(k)
            if k < 1000:
                break
        return time.perf_counter() - t0, n


# ---- driving ------------------------------------------------------------------------


@contextmanager
def work_dir(directory: str | os.PathLike[str] | None, *, keep: bool = False) -> Iterator[Path]:
    """A fresh directory for one benchmark: under ``directory`` (or the system temp dir);
    removed afterwards unless ``keep``."""
    if directory is not None:
        Path(directory).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tiered-log-perf-", dir=directory))
    try:
        yield root
    finally:
        if keep:
            say(f"kept the benchmark files in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        for p in (path, Path(str(path) + "-wal"), Path(str(path) + "-shm")):
            p.unlink(missing_ok=True)


def _figures(w: Workload, runs: list[float], fsyncs: list[float] | None = None) -> dict[str, Any]:
    """Figures of the best (shortest) run; ``fsyncs[i]`` is the final fsync's part of run i."""
    i = min(range(len(runs)), key=runs.__getitem__)
    best = runs[i]
    out: dict[str, Any] = {
        "seconds": round(best, 6),
        "mb_per_s": round(rate(w.payload_bytes / MB, best), 3),
        "records_per_s": round(rate(w.records, best), 1),
    }
    if fsyncs is not None:
        out["fsync_seconds"] = round(fsyncs[i], 6)
    out["runs_seconds"] = [round(r, 6) for r in runs]
    return out


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    ours = results[OURS]["records_per_s"]
    return {
        f"vs_{name}": round(ratio(ours, r["records_per_s"]), 3)
        for name, r in results.items()
        if name != OURS
    }


def _targets(
    per_workload: dict[str, dict[str, Any]], spec: dict[str, tuple[str, float]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    main = per_workload[MAIN_WORKLOAD]
    for name, (baseline, minimum) in spec.items():
        r = main["ratios"][f"vs_{baseline}"]
        out[name] = {
            "workload": MAIN_WORKLOAD,
            "baseline": baseline,
            "min_ratio": minimum,
            "ratio": r,
            "met": bool(r >= minimum),
        }
    return out


def _report(
    kind: str,
    per_workload: dict[str, dict[str, Any]],
    spec: dict[str, tuple[str, float]],
    repeat: int,
    batch: int,
    note: str,
) -> dict[str, Any]:
    targets = _targets(per_workload, spec)
    return {
        "benchmark": kind,
        "note": note,
        "environment": environment(),
        "params": {"repeat": repeat, "batch": batch},
        "workloads": per_workload,
        "ratios": {name: t["ratio"] for name, t in targets.items()},
        "targets": targets,
        "met": all(t["met"] for t in targets.values()),
    }


def _check_params(records: int, small_records: int | None, batch: int, repeat: int) -> None:
    from ..errors import InvalidArgumentError

    for name, v in (("records", records), ("batch", batch), ("repeat", repeat)):
        if v < 1:
            raise InvalidArgumentError(f"{name} must be at least 1, got {v}")
    if small_records is not None and small_records < 1:
        raise InvalidArgumentError(f"small_records must be at least 1, got {small_records}")


def run_append(
    records: int = DEFAULT_RECORDS,
    *,
    small_records: int | None = None,
    batch: int = DEFAULT_BATCH,
    repeat: int = DEFAULT_REPEAT,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Benchmark appends against the plain-file and SQLite baselines; see the module doc.

    ``progress``: None shows progress on stderr only if it is a terminal; True forces it.
    """
    _check_params(records, small_records, batch, repeat)
    per: dict[str, dict[str, Any]] = {}
    with work_dir(directory, keep=keep) as root:
        for w in workloads(records, small_records, batch):
            say(f"append {w.name}: preparing {w.records:,} records", enabled=progress is not False)
            batches = make_batches(w)
            rows = sqlite_rows(batches, time.time_ns() // 1_000_000)
            runs: dict[str, list[float]] = {OURS: [], PLAIN: [], SQLITE: []}
            fsyncs: dict[str, list[float]] = {OURS: [], PLAIN: [], SQLITE: []}
            log_dir, dat, db = root / f"{w.name}-log", root / f"{w.name}.dat", root / f"{w.name}.db"
            jobs: list[tuple[str, Path, Callable[[Progress], tuple[float, float]]]] = [
                (OURS, log_dir, partial(append_tiered_log, log_dir, batches)),
                (PLAIN, dat, partial(append_plain_file, dat, batches)),
                (SQLITE, db, partial(append_sqlite, db, rows)),
            ]
            for i in range(repeat):
                # Systems take turns within each repeat, so slow drifts hit all of them.
                for name, path, job in jobs:
                    _remove(path)
                    label = f"append {w.name} run {i + 1}/{repeat} {name}"
                    with Progress(w.records, label, enabled=progress) as pr:
                        secs, sync = job(pr)
                    runs[name].append(secs)
                    fsyncs[name].append(sync)
                    if not (keep and i == repeat - 1):
                        _remove(path)
            results = {name: _figures(w, r, fsyncs[name]) for name, r in runs.items()}
            per[w.name] = {
                "record_bytes": w.record_bytes,
                "records": w.records,
                "batch": w.batch,
                "payload_bytes": w.payload_bytes,
                "results": results,
                "ratios": _ratios(results),
            }
    return _report(
        "append",
        per,
        APPEND_TARGETS,
        repeat,
        batch,
        "best of repeat runs; MB = 10**6 bytes of record values; ratio = ours / baseline "
        "(higher is better for us); every system fsyncs once at the end, included in "
        "seconds (fsync_seconds is that part)",
    )


def run_read(
    records: int = DEFAULT_RECORDS,
    *,
    small_records: int | None = None,
    batch: int = DEFAULT_BATCH,
    repeat: int = DEFAULT_REPEAT,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Benchmark sequential reads against SQLite (and a plain file); see the module doc."""
    _check_params(records, small_records, batch, repeat)
    per: dict[str, dict[str, Any]] = {}
    show = progress is not False
    with work_dir(directory, keep=keep) as root:
        for w in workloads(records, small_records, batch):
            say(
                f"read {w.name}: writing {w.records:,} records to each system (not timed)",
                enabled=show,
            )
            batches = make_batches(w)
            rows = sqlite_rows(batches, time.time_ns() // 1_000_000)
            log_dir, dat, db = root / f"{w.name}-log", root / f"{w.name}.dat", root / f"{w.name}.db"
            quiet = Progress(None, "", enabled=False)
            append_tiered_log(log_dir, batches, quiet)
            append_plain_file(dat, batches, quiet)
            append_sqlite(db, rows, quiet)
            del batches, rows
            jobs: list[tuple[str, Callable[[Progress], tuple[float, int]]]] = [
                (OURS, partial(read_tiered_log, log_dir)),
                (PLAIN, partial(read_plain_file, dat, w.record_bytes)),
                (SQLITE, partial(read_sqlite, db)),
            ]
            runs: dict[str, list[float]] = {OURS: [], PLAIN: [], SQLITE: []}
            cpu: dict[str, list[float]] = {OURS: [], PLAIN: [], SQLITE: []}
            for i in range(repeat):
                for name, job in jobs:
                    label = f"read {w.name} run {i + 1}/{repeat} {name}"
                    with Progress(w.records, label, enabled=progress) as pr:
                        c0 = time.process_time()
                        secs, n = job(pr)
                        cpu[name].append(time.process_time() - c0)
                    if n != w.records:
                        raise TieredLogError(
                            f"{name} read back {n} records of {w.name}, expected {w.records}"
                        )
                    runs[name].append(secs)
            if not keep:
                for p in (log_dir, dat, db):
                    _remove(p)
            results = {name: _figures(w, r) for name, r in runs.items()}
            per[w.name] = {
                "record_bytes": w.record_bytes,
                "records": w.records,
                "page_records": 1000,
                "payload_bytes": w.payload_bytes,
                "results": results,
                "ratios": _ratios(results),
                # Every reader runs on this process's one thread: its CPU time is what
                # the read costs, however busy the machine (wall time is not then).
                "cpu_seconds": {name: round(min(c), 6) for name, c in cpu.items()},
                "cpu_ratios": {
                    f"vs_{name}": round(ratio(min(c), min(cpu[OURS])), 3)
                    for name, c in cpu.items()
                    if name != OURS
                },
            }
    return _report(
        "read",
        per,
        READ_TARGETS,
        repeat,
        batch,
        "best of repeat runs; sequential read of every record from offset 0 with the "
        "files in the page cache; MB = 10**6 bytes of record values; ratio = ours / "
        "baseline; plain_file is a reference (no framing, no checksums)",
    )


def format_table(report: dict[str, Any]) -> str:
    """A readable table of a :func:`run_append` / :func:`run_read` report."""
    has_fsync = any(
        "fsync_seconds" in r for w in report["workloads"].values() for r in w["results"].values()
    )
    sync_head = f" {'of it fsync':>11}" if has_fsync else ""
    lines = [
        f"perf {report['benchmark']} ({report['note']})",
        f"{'workload':<9} {'system':<11} {'seconds':>9}{sync_head} {'MB/s':>9} "
        f"{'records/s':>12} {'ours/this':>10}",
    ]
    for wname, w in report["workloads"].items():
        first = True
        for sname, r in w["results"].items():
            rat = "" if sname == OURS else f"{w['ratios'][f'vs_{sname}']:.2f}x"
            sync = f" {r['fsync_seconds']:>11.3f}" if has_fsync else ""
            lines.append(
                f"{wname if first else '':<9} {sname:<11} {r['seconds']:>9.3f}{sync} "
                f"{r['mb_per_s']:>9.1f} {r['records_per_s']:>12,.0f} {rat:>10}"
            )
            first = False
    lines.append("targets:")
    for tname, t in report["targets"].items():
        lines.append(
            f"  {tname:<22} {t['workload']}: ratio {t['ratio']:.2f} (target >= "
            f"{t['min_ratio']:g}) {'met' if t['met'] else 'NOT MET'}"
        )
    return "\n".join(lines)


__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_RECORDS",
    "DEFAULT_REPEAT",
    "Workload",
    "format_table",
    "make_batches",
    "run_append",
    "run_read",
    "workloads",
]
