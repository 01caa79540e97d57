"""Benchmarks of the HTTP service against the in-process library, measured in one run.

``tiered-log perf http-produce`` (:func:`run_http_produce`) appends ``N`` records of
1 KiB in batches of 1,000:

- **http**: ``tiered_log.client.Client.produce`` of each batch to a real server process
  (``python -m tiered_log.service``) on a loopback port, one request at a time. The
  client sends the binary batch form (``Content-Type: application/vnd.tiered-log.frames``:
  the records as stored frames, no JSON, no base64); the clock covers the client's
  encoding, the request, the server's checksum verification, decoding and append, and
  the answer;
- **library**: ``append_batch`` of the same batches on a partition log opened in this
  process exactly as the server opens its partitions
  (:func:`tiered_log.broker.topics.open_partition_log`, same topic config).

Then ``--single`` single-record produces one request at a time, for the latency
distribution (p50/p99/max, milliseconds) of one acknowledged record over HTTP, next to
the same single-record ``append_batch`` in process.

``tiered-log perf http-fetch`` (:func:`run_http_fetch`) reads ``N`` records from offset 0
in pages of 1,000:

- **http**: ``Client.consume`` handing out pages of ``batch`` records, as a Kafka
  consumer's poll does (binary form, ``Accept: application/octet-stream``, received
  through ``http.client``; each request asks for up to 10,000 records within
  ``max_bytes`` = 64 MiB, the next one in flight while this one's records are decoded,
  as Kafka's fetcher does; the server sends the stored batches, the client decodes them
  and verifies every checksum);
- **library**: ``read_range`` page after page on an in-process partition log holding the
  same records (it decodes and verifies checksums too).

In the same run it measures the machine's loopback limit for these bytes (a plain
``sendfile`` sender to a plain ``recv_into`` receiver) next to
``Client.fetch_batches`` (batches received and checksum-verified, no record built) of
local data and of archived data from a warm chunk cache; see
:mod:`tiered_log.perf.fetch_limit` (report keys ``batches``,
``ratios.local_vs_loopback``, ``ratios.archived_vs_loopback``).

Both systems use the same topic config: the service's defaults except
``flush_messages`` (None unless ``durable``: then 1, an fsync per batch on both sides)
and ``remote_enabled=False`` (tiering is measured by ``perf ship`` / ``remote-read``;
here the HTTP layer is). The records are generated before any clock starts; each system
runs ``repeat`` times, taking turns, and the best run counts. The server runs with
access logs off and log level ``warning``. On a small machine the client and server
share the CPUs: the figures include that.

The result is one JSON-able dict: per system ``seconds``, ``mb_per_s``, ``records_per_s``
and every run's seconds; ``ratios`` (http / library); ``targets`` (``produce_vs_library``
>= 0.5, ``fetch_vs_library`` >= 0.5) each with ``met``; and, for produce, ``latency``.
Not thread-safe: one benchmark at a time.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..allocator import tune_malloc
from . import fetch_limit
from .common import DEFAULT_BATCH, DEFAULT_REPEAT, MB, Progress, environment, rate, ratio, say

if TYPE_CHECKING:
    from ..broker.topics import PartitionLog
    from ..config import TopicConfig

HTTP = "http"
LIBRARY = "library"
RECORD_BYTES = 1024
DEFAULT_HTTP_RECORDS = 100_000
"""1 KiB records per run by default (about 100 MB)."""
DEFAULT_SINGLE = 2000
"""Single-record produces timed for the latency figures by default."""
PRODUCE_TARGET = 0.5
FETCH_TARGET = 0.5
TOPIC = "perf"
ARCHIVED_TOPIC = "perf-archived"


# ---- the server process ---------------------------------------------------------------------


class ServerProcess:
    """``python -m tiered_log.service`` on ``127.0.0.1`` (any free port), data in
    ``data_dir``; its output goes to ``log_path``. Stop it with :meth:`stop` (SIGTERM)."""

    def __init__(
        self, data_dir: Path, log_path: Path, settings: dict[str, str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.settings = settings or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Start it and wait until it listens and ``/healthz`` answers."""
        import httpx

        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
        env.update(
            {
                "TIERED_LOG_DATA_DIR": str(self.data_dir),
                "TIERED_LOG_HOST": "127.0.0.1",
                "TIERED_LOG_PORT": "0",
                "TIERED_LOG_KAFKA_PORT": "0",
                "TIERED_LOG_ACCESS_LOG": "false",
                "TIERED_LOG_LOG_LEVEL": "warning",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update({f"TIERED_LOG_{k.upper()}": v for k, v in self.settings.items()})
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tiered_log.service"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with status {self.proc.returncode}: "
                    f"{self.log_text()[-2000:]}"
                )
            if not self.url:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.log_text())
                if m:
                    self.url = m.group(1)
            if self.url:
                try:
                    if httpx.get(self.url + "/healthz", timeout=2.0).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the server did not start in {timeout:.0f}s: {self.log_text()[-2000:]}")

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (graceful) and wait; SIGKILL if it does not stop in ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@contextmanager
def running_server(root: Path) -> Iterator[ServerProcess]:
    """A server with its data under ``root/server``; stopped on exit."""
    (root / "server").mkdir(parents=True, exist_ok=True)
    srv = ServerProcess(root / "server" / "data", root / "server" / "server.log")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


