"""Segments of the local log: rolling, truncation, retention, the index cache, reads
across segment boundaries, flush policy and reopening."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from tiered_log import Log, LogConfig, OffsetOutOfRangeError, ProducerRecord
from tiered_log.format import naming

from .helpers import fixed_record, read_all, store_files, value_for, wait_for_clock

# Records of fixed_record() take 100 bytes each: five fit a 500-byte segment exactly.
FIVE_PER_SEGMENT = LogConfig(segment_bytes=500, index_interval_bytes=150)


def five_per_segment_log(path: Path, n: int = 23, config: LogConfig = FIVE_PER_SEGMENT) -> Log:
    """A log of ``n`` records, appended one at a time: segments [0-4] [5-9] ... [20-22]."""
    log = Log.open(path, config)
    for i in range(n):
        assert log.append_batch([fixed_record(i, ts=1_000 + i)]) == (i, i)
    return log


def check_records(log: Log, offsets: range) -> None:
    got = read_all(log)
    assert [r.offset for r in got] == list(offsets)
    for r in got:
        assert r.value == fixed_record(r.offset).value and r.timestamp == 1_000 + r.offset


def test_bytes_from_counts_what_a_follower_at_an_offset_lacks(tmp_path: Path) -> None:
    """100 bytes a record, five a segment: from offset o, the log holds (23 - o) * 100
    bytes; below its start, all of it; at or past its end, none."""
    with five_per_segment_log(tmp_path) as log:
        for o in range(24):
            assert log.bytes_from(o) == (23 - o) * 100, o
        assert log.bytes_from(99) == 0
        log.delete_segments_before(10)
        assert log.bytes_from(0) == log.bytes_from(10) == 1300


def test_segment_bases_in_a_range(tmp_path: Path) -> None:
    """Segments [0-4] [5-9] [10-14] [15-19] [20-22]: the bases beginning in [start, end)."""
    with five_per_segment_log(tmp_path) as log:
        for start in range(-1, 26):
            for end in range(start, 27):
                want = [b for b in (0, 5, 10, 15, 20) if start <= b < end]
                assert log.segment_bases(start, end) == want, (start, end)
        log.delete_segments_before(10)
        assert log.segment_bases(0, 100) == [10, 15, 20]


def test_retention_candidates_up_to_stop_at_the_first_segment_past_it(tmp_path: Path) -> None:
    """``up_to`` (what was shipped) cuts the candidates where a filter of them would."""
    with five_per_segment_log(tmp_path) as log:
        every = log.retention_candidates(None, 0)
        assert [s.base_offset for s in every] == [0, 5, 10, 15]
        for up_to in range(0, 26):
            want = [s for s in every if s.next_offset <= up_to]
            assert log.retention_candidates(None, 0, up_to=up_to) == want, up_to
            for limit in range(0, 6):
                got = log.retention_candidates(None, 0, up_to=up_to, limit=limit)
                assert got == want[:limit], (up_to, limit)


def test_deleted_segments_leave_the_log_and_their_files(tmp_path: Path) -> None:
    """The segments deleted leave the log at once and their files are gone when the call
    returns (they are unlinked after the log's lock is released); appends go on."""
    with five_per_segment_log(tmp_path) as log:
        gone = log.delete_segments_before(10)
        assert [s.base_offset for s in gone] == [0, 5]
        assert not any(s.store_path.exists() for s in gone)
        for s in gone:  # nor their index files
            assert not list(tmp_path.rglob(s.store_path.stem + ".*"))
        assert log.segment_bases(0, 100) == [10, 15, 20]
        first, _ = log.append_batch([b"after"])
        assert log.read_range(first, 1, 1 << 20)[0].value == b"after"


# ---- rolling ---------------------------------------------------------------------------


def test_rolls_by_size(tmp_path: Path) -> None:
    with five_per_segment_log(tmp_path) as log:
        infos = log.segments()
        assert [(s.base_offset, s.next_offset) for s in infos] == [
            (0, 5),
            (5, 10),
            (10, 15),
            (15, 20),
            (20, 23),
        ]
        assert [s.sealed for s in infos] == [True] * 4 + [False]
        assert all(s.size == 500 for s in infos[:-1]) and infos[-1].size == 300
        for s in infos[:-1]:
            assert s.max_timestamp == 1_000 + s.last_offset
            for suffix in (naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX):
                assert naming.segment_path(tmp_path, s.base_offset, suffix).stat().st_size > 0
        active = infos[-1].base_offset
        assert not naming.segment_path(tmp_path, active, naming.INDEX_SUFFIX).exists()
        assert [p.name for p in store_files(tmp_path)] == [
            naming.offset_name(b) + ".log" for b in (0, 5, 10, 15, 20)
        ]
        check_records(log, range(23))


def test_batch_larger_than_a_segment_goes_alone_into_a_new_one(tmp_path: Path) -> None:
    with Log.open(tmp_path, FIVE_PER_SEGMENT) as log:
        log.append_batch([fixed_record(0, ts=1_000)])
        assert log.append_batch([fixed_record(i, ts=1_000 + i) for i in range(1, 13)]) == (1, 12)
        log.append_batch([fixed_record(13, ts=1_013)])
        assert [(s.base_offset, s.next_offset) for s in log.segments()] == [
            (0, 1),
            (1, 13),
            (13, 14),
        ]
        check_records(log, range(14))


def test_rolls_by_age(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(segment_ms=1)) as log:
        log.append(b"a")
        wait_for_clock(2)
        log.append(b"b")
        assert [(s.base_offset, s.next_offset) for s in log.segments()] == [(0, 1), (1, 2)]
        wait_for_clock(2)
        assert log.maybe_roll_by_age()
        assert log.segments()[-1].base_offset == 2 and log.segments()[-1].size == 0
        assert not log.maybe_roll_by_age()  # an empty active segment never rolls
        assert [r.value for r in read_all(log)] == [b"a", b"b"]


def test_no_roll_by_age_without_segment_ms(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(segment_ms=None)) as log:
        log.append(b"a")
        wait_for_clock(2)
        log.append(b"b")
        assert not log.maybe_roll_by_age()
        assert len(log.segments()) == 1


def test_explicit_roll(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        log.roll()  # nothing to seal
        assert len(log.segments()) == 1
        log.append_batch([b"a", b"b"])
        log.roll()
        infos = log.segments()
        assert [(s.base_offset, s.next_offset, s.sealed) for s in infos] == [
            (0, 2, True),
            (2, 2, False),
        ]
        assert log.flushed_offset == 2
        log.append(b"c")
        assert [r.value for r in read_all(log)] == [b"a", b"b", b"c"]


# ---- truncation ------------------------------------------------------------------------

TRUNCATION_POINTS = [
    pytest.param(0, id="whole-log"),
    pytest.param(1, id="second-record-of-first-segment"),
    pytest.param(4, id="last-record-of-first-segment"),
    pytest.param(5, id="first-record-of-second-segment"),
    pytest.param(7, id="middle-of-a-segment"),
    pytest.param(9, id="last-record-of-a-middle-segment"),
    pytest.param(15, id="first-record-of-last-sealed-segment"),
    pytest.param(19, id="last-record-of-last-sealed-segment"),
    pytest.param(20, id="first-record-of-active-segment"),
    pytest.param(21, id="middle-of-active-segment"),
    pytest.param(22, id="last-record-of-the-log"),
    pytest.param(23, id="next-offset-no-op"),
]


@pytest.mark.parametrize("point", TRUNCATION_POINTS)
def test_truncate_at_every_boundary(tmp_path: Path, point: int) -> None:
    log = five_per_segment_log(tmp_path)
    log.flush()
    log.truncate(point)
    assert log.next_offset == point and log.log_start_offset == 0
    assert log.flushed_offset <= point
    check_records(log, range(point))
    infos = log.segments()
    assert infos[-1].next_offset == point and not infos[-1].sealed
    assert all(s.sealed for s in infos[:-1])
    assert [p.name for p in store_files(tmp_path)] == [
        naming.offset_name(s.base_offset) + ".log" for s in infos
    ]
    if point < 23:
        with pytest.raises(OffsetOutOfRangeError):
            log.read(point)
    assert log.read_range(point) == []
    assert log.offset_for_timestamp(1_000 + point) is None
    if point:
        assert log.offset_for_timestamp(1_000 + point - 1) == point - 1
    # appending continues at the truncation point, rolling as before
    for i in range(point, point + 8):
        assert log.append_batch([fixed_record(i, ts=1_000 + i)]) == (i, i)
    check_records(log, range(point + 8))
    log.close()
    with Log.open(tmp_path, FIVE_PER_SEGMENT) as log:
        assert log.recovery.truncated_bytes == 0
        check_records(log, range(point + 8))
        assert log.offset_for_timestamp(1_000 + point + 3) == point + 3


def test_truncate_then_reopen_without_appending(tmp_path: Path) -> None:
    for point in (12, 10, 3, 0):
        with five_per_segment_log(tmp_path / str(point)) as log:
            log.truncate(point)
        with Log.open(tmp_path / str(point), FIVE_PER_SEGMENT) as log:
            assert (log.log_start_offset, log.next_offset) == (0, point)
            check_records(log, range(point))


def test_truncate_to_log_start_after_retention(tmp_path: Path) -> None:
    with five_per_segment_log(tmp_path) as log:
        log.delete_segments_before(10)
        assert log.log_start_offset == 10
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate(9)
        log.truncate(10)
        assert (log.log_start_offset, log.next_offset) == (10, 10)
        assert log.read_range(10) == []
        assert log.append(b"again") == 10
    with Log.open(tmp_path, FIVE_PER_SEGMENT) as log:
        assert (log.log_start_offset, log.next_offset) == (10, 11)
        assert log.read(10).value == b"again"


def test_truncate_repeatedly_interleaved_with_appends(tmp_path: Path) -> None:
    rng = random.Random(7)
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=64)
    expected: list[bytes] = []
    with Log.open(tmp_path, cfg) as log:
        for _ in range(60):
            if expected and rng.random() < 0.3:
                point = rng.randrange(len(expected) + 1)
                log.truncate(point)
                del expected[point:]
            else:
                batch = [
                    value_for(rng.randrange(10_000), rng.randint(1, 150))
                    for _ in range(rng.randint(1, 6))
                ]
                log.append_batch(batch)
                expected.extend(batch)
            assert [r.value for r in read_all(log)] == expected
    with Log.open(tmp_path, cfg) as log:
        assert [r.value for r in read_all(log)] == expected


# ---- retention -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention_bytes", "start"),
    [
        pytest.param(None, 0, id="unlimited"),
        pytest.param(10_000, 0, id="under-the-limit"),
        pytest.param(2_300, 0, id="exactly-the-size"),
        pytest.param(2_299, 0, id="just-under-the-size"),
        pytest.param(1_800, 5, id="drops-one"),
        pytest.param(800, 15, id="drops-three"),
        pytest.param(300, 20, id="only-active-left"),
        pytest.param(0, 20, id="zero-keeps-the-active-segment"),
    ],
)
def test_retention_by_bytes(tmp_path: Path, retention_bytes: int | None, start: int) -> None:
    cfg = LogConfig(segment_bytes=500, retention_bytes=retention_bytes)
    with five_per_segment_log(tmp_path, config=cfg) as log:
        assert log.size_bytes == 2_300
        deleted = log.enforce_retention()
        assert [s.base_offset for s in deleted] == list(range(0, start, 5))
        assert log.log_start_offset == start and log.next_offset == 23
        if retention_bytes is not None and start:
            assert log.size_bytes >= retention_bytes
        check_records(log, range(start, 23))
        for gone in range(start):
            with pytest.raises(OffsetOutOfRangeError):
                log.read(gone)
        for s in deleted:
            for suffix in naming.SEGMENT_SUFFIXES:
                assert not naming.segment_path(tmp_path, s.base_offset, suffix).exists()
        assert log.enforce_retention() == []
    with Log.open(tmp_path, cfg) as log:
        assert log.log_start_offset == start
        check_records(log, range(start, 23))


