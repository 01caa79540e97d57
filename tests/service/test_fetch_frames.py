"""``fetch_frames`` (the binary fetch's page builder) in process: for any offset and
limits it returns whole stored batches, from the one holding the offset, holding exactly
the records ``read_range`` decodes from there, and no batch more than the limits need,
across segment boundaries."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log import LogConfig, TieredLog
from tiered_log.format.records import batch_header, batch_table, decode_records
from tiered_log.service.fetch import FrameBatch, fetch_frames


def check_page(log: TieredLog, page: FrameBatch, offset: int, max_records: int,
               max_bytes: int) -> None:
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
@given(batches=st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=6), min_size=1,
                        max_size=40),
       queries=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 12),
                                  st.integers(1, 20_000)), min_size=1, max_size=12))
def test_fetch_frames_pages_whole_batches(batches: list[list[int]],
                                          queries: list[tuple[int, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = TieredLog(Path(d) / "p", config=LogConfig(segment_bytes=8192,
                                                         index_interval_bytes=256))
        try:
            i = 0
            for sizes in batches:
                log.append_batch([bytes([(i + k) % 251]) * n for k, n in enumerate(sizes)])
                i += len(sizes)
            for offset, max_records, max_bytes in queries:
                offset = min(offset, i - 1)
                check_page(log, fetch_frames(log, offset, max_records, max_bytes), offset,
                           max_records, max_bytes)
        finally:
            log.close()


def test_pages_of_one_big_batch_and_of_small_ones(tmp_path: Path) -> None:
    """A page from inside a batch starts with that whole batch; small batches fill a page
    up to the limits."""
    log = TieredLog(tmp_path / "p", config=LogConfig(segment_bytes=1 << 20,
                                                      index_interval_bytes=512))
    try:
        log.append_batch([bytes([i % 251]) * (20 + i % 90) for i in range(3000)])
        for i in range(300):
            log.append(bytes([i % 251]) * 50)
        for offset in range(0, 3290, 37):
            for max_records, max_bytes in ((10, 1 << 20), (500, 1 << 20), (400, 3000)):
                check_page(log, fetch_frames(log, offset, max_records, max_bytes), offset,
                           max_records, max_bytes)
    finally:
        log.close()
