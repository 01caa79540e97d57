"""A copy's scan of a store file, a window at a time, finds exactly the batches (and the
damage) that verifying the whole file at once finds, whatever the window."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.format.records import ProducerRecord, batch_table, encode_batch
from tiered_log.remote.manifest import scan_store


def store_bytes(batches: list[list[int]], base: int) -> bytes:
    out = bytearray()
    off = base
    for sizes in batches:
        recs = [
            ProducerRecord(bytes([(off + i) % 251]) * n, timestamp=1000 + off + i)
            for i, n in enumerate(sizes)
        ]
        out += encode_batch(off, recs, 0, 1 << 62).data
        off += len(sizes)
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(1, 3000), min_size=1, max_size=5), min_size=1, max_size=25
    ),
    window=st.integers(28, 9000),
    flip=st.none() | st.floats(0, 1, exclude_max=True),
    cut=st.integers(0, 40),
)
def test_windowed_scan_equals_whole_scan(
    batches: list[list[int]], window: int, flip: float | None, cut: int
) -> None:
    data = bytearray(store_bytes(batches, 500))
    if flip is not None:  # a damaged byte anywhere
        data[int(flip * len(data))] ^= 0x40
    data = data[: max(0, len(data) - cut)]  # a torn tail
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.log"
        path.write_bytes(bytes(data) + b"\xff" * 100)  # bytes past `size` are not read
        got = scan_store(path, len(data), 500, window)
    assert got == batch_table(bytes(data), 500)
