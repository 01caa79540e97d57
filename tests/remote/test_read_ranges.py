"""``TieredLog.read_batch_ranges``, the batch read's second result form, in process: for
any offset and limits it names exactly the bytes ``read_batches`` returns (same next
offset, same errors), as ranges of the segment files and of the chunk cache's files
(a chunk not written to the cache yet comes from memory); the ranges stay readable
after retention deletes a segment; pages not in the page cache are checked through
``pread``; a truncation waits for the readers that map a segment."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log import LogConfig, OffsetOutOfRangeError, ProducerRecord, TieredLog
from tiered_log.errors import CorruptRangeError, RemoteCorruptionError
from tiered_log.format import naming
from tiered_log.local import ranges
from tiered_log.local.files import ReadFd
from tiered_log.local.ranges import CutGuard, FetchRanges, FileRange, MappedReader
from tiered_log.remote.tier import TierConfig

from .test_read_batches import archived_log, local_log


def same_page(
    log: TieredLog, offset: int, max_records: int, max_bytes: int, upto: int | None = None
) -> FetchRanges:
    """Both forms of one read agree; the ranges form's result (still open)."""
    want = log.read_batches(offset, max_records, max_bytes, upto=upto)
    got = log.read_batch_ranges(offset, max_records, max_bytes, upto=upto)
    assert got.read() == bytes(want.data)
    assert (got.first_offset, got.next_offset, got.count) == (
        want.first_offset,
        want.next_offset,
        want.count,
    )
    assert got.size == len(want.data)
    return got