@pytest.mark.parametrize(
    ("retention_ms", "now", "start"),
    [
        pytest.param(None, 10**9, 0, id="unlimited"),
        pytest.param(100, 1_004 + 100, 0, id="first-segment-just-in-time"),
        pytest.param(100, 1_005 + 100, 5, id="first-segment-just-expired"),
        pytest.param(0, 1_014, 10, id="zero-ms"),
        pytest.param(50, 10**9, 20, id="everything-sealed-expired"),
    ],
)
def test_retention_by_time(tmp_path: Path, retention_ms: int | None, now: int, start: int) -> None:
    cfg = LogConfig(segment_bytes=500, retention_ms=retention_ms)
    with five_per_segment_log(tmp_path, config=cfg) as log:
        deleted = log.enforce_retention(now=now)
        assert [s.base_offset for s in deleted] == list(range(0, start, 5))
        assert log.log_start_offset == start
        check_records(log, range(start, 23))
        assert log.offset_for_timestamp(0) == start


def test_retention_by_time_stops_at_the_first_young_segment(tmp_path: Path) -> None:
    """A segment holding a new timestamp protects the older segments behind it."""
    cfg = LogConfig(segment_bytes=500, retention_ms=10)
    with Log.open(tmp_path, cfg) as log:
        for i in range(15):
            ts = 5_000 if i == 7 else 1_000 + i
            log.append_batch([fixed_record(i, ts=ts)])
        assert [s.max_timestamp for s in log.segments()] == [1_004, 5_000, 1_014]
        assert [s.base_offset for s in log.enforce_retention(now=4_000)] == [0]
        assert log.log_start_offset == 5


