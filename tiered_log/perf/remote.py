"""Benchmarks of the remote tier, each with its baseline measured in the same run.

- ``ship``: copying sealed segments with the shipper vs a plain boto3 ``upload_file`` of
  the same files to the same endpoint, one after the other (target >= 0.8x). The
  shipper keeps two copies in flight; so that its own design is not all the ratio shows,
  a second baseline uploads the files two at a time (``upload_file`` from two threads)
  and its ratio is reported too.
- ``remote-read``: a consumer reading the whole archive from offset 0 (cold cache) vs a
  plain boto3 download of the same objects (target >= 0.7x), three ways: the stored
  batches as bytes (``TieredLog.read_remote_batches``: verified, not decoded; the
  consumer decodes in its own process), where they lie (``TieredLog.read_batch_ranges``,
  what the service's binary fetch sends with ``sendfile``: verified, not copied) and
  decoded records in this process (``TieredLog.read_range``).
- ``produce-latency``: p50/p99 of acknowledged (flushed) single-record appends with
  tiering off, with shipping running, and with shipping plus a catch-up reader on
  remote data, the three phases in turn for several rounds (targets: the median over
  the rounds of each round's p99 ratio <= 1.5x and <= 2.0x of off; the goal 1.2x). The reader does
  the broker's share of serving a catch-up consumer, as in KIP-405's measurement: it
  reads the archive's batches as the service's binary fetch does
  (``read_remote_batches``: fetched, cached, verified; the consumer decodes in its own
  process), in a loop.

Without ``--endpoint`` they start moto's S3 server on 127.0.0.1 as a separate process (a
real HTTP endpoint, not sharing this process's GIL, as a real S3 would not); with it, they
use that endpoint (MinIO, AWS). Each run prints progress to
stderr and returns one JSON-able dict. Not thread-safe: one benchmark at a time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..format import naming
from ..local.log import LogConfig
from ..partition import TieredLog
from ..remote.s3 import S3Storage
from ..remote.tier import TierConfig
from .common import DEFAULT_LATENCY_ROUNDS, say


@dataclass
class S3Target:
    """Where the benchmarks send objects."""

    endpoint: str
    bucket: str
    access_key: str | None
    secret_key: str | None
    region: str


def _say(msg: str) -> None:
    print(f"[perf] {msg}", file=sys.stderr, flush=True)


BUCKET_CPU = ("idle", "normal")
"""Priorities moto's server may run at (:func:`moto_server_process`)."""


@contextmanager
def moto_server_process(cpu: str = "normal") -> Iterator[str]:
    """moto's S3 server as a separate process on a free port of 127.0.0.1; its URL.

    A separate process, as a real S3 endpoint is: run in this process (ThreadedMotoServer),
    the server's request handling would compete for the GIL with the code being measured
    and penalize exactly the concurrent parts (prefetching reader, background shipper)
    while sparing the sequential boto3 baselines. Its spooled object files go to a memory
    file system where there is one (``/dev/shm``), not to the disk the log is measured
    on: a real bucket's disks are other machines' (on ext4, another process's writes on
    the log's file system lengthen the log's fsyncs, which would be measured as the
    tier's cost).

    ``cpu="idle"`` runs the server under Linux's ``SCHED_IDLE`` policy (elsewhere, at
    ``nice`` 19): it gets a core only when nothing else wants one, as a real bucket's CPUs
    are other machines' too. ``"normal"``: the same priority as this process.
    """
    import socket
    import subprocess
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    spool: str | None = None
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        spool = tempfile.mkdtemp(prefix="tl-moto-", dir="/dev/shm")
        env["TMPDIR"] = spool
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    if cpu == "idle":
        _lower_priority(proc.pid)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not start on port {port}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)


