"""``fetch_frames`` (the binary fetch's page builder) in process: for any offset and
limits it returns exactly the frames ``read_range`` decodes, across segment boundaries,
whether the page's end is found through the index or by walking the frames."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log import LogConfig, TieredLog
from tiered_log.format.records import decode_frames
from tiered_log.service.fetch import fetch_frames


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=120),
       queries=st.lists(st.tuples(st.integers(0, 130), st.integers(1, 12),
                                  st.integers(1, 20_000)), min_size=1, max_size=12))
def test_fetch_frames_is_read_range_as_bytes(sizes: list[int],
                                             queries: list[tuple[int, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = TieredLog(Path(d) / "p", config=LogConfig(segment_bytes=8192,
                                                         index_interval_bytes=256))
        try:
            for i, n in enumerate(sizes):
                log.append(bytes([i % 251]) * n)
            for offset, max_records, max_bytes in queries:
                if offset >= len(sizes):
                    offset = len(sizes) - 1
                want = log.read_range(offset, max_records, max_bytes)
                page = fetch_frames(log, offset, max_records, max_bytes)
                got, pos, _ = decode_frames(bytes(page.data))
                assert pos == len(page.data)
                assert [(r.offset, r.value) for r in got] == [(r.offset, r.value) for r in want]
                assert page.count == len(got) and page.next_offset == offset + len(got)
        finally:
            log.close()


def test_pages_inside_a_segment_come_from_one_read(tmp_path: Path) -> None:
    """Pages that end inside a segment (the index shortcut) equal decoded reads, also
    with a max_bytes that cuts the page before max_records."""
    log = TieredLog(tmp_path / "p", config=LogConfig(segment_bytes=1 << 20,
                                                      index_interval_bytes=512))
    try:
        log.append_batch([bytes([i % 251]) * (20 + i % 90) for i in range(3000)])
        for offset in range(0, 2990, 37):
            for max_records, max_bytes in ((10, 1 << 20), (500, 1 << 20), (400, 3000)):
                want = log.read_range(offset, max_records, max_bytes)
                page = fetch_frames(log, offset, max_records, max_bytes)
                got, _, _ = decode_frames(bytes(page.data))
                assert [(r.offset, r.value) for r in got] == [(r.offset, r.value) for r in want]
    finally:
        log.close()