def test_retention_candidates_do_not_delete(tmp_path: Path) -> None:
    with five_per_segment_log(tmp_path) as log:
        cands = log.retention_candidates(None, 1_000)
        assert [s.base_offset for s in cands] == [0, 5]
        assert [s.base_offset for s in log.retention_candidates(0, None, now=1_009)] == [0]
        assert log.log_start_offset == 0
        assert log.delete_segments_before(7) == cands[:1]
        assert log.log_start_offset == 5
        assert log.delete_segments_before(1_000)[-1].base_offset == 15  # never the active one
        assert log.log_start_offset == 20
        check_records(log, range(20, 23))


# ---- the index cache -------------------------------------------------------------------


def test_index_cache_stays_bounded_and_reads_stay_right(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=500, index_interval_bytes=150, num_index_cached_read_segments=2)
    rng = random.Random(3)
    with five_per_segment_log(tmp_path, n=103, config=cfg) as log:
        assert len(log.segments()) == 21
        assert len(log.index_cache) <= 2
        order = list(range(103)) * 2
        rng.shuffle(order)
        for off in order:
            rec = log.read(off)
            assert rec.offset == off and rec.value == fixed_record(off).value
            assert len(log.index_cache) <= 2
        for t in (1_000, 1_037, 1_102):
            assert log.offset_for_timestamp(t) == t - 1_000
            assert len(log.index_cache) <= 2
        check_records(log, range(103))
        assert len(log.index_cache) <= 2
        assert log.index_cache.misses > 0 and log.index_cache.hits > 0
    with Log.open(tmp_path, cfg) as log:
        assert len(log.index_cache) == 0  # sealed indexes load lazily
        check_records(log, range(103))
        assert len(log.index_cache) <= 2


