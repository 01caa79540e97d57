"""The partition snapshot: a log's remote view kept in the bucket, so that a rebuild (a
new disk, a new leader) reads it in a few requests, not one per archived segment; the
per-segment manifests stay the source of truth when it is missing or damaged."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.snapshot import (
    SPILLS_DIR,
    Snapshot,
    decode_snapshot,
    read_snapshot,
    snapshot_key,
)
from tiered_log.remote.tier import TierConfig

from .fake_store import MemoryStorage

CFG = LogConfig(segment_bytes=1024, index_interval_bytes=256)
LOG_ID = "orders-0"


def open_log(path: Path, store: MemoryStorage, **tier: Any) -> TieredLog:
    cfg = {
        "chunk_bytes": 1024,
        "fetch_bytes": 4096,
        "prefetch_bytes": 4096,
        "snapshot_interval_segments": 20,
        "local_retention_bytes": 0,
        **tier,
    }
    return TieredLog(
        path, log_id=LOG_ID, storage=store, config=CFG, tier=TierConfig(**cfg), start_shipper=False
    )


def value(o: int) -> bytes:
    return b"value-%08d-" % o + b"x" * 40


def ship(tlog: TieredLog, n: int) -> None:
    """Append ``n`` records (about 14 per 1 KiB segment) and ship round by round, as the
    shipper does."""
    o = tlog.next_offset
    for start in range(o, o + n, 50):
        tlog.append_batch(
            [
                ProducerRecord(value(x), timestamp=1_000_000 + x)
                for x in range(start, min(start + 50, o + n))
            ]
        )
        tlog.roll()
        tlog.tier_once()


def read_all(tlog: TieredLog) -> list[tuple[int, bytes]]:
    o, out = tlog.log_start_offset, []
    while o < tlog.next_offset:
        got = tlog.read_range(o, 1000, 1 << 20)
        for r in got:
            assert r.value is not None  # every record here has a value
            out.append((r.offset, bytes(r.value)))
        o = got[-1].offset + 1
    return out


def manifest_reads(store: MemoryStorage) -> int:
    return sum(1 for op, key in store.calls if op == "get" and key.endswith(naming.RLI_SUFFIX))


def rebuilt(tmp_path: Path, store: MemoryStorage, name: str) -> TieredLog:
    store.calls.clear()
    return open_log(tmp_path / name, store)


def assert_full_rebuild(
    tmp_path: Path, store: MemoryStorage, name: str, segments: int, expected: object
) -> None:
    """A log rebuilt in a new directory read every manifest (no usable snapshot) and
    serves ``expected``."""
    again = rebuilt(tmp_path, store, name)
    try:
        assert manifest_reads(store) == segments
        assert read_all(again) == expected
    finally:
        again.close()


@pytest.mark.parametrize("records", [1_500, 4_500])
def test_a_rebuild_reads_the_snapshot_and_only_the_copies_after_it(
    tmp_path: Path, records: int
) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store)
    ship(tlog, records)
    r = tlog.remote_tier
    assert r is not None
    segments = len(r.finished_segments)
    snap = read_snapshot(store, LOG_ID)
    assert snap is not None and 0 < snap.end <= r.remote_end
    after = sum(1 for s in r.finished_segments if s.base_offset >= snap.end)
    assert after < 20  # written every 20 copies
    expected = read_all(tlog)
    end = tlog.next_offset
    tlog.close()

    again = rebuilt(tmp_path, store, "new-disk")
    try:
        assert again.remote_tier is not None
        assert len(again.remote_tier.finished_segments) == segments
        assert manifest_reads(store) == after  # not one per archived segment
        # meta + snapshot + one listing page + the manifests after the snapshot
        assert again.remote_tier.rebuild_requests == 3 + after
        assert again.next_offset == end
        assert read_all(again) == expected == [(o, value(o)) for o in range(end)]
        assert again.offset_for_timestamp(1_000_000 + end // 2) == end // 2
    finally:
        again.close()


def test_without_a_usable_snapshot_every_manifest_is_read(tmp_path: Path) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store)
    ship(tlog, 1_000)
    assert tlog.remote_tier is not None
    segments = len(tlog.remote_tier.finished_segments)
    expected = read_all(tlog)
    tlog.close()
    store.flip_byte(snapshot_key(LOG_ID), 40)  # damaged: never trusted
    assert_full_rebuild(tmp_path, store, "damaged", segments, expected)
    store.lose(snapshot_key(LOG_ID))  # missing
    assert_full_rebuild(tmp_path, store, "missing", segments, expected)


def test_retention_after_the_snapshot_moves_the_rebuilt_log_start(tmp_path: Path) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store)
    ship(tlog, 1_000)
    snap = read_snapshot(store, LOG_ID)
    assert snap is not None
    r = tlog.remote_tier
    assert r is not None
    cut = r.finished_segments[5].next_offset
    r.delete_before(cut)  # remote retention after the snapshot was written
    assert read_snapshot(store, LOG_ID) == snap  # not rewritten: it lists deleted copies
    expected = read_all(tlog)
    tlog.close()
    again = rebuilt(tmp_path, store, "after-retention")
    try:
        assert again.log_start_offset == cut
        assert read_all(again) == expected
    finally:
        again.close()


def spills_of(store: MemoryStorage) -> list[str]:
    return [k for k in store.stored_keys() if f"/{SPILLS_DIR}/" in k]


def head_of(store: MemoryStorage) -> Snapshot:
    """The snapshot object as stored: its own copies, its spills named, not read."""
    key = snapshot_key(LOG_ID)
    return decode_snapshot(store.get(key), key)


SPILLING = {"snapshot_interval_segments": 5, "snapshot_spill_segments": 4}


@pytest.mark.parametrize("spilling", [False, True])
def test_a_truncation_drops_the_snapshot_and_the_next_round_writes_one(
    tmp_path: Path, spilling: bool
) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store, **(SPILLING if spilling else {}))
    ship(tlog, 1_500)
    r = tlog.remote_tier
    assert r is not None and read_snapshot(store, LOG_ID) is not None
    assert bool(spills_of(store)) == spilling
    tlog.truncate(r.finished_segments[-3].base_offset + 3)
    assert read_snapshot(store, LOG_ID) is None and not spills_of(store)  # spills too
    ship(tlog, 100)
    assert read_snapshot(store, LOG_ID) is not None
    expected = read_all(tlog)
    tlog.close()
    again = rebuilt(tmp_path, store, "after-truncation")
    try:
        assert read_all(again) == expected
    finally:
        again.close()
    shutil.rmtree(tmp_path / "after-truncation")


def test_a_long_archive_spills_and_a_rebuild_reads_the_spills(tmp_path: Path) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store, **SPILLING)
    ship(tlog, 1_500)  # 30 copies
    r = tlog.remote_tier
    assert r is not None
    copies = [(s.base_offset, s.id) for s in r.finished_segments]
    head = head_of(store)
    # The snapshot itself keeps between 4 and 8 copies; the rest is in a few spills,
    # merged as a binary counter (each no larger than the one before it).
    assert 4 <= len(head.segments) < 8
    counts = [p.count for p in head.spills]
    listed = len([c for c in copies if c[0] < head.end])
    assert sum(counts) + len(head.segments) == listed
    assert 1 <= len(counts) <= 1 + math.log2(listed / 4)
    assert counts == sorted(counts, reverse=True) and max(counts) <= 16 * 4
    # Spills merged away were deleted once the snapshot no longer named them.
    assert sorted(spills_of(store)) == sorted(p.key for p in head.spills)
    # Read back whole: the same copies as the log's, in offset order.
    whole = read_snapshot(store, LOG_ID)
    assert whole is not None and whole.reads == 1 + len(head.spills)
    assert [(s.base_offset, s.id) for s in whole.segments] == [c for c in copies if c[0] < head.end]
    after = sum(1 for c in copies if c[0] >= head.end)
    expected = read_all(tlog)
    tlog.close()

    again = rebuilt(tmp_path, store, "new-disk")
    try:
        assert again.remote_tier is not None
        assert [(s.base_offset, s.id) for s in again.remote_tier.finished_segments] == copies
        assert manifest_reads(store) == after  # not one per archived segment
        # meta + snapshot + its spills + one listing page + the manifests after it
        assert again.remote_tier.rebuild_requests == 3 + len(head.spills) + after
        assert read_all(again) == expected
        # The rebuilt leader goes on with the same spills: its next write adds to them.
        ship(again, 300)
        assert set(p.key for p in head.spills) & set(p.key for p in head_of(store).spills)
    finally:
        again.close()


def test_spills_below_the_log_start_are_dropped_and_a_missing_one_means_a_full_rebuild(
    tmp_path: Path,
) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store, **SPILLING)
    ship(tlog, 1_500)
    r = tlog.remote_tier
    assert r is not None
    first = head_of(store).spills[0]
    r.delete_before(first.end)  # retention past the oldest spill
    ship(tlog, 100)  # the next snapshot no longer names it, and it is deleted
    assert first.key not in spills_of(store)
    assert all(p.end > first.end for p in head_of(store).spills)
    segments = len(r.finished_segments)
    expected = read_all(tlog)
    tlog.close()
    again = rebuilt(tmp_path, store, "after-retention")
    try:
        assert again.log_start_offset == first.end
        assert read_all(again) == expected
    finally:
        again.close()
    store.lose(head_of(store).spills[-1].key)  # missing: the snapshot is not trusted
    assert_full_rebuild(tmp_path, store, "spill-missing", segments, expected)


def test_a_reader_that_meets_a_merged_spill_reads_the_snapshot_again(tmp_path: Path) -> None:
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store, **SPILLING)
    ship(tlog, 1_500)
    stale = store.get(snapshot_key(LOG_ID))
    ship(tlog, 400)  # merges: some spills the stale snapshot names are deleted
    assert set(p.key for p in decode_snapshot(stale, "k").spills) - set(spills_of(store))
    fresh = store.get(snapshot_key(LOG_ID))
    # Simulate the race: the first GET of the snapshot returns the stale one.
    calls: list[int] = []
    real_get = store.get

    def get(key: str, start: int = 0, end: int | None = None) -> bytes:
        if key == snapshot_key(LOG_ID) and not calls:
            calls.append(1)
            return stale
        return real_get(key, start, end)

    store.get = get  # type: ignore[method-assign]
    try:
        snap = read_snapshot(store, LOG_ID)
    finally:
        del store.get
    assert snap is not None and calls
    assert snap.spills == decode_snapshot(fresh, "k").spills
    assert snap.reads >= 2 + len(snap.spills)
    tlog.close()


def test_a_log_opened_afresh_respills_and_deletes_the_old_spills(tmp_path: Path) -> None:
    """A log that did not read the snapshot (its own directory, reopened) does not take
    spills it cannot check against its view: it writes its own (the largest size at
    once, no merges, over a long archive) and deletes the old."""
    store = MemoryStorage()
    tlog = open_log(tmp_path / "log", store, **SPILLING)
    ship(tlog, 3_600)  # 72 copies: at least 64 + 4 above the spills to come
    old = set(spills_of(store))
    tlog.close()
    tlog = open_log(tmp_path / "log", store, **SPILLING)
    try:
        ship(tlog, 100)
        now = set(spills_of(store))
        assert now and not now & old
        assert now == {p.key for p in head_of(store).spills}
        assert head_of(store).spills[0].count == 16 * 4
        expected = read_all(tlog)
    finally:
        tlog.close()
    again = rebuilt(tmp_path, store, "new-disk")
    try:
        assert read_all(again) == expected
    finally:
        again.close()
