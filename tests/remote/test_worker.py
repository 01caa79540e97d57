"""The tier's worker processes (issue 18: producers shielded from tiering): a segment's
upload and scan run in another process (its pid is not ours), their errors arrive whole,
a worker killed with SIGKILL costs one retriable round and nothing else, and a store
only this process can use stays in-process."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.errors import (
    CorruptRecordError,
    RemoteCorruptionError,
    RemoteStorageError,
    TieredLogError,
)
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig
from tiered_log.remote.worker import TierWorker, shared_worker, spec_of

from .fake_store import MemoryStorage

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)


def fill(tlog: TieredLog, n: int) -> None:
    for i in range(0, n, 50):
        tlog.append_batch([ProducerRecord(b"v%06d" % o + b"x" * 200) for o in range(i, i + 50)])
    tlog.roll()


def open_log(d: Path, storage: RemoteStorage, processes: int = 1) -> TieredLog:
    return TieredLog(
        d,
        log_id="w-0",
        storage=storage,
        config=SMALL,
        tier=TierConfig(chunk_bytes=4096, worker_processes=processes),
        start_shipper=False,
    )


def test_errors_cross_a_process_whole() -> None:
    err = RemoteStorageError("the bucket is away", retriable=True)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is RemoteStorageError and back.message == err.message
    assert back.retriable is True and str(back) == str(err)
    bad = pickle.loads(pickle.dumps(CorruptRecordError("damaged at 12")))
    assert isinstance(bad, TieredLogError) and bad.code == "corrupt_record"


def test_copies_run_in_a_worker_and_ship_the_same_objects(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    tlog = open_log(tmp_path / "a", LocalDirStorage(bucket))
    try:
        fill(tlog, 1000)
        assert tlog.tier_once() > 0
        value = tlog.read(0).value
        assert value is not None and value.startswith(b"v000000")
        shipped = sorted(p.name for p in bucket.rglob("*") if p.is_file())
    finally:
        tlog.close()
    worker = shared_worker(1, TierConfig().worker_nice)
    assert worker is not None
    pids = worker.pids()
    assert pids and os.getpid() not in pids  # the work ran elsewhere
    # ... at a lower CPU priority: producers first when the CPU is short.
    assert all(
        os.getpriority(os.PRIO_PROCESS, p) - os.getpriority(os.PRIO_PROCESS, 0) == 10 for p in pids
    )
    # The same log shipped on this process's threads puts the same kinds of objects.
    bucket2 = tmp_path / "bucket2"
    plain = open_log(tmp_path / "b", LocalDirStorage(bucket2), processes=0)
    try:
        fill(plain, 1000)
        assert plain.tier_once() > 0
        same = sorted(p.name for p in bucket2.rglob("*") if p.is_file())
    finally:
        plain.close()
    assert [n.split("-")[0] + n.rsplit(".", 1)[-1] for n in shipped if naming.RLI_SUFFIX in n] == [
        n.split("-")[0] + n.rsplit(".", 1)[-1] for n in same if naming.RLI_SUFFIX in n
    ]


def test_a_damaged_segment_fails_in_the_worker_and_is_not_shipped(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    tlog = open_log(tmp_path / "a", LocalDirStorage(bucket))
    try:
        fill(tlog, 300)
        first = tlog.bounds().local_start_offset
        path = naming.segment_path(tmp_path / "a", first, naming.LOG_SUFFIX)
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"\xff" * 8)
        with pytest.raises(CorruptRecordError):
            tlog.tier_once()
        assert not [p for p in bucket.rglob("*.rli")]
    finally:
        tlog.close()


def test_a_killed_worker_costs_one_retriable_round(tmp_path: Path) -> None:
    worker = TierWorker(1)
    spec = spec_of(LocalDirStorage(tmp_path / "bucket"))
    assert spec is not None
    src = tmp_path / "src"
    src.write_bytes(b"x" * 1000)
    try:
        assert worker.upload(spec, "a/one", src) == 1000
        for pid in worker.pids():
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(RemoteStorageError) as got:
            for _ in range(50):  # until the pool sees its worker gone
                worker.upload(spec, "a/two", src)
        assert got.value.retriable
        assert worker.upload(spec, "a/three", src) == 1000  # a new pool
        assert (tmp_path / "bucket" / "a" / "three").read_bytes() == b"x" * 1000
    finally:
        worker.close()


def test_a_store_only_this_process_has_is_used_here(tmp_path: Path) -> None:
    assert spec_of(MemoryStorage()) is None
    tlog = open_log(tmp_path / "a", MemoryStorage())
    try:
        fill(tlog, 500)
        assert tlog.tier_once() > 0
        value = tlog.read(0).value
        assert value is not None and value.startswith(b"v000000")
    finally:
        tlog.close()


def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    """The worker is a plain child process: it does not import the caller's script
    again (as multiprocessing's spawn and forkserver would, running its top level)."""
    script = tmp_path / "ship.py"
    script.write_text(f"""
from pathlib import Path
from tiered_log import LogConfig, ProducerRecord
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig
from tiered_log.partition import TieredLog
print("top level ran", flush=True)
log = TieredLog(Path({str(tmp_path / "log")!r}), log_id="s-0",
                storage=LocalDirStorage({str(tmp_path / "bucket")!r}),
                config=LogConfig(segment_bytes=4096), tier=TierConfig(worker_processes=1),
                start_shipper=False)
log.append_batch([ProducerRecord(b"x" * 100) for _ in range(100)])
log.roll()
print("shipped", log.tier_once(), flush=True)
log.close()
""")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("top level ran") == 1 and "shipped" in done.stdout


def _written_by(pid: int) -> int:
    """Bytes the process ``pid`` has written with write(2) and the like (its wchar)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar")


def archived(tmp_path: Path, n: int = 2000) -> TieredLog:
    """A log whose sealed segments are shipped and dropped locally (fs store)."""
    tlog = TieredLog(
        tmp_path / "log",
        log_id="w-0",
        storage=LocalDirStorage(tmp_path / "bucket"),
        config=SMALL,
        tier=TierConfig(chunk_bytes=4096, worker_processes=1, local_retention_bytes=0),
        start_shipper=False,
    )
    fill(tlog, n)
    while tlog.tier_once():
        pass
    tlog.maintain()
    assert tlog.bounds().local_start_offset > n // 2
    return tlog


def test_archived_reads_fetch_in_the_worker(tmp_path: Path) -> None:
    """A catch-up read's GETs, checks and cache writes happen in the worker: its process
    writes the chunk files (this one does not), and both read forms see every record."""
    tlog = archived(tmp_path)
    try:
        worker = shared_worker(1, TierConfig().worker_nice)
        assert worker is not None and worker.pids()
        pid = worker.pids()[0]
        before = _written_by(pid)
        local_start = tlog.bounds().local_start_offset
        off, seen = 0, 0
        while off < local_start:
            page = tlog.read_batch_ranges(off, 500, 64 << 10)
            assert page.count > 0
            off = page.next_offset
            page.close()
        cache = tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR
        cached = sum(p.stat().st_size for p in cache.iterdir())
        assert cached > 0 and _written_by(pid) - before >= cached
        for r in tlog.read_range(0, local_start, 1 << 30):
            assert r.value is not None and r.value.startswith(b"v%06d" % r.offset)
            seen += 1
        assert seen == local_start
        assert tlog.stats()["remote_fetch_requests"] > 0
    finally:
        tlog.close()


def test_a_damaged_object_is_refused_and_not_cached(tmp_path: Path) -> None:
    """The read answers RemoteCorruptionError as it would in-process (the reader finds
    the damage: the worker does not check; the cache file is dropped, see
    test_fetch_pipeline); the rest of the archive reads."""
    tlog = archived(tmp_path)
    try:
        objects = sorted((tmp_path / "bucket").rglob("*" + naming.LOG_SUFFIX))
        data = bytearray(objects[1].read_bytes())
        data[200] ^= 0x01
        objects[1].write_bytes(bytes(data))
        base = int(objects[1].name.split("-")[0])
        with pytest.raises(RemoteCorruptionError):
            tlog.read_batch_ranges(base, 5, 1 << 20)
        page = tlog.read_batch_ranges(0, 5, 1 << 20)
        assert page.count > 0 and page.read()
        page.close()
    finally:
        tlog.close()


def test_a_worker_killed_under_reads_costs_a_retry(tmp_path: Path) -> None:
    tlog = archived(tmp_path)
    try:
        worker = shared_worker(1, TierConfig().worker_nice)
        assert worker is not None
        for pid in worker.pids():
            os.kill(pid, signal.SIGKILL)
        local_start = tlog.bounds().local_start_offset
        off, failures = 0, 0
        while off < local_start:
            try:
                page = tlog.read_batch_ranges(off, 500, 64 << 10)
            except RemoteStorageError as exc:
                assert exc.retriable
                failures += 1
                assert failures < 5
                continue
            off = page.next_offset
            page.close()
        assert worker.pids() and all(p > 0 for p in worker.pids())
    finally:
        tlog.close()