# ---- reads across segment boundaries ---------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "max_records", "max_bytes", "expected"),
    [
        pytest.param(0, 500, 1 << 20, range(23), id="everything"),
        pytest.param(3, 4, 1 << 20, range(3, 7), id="records-limit-across-boundary"),
        pytest.param(3, 500, 160, range(3, 7), id="bytes-limit-across-boundary"),
        pytest.param(3, 500, 194, range(3, 7), id="bytes-limit-just-under"),
        pytest.param(3, 500, 195, range(3, 8), id="bytes-limit-exact"),
        pytest.param(4, 1, 1 << 20, range(4, 5), id="last-of-a-segment"),
        pytest.param(4, 2, 1 << 20, range(4, 6), id="last-and-first"),
        pytest.param(5, 500, 1, range(5, 6), id="tiny-max-bytes-one-record"),
        pytest.param(2, 500, 500, range(2, 14), id="spans-three-boundaries"),
        pytest.param(18, 500, 1 << 20, range(18, 23), id="into-active"),
        pytest.param(22, 500, 1, range(22, 23), id="last-record"),
        pytest.param(23, 500, 1 << 20, range(23, 23), id="next-offset"),
    ],
)
def test_reads_across_segments_with_limits(
    tmp_path: Path, offset: int, max_records: int, max_bytes: int, expected: range
) -> None:
    with five_per_segment_log(tmp_path) as log:
        got = log.read_range(offset, max_records=max_records, max_bytes=max_bytes)
        assert [r.offset for r in got] == list(expected)
        assert all(r.value == fixed_record(r.offset).value for r in got)