def _lower_priority(pid: int) -> None:
    """Give process ``pid`` the lowest CPU priority there is: ``SCHED_IDLE`` on Linux
    (each of its threads; the ones it starts later inherit it), else ``nice`` 19."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            tids = [pid]
        for tid in tids:
            with contextlib.suppress(OSError):  # a thread (or the process) that ended
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.setpriority(os.PRIO_PROCESS, pid, 19)


@contextmanager
def s3_target(
    endpoint: str | None = None, bucket: str | None = None, *, bucket_cpu: str = "normal"
) -> Iterator[S3Target]:
    """An S3 endpoint to benchmark against: the given one, or moto's server started in a
    separate process on loopback (:func:`moto_server_process`, at ``bucket_cpu``), with
    fake credentials."""
    with contextlib.ExitStack() as stack:
        if endpoint is None:
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
            endpoint = stack.enter_context(moto_server_process(bucket_cpu))
        yield S3Target(
            endpoint,
            bucket or f"perf-{uuid.uuid4().hex[:12]}",
            os.environ.get("AWS_ACCESS_KEY_ID"),
            os.environ.get("AWS_SECRET_ACCESS_KEY"),
            os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        )


def _storage(t: S3Target, prefix: str) -> S3Storage:
    st = S3Storage(
        t.bucket,
        prefix=prefix,
        endpoint_url=t.endpoint,
        region=t.region,
        access_key=t.access_key,
        secret_key=t.secret_key,
    )
    st.ensure_bucket()
    return st


def _boto(t: S3Target) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=t.endpoint,
        region_name=t.region,
        aws_access_key_id=t.access_key,
        aws_secret_access_key=t.secret_key,
        config=Config(s3={"addressing_style": "path"}),
    )


def _fill(tlog: TieredLog, total_bytes: int, record_bytes: int, show: bool = True) -> int:
    payload = [os.urandom(record_bytes) for _ in range(1000)]
    n = 0
    last_report = 0.0
    while n * record_bytes < total_bytes:
        tlog.append_batch(payload)
        n += len(payload)
        if show and time.monotonic() - last_report > 1:
            _say(f"filling: {n * record_bytes >> 20} / {total_bytes >> 20} MiB")
            last_report = time.monotonic()
    tlog.flush()
    tlog.roll()
    return n


def run_ship(
    total_mib: int = 64, segment_mib: int = 8, endpoint: str | None = None, repeat: int = 3
) -> dict[str, Any]:
    """Segment shipping throughput vs plain boto3 uploads of the same files.

    ``repeat`` rounds, each a baseline upload then a shipment of a fresh copy of the log
    (under a new log id, so every round ships everything); the best of each side counts
    (a shared machine's noise only ever slows a run down).
    """
    work = Path(tempfile.mkdtemp(prefix="tl-perf-ship-"))
    try:
        with s3_target(endpoint) as t:
            storage = _storage(t, "ship")
            cfg = LogConfig(segment_bytes=segment_mib << 20)
            tlog = TieredLog(
                work / "log",
                log_id="perf-0",
                storage=storage,
                config=cfg,
                tier=TierConfig(),
                start_shipper=False,
            )
            _fill(tlog, total_mib << 20, 1024)
            segs = tlog.eligible_segments()
            size = sum(s.size for s in segs)
            tlog.close()
            client = _boto(t)
            base_runs: list[float] = []
            pair_runs: list[float] = []
            ours_runs: list[float] = []
            copied = 0

            def baseline(r: int) -> None:
                from concurrent.futures import ThreadPoolExecutor

                for threads, runs in ((1, base_runs), (2, pair_runs)):
                    _say(
                        f"round {r + 1}/{repeat}: boto3 upload_file of {len(segs)} segment "
                        f"files ({size >> 20} MiB), {threads} at a time"
                    )
                    os.sync()  # no writeback pending at the start (moto spools to disk)
                    keys = [f"baseline/{r}/{threads}/{s.store_path.name}" for s in segs]

                    def up(i: int, keys: list[str] = keys) -> None:
                        client.upload_file(str(segs[i].store_path), t.bucket, keys[i])

                    t0 = time.perf_counter()
                    with ThreadPoolExecutor(threads) as ex:
                        list(ex.map(up, range(len(segs))))
                    runs.append(time.perf_counter() - t0)
                    client.delete_objects(
                        Bucket=t.bucket, Delete={"Objects": [{"Key": k} for k in keys]}
                    )

            def ours(r: int) -> int:
                _say(f"round {r + 1}/{repeat}: shipping the same segments with the shipper")
                copy_dir = work / f"log-{r}"
                shutil.copytree(work / "log", copy_dir, ignore=shutil.ignore_patterns(".lock"))
                tl = TieredLog(
                    copy_dir,
                    log_id=f"perf-{r + 1}",
                    storage=storage,
                    config=cfg,
                    tier=TierConfig(),
                    start_shipper=False,
                    rebuild=False,
                )
                os.sync()  # the copy just made is not written back while we measure
                t0 = time.perf_counter()
                n = tl.tier_once()
                ours_runs.append(time.perf_counter() - t0)
                tl.close()
                tl.delete_remote_objects()
                shutil.rmtree(copy_dir, ignore_errors=True)
                return n

            for r in range(repeat):
                # Taking turns at going first; each side's objects are deleted after it,
                # so neither uploads into a fuller server than the other.
                if r % 2 == 0:
                    baseline(r)
                    copied = ours(r)
                else:
                    copied = ours(r)
                    baseline(r)
            storage.close()
        base_s, pair_s, ours_s = min(base_runs), min(pair_runs), min(ours_runs)
        ratio = base_s / ours_s
        return {
            "benchmark": "ship",
            "segments": copied,
            "bytes": size,
            "repeat": repeat,
            "ship_mb_s": round(size / ours_s / 1e6, 1),
            "baseline_boto3_upload_mb_s": round(size / base_s / 1e6, 1),
            "ratio_vs_boto3": round(ratio, 3),
            "target": 0.8,
            "met": ratio >= 0.8,
            "baseline_boto3_two_at_a_time_mb_s": round(size / pair_s / 1e6, 1),
            "ratio_vs_boto3_two_at_a_time": round(pair_s / ours_s, 3),
            "runs_seconds": {
                "ship": [round(x, 3) for x in ours_runs],
                "baseline": [round(x, 3) for x in base_runs],
                "baseline_two_at_a_time": [round(x, 3) for x in pair_runs],
            },
            "endpoint": "moto" if endpoint is None else endpoint,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_remote_read(
    total_mib: int = 64, segment_mib: int = 8, endpoint: str | None = None, repeat: int = 3
) -> dict[str, Any]:
    """A consumer reading the whole archive from offset 0 vs plain boto3 downloads.

    ``repeat`` rounds, each a baseline download, then a cold read (empty chunk cache) of
    batches as bytes, one of their ranges and one of decoded records; the best of each
    counts. Every reader reads every record of the archive, the baseline every byte of
    its objects (``bytes`` = ``baseline_bytes``). The ratio and target are reported for
    each reader (``ratio_vs_boto3``/``met`` are the batches', ``ranges_ratio_vs_boto3``
    the ranges' (the bytes a catch-up consumer of the service is sent, without the
    copy), ``records_ratio_vs_boto3`` and ``records_met`` the in-process decoding
    reader's).
    """
    work = Path(tempfile.mkdtemp(prefix="tl-perf-rread-"))
    try:
        with s3_target(endpoint) as t:
            storage = _storage(t, "rread")
            tier = TierConfig(local_retention_bytes=0)
            cfg = LogConfig(segment_bytes=segment_mib << 20)
            tlog = TieredLog(
                work / "log",
                log_id="perf-0",
                storage=storage,
                config=cfg,
                tier=tier,
                start_shipper=False,
            )
            n = _fill(tlog, total_mib << 20, 1024)
            _say("shipping the archive")
            tlog.tier_once()
            assert tlog.bounds().local_start_offset == n, "local copies were not dropped"
            shipped = [
                s for s in tlog.describe()["remote_segments"] if s["state"] == "COPY_FINISHED"
            ]
            keys = [f"rread/{_data_key(s['base_offset'], s['id'])}" for s in shipped]
            size = sum(s["size"] for s in shipped)
            tlog.close()
            client = _boto(t)
            base_runs: list[float] = []
            batch_runs: list[float] = []
            range_runs: list[float] = []
            record_runs: list[float] = []
            got = count = requests = 0
            for r in range(repeat):
                _say(
                    f"round {r + 1}/{repeat}: boto3 get_object of {len(keys)} objects "
                    f"({size >> 20} MiB)"
                )
                t0 = time.perf_counter()
                got = 0
                for k in keys:
                    got += len(client.get_object(Bucket=t.bucket, Key=k)["Body"].read())
                base_runs.append(time.perf_counter() - t0)
                for what in ("batches", "ranges", "records"):
                    # A fresh open with an empty chunk cache: a cold catch-up reader.
                    shutil.rmtree(
                        work / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR,
                        ignore_errors=True,
                    )
                    tlog = TieredLog(
                        work / "log",
                        log_id="perf-0",
                        storage=storage,
                        config=cfg,
                        tier=tier,
                        start_shipper=False,
                    )
                    _say(
                        f"round {r + 1}/{repeat}: consumer reading {n} records from offset "
                        f"0 as {what}"
                    )
                    t0 = time.perf_counter()
                    o = count = 0
                    if what == "batches":
                        while o < n:
                            o = tlog.read_remote_batches(o, 10_000, 8 << 20).next_offset
                        batch_runs.append(time.perf_counter() - t0)
                        count = o
                    elif what == "ranges":
                        while o < n:
                            page = tlog.read_batch_ranges(o, 10_000, 8 << 20)
                            o = page.next_offset
                            page.close()
                        range_runs.append(time.perf_counter() - t0)
                        count = o
                    else:
                        while o < n:
                            recs = tlog.read_range(o, 5000, 8 << 20)
                            count += len(recs)
                            o = recs[-1].offset + 1
                        record_runs.append(time.perf_counter() - t0)
                    requests = tlog.describe()["remote_fetch_requests"]
                    tlog.close()
            storage.close()
        base_s, batch_s, record_s = min(base_runs), min(batch_runs), min(record_runs)
        range_s = min(range_runs)
        ratio, record_ratio = base_s / batch_s, base_s / record_s
        return {
            "benchmark": "remote-read",
            "records": count,
            "bytes": size,
            "baseline_bytes": got,
            "repeat": repeat,
            "remote_read_mb_s": round(size / batch_s / 1e6, 1),
            "remote_read_records_s": round(count / batch_s),
            "baseline_boto3_download_mb_s": round(size / base_s / 1e6, 1),
            "ratio_vs_boto3": round(ratio, 3),
            "target": 0.7,
            "met": ratio >= 0.7,
            "ranges_read_mb_s": round(size / range_s / 1e6, 1),
            "ranges_ratio_vs_boto3": round(base_s / range_s, 3),
            "records_read_mb_s": round(size / record_s / 1e6, 1),
            "records_read_records_s": round(count / record_s),
            "records_ratio_vs_boto3": round(record_ratio, 3),
            "records_met": record_ratio >= 0.7,
            "remote_fetch_requests": requests,
            "runs_seconds": {
                "remote_read": [round(x, 3) for x in batch_runs],
                "ranges_read": [round(x, 3) for x in range_runs],
                "records_read": [round(x, 3) for x in record_runs],
                "baseline": [round(x, 3) for x in base_runs],
            },
            "endpoint": "moto" if endpoint is None else endpoint,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _data_key(base: int, seg_id: str) -> str:
    from ..format import naming

    return naming.segment_object_key("perf-0", base, seg_id, naming.LOG_SUFFIX)


def _thread_sched() -> tuple[float, float] | None:
    """The calling thread's seconds on a CPU and seconds runnable but waiting for one
    (Linux's ``/proc/thread-self/schedstat``), or None where there is no such file."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            on_cpu, waiting, _ = f.read().split()
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9


@dataclass
class _Phase:
    """One phase's appends: each one's latency and, where the OS tells, how much of it
    the producer's thread spent on a CPU and waiting for one (the rest it was blocked:
    on the disk's fsync, or a lock)."""

    lat: list[float]
    cpu: list[float]
    runqueue: list[float]

    @staticmethod
    def joined(phases: list[_Phase]) -> _Phase:
        """The appends of ``phases`` as one phase (the rounds' pooled figures)."""
        out = _Phase([], [], [])
        for p in phases:
            out.lat += p.lat
            out.cpu += p.cpu
            out.runqueue += p.runqueue
        return out


def _latencies(tlog: TieredLog, n: int, value: bytes) -> _Phase:
    out = _Phase([], [], [])
    for _ in range(n):
        s0 = _thread_sched()  # read outside the timed span
        t0 = time.perf_counter()
        tlog.append(value)
        tlog.flush()  # acknowledged = durable
        out.lat.append(time.perf_counter() - t0)
        s1 = _thread_sched()
        if s0 is not None and s1 is not None:
            out.cpu.append(s1[0] - s0[0])
            out.runqueue.append(s1[1] - s0[1])
    return out


def _tail_breakdown(phase: _Phase, share: float = 0.01) -> dict[str, float] | None:
    """Where the slowest ``share`` of a phase's appends spent their time, in mean
    milliseconds: on a CPU, runnable but waiting for one (other threads and processes
    had the cores), and blocked (the fsync's disk, a lock). None without the OS's
    figures. The schedstat reads bracket a little more than the timed span, so the
    parts may add up to slightly more than ``latency_ms``."""
    if len(phase.cpu) != len(phase.lat) or not phase.lat:
        return None
    order = sorted(range(len(phase.lat)), key=phase.lat.__getitem__)
    slow = order[-max(1, int(len(order) * share)) :]
    latency, cpu, runq = (
        statistics.fmean(xs[i] for i in slow) * 1000
        for xs in (phase.lat, phase.cpu, phase.runqueue)
    )
    return {
        "latency_ms": round(latency, 3),
        "on_cpu_ms": round(cpu, 3),
        "waiting_for_cpu_ms": round(runq, 3),
        "blocked_ms": round(max(0.0, latency - cpu - runq), 3),
    }


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


OFF, SHIPPING, CATCHUP = "off", "shipping", "shipping_and_catchup_reader"
"""The phases of ``produce-latency``, in the order each round runs them."""


def _phase_figures(lat: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(_pct(lat, 0.50), 3),
        "p99_ms": round(_pct(lat, 0.99), 3),
        "mean_ms": round(statistics.fmean(lat) * 1000, 3),
    }


def _p99_ratios(phases: dict[str, list[float]]) -> tuple[float, float]:
    """``(shipping, catch-up)`` p99 over the ``off`` p99 of one set of latencies."""
    off = _pct(phases[OFF], 0.99)
    return _pct(phases[SHIPPING], 0.99) / off, _pct(phases[CATCHUP], 0.99) / off


class _CatchUpReader:
    """A thread reading the archive of ``tlog`` from its log start to its local start, in
    a loop, as the service's binary fetch does for a catch-up consumer: stored batches
    fetched, verified and cached (in the tier's worker process where the store allows),
    then named as ranges of the chunk cache's files, which the service would ``sendfile``
    (:meth:`~tiered_log.partition.log.TieredLog.read_batch_ranges`; the consumer decodes them
    in its own process). ``start`` it, then ``stop`` it: the records it read and for
    how long."""

    def __init__(self, tlog: TieredLog) -> None:
        self.tlog = tlog
        self.records = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="catch-up-reader", daemon=True)
        self._t0 = 0.0

    def _run(self) -> None:
        tlog = self.tlog
        while not self._stop.is_set():
            o = tlog.log_start_offset
            while not self._stop.is_set() and o < tlog.bounds().local_start_offset:
                page = tlog.read_batch_ranges(o, 2000, 4 << 20)
                nxt = page.next_offset
                page.close()
                self.records += nxt - o
                o = nxt

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._thread.start()

    def stop(self) -> tuple[int, float]:
        self._stop.set()
        self._thread.join()
        return self.records, time.perf_counter() - self._t0


def _latency_round(
    off: TieredLog,
    on: TieredLog,
    appends: int,
    value: bytes,
    backlog_bytes: int,
    label: str,
    show: bool,
) -> tuple[dict[str, _Phase], int, float]:
    """One round of the three phases: ``off`` appends with no tier; a fresh backlog
    filled into ``on`` (its shipper stopped), then appends while the shipper ships it;
    then appends while it ships and a catch-up reader reads the archive. Every phase
    starts with the disk's dirty pages written back (``os.sync``), so none pays for the
    writes of the one before it. Returns the phases' appends, and the reader's records
    and seconds."""
    lat: dict[str, _Phase] = {}
    os.sync()
    say(f"{label}: phase 1/3: tiering off", enabled=show)
    lat[OFF] = _latencies(off, appends, value)
    _fill(on, backlog_bytes, 1024, show)
    os.sync()
    on.start_shipper()
    say(f"{label}: phase 2/3: shipping running", enabled=show)
    lat[SHIPPING] = _latencies(on, appends, value)
    deadline = time.monotonic() + 120  # the first round: wait for an archive to read
    while on.bounds().local_start_offset == on.log_start_offset and time.monotonic() < deadline:
        time.sleep(0.1)
    os.sync()
    reader = _CatchUpReader(on)
    reader.start()
    say(f"{label}: phase 3/3: shipping + catch-up reader on remote data", enabled=show)
    try:
        lat[CATCHUP] = _latencies(on, appends, value)
    finally:
        read, seconds = reader.stop()
        on.stop_shipper()  # the next round's backlog waits for its own shipping phase
    return lat, read, seconds


def run_produce_latency(
    appends: int = 2000,
    endpoint: str | None = None,
    backlog_mib: int = 32,
    *,
    upload_bytes_per_sec: int | None = None,
    fetch_bytes_per_sec: int | None = None,
    copies_in_flight: int = 2,
    rounds: int = DEFAULT_LATENCY_ROUNDS,
    bucket_cpu: str = "idle",
    progress: bool | None = None,
) -> dict[str, Any]:
    """p50/p99 of acknowledged single-record appends: tiering off, shipping, + catch-up reader.

    The three phases run ``rounds`` times, in turn (off, shipping, catch-up; then again),
    ``appends`` appends each. Each round's p99 ratios (shipping / off, catch-up / off) are
    taken within the round, and their medians judge the targets: the disk's moods over
    a run (the "off" p99 alone moves by several times between runs) then shift the
    phases of a round together instead of deciding the ratio. ``p99_ratio_*`` are those
    medians too; ``phases`` pools every round's latencies, ``pooled_p99_ratio_*`` are
    their ratios, and ``round_figures`` holds each round's own.

    ``backlog_mib``: data appended before each shipping phase (the shipper's backlog
    and, once shipped, more of the catch-up reader's archive); local retention and the
    chunk cache are each an eighth of it, so the reader keeps fetching from the bucket.
    ``upload_bytes_per_sec``, ``fetch_bytes_per_sec`` and ``copies_in_flight`` are the
    log's tier settings of those names (the defaults: unlimited, unlimited, 2): the knobs
    that trade shipping and catch-up speed for producer latency.

    ``bucket_cpu`` (without ``endpoint``): the CPU priority of the moto server that stands
    in for the bucket (:data:`BUCKET_CPU`). By default ``"idle"``: a real bucket's
    request handling runs on other machines, and moto's (a Python server handling every
    upload and fetch) on the same cores would be measured as the tier's cost;
    ``"normal"`` measures it so. ``slowest_1pct`` in the report says, per phase, where
    the slowest appends spent their time (on a CPU, waiting for one, blocked on the
    disk), which tells the two apart. Progress lines go to stderr unless ``progress``
    is False.
    """
    if appends < 1 or backlog_mib < 1 or rounds < 1:
        raise ValueError("appends, backlog_mib and rounds must be at least 1")
    if bucket_cpu not in BUCKET_CPU:
        raise ValueError(f"bucket_cpu must be one of {', '.join(BUCKET_CPU)}, got {bucket_cpu!r}")
    show = progress is not False
    work = Path(tempfile.mkdtemp(prefix="tl-perf-lat-"))
    value = os.urandom(1024)
    try:
        with s3_target(endpoint, bucket_cpu=bucket_cpu) as t:
            storage = _storage(t, "lat")
            cfg = LogConfig(segment_bytes=1 << 20)
            # Off: no remote tier at all.
            off = TieredLog(work / "off", config=cfg, start_shipper=False)
            _fill(off, min(8, backlog_mib) << 20, 1024, show)
            # On: the shipper runs only in the shipping and catch-up phases.
            # A cache smaller than the archive: the catch-up reader keeps fetching remotely.
            eighth = max(1 << 20, (backlog_mib << 20) // 8)
            tier = TierConfig(
                ship_interval_ms=10,
                local_retention_bytes=eighth,
                cache_bytes=eighth,
                upload_bytes_per_sec=upload_bytes_per_sec,
                fetch_bytes_per_sec=fetch_bytes_per_sec,
                copies_in_flight=copies_in_flight,
            )
            on = TieredLog(
                work / "on",
                log_id="lat-0",
                storage=storage,
                config=cfg,
                tier=tier,
                start_shipper=False,
            )
            per_round: list[dict[str, _Phase]] = []
            read_records, read_seconds = 0, 0.0
            try:
                for r in range(rounds):
                    lat, n, secs = _latency_round(
                        off, on, appends, value, backlog_mib << 20, f"round {r + 1}/{rounds}", show
                    )
                    per_round.append(lat)
                    read_records += n
                    read_seconds += secs
            finally:
                off.close()
                on.close()
                storage.close()
        return _latency_report(
            per_round,
            appends,
            read_records,
            read_seconds,
            {
                "upload_bytes_per_sec": upload_bytes_per_sec,
                "fetch_bytes_per_sec": fetch_bytes_per_sec,
                "copies_in_flight": copies_in_flight,
            },
            "moto" if endpoint is None else endpoint,
            bucket_cpu if endpoint is None else None,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _latency_report(
    per_round: list[dict[str, _Phase]],
    appends: int,
    read_records: int,
    read_seconds: float,
    settings: dict[str, int | None],
    endpoint: str,
    bucket_cpu: str | None,
) -> dict[str, Any]:
    """The JSON-able report of :func:`run_produce_latency` (see there)."""
    rounds: list[dict[str, Any]] = []
    ships: list[float] = []
    catches: list[float] = []
    for i, phases in enumerate(per_round):
        lat = {k: v.lat for k, v in phases.items()}
        ship, catch = _p99_ratios(lat)
        ships.append(ship)
        catches.append(catch)
        rounds.append(
            {
                "round": i + 1,
                "phases": {k: _phase_figures(v) for k, v in lat.items()},
                "p99_ratio_shipping_vs_off": round(ship, 3),
                "p99_ratio_catchup_vs_off": round(catch, 3),
            }
        )
    pooled = {k: _Phase.joined([r[k] for r in per_round]) for k in (OFF, SHIPPING, CATCHUP)}
    pooled_ship, pooled_catch = _p99_ratios({k: v.lat for k, v in pooled.items()})
    m_ship = round(statistics.median(ships), 3)
    m_catch = round(statistics.median(catches), 3)
    return {
        "benchmark": "produce-latency",
        "appends_per_phase": appends,
        "rounds": len(rounds),
        "median_p99_ratio_shipping_vs_off": m_ship,
        "median_p99_ratio_catchup_vs_off": m_catch,
        "p99_ratio_shipping_vs_off": m_ship,
        "p99_ratio_catchup_vs_off": m_catch,
        "phases": {k: _phase_figures(v.lat) for k, v in pooled.items()},
        "slowest_1pct": {k: _tail_breakdown(v) for k, v in pooled.items()},
        "pooled_p99_ratio_shipping_vs_off": round(pooled_ship, 3),
        "pooled_p99_ratio_catchup_vs_off": round(pooled_catch, 3),
        "round_figures": rounds,
        "catchup_records_read": read_records,
        "catchup_records_per_s": round(read_records / max(read_seconds, 1e-9)),
        "settings": settings,
        "targets": {"shipping": 1.5, "catchup": 2.0},
        "met": {"shipping": m_ship <= 1.5, "catchup": m_catch <= 2.0},
        "goal": {"shipping": 1.2},
        "endpoint": endpoint,
        "bucket_cpu": bucket_cpu,
    }
