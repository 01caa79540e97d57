"""TieredLog end to end: shipping, transparent reads, retention, truncation, rebuild.

Runs against both backends: the local-directory store and S3 through moto's threaded
server on 127.0.0.1 (real HTTP, real boto3).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest

from tiered_log import LogConfig, OffsetOutOfRangeError, ProducerRecord, RemoteCorruptionError
from tiered_log.format import naming
from tiered_log.format.records import HEADER_SIZE, batch_table
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.snapshot import snapshot_key
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)


def value_for(offset: int) -> bytes:
    return hashlib.sha256(str(offset).encode()).digest() * (1 + offset % 7)


def produce(tlog: TieredLog, n: int, ts0: int = 1_000_000, batch_records: int = 50) -> None:
    start = tlog.next_offset
    batch = []
    for o in range(start, start + n):
        key = f"k{o}".encode() if o % 3 else None
        headers = (("h", str(o).encode()),) if o % 5 == 0 else ()
        batch.append(ProducerRecord(value_for(o), key=key, headers=headers, timestamp=ts0 + o * 10))
        if len(batch) == batch_records:
            tlog.append_batch(batch)
            batch = []
    if batch:
        tlog.append_batch(batch)
    tlog.flush()


def check_record(rec, o: int, ts0: int = 1_000_000) -> None:  # type: ignore[no-untyped-def]
    assert rec.offset == o
    assert rec.value == value_for(o)
    assert rec.timestamp == ts0 + o * 10
    assert rec.key == (f"k{o}".encode() if o % 3 else None)
    assert rec.headers == ((("h", str(o).encode()),) if o % 5 == 0 else ())


def read_all_checked(tlog: TieredLog, end: int, max_records: int = 50) -> None:
    """Read offsets 0 .. end-1 in order, ``max_records`` a call, and check every record."""
    o = 0
    while o < end:
        recs = tlog.read_range(o, max_records=max_records, max_bytes=1 << 20)
        assert recs and recs[0].offset == o
        for r in recs:
            check_record(r, r.offset)
        o = recs[-1].offset + 1


def remote_end(tlog: TieredLog) -> int:
    """The log's remote end offset: a log's own bounds always carry it (only a client's
    copy has None there)."""
    end = tlog.bounds().remote_end_offset
    assert end is not None
    return end


def open_log(path: Path, storage: RemoteStorage, **tier: Any) -> TieredLog:
    cfg = {"chunk_bytes": 2048, "fetch_bytes": 8192, "prefetch_bytes": 8192, **tier}
    return TieredLog(
        path,
        log_id="orders-0",
        storage=storage,
        config=SMALL,
        tier=TierConfig(**cfg),
        start_shipper=False,
    )


def test_ship_drop_local_read_back_everything(tmp_path: Path, storage: RemoteStorage) -> None:
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    produce(tlog, 2000)
    tlog.roll()
    copied = tlog.tier_once()
    assert copied >= 5
    b = tlog.bounds()
    assert b.log_start_offset == 0
    assert (
        b.local_start_offset == b.remote_end_offset == 2000
    )  # every sealed segment dropped locally
    recs = []
    o = 0
    while o < 2000:
        got = tlog.read_range(o, max_records=333, max_bytes=64 * 1024)
        assert got and got[0].offset == o
        recs.extend(got)
        o = got[-1].offset + 1
    assert len(recs) == 2000
    for r in recs:
        check_record(r, r.offset)
    # Checksums equal the ones the frames were written with (recomputed on read).
    assert all(r.checksum for r in recs)
    d = tlog.describe()
    assert d["copy_lag_segments"] == 0 and d["remote_fetch_requests"] > 0
    # Random access too.
    for o in (0, 1, 777, 1999):
        check_record(tlog.read(o), o)
    tlog.close()


def test_timestamp_lookup_lands_in_remote_segments(tmp_path: Path, storage: RemoteStorage) -> None:
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    produce(tlog, 1000)
    tlog.roll()
    tlog.tier_once()
    assert tlog.bounds().local_start_offset == 1000
    for o in (0, 1, 250, 999):
        assert tlog.offset_for_timestamp(1_000_000 + o * 10) == o
        assert tlog.offset_for_timestamp(1_000_000 + o * 10 - 5) == o if o else True
    assert tlog.offset_for_timestamp(0) == 0
    produce(tlog, 10)
    assert tlog.offset_for_timestamp(1_000_000 + 1005 * 10) == 1005  # local
    assert tlog.offset_for_timestamp(10**13) is None
    tlog.close()


def test_local_retention_waits_for_copy_and_total_retention_moves_start(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = open_log(tmp_path / "log", storage, remote_enabled=True, local_retention_bytes=0)
    produce(tlog, 1500)
    tlog.roll()
    # Nothing copied yet (a round asked to stop copies nothing but still applies
    # retention): local retention must not drop anything.
    stopped = threading.Event()
    stopped.set()
    assert tlog.tier_once(stopped) == 0
    assert tlog.bounds().local_start_offset == 0
    tlog.tier_once()
    assert tlog.bounds().local_start_offset == 1500
    remote_before = len(tlog.remote_tier.finished_segments)  # type: ignore[union-attr]
    tlog.close()
    # Now total retention by bytes: keep about 20 KiB.
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0, retention_bytes=20 * 1024)
    tlog.tier_once()
    start = tlog.log_start_offset
    assert start > 0
    assert len(tlog.remote_tier.finished_segments) < remote_before  # type: ignore[union-attr]
    with pytest.raises(OffsetOutOfRangeError):
        tlog.read(0)
    for o in range(start, 1500, 97):
        check_record(tlog.read(o), o)
    # Deleted segments left no objects behind.
    keys = [i.key for i in storage.list(naming.segment_objects_prefix("orders-0"))]
    remote = tlog.remote_tier
    assert remote is not None
    assert len(keys) == len(naming.SEGMENT_OBJECT_SUFFIXES) * len(remote.finished_segments)
    tlog.close()
    # Total retention by time: everything is old (timestamps near 1970).
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0, retention_ms=1000)
    produce(tlog, 5, ts0=10**13)
    tlog.tier_once()
    assert tlog.log_start_offset == 1500
    assert tlog.read(1500).offset == 1500
    tlog.close()


def test_truncate_below_local_start(tmp_path: Path, storage: RemoteStorage) -> None:
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    produce(tlog, 1000)
    tlog.roll()
    tlog.tier_once()
    assert tlog.bounds().local_start_offset == 1000
    tlog.truncate(600)
    assert tlog.next_offset == 600
    check_record(tlog.read(599), 599)
    with pytest.raises(OffsetOutOfRangeError):
        tlog.read(600)
    # New records at the truncated offsets are the new ones, from either tier.
    tlog.append_batch([ProducerRecord(b"new-%d" % i, timestamp=5) for i in range(100)])
    tlog.flush()
    assert tlog.read(600).value == b"new-0"
    tlog.roll()
    tlog.tier_once()
    assert tlog.read(650).value == b"new-50"
    assert [r.offset for r in tlog.read_range(590, 20, 1 << 20)][:20] == list(range(590, 610))
    tlog.close()
    # Survives a reopen, and a rebuild from the bucket alone.
    tlog = open_log(tmp_path / "log", storage)
    assert tlog.read(650).value == b"new-50"
    tlog.close()
    rebuilt = open_log(tmp_path / "empty", storage)
    assert rebuilt.next_offset == 700
    check_record(rebuilt.read(599), 599)
    assert rebuilt.read(600).value == b"new-0"
    rebuilt.close()


def test_rebuild_from_bucket_into_empty_directory(tmp_path: Path, storage: RemoteStorage) -> None:
    tlog = open_log(tmp_path / "a", storage, local_retention_bytes=0)
    produce(tlog, 1200)
    tlog.roll()
    tlog.tier_once()
    n_segments = len(tlog.remote_tier.finished_segments)  # type: ignore[union-attr]
    tlog.close()
    fetched_before = 0
    rebuilt = open_log(tmp_path / "b", storage)
    # Only manifests were read: no chunk was fetched to rebuild.
    assert rebuilt.remote_tier.stats.remote_fetch_bytes == fetched_before  # type: ignore[union-attr]
    assert len(rebuilt.remote_tier.finished_segments) == n_segments  # type: ignore[union-attr]
    assert rebuilt.bounds().log_start_offset == 0
    assert rebuilt.next_offset == 1200
    idx_files = list((tmp_path / "b" / "remote" / "index").iterdir())
    assert {p.suffix for p in idx_files} == set(naming.REMOTE_INDEX_SUFFIXES)
    for o in range(0, 1200, 37):
        check_record(rebuilt.read(o), o)
    assert rebuilt.offset_for_timestamp(1_000_000 + 555 * 10) == 555
    # The rebuilt log keeps going.
    produce(rebuilt, 10)
    check_record(rebuilt.read(1205), 1205)
    rebuilt.close()


def test_manifest_carries_indexes_and_a_copy_needs_both_objects(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    """The ``.rli`` manifest holds the segment's own offset and time index files; a copy
    whose data object is missing (or whose manifest is) does not count at rebuild, and
    its leftover object is deleted."""
    from tiered_log.remote.manifest import decode_manifest

    tlog = open_log(tmp_path / "a", storage)
    produce(tlog, 900)
    tlog.roll()
    tlog.tier_once()
    assert tlog.remote_tier is not None
    finished = tlog.remote_tier.finished_segments
    assert len(finished) >= 3
    local = {s.base_offset: s for s in tlog.local_segments()}
    for rs in finished:
        key = naming.segment_object_key("orders-0", rs.base_offset, rs.id, naming.RLI_SUFFIX)
        got, entries, index, timeindex = decode_manifest(storage.get(key), key)
        seg = local[rs.base_offset]
        assert (got.id, got.base_offset, got.next_offset, got.chunks) == (
            rs.id,
            rs.base_offset,
            rs.next_offset,
            len(entries),
        )
        assert index == seg.store_path.with_suffix(naming.INDEX_SUFFIX).read_bytes()
        assert timeindex == seg.store_path.with_suffix(naming.TIMEINDEX_SUFFIX).read_bytes()
        assert index and timeindex
    tlog.close()
    last = finished[-1]
    storage.delete(
        [naming.segment_object_key("orders-0", last.base_offset, last.id, naming.LOG_SUFFIX)]
    )
    # Without the partition snapshot (it would stand for the copies it lists), the
    # rebuild reads the bucket's listing and manifests.
    storage.delete([snapshot_key("orders-0")])
    rebuilt = open_log(tmp_path / "b", storage)
    assert rebuilt.remote_tier is not None
    assert [s.id for s in rebuilt.remote_tier.finished_segments] == [s.id for s in finished[:-1]]
    # Its offsets were handed out: the rebuilt log resumes above them and reports them
    # lost (issue 17: never an acknowledged offset twice; it used to resume at its base).
    assert rebuilt.next_offset == last.next_offset
    assert rebuilt.lost_offsets() == [[last.base_offset, last.next_offset]]
    keys = [i.key for i in storage.list(naming.segment_objects_prefix("orders-0"))]
    assert not any(last.id in k for k in keys)  # the lone manifest was cleaned up
    check_record(rebuilt.read(last.base_offset - 1), last.base_offset - 1)
    rebuilt.close()


def test_damaged_remote_index_files_are_rebuilt(tmp_path: Path, storage: RemoteStorage) -> None:
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    produce(tlog, 800)
    tlog.roll()
    tlog.tier_once()
    tlog.close()
    for p in (tmp_path / "log" / "remote" / "index").glob("*.remoteLogIndex"):
        data = bytearray(p.read_bytes())
        data[10] ^= 0xFF
        p.write_bytes(bytes(data))
    tlog = open_log(tmp_path / "log", storage)
    for o in range(0, 800, 41):
        check_record(tlog.read(o), o)
    tlog.close()


def test_flipped_bytes_in_remote_object_are_detected(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    storage = LocalDirStorage(bucket)
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    produce(tlog, 500)
    tlog.roll()
    tlog.tier_once()
    seg = tlog.remote_tier.finished_segments[0]  # type: ignore[union-attr]
    key = naming.segment_object_key("orders-0", seg.base_offset, seg.id, naming.LOG_SUFFIX)
    path = bucket / key
    data = bytearray(path.read_bytes())
    data[200] ^= 0x55
    path.write_bytes(bytes(data))
    with pytest.raises(RemoteCorruptionError):
        tlog.read_range(0, 1000, 1 << 20)
    # Nothing damaged was cached: reading again fails again, never returns data.
    with pytest.raises(RemoteCorruptionError):
        tlog.read_range(0, 1000, 1 << 20)
    tlog.close()


def test_remote_disabled_is_a_plain_local_log(tmp_path: Path) -> None:
    tlog = TieredLog(
        tmp_path / "log",
        config=SMALL,
        tier=TierConfig(retention_bytes=20 * 1024),
        start_shipper=False,
    )
    produce(tlog, 1000)
    tlog.roll()
    tlog.tier_once()
    assert tlog.log_start_offset > 0
    check_record(tlog.read(999), 999)
    tlog.close()


def test_background_shipper_ships(tmp_path: Path, storage: RemoteStorage) -> None:
    import time

    tlog = TieredLog(
        tmp_path / "log",
        log_id="bg-0",
        storage=storage,
        config=SMALL,
        tier=TierConfig(ship_interval_ms=20, local_retention_bytes=0),
    )
    produce(tlog, 600)
    tlog.roll()
    deadline = time.monotonic() + 30
    while remote_end(tlog) < 600 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tlog.bounds().remote_end_offset == 600
    tlog.close()


def test_damaged_local_segment_is_never_shipped(tmp_path: Path, storage: RemoteStorage) -> None:
    """The frames are verified while the data uploads; a damaged segment's attempt is
    cleaned up (no objects, no journal entry) and nothing past it is shipped."""
    from tiered_log import CorruptRecordError

    tlog = open_log(tmp_path / "log", storage)
    produce(tlog, 600)
    tlog.roll()
    segs = tlog.eligible_segments()
    assert len(segs) >= 3
    victim = segs[1]
    (first, *_), _ = batch_table(victim.store_path.read_bytes(), victim.base_offset)
    at = HEADER_SIZE + (first.size - HEADER_SIZE) // 2  # inside a record of its first batch
    with open(victim.store_path, "r+b") as f:  # flip a byte inside a record's value
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))
    with pytest.raises(CorruptRecordError):
        tlog.tier_once()
    assert tlog.remote_tier is not None
    assert [s.base_offset for s in tlog.remote_tier.finished_segments] == [segs[0].base_offset]
    assert [s.state for s in tlog.remote_tier.journal.segments()] == ["COPY_FINISHED"]
    keys = [i.key for i in storage.list(naming.segment_objects_prefix("orders-0"))]
    assert len(keys) == len(naming.SEGMENT_OBJECT_SUFFIXES) and all(
        segs[0].base_offset == naming.parse_segment_object_key(k)[0]  # type: ignore[index]
        for k in keys
    )
    assert tlog.bounds().remote_end_offset == segs[0].next_offset
    tlog.close()


def test_time_retention_follows_the_logs_clock(tmp_path: Path) -> None:
    """Time-based retention dates segments by the log's clock (injected here): nothing
    goes while the newest record of a segment is younger than ``retention_ms``; once the
    clock has moved past it, every sealed segment whose records are all older goes."""
    now = [1_000_000]
    tlog = TieredLog(
        tmp_path / "log",
        config=SMALL,
        tier=TierConfig(retention_ms=60_000),
        clock=lambda: now[0],
    )
    produce(tlog, 1500)  # timestamps 1_000_000 + 10 * offset
    tlog.roll()
    sealed = tlog.local_segments()[:-1]
    assert len(sealed) >= 3
    now[0] = sealed[0].max_timestamp + 60_000
    tlog.tier_once()
    assert tlog.log_start_offset == 0
    now[0] += 1
    tlog.tier_once()
    assert tlog.log_start_offset == sealed[0].next_offset
    now[0] = 1_000_000 + 1500 * 10 + 60_001
    tlog.tier_once()
    assert tlog.log_start_offset == tlog.next_offset == 1500
    tlog.close()


def test_many_logs_share_a_few_tiering_threads_and_idle_logs_rest(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    """Every shipper runs on one scheduler's workers (not a thread per log); a log whose
    state does not change gets no rounds; an append that rolls a segment wakes shipping
    at once; stop() waits for a running round and no round runs after it."""
    import threading
    import time

    from tiered_log.partition import TieringScheduler

    sched = TieringScheduler(workers=2)
    before = threading.active_count()
    logs = []
    for i in range(30):
        t = TieredLog(
            tmp_path / f"l{i}",
            log_id=f"many-{i}",
            storage=storage,
            config=SMALL,
            tier=TierConfig(ship_interval_ms=10),
            scheduler=sched,
        )
        logs.append(t)
    assert threading.active_count() - before <= 2
    time.sleep(0.5)
    # Idle: after the first round, nothing changes, so no more rounds (the skips back
    # off; a full round comes only every FULL_ROUND_S).
    rounds = [t.shipper.rounds for t in logs]  # type: ignore[union-attr]
    assert all(r >= 1 for r in rounds)
    time.sleep(0.5)
    assert [t.shipper.rounds for t in logs] == rounds  # type: ignore[union-attr]
    # Appends that roll segments wake shipping: everything sealed and flushed ships
    # without waiting out the idle back-off.
    busy = logs[7]
    produce(busy, 600)
    busy.flush()
    deadline = time.monotonic() + 30
    sealed_end = busy.local_segments()[-1].base_offset
    assert sealed_end > 0
    while remote_end(busy) < sealed_end and time.monotonic() < deadline:
        time.sleep(0.02)
    assert busy.bounds().remote_end_offset == sealed_end
    for t in logs:
        t.close()
    after = [t.shipper.rounds for t in logs]  # type: ignore[union-attr]
    time.sleep(0.2)
    assert [t.shipper.rounds for t in logs] == after  # type: ignore[union-attr]


def test_fetch_and_copy_threads_are_shared_by_all_logs(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    """Twenty logs shipping and reading back from the bucket use the process's shared
    pools, not threads of their own."""
    import threading

    from tiered_log.remote.tier import COPY_THREADS, FETCH_THREADS

    logs = [
        TieredLog(
            tmp_path / f"s{i}",
            log_id=f"shared-{i}",
            storage=storage,
            config=SMALL,
            tier=TierConfig(
                chunk_bytes=2048, fetch_bytes=4096, prefetch_bytes=8192, local_retention_bytes=0
            ),
            start_shipper=False,
        )
        for i in range(20)
    ]
    for t in logs:
        produce(t, 300)
        t.roll()
        t.tier_once()
        assert t.bounds().local_start_offset == 300  # everything is remote now
        for o in range(0, 300, 41):
            check_record(t.read(o), o)
    names = [th.name for th in threading.enumerate()]
    assert not any("shared-" in n for n in names), names
    pooled = [n for n in names if n.startswith(("remote-fetch", "remote-copy"))]
    assert 0 < len(pooled) <= FETCH_THREADS + COPY_THREADS
    for t in logs:
        t.close()


def test_prefetch_never_outgrows_the_cache(tmp_path: Path, storage: RemoteStorage) -> None:
    """With a prefetch window configured larger than the chunk cache, a sequential reader
    still fetches every archived byte once: the window is capped at half the cache."""
    tlog = open_log(
        tmp_path / "log",
        storage,
        local_retention_bytes=0,
        cache_bytes=16 * 1024,
        prefetch_bytes=256 * 1024,
        fetch_bytes=8192,
        compression="none",  # fetched bytes are compared with the log's own bytes
    )
    produce(tlog, 1500, batch_records=5)  # batches (so chunks) of ~750 bytes, as configured
    tlog.roll()
    tlog.tier_once()
    assert tlog.remote_tier is not None
    archived = tlog.remote_tier.size_bytes
    read_all_checked(tlog, 1500)
    assert archived <= tlog.remote_tier.stats.remote_fetch_bytes <= archived * 1.1
    tlog.close()


def test_sequential_reader_fetches_each_object_once_in_one_request(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    """A prefetch window that ends inside a segment object takes the object's rest too
    (it fits in ``fetch_bytes``): a cold sequential reader makes one ranged GET per object
    and fetches every archived byte once."""
    tlog = open_log(
        tmp_path / "log",
        storage,
        local_retention_bytes=0,
        chunk_bytes=2048,
        fetch_bytes=64 * 1024,
        prefetch_bytes=6 * 1024,
        compression="none",  # windows and fetched bytes are counted in the log's bytes
    )
    produce(tlog, 1500, batch_records=5)
    tlog.roll()
    tlog.tier_once()
    assert tlog.remote_tier is not None
    objects = len(tlog.remote_tier.finished_segments)
    assert objects >= 4 and max(s.size for s in tlog.remote_tier.finished_segments) > 6 * 1024
    read_all_checked(tlog, 1500)
    assert tlog.remote_tier.stats.remote_fetch_requests == objects
    assert tlog.remote_tier.stats.remote_fetch_bytes == tlog.remote_tier.size_bytes
    tlog.close()


@pytest.mark.parametrize("in_flight", [1, 3])
def test_copies_in_flight_bounds_concurrent_copies(tmp_path: Path, in_flight: int) -> None:
    """A round keeps at most ``copies_in_flight`` copies under way (seen in the journal
    while the uploads are throttled), and ships everything in order either way."""
    import threading
    import time

    storage = LocalDirStorage(tmp_path / "bucket")
    # Slower than one segment a second: every copy waits for the limit, so the copies
    # started together are seen together; once they were, the limit is released.
    tlog = open_log(
        tmp_path / "log", storage, copies_in_flight=in_flight, upload_bytes_per_sec=8 * 1024
    )
    produce(tlog, 600)
    tlog.roll()
    assert len(tlog.eligible_segments()) >= 4
    assert tlog.remote_tier is not None
    remote = tlog.remote_tier
    journal = remote.journal
    most = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, sum(s.state == "COPY_STARTED" for s in journal.segments()))
            if most == in_flight and remote.limiter.waiting:
                remote.release_limits()  # seen: the rest may run at full speed
            time.sleep(0.005)

    th = threading.Thread(target=watch)
    th.start()
    try:
        copied = tlog.tier_once()
    finally:
        done.set()
        th.join()
    assert most == in_flight
    assert copied == len(tlog.remote_tier.finished_segments) >= 4
    bases = [s.base_offset for s in tlog.remote_tier.finished_segments]
    assert bases == sorted(bases) and tlog.bounds().remote_end_offset == 600
    for o in (0, 299, 599):
        check_record(tlog.read(o), o)
    tlog.close()