# ---- helpers ----------------------------------------------------------------------------------


def topic_overrides(durable: bool) -> dict[str, Any]:
    """The per-topic config both systems use (see the module docstring)."""
    return {"flush_messages": 1 if durable else None, "remote_enabled": False}


def topic_config(durable: bool) -> TopicConfig:
    from ..config import TopicConfig

    return TopicConfig.model_validate(topic_overrides(durable))


def open_library_log(directory: Path, durable: bool) -> PartitionLog:
    """A partition log opened as the server opens one (same function, same config)."""
    from ..broker.topics import open_partition_log
    from ..config import load_settings

    settings = load_settings(data_dir=str(directory.parent))
    return open_partition_log(
        directory,
        topic_config(durable),
        settings,
        log_id=f"perf-{directory.name}",
        storage=None,
        rebuild=False,
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank method."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))
    return s[k]


def latency_figures(seconds: Sequence[float]) -> dict[str, Any]:
    ms = [x * 1000 for x in seconds]
    return {
        "count": len(ms),
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "max_ms": round(max(ms, default=0.0), 3),
        "mean_ms": round(sum(ms) / len(ms), 3) if ms else 0.0,
    }


def _figures(records: int, runs: list[float]) -> dict[str, Any]:
    best = min(runs)
    return {
        "seconds": round(best, 6),
        "mb_per_s": round(rate(records * RECORD_BYTES / MB, best), 3),
        "records_per_s": round(rate(records, best), 1),
        "runs_seconds": [round(r, 6) for r in runs],
    }


def _check(records: int, batch: int, repeat: int, single: int = 1) -> None:
    from ..errors import InvalidArgumentError

    for name, v in (("records", records), ("batch", batch), ("repeat", repeat)):
        if v < 1:
            raise InvalidArgumentError(f"{name} must be at least 1, got {v}")
    if single < 0:
        raise InvalidArgumentError(f"single must not be negative, got {single}")
    if batch > 10_000:
        raise InvalidArgumentError("batch must be at most 10000 (the server's page limit)")


def _report(
    kind: str,
    records: int,
    batch: int,
    repeat: int,
    durable: bool,
    results: dict[str, dict[str, Any]],
    target: tuple[str, float],
    note: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    r = round(ratio(results[HTTP]["records_per_s"], results[LIBRARY]["records_per_s"]), 3)
    name, minimum = target
    targets = {
        name: {"baseline": LIBRARY, "min_ratio": minimum, "ratio": r, "met": bool(r >= minimum)}
    }
    return {
        "benchmark": kind,
        "note": note,
        "environment": environment(),
        "params": {
            "records": records,
            "record_bytes": RECORD_BYTES,
            "batch": batch,
            "repeat": repeat,
            "durable": durable,
            "topic_config": topic_overrides(durable),
        },
        "results": results,
        "ratios": {name: r},
        "targets": targets,
        "met": all(t["met"] for t in targets.values()),
        **(extra or {}),
    }


def _batches(records: int, batch: int) -> list[list[bytes]]:
    from .local import Workload, make_batches

    return make_batches(Workload("1KiB", RECORD_BYTES, records, batch))


# ---- produce ----------------------------------------------------------------------------------


def _produce_http(
    client: Any, topic: str, batches: Sequence[Sequence[bytes]], progress: Progress
) -> float:
    produce = client.produce
    adv = progress.advance
    t0 = time.perf_counter()
    for b in batches:
        produce(topic, 0, b)
        adv(len(b))
    return time.perf_counter() - t0


def _produce_library(
    directory: Path, durable: bool, batches: Sequence[Sequence[bytes]], progress: Progress
) -> float:
    log = open_library_log(directory, durable)
    try:
        append = log.append_batch
        adv = progress.advance
        t0 = time.perf_counter()
        for b in batches:
            append(b)
            adv(len(b))
        return time.perf_counter() - t0
    finally:
        log.close()


def _single_latencies(
    fn: Callable[[list[bytes]], object], values: Sequence[bytes], progress: Progress
) -> list[float]:
    out: list[float] = []
    clock = time.perf_counter
    for v in values:
        t0 = clock()
        fn([v])
        out.append(clock() - t0)
        progress.advance()
    return out


def run_http_produce(
    records: int = DEFAULT_HTTP_RECORDS,
    *,
    batch: int = DEFAULT_BATCH,
    repeat: int = DEFAULT_REPEAT,
    single: int = DEFAULT_SINGLE,
    durable: bool = False,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Batched produce over HTTP vs in-process ``append_batch``, plus single-record
    produce latency; see the module docstring."""
    tune_malloc()  # the in-process side with the allocator settings of the service
    from ..client import Client
    from .local import _remove, work_dir

    _check(records, batch, repeat, single)
    show = progress is not False
    runs: dict[str, list[float]] = {HTTP: [], LIBRARY: []}
    with work_dir(directory, keep=keep) as root:
        say(f"http-produce: preparing {records:,} records of {RECORD_BYTES} bytes", enabled=show)
        batches = _batches(records, batch)
        say("http-produce: starting the server", enabled=show)
        with running_server(root) as srv, Client(srv.url, timeout=300) as client:
            say(f"http-produce: server on {srv.url}", enabled=show)
            for i in range(repeat):
                topic = f"{TOPIC}-{i}"
                client.create_topic(topic, 1, topic_overrides(durable))
                with Progress(
                    records, f"produce run {i + 1}/{repeat} {HTTP}", enabled=progress
                ) as pr:
                    runs[HTTP].append(_produce_http(client, topic, batches, pr))
                client.delete_topic(topic)
                lib_dir = root / f"library-{i}"
                with Progress(
                    records, f"produce run {i + 1}/{repeat} {LIBRARY}", enabled=progress
                ) as pr:
                    runs[LIBRARY].append(_produce_library(lib_dir, durable, batches, pr))
                if not keep:
                    _remove(lib_dir)
            latency: dict[str, Any] = {}
            if single:
                values = [v for b in batches for v in b][:single]
                while len(values) < single:
                    values += values[: single - len(values)]
                client.create_topic(f"{TOPIC}-single", 1, topic_overrides(durable))
                with Progress(single, "single-record produce http", enabled=progress) as pr:
                    http_lat = _single_latencies(
                        lambda recs: client.produce(f"{TOPIC}-single", 0, recs), values, pr
                    )
                log = open_library_log(root / "library-single", durable)
                try:
                    with Progress(single, "single-record produce library", enabled=progress) as pr:
                        lib_lat = _single_latencies(log.append_batch, values, pr)
                finally:
                    log.close()
                latency = {
                    "single_record_produce": {
                        HTTP: latency_figures(http_lat),
                        LIBRARY: latency_figures(lib_lat),
                    }
                }
    results = {name: _figures(records, r) for name, r in runs.items()}
    say("http-produce: done", enabled=show)
    return _report(
        "http-produce",
        records,
        batch,
        repeat,
        durable,
        results,
        ("produce_vs_library", PRODUCE_TARGET),
        "best of repeat runs; MB = 10**6 bytes of record values; ratio = http / library; "
        "http = Client.produce of binary frame batches (application/vnd.tiered-log.frames) to "
        "a server process on loopback; library = "
        "append_batch in process on a log opened as the server opens partitions; latency = "
        "one record per request, one request at a time",
        {"latency": latency} if single else None,
    )


# ---- fetch ------------------------------------------------------------------------------------


def _fetch_http(
    client: Any, topic: str, records: int, page: int, progress: Progress
) -> tuple[float, int]:
    adv = progress.advance
    n = 0
    t0 = time.perf_counter()
    for res in client.consume(
        topic, 0, 0, end_offset=records, max_records=page, max_bytes=64 << 20
    ):
        n += len(res.records)
        adv(len(res.records))
    return time.perf_counter() - t0, n


def _fetch_library(
    log: PartitionLog, records: int, page: int, progress: Progress
) -> tuple[float, int]:
    read_range = log.read_range
    adv = progress.advance
    off = 0
    n = 0
    t0 = time.perf_counter()
    while off < records:
        recs = read_range(off, page, 64 << 20)
        if not recs:
            break
        n += len(recs)
        off = recs[-1].offset + 1
        adv(len(recs))
    return time.perf_counter() - t0, n


def run_http_fetch(
    records: int = DEFAULT_HTTP_RECORDS,
    *,
    batch: int = DEFAULT_BATCH,
    repeat: int = DEFAULT_REPEAT,
    durable: bool = False,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Binary fetch over HTTP vs in-process ``read_range``, ``batch`` records a page; see
    the module docstring."""
    tune_malloc()  # the in-process side with the allocator settings of the service
    from ..client import Client
    from ..errors import TieredLogError
    from .local import work_dir

    _check(records, batch, repeat)
    show = progress is not False
    runs: dict[str, list[float]] = {HTTP: [], LIBRARY: []}
    with work_dir(directory, keep=keep) as root:
        say(f"http-fetch: preparing {records:,} records of {RECORD_BYTES} bytes", enabled=show)
        batches = _batches(records, batch)
        with running_server(root) as srv, Client(srv.url, timeout=300) as client:
            say(
                f"http-fetch: server on {srv.url}; writing the records to both (not timed)",
                enabled=show,
            )
            client.create_topic(TOPIC, 1, topic_overrides(durable))
            client.create_topic(
                ARCHIVED_TOPIC, 1, fetch_limit.archived_overrides(durable, records * RECORD_BYTES)
            )
            for b in batches:
                client.produce(TOPIC, 0, b)
                client.produce(ARCHIVED_TOPIC, 0, b)
            say("http-fetch: waiting until the archived topic is shipped", enabled=show)
            archived = fetch_limit.ship_archived(client, ARCHIVED_TOPIC)
            log = open_library_log(root / "library", durable)
            try:
                for b in batches:
                    log.append_batch(b)
                log.flush()
                del batches
                for i in range(repeat):
                    with Progress(
                        records, f"fetch run {i + 1}/{repeat} {HTTP}", enabled=progress
                    ) as pr:
                        secs, n = _fetch_http(client, TOPIC, records, batch, pr)
                    if n != records:
                        raise TieredLogError(f"http fetch read {n} records, expected {records}")
                    runs[HTTP].append(secs)
                    with Progress(
                        records, f"fetch run {i + 1}/{repeat} {LIBRARY}", enabled=progress
                    ) as pr:
                        secs, n = _fetch_library(log, records, batch, pr)
                    if n != records:
                        raise TieredLogError(f"library read {n} records, expected {records}")
                    runs[LIBRARY].append(secs)
            finally:
                log.close()
            segments = sorted((srv.data_dir / "topics" / TOPIC / "0").glob("*.log"))
            limits = fetch_limit.measure_limits(
                client, segments, TOPIC, records, ARCHIVED_TOPIC, archived, repeat, show
            )
    results = {name: _figures(records, r) for name, r in runs.items()}
    say("http-fetch: done", enabled=show)
    return fetch_limit.merge_into(
        _report(
            "http-fetch",
            records,
            batch,
            repeat,
            durable,
            results,
            ("fetch_vs_library", FETCH_TARGET),
            "best of repeat runs; sequential read of every record from offset 0, batch records a "
            "page, files in the page cache; MB = 10**6 bytes of record values; ratio = http / "
            "library; http = Client.consume (pages of batch records from requests of up to "
            "10,000 records, the next request in flight while one is decoded; binary batches, "
            "checksums verified by the client); "
            "library = read_range in process (checksums verified); batches = "
            "Client.fetch_batches (checksums verified, no record built) vs the loopback limit "
            "(plain sendfile sender, plain recv_into receiver), alternating rounds, ratios = "
            "median of the rounds' ratios",
        ),
        limits,
    )


# ---- output ----------------------------------------------------------------------------------


def format_table(report: dict[str, Any]) -> str:
    """A readable summary of a :func:`run_http_produce` / :func:`run_http_fetch` report."""
    p = report["params"]
    lines = [
        f"perf {report['benchmark']}: {p['records']:,} records of {p['record_bytes']} "
        f"bytes, {p['batch']:,} a batch, best of {p['repeat']} "
        f"(durable={p['durable']})",
        f"{'system':<9} {'seconds':>9} {'MB/s':>9} {'records/s':>12}",
    ]
    for name, r in report["results"].items():
        lines.append(
            f"{name:<9} {r['seconds']:>9.3f} {r['mb_per_s']:>9.1f} {r['records_per_s']:>12,.0f}"
        )
    for tname, t in report["targets"].items():
        lines.append(
            f"{tname}: ratio {t['ratio']:.2f} (target >= {t['min_ratio']:g}) "
            f"{'met' if t['met'] else 'NOT MET'}"
        )
    lines.extend(fetch_limit.table_lines(report))
    lat = report.get("latency", {}).get("single_record_produce")
    if lat:
        for name, f in lat.items():
            lines.append(
                f"single-record produce {name:<8} p50 {f['p50_ms']:.3f} ms  "
                f"p99 {f['p99_ms']:.3f} ms  max {f['max_ms']:.3f} ms  "
                f"({f['count']:,} requests)"
            )
    return "\n".join(lines)


__all__ = [
    "DEFAULT_HTTP_RECORDS",
    "DEFAULT_SINGLE",
    "ServerProcess",
    "format_table",
    "latency_figures",
    "percentile",
    "run_http_fetch",
    "run_http_produce",
]