def test_record_larger_than_max_bytes_is_returned_alone(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(segment_bytes=4096)) as log:
        log.append_batch([b"a", b"b"])
        log.append(b"x" * 10_000)  # rolls: alone in its own segment
        log.append(b"c")
        assert [r.offset for r in log.read_range(0, max_bytes=100)] == [0, 1]
        assert [r.offset for r in log.read_range(0, max_bytes=10)] == [0]
        big = log.read_range(2, max_bytes=100)
        assert [(r.offset, len(r.value or b"")) for r in big] == [(2, 10_000)]
        assert [r.offset for r in log.read_range(2, max_bytes=10_018)] == [2]
        assert [r.offset for r in log.read_range(2, max_bytes=10_019)] == [2, 3]


def test_reads_fill_the_limits_when_record_sizes_vary(tmp_path: Path) -> None:
    """Many small records, then big ones: a read from the big ones returns as many as the
    limits allow, and goes on into the next segment, not stopping at a buffer's end."""
    with Log.open(tmp_path, LogConfig(segment_bytes=8 << 20)) as log:
        log.append_batch([b"s"] * 200)
        log.append_batch([bytes([i]) * 50_000 for i in range(20)])
        log.roll()
        log.append_batch([b"t"] * 5)
        got = log.read_range(200, max_records=22, max_bytes=8 << 20)
        assert [r.offset for r in got] == list(range(200, 222))
        assert [len(r.value or b"") for r in got] == [50_000] * 20 + [1, 1]
        got = log.read_range(150, max_records=1_000, max_bytes=30 * 50_038)
        assert [r.offset for r in got] == list(range(150, 225))


# ---- flushing --------------------------------------------------------------------------


def test_flush_messages_policy(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(flush_messages=3)) as log:
        assert log.flushed_offset == 0
        log.append(b"1")
        log.append(b"2")
        assert log.flushed_offset == 0
        log.append(b"3")
        assert log.flushed_offset == 3
        log.append(b"4")
        assert log.flushed_offset == 3
        log.append_batch([b"5", b"6", b"7", b"8"])
        assert log.flushed_offset == 8
        assert log.bounds().flushed_offset == 8


