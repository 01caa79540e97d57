"""``TieredLog.read_batches`` (what the binary fetch sends) in process: for any offset and
limits it returns whole stored batches, from the one holding the offset, holding exactly
the records ``read_range`` decodes from there, and no batch more than the limits need,
across segment boundaries; from the remote tier the same (batches sent as stored,
verified, never decoded), with truncation inside a batch and damaged chunks."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log import DataLossError, LogConfig, OffsetOutOfRangeError, TieredLog
from tiered_log.errors import RemoteCorruptionError
from tiered_log.format import naming
from tiered_log.format.records import (
    FetchData,
    ProducerRecord,
    batch_header,
    batch_table,
    decode_records,
)
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig


def check_page(
    log: TieredLog, page: FetchData, offset: int, max_records: int, max_bytes: int
) -> None:
    """``page`` holds whole verified batches whose records from ``offset`` are the log's,
    at least one, and it stops at the first batch that reaches a limit."""
    data = bytes(page.data)
    infos, end = batch_table(data, batch_header(data)[0])
    assert end == len(data)
    assert infos[0].base_offset <= offset < infos[0].next_offset
    got, pos, _ = decode_records(data, start_offset=offset)
    assert pos == len(data)
    want = log.read_range(offset, len(got), 1 << 62)
    assert [(r.offset, r.value) for r in got] == [(r.offset, r.value) for r in want]
    assert page.count == len(got) >= 1 and page.next_offset == offset + len(got)
    last = infos[-1]
    # Without its last batch the page was still under both limits.
    assert len(got) - (last.next_offset - max(last.base_offset, offset)) < max_records
    assert len(data) - last.size < max_bytes


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(1, 300), min_size=1, max_size=6), min_size=1, max_size=40
    ),
    queries=st.lists(
        st.tuples(st.integers(0, 200), st.integers(1, 12), st.integers(1, 20_000)),
        min_size=1,
        max_size=12,
    ),
)
def test_read_batches_pages_whole_batches(
    batches: list[list[int]], queries: list[tuple[int, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        log, i = local_log(Path(d), batches)
        try:
            for offset, max_records, max_bytes in queries:
                offset = min(offset, i - 1)
                check_page(
                    log,
                    log.read_batches(offset, max_records, max_bytes),
                    offset,
                    max_records,
                    max_bytes,
                )
        finally:
            log.close()


def test_pages_of_one_big_batch_and_of_small_ones(tmp_path: Path) -> None:
    """A page from inside a batch starts with that whole batch; small batches fill a page
    up to the limits."""
    log = TieredLog(
        tmp_path / "p", config=LogConfig(segment_bytes=1 << 20, index_interval_bytes=512)
    )
    try:
        log.append_batch([bytes([i % 251]) * (20 + i % 90) for i in range(3000)])
        for i in range(300):
            log.append(bytes([i % 251]) * 50)
        for offset in range(0, 3290, 37):
            for max_records, max_bytes in ((10, 1 << 20), (500, 1 << 20), (400, 3000)):
                check_page(
                    log,
                    log.read_batches(offset, max_records, max_bytes),
                    offset,
                    max_records,
                    max_bytes,
                )
    finally:
        log.close()


# ---- from the remote tier ---------------------------------------------------------------

ARCHIVE_SEGMENTS = LogConfig(segment_bytes=8192, index_interval_bytes=256)


def local_log(root: Path, batches: list[list[int]]) -> tuple[TieredLog, int]:
    """A local log (8 KiB segments) with one batch per entry of ``batches``, record ``i``
    being ``bytes([i % 251]) * size``; and its record count."""
    log = TieredLog(root / "p", config=LogConfig(segment_bytes=8192, index_interval_bytes=256))
    i = 0
    for sizes in batches:
        log.append_batch([bytes([(i + k) % 251]) * n for k, n in enumerate(sizes)])
        i += len(sizes)
    return log, i


def archived_log(
    root: Path, batches: list[list[int]], worker_processes: int = 1
) -> tuple[TieredLog, int]:
    """A log whose every sealed segment is shipped and dropped locally; record ``i`` is
    ``bytes([i % 251]) * size`` with timestamp ``1000 + i``. ``worker_processes`` 0:
    uploads and fetches on this process's threads."""
    log = TieredLog(
        root / "log",
        log_id="t-0",
        storage=LocalDirStorage(root / "bucket"),
        config=ARCHIVE_SEGMENTS,
        tier=TierConfig(
            local_retention_bytes=0,
            chunk_bytes=2048,
            fetch_bytes=8192,
            prefetch_bytes=8192,
            worker_processes=worker_processes,
        ),
        start_shipper=False,
    )
    i = 0
    for sizes in batches:
        log.append_batch(
            [
                ProducerRecord(bytes([(i + k) % 251]) * n, timestamp=1000 + i + k)
                for k, n in enumerate(sizes)
            ]
        )
        i += len(sizes)
    log.flush()
    log.roll()
    log.tier_once()
    return log, i


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(1, 400), min_size=1, max_size=8), min_size=2, max_size=40
    ),
    queries=st.lists(
        st.tuples(st.integers(0, 250), st.integers(1, 15), st.integers(1, 20_000)),
        min_size=1,
        max_size=10,
    ),
)
def test_remote_pages_are_whole_verified_batches(
    batches: list[list[int]], queries: list[tuple[int, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        log, n = archived_log(Path(d), batches)
        try:
            local_start = log.bounds().local_start_offset
            assert local_start == n  # everything is archived
            for offset, max_records, max_bytes in queries:
                offset = min(offset, n - 1)
                page = log.read_batches(offset, max_records, max_bytes)
                check_page(log, page, offset, max_records, max_bytes)
                recs = decode_records(bytes(page.data), start_offset=offset)[0]
                assert all(r.timestamp == 1000 + r.offset for r in recs)
        finally:
            log.close()


def test_truncation_inside_an_archived_batch_is_never_sent(tmp_path: Path) -> None:
    log, _ = archived_log(tmp_path, [[100] * 30 for _ in range(20)])
    try:
        log.truncate(317)  # inside the batch [300, 330)
        b = log.bounds()
        assert b.next_offset == 317 and b.local_start_offset == 317
        fetched = log.read_remote_batches(290, 1000, 1 << 20)
        data, nxt = fetched.data, fetched.next_offset
        assert nxt == 317
        recs = decode_records(data, start_offset=290)[0]
        assert [r.offset for r in recs] == list(range(290, 317))
        assert batch_header(data)[0] == 270  # the first batch is sent whole
        with pytest.raises(OffsetOutOfRangeError):
            log.read_batches(318, 10, 1 << 20)
        assert log.read_batches(317, 10, 1 << 20).count == 0
        with pytest.raises(DataLossError):
            log.read_remote_batches(317, 10, 1 << 20)  # not in the remote tier
    finally:
        log.close()


def test_damaged_remote_chunk_raises_and_is_not_cached(tmp_path: Path) -> None:
    log, _ = archived_log(tmp_path, [[200] * 10 for _ in range(40)])
    try:
        seg = log.remote_tier.finished_segments[1]  # type: ignore[union-attr]
        path = (
            tmp_path
            / "bucket"
            / naming.segment_object_key("t-0", seg.base_offset, seg.id, naming.LOG_SUFFIX)
        )
        data = bytearray(path.read_bytes())
        data[100] ^= 0x01
        path.write_bytes(bytes(data))
        for _ in range(2):  # nothing damaged was kept in the cache
            with pytest.raises(RemoteCorruptionError):
                log.read_batches(seg.base_offset, 5, 1 << 20)
        # Pages before the damaged segment are fine.
        page = log.read_batches(0, 5, 1 << 20)
        assert page.count >= 5
    finally:
        log.close()