def wait_cache_written(log: TieredLog) -> None:
    """Until no fetch (prefetches too) and no cache file write is under way."""
    reader = log.remote_tier.reader  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while (reader.cache_writes() or reader.fetch_futures()) and time.monotonic() < deadline:
        time.sleep(0.01)


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(1, 300), min_size=1, max_size=6), min_size=1, max_size=40
    ),
    queries=st.lists(
        st.tuples(
            st.integers(0, 200), st.integers(1, 12), st.integers(1, 20_000), st.integers(0, 3)
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_local_ranges_name_the_bytes_read_batches_returns(
    batches: list[list[int]], queries: list[tuple[int, int, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        log, i = local_log(Path(d), batches)
        try:
            for offset, max_records, max_bytes, cap in queries:
                offset = min(offset, i)
                page = same_page(
                    log,
                    offset,
                    max_records,
                    max_bytes,
                    upto=None if not cap else max(offset, i - cap),
                )
                assert page.file_bytes == page.size  # all of it in files, none in memory
                assert all(isinstance(p, FileRange) for p in page.parts)
                page.close()
        finally:
            log.close()


def test_local_ranges_errors_and_deleted_segments(tmp_path: Path) -> None:
    log = TieredLog(
        tmp_path / "p",
        config=LogConfig(segment_bytes=4096, index_interval_bytes=256),
        tier=TierConfig(retention_ms=3_600_000),
    )
    try:
        for i in range(60):
            # The first 150 records are from 1970: past retention, whose round this log
            # (no remote tier, no shipper) runs only when asked.
            ts = 1_000 if i < 30 else None
            log.append_batch([ProducerRecord(bytes([i]) * 100, timestamp=ts)] * 5)
        with pytest.raises(OffsetOutOfRangeError):
            log.read_batch_ranges(301)
        assert log.read_batch_ranges(300).count == 0
        page = same_page(log, 0, 1000, 1 << 30)
        first = page.parts[0]
        assert isinstance(first, FileRange)
        want = page.read()
        # Retention deletes the first segments: what the page holds is still readable.
        log.tier_once()
        assert log.log_start_offset <= 150 < log.local_segments()[0].next_offset
        assert first.fd.pread(4, 0) != b"" and page.read() == want
        with pytest.raises(OffsetOutOfRangeError):
            log.read_batch_ranges(0)
        page.close()
        assert page.parts == []
        # A damaged batch: the same answers as the bytes form.
        seg = sorted((tmp_path / "p").glob("*.log"))[1]
        data = bytearray(seg.read_bytes())
        data[200] ^= 0xFF
        seg.write_bytes(bytes(data))
        base = int(seg.name.split(".")[0])
        with pytest.raises(CorruptRangeError):
            log.read_batches(base, 10, 1 << 20)
        with pytest.raises(CorruptRangeError):
            log.read_batch_ranges(base, 10, 1 << 20)
        before = same_page(log, 150, 1000, 1 << 20)  # stops before the damage
        assert before.next_offset == base
    finally:
        log.close()


def test_pages_not_in_the_page_cache_are_checked_with_pread(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    fd = ReadFd(path)
    os.fsync(fd.fd)
    reader = MappedReader(fd)
    resident = reader(4096, 100_000)
    assert isinstance(resident, memoryview) and bytes(resident) == fd.pread(100_000, 4096)
    del resident
    reader.release()
    os.posix_fadvise(fd.fd, 0, 0, os.POSIX_FADV_DONTNEED)
    reader = MappedReader(fd)
    cold = reader(4096, 100_000)
    if ranges._resident is not None:
        assert isinstance(cold, bytes)  # read, which also brings the pages in
    assert bytes(cold) == fd.pread(100_000, 4096)
    assert isinstance(reader(4096, 100_000), memoryview)
    assert reader(len(path.read_bytes()) - 10, 100) == fd.pread(100, (1 << 20) - 10)  # past EOF
    reader.release()


def test_a_cut_waits_for_mapped_readers_and_they_for_it() -> None:
    guard = CutGuard()
    guard.enter()
    order: list[str] = []

    def cut() -> None:
        with guard.cutting():
            order.append("cut")
            time.sleep(0.2)
            order.append("cut done")

    def late_reader() -> None:
        guard.enter()
        order.append("late reader")
        guard.exit()

    t = threading.Thread(target=cut)
    t.start()
    time.sleep(0.2)
    late = threading.Thread(target=late_reader)
    late.start()
    time.sleep(0.1)
    assert order == []  # the cut waits for the reader inside, the late one for the cut
    order.append("reader done")
    guard.exit()
    t.join(5)
    late.join(5)
    assert order == ["reader done", "cut", "cut done", "late reader"]


def test_a_walk_back_in_a_grown_segment_does_not_wait_for_a_waiting_cut(tmp_path: Path) -> None:
    """A walk that comes back to a segment it already read (appends grew it meanwhile)
    must not enter its guard again: a cut waiting for the walk's first entry would wait
    forever, and the walk for the cut (found under load: a reader and a truncation of
    the active segment both hung)."""
    path = tmp_path / "f"
    path.write_bytes(b"z" * 8192)
    fd = ReadFd(path)
    guard = CutGuard()
    page = ranges.RangesPage(0)
    page.reader(fd, guard)(0, 10)
    cut_done = threading.Event()

    def cut() -> None:
        with guard.cutting():
            cut_done.set()

    cutter = threading.Thread(target=cut, daemon=True)
    cutter.start()
    deadline = time.monotonic() + 5
    while not guard._cutting and time.monotonic() < deadline:  # the cut waits for the page
        time.sleep(0.01)
    assert guard._cutting and not cut_done.is_set()
    again: list[bytes | memoryview] = []
    walker = threading.Thread(
        target=lambda: again.append(page.reader(fd, guard)(4096, 10)), daemon=True
    )
    walker.start()
    walker.join(5)
    assert again and bytes(again[0]) == b"z" * 10, "the walk waited for the cut"
    assert not cut_done.is_set()
    page.result(1)  # the page lets go once: the cut goes on
    cutter.join(5)
    assert cut_done.is_set()


def test_truncation_during_mapped_reads(tmp_path: Path) -> None:
    """Readers map while a truncation cuts the active segment again and again: every
    read either names the log's bytes or fails as the bytes form would; no fault."""
    log = TieredLog(tmp_path / "p", config=LogConfig(segment_bytes=1 << 20))
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                page = log.read_batch_ranges(0, 10_000, 1 << 20)
                page.close()
            except OffsetOutOfRangeError:
                pass
            except BaseException as exc:  # pragma: no cover - the failure
                errors.append(exc)

    try:
        log.append_batch([b"x" * 1000] * 200)
        threads = [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for n in range(30):
            log.truncate(100 + n)
            log.append_batch([b"y" * 1000] * 100)
        stop.set()
        for t in threads:
            t.join(10)
        assert errors == []
        same_page(log, 0, 10_000, 1 << 20).close()
    finally:
        stop.set()
        log.close()


@settings(max_examples=15, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(1, 400), min_size=1, max_size=8), min_size=2, max_size=30
    ),
    queries=st.lists(
        st.tuples(st.integers(0, 200), st.integers(1, 15), st.integers(1, 20_000)),
        min_size=1,
        max_size=8,
    ),
)
def test_archived_ranges_from_memory_then_from_the_cache_files(
    batches: list[list[int]], queries: list[tuple[int, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        log, n = archived_log(Path(d), batches)
        try:
            assert log.bounds().local_start_offset == n
            for offset, max_records, max_bytes in queries:
                offset = min(offset, n - 1)
                same_page(log, offset, max_records, max_bytes).close()
                wait_cache_written(log)
                page = same_page(log, offset, max_records, max_bytes)  # now from the files
                assert page.file_bytes == page.size
                page.close()
        finally:
            log.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_archived_uncached_is_in_memory_and_damage_answers_alike(
    tmp_path: Path, workers: int
) -> None:
    """Fetched on this process's threads, a chunk is read from memory until its cache
    file is written (in the background: either may come first); fetched by the tier's
    worker process, from the file it wrote. Damage answers alike."""
    log, _ = archived_log(tmp_path, [[200] * 10 for _ in range(40)], worker_processes=workers)
    try:
        # The last segment's object is damaged before any read: a prefetch the first
        # read starts may reach it in the background (on a loaded machine it did), and
        # must then find the damage too, never cache it.
        seg = log.remote_tier.finished_segments[-1]  # type: ignore[union-attr]
        path = (
            tmp_path
            / "bucket"
            / naming.segment_object_key("t-0", seg.base_offset, seg.id, naming.LOG_SUFFIX)
        )
        data = bytearray(path.read_bytes())
        data[100] ^= 0x01
        path.write_bytes(bytes(data))
        page = same_page(log, 0, 5, 1 << 20)  # fetched now
        assert page.size > 0 and page.file_bytes in ((page.size,) if workers else (0, page.size))
        wait_cache_written(log)
        for _ in range(2):
            with pytest.raises(RemoteCorruptionError):
                log.read_batch_ranges(seg.base_offset, 5, 1 << 20)
        # A cached chunk file damaged on disk is refused too, and dropped.
        wait_cache_written(log)
        cached = same_page(log, 0, 5, 1 << 20)
        assert cached.file_bytes == cached.size
        part = cached.parts[0]
        assert isinstance(part, FileRange)
        cache_file = Path(f"/proc/self/fd/{part.fd.fd}").resolve()
        cached.close()
        del part
        raw = bytearray(cache_file.read_bytes())
        raw[60] ^= 0x01
        cache_file.write_bytes(bytes(raw))
        with pytest.raises(RemoteCorruptionError):
            log.read_batch_ranges(0, 5, 1 << 20)
        same_page(log, 0, 5, 1 << 20).close()  # fetched again, intact
    finally:
        log.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_the_archives_last_chunk_is_fetched_once(tmp_path: Path, workers: int) -> None:
    """Reading the last archived chunk fetches it once: its prefetch window is empty
    (the index lookup past the archive's end yields the last chunk again, which the
    window once took as the next one and fetched a second time)."""
    log, n = archived_log(tmp_path, [[100] * 5 for _ in range(30)], worker_processes=workers)
    try:
        page = log.read_batch_ranges(n - 1, 1, 1 << 20)
        assert page.next_offset == n
        page.close()
        wait_cache_written(log)
        assert log.stats()["remote_fetch_requests"] == 1
    finally:
        log.close()