def test_flush_ms_policy(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(flush_messages=None, flush_ms=0)) as log:
        log.append(b"1")
        assert log.flushed_offset == 1
        log.append_batch([b"2", b"3"])
        assert log.flushed_offset == 3
    with Log.open(tmp_path / "b", LogConfig(flush_messages=None, flush_ms=1)) as log:
        wait_for_clock(2)
        log.append(b"1")  # the last flush is older than flush_ms
        assert log.flushed_offset == 1
        log.append(b"2")
        if log.flushed_offset == 1:  # the clock has not moved yet
            wait_for_clock(2)
            log.maybe_flush()
        assert log.flushed_offset == 2
    with Log.open(tmp_path / "c", LogConfig(flush_messages=None, flush_ms=3_600_000)) as log:
        log.append(b"1")
        log.maybe_flush()
        assert log.flushed_offset == 0
        assert log.flush() == 1 and log.flushed_offset == 1


def test_no_flush_policy_and_explicit_flush(tmp_path: Path) -> None:
    no_flush = replace(FIVE_PER_SEGMENT, flush_messages=None)  # the default fsyncs each append
    with Log.open(tmp_path, no_flush) as log:
        for i in range(3):
            log.append_batch([fixed_record(i)])
        assert log.flushed_offset == 0
        assert log.flush() == 3
        for i in range(3, 7):
            log.append_batch([fixed_record(i)])
        assert log.flushed_offset == 5  # the roll at 5 sealed (and so fsynced) [0, 5)
        assert log.flush() == 7
    with Log.open(tmp_path, no_flush) as log:
        assert log.flushed_offset == log.next_offset == 7


def test_a_flush_with_nothing_unflushed_makes_no_system_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit flush after an append the policy already synced is answered from the
    flushed offset; after an append it did not sync, it fsyncs (counted at the OS call)."""
    calls: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    with Log.open(tmp_path / "synced", LogConfig()) as log:  # flush_messages=1
        log.append(b"a")
        monkeypatch.setattr(os, "fsync", counting_fsync)
        assert log.flush() == 1 and calls == []
        monkeypatch.undo()
    with Log.open(tmp_path / "lazy", LogConfig(flush_messages=None)) as log:
        log.append(b"a")
        monkeypatch.setattr(os, "fsync", counting_fsync)
        assert log.flush() == 1 and len(calls) == 1
        assert log.flush() == 1 and len(calls) == 1
        monkeypatch.undo()


# ---- reopening -------------------------------------------------------------------------


def test_reopen_after_close_keeps_everything(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1_000, index_interval_bytes=100)
    recs = [
        ProducerRecord(
            value_for(i, 1 + i % 90),
            key=None if i % 3 else b"k%d" % i,
            headers=(("n", str(i).encode()),) if i % 4 == 0 else (),
            timestamp=5_000 + 3 * i,
        )
        for i in range(137)
    ]
    with Log.open(tmp_path, cfg) as log:
        for i in range(0, 137, 4):
            log.append_batch(recs[i : i + 4])
        log.flush()
        before = (log.bounds(), log.segments(), log.size_bytes)
    for _ in range(2):
        with Log.open(tmp_path, cfg) as log:
            assert (log.bounds(), log.segments(), log.size_bytes) == before
            assert log.recovery.truncated_bytes == 0 and log.recovery.removed_files == 0
            got = read_all(log)
            assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
                (i, w.key, w.value, w.headers, w.timestamp) for i, w in enumerate(recs)
            ]
            for i in (0, 1, 50, 136):
                assert log.offset_for_timestamp(5_000 + 3 * i) == i
                assert log.offset_for_timestamp(5_000 + 3 * i - 1) == i
            assert log.offset_for_timestamp(5_000 + 3 * 137) is None
    with Log.open(tmp_path, cfg) as log:
        assert log.append(b"more") == 137
