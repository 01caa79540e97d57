"""The archive reader's fetch pipeline: group fetches start in read order, at most
``FETCH_DEPTH`` at once (a group a reader waits for first); a sequential read fetches
every chunk once and nothing past the archive's end; the tier's worker hands chunks
over unchecked and the reader checks what it serves, so a chunk damaged in the bucket
or in its cache file after the hand-over is refused (and dropped), never served; a
failed fetch answers as it does on this process's threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.errors import RemoteCorruptionError, RemoteStorageError
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.cache import chunk_file_name
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.limits import FETCH_DEPTH
from tiered_log.remote.tier import TierConfig

from .fake_store import MemoryStorage

SEGMENT = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)


def archived(root: Path, storage: object, workers: int, n: int = 1500) -> TieredLog:
    """A log of ``n`` records of 200 bytes whose sealed segments are all shipped and
    dropped locally. Chunks of 4 KiB, a group per segment (16 KiB), a window of
    four groups."""
    tlog = TieredLog(
        root / "log",
        log_id="p-0",
        storage=storage,  # type: ignore[arg-type]
        config=SEGMENT,
        tier=TierConfig(
            chunk_bytes=4096,
            fetch_bytes=16 * 1024,
            prefetch_bytes=64 * 1024,
            worker_processes=workers,
            local_retention_bytes=0,
            compression="none",  # fetched bytes and groups are counted in the log's bytes
        ),
        start_shipper=False,
    )
    for i in range(0, n, 50):
        tlog.append_batch([ProducerRecord(b"v%06d" % o + b"x" * 193) for o in range(i, i + 50)])
    tlog.roll()
    while tlog.tier_once():
        pass
    tlog.maintain()
    assert tlog.bounds().local_start_offset > n // 2
    return tlog


def read_all(tlog: TieredLog) -> int:
    """Read the archive from its start with the ranges form; the records read."""
    end = tlog.bounds().local_start_offset
    off = 0
    while off < end:
        page = tlog.read_batch_ranges(off, 100, 64 << 10)
        assert page.count > 0
        off = page.next_offset
        page.close()
    return off


def settle(tlog: TieredLog) -> None:
    """Until no fetch (prefetches too) and no cache file write is under way."""
    reader = tlog.remote_tier.reader  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while (reader.cache_writes() or reader.fetch_futures()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not reader.fetch_futures()


def archived_bytes(tlog: TieredLog) -> int:
    segments = tlog.remote_tier.finished_segments  # type: ignore[union-attr]
    return sum(int(s.size) for s in segments)


def test_groups_are_fetched_in_read_order_at_most_depth_at_once(tmp_path: Path) -> None:
    """Each GET is held up a while: no more than FETCH_DEPTH overlap, and the objects
    are fetched in the order they are read, each once."""
    store = MemoryStorage()
    tlog = archived(tmp_path, store, workers=0)
    spans: list[tuple[float, float, str]] = []
    lock = threading.Lock()

    def slow_get(op: str, key: str) -> None:
        if op == "get" and key.endswith(naming.LOG_SUFFIX):
            t0 = time.monotonic()
            time.sleep(0.05)
            with lock:
                spans.append((t0, time.monotonic(), key))

    store.before = slow_get
    try:
        read_all(tlog)
        settle(tlog)
    finally:
        tlog.close()
    assert len(spans) >= 2 * FETCH_DEPTH
    most = max(sum(1 for a, b, _ in spans if a <= t < b) for t, _, _ in spans)
    assert most <= FETCH_DEPTH
    keys = [k for _, _, k in sorted(spans)]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_a_group_a_reader_waits_for_goes_first(tmp_path: Path) -> None:
    """A reader far ahead of the window another reader queued is not served after it:
    its group starts next."""
    store = MemoryStorage()
    tlog = archived(tmp_path, store, workers=0, n=3000)
    order: list[str] = []
    gate = threading.Event()

    def held_get(op: str, key: str) -> None:
        if op == "get" and key.endswith(naming.LOG_SUFFIX):
            order.append(key)
            gate.wait(10)

    store.before = held_get
    try:
        first = threading.Thread(target=tlog.read_batch_ranges, args=(0, 10, 1 << 20))
        first.start()  # its group and a window of three more: two run, the rest queue
        deadline = time.monotonic() + 10
        while len(order) < FETCH_DEPTH and time.monotonic() < deadline:
            time.sleep(0.01)
        far = tlog.bounds().local_start_offset - 1
        second = threading.Thread(target=tlog.read_batch_ranges, args=(far, 10, 1 << 20))
        second.start()
        time.sleep(0.2)  # its group is queued by now
        gate.set()
        first.join(10)
        second.join(10)
        settle(tlog)
    finally:
        gate.set()
        tlog.close()
    last = max(tlog.remote_tier.finished_segments, key=lambda s: s.base_offset)  # type: ignore[union-attr]
    key = naming.segment_object_key("p-0", last.base_offset, last.id, naming.LOG_SUFFIX)
    # Started in the first round after the two held ones, ahead of the rest of the
    # first reader's window (queued before it).
    assert key in order and order.index(key) < 2 * FETCH_DEPTH


def test_a_sequential_read_fetches_each_chunk_once_and_stops_at_the_end(tmp_path: Path) -> None:
    tlog = archived(tmp_path, LocalDirStorage(tmp_path / "bucket"), workers=1)
    try:
        n = read_all(tlog)
        settle(tlog)
        stats = tlog.stats()
        assert stats["remote_fetch_bytes"] == archived_bytes(tlog)
        requests = stats["remote_fetch_requests"]
        assert requests == len(tlog.remote_tier.finished_segments)  # type: ignore[union-attr]
        page = tlog.read_batch_ranges(n - 1, 1, 1 << 20)  # the end again: from the cache
        page.close()
        settle(tlog)
        assert tlog.stats()["remote_fetch_requests"] == requests
    finally:
        tlog.close()


def _chunk_file(tlog: TieredLog, root: Path, offset: int) -> tuple[Path, int]:
    """The cache file of the archived chunk holding ``offset``, and the chunk's first
    offset."""
    entry = next(tlog.remote_tier.index.entries_from(offset))  # type: ignore[union-attr]
    name = chunk_file_name(entry.object_key, entry.position, entry.data_length)
    return root / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR / name, entry.first_offset


def test_a_chunk_damaged_after_the_hand_over_is_refused_and_fetched_again(
    tmp_path: Path,
) -> None:
    """The worker wrote a prefetched chunk's file and handed it over; the file is
    damaged before anyone reads it: the read that meets it answers
    RemoteCorruptionError, the file is dropped, and the next read fetches the chunk
    again, intact."""
    tlog = archived(tmp_path, LocalDirStorage(tmp_path / "bucket"), workers=1)
    try:
        tlog.read_batch_ranges(0, 10, 1 << 20).close()  # prefetches the window
        settle(tlog)
        path, first = _chunk_file(tlog, tmp_path, 150)
        assert path.exists()  # handed over, not read yet
        with open(path, "r+b") as f:  # in place, same length, as a bad disk would
            f.seek(path.stat().st_size // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x01]))
        with pytest.raises(RemoteCorruptionError):
            tlog.read_batch_ranges(first, 1000, 1 << 20)
        assert not path.exists()
        recs = tlog.read_range(first, 1000, 1 << 20)
        assert [r.value for r in recs] == [
            b"v%06d" % o + b"x" * 193 for o in range(first, first + len(recs))
        ]
        assert recs[-1].offset >= first + 15  # past the damaged chunk
    finally:
        tlog.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_damage_in_the_bucket_is_refused_and_no_cache_file_stays(
    tmp_path: Path, workers: int
) -> None:
    """Unchecked in the worker, a damaged chunk is written to the cache; the reader
    refuses it (RemoteCorruptionError, as on this process's threads) and drops the file."""
    tlog = archived(tmp_path, LocalDirStorage(tmp_path / "bucket"), workers=workers)
    try:
        seg = tlog.remote_tier.finished_segments[1]  # type: ignore[union-attr]
        key = naming.segment_object_key("p-0", seg.base_offset, seg.id, naming.LOG_SUFFIX)
        obj = tmp_path / "bucket" / key
        data = bytearray(obj.read_bytes())
        data[300] ^= 0x01
        obj.write_bytes(bytes(data))
        for _ in range(2):
            with pytest.raises(RemoteCorruptionError):
                tlog.read_batch_ranges(seg.base_offset, 5, 1 << 20)
        settle(tlog)
        path, _ = _chunk_file(tlog, tmp_path, seg.base_offset)
        assert not path.exists()
        page = tlog.read_batch_ranges(0, 5, 1 << 20)  # the rest still reads
        assert page.count > 0
        page.close()
    finally:
        tlog.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_a_missing_object_answers_the_same_error_either_way(tmp_path: Path, workers: int) -> None:
    """An archived object gone from the bucket: the read answers the store's error (the
    same type on both fetch paths), its queued neighbours are not left waiting, and
    reads elsewhere go on."""
    tlog = archived(tmp_path, LocalDirStorage(tmp_path / "bucket"), workers=workers)
    try:
        seg = tlog.remote_tier.finished_segments[2]  # type: ignore[union-attr]
        key = naming.segment_object_key("p-0", seg.base_offset, seg.id, naming.LOG_SUFFIX)
        (tmp_path / "bucket" / key).unlink()
        with pytest.raises(RemoteStorageError) as err:
            tlog.read_batch_ranges(seg.base_offset, 5, 1 << 20)
        assert type(err.value).__name__ == "RemoteObjectNotFoundError"
        settle(tlog)
        page = tlog.read_batch_ranges(0, 5, 1 << 20)
        assert page.count > 0
        page.close()
    finally:
        tlog.close()
