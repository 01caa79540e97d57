"""The local log on Kafka record batches: null and empty values, the torn-tail cut of a
Kafka batch, the leader epoch and LogAppendTime written into the stored batch headers,
and a directory in the former batch format refused at open and rewritten by
``tiered-log migrate``."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from tiered_log import CorruptRecordError, Log, LogConfig, ProducerRecord, Record
from tiered_log.cli import main
from tiered_log.format import legacy, naming
from tiered_log.format.index import SegmentIndex
from tiered_log.format.kafka import Compression, NewRecord, TimestampType, verify_batches
from tiered_log.format.kafka import encode_batch as kafka_batch
from tiered_log.format.kafka.batch import BatchHeader, iter_batches
from tiered_log.format.records import LegacyFormatError, is_legacy_batch, receive_batches
from tiered_log.local.files import write_atomic
from tiered_log.local.leader_epoch import EpochEntry, LeaderEpochCache
from tiered_log.partition import TieredLog
from tiered_log.topic_config import TOPIC_DEFAULTS, TopicConfig

from .helpers import read_all, store_files

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100)


def stored_headers(directory: Path) -> list[BatchHeader]:
    """The header of every batch of the log's store files, each batch verified."""
    return [h for p in store_files(directory) for h in verify_batches(p.read_bytes())]


def content(rec: Record) -> tuple[object, ...]:
    return (rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)


# ---- null and empty values ----------------------------------------------------------------

ODD_RECORDS = [
    ProducerRecord(None, timestamp=10),
    ProducerRecord(b"", timestamp=11),
    ProducerRecord(None, key=b"", timestamp=12),
    ProducerRecord(b"", key=b"k", headers=(("n", None), ("e", b"")), timestamp=13),
    ProducerRecord(b"v", key=None, timestamp=14),
]


def test_null_and_empty_values_round_trip_across_restarts(tmp_path: Path) -> None:
    """None and b"" values and keys append, read back distinct, and survive the recovery
    scan of the active segment and the index load of a sealed one."""
    want = [(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(ODD_RECORDS)]
    with Log.open(tmp_path, SMALL) as log:
        assert log.append_batch(ODD_RECORDS) == (0, 4)
        assert log.append(None, key=b"tomb", timestamp=15) == 5
        assert [content(r) for r in read_all(log)][:5] == want
    want.append((5, 15, b"tomb", None, ()))
    with Log.open(tmp_path, SMALL) as log:  # the active segment's recovery scan
        assert log.recovery.truncated_bytes == 0 and log.next_offset == 6
        assert [content(r) for r in read_all(log)] == want
        log.roll()
        log.append_batch([ProducerRecord(None, timestamp=16)])
    with Log.open(tmp_path, SMALL) as log:  # the first segment is sealed now
        assert log.segments()[0].sealed
        got = [content(r) for r in read_all(log)]
        assert got == [*want, (6, 16, None, None, ())]
        assert log.read(0).value is None and log.read(1).value == b""
        assert log.read(2).key == b"" and log.read(4).key is None


# ---- the stored bytes -----------------------------------------------------------------------


def test_segment_files_are_kafka_batches(tmp_path: Path) -> None:
    with Log.open(tmp_path, SMALL) as log:
        for i in range(0, 30, 3):
            log.append_batch(
                [
                    ProducerRecord(b"v%d" % j, key=b"k%d" % j, timestamp=1000 + j)
                    for j in range(i, i + 3)
                ]
            )
        assert len(log.segments()) == 2
    offsets = []
    for p in store_files(tmp_path):
        for b in iter_batches(p.read_bytes()):
            assert b.header.magic == 2 and b.header.records_count == 3
            assert b.header.partition_leader_epoch == -1  # a plain log has no epoch
            assert b.header.max_timestamp == 1000 + b.header.base_offset + 2
            for r in b.records():
                assert (r.key, r.value, r.timestamp) == (
                    b"k%d" % r.offset,
                    b"v%d" % r.offset,
                    1000 + r.offset,
                )
                offsets.append(r.offset)
    assert offsets == list(range(30))


# ---- torn tails -----------------------------------------------------------------------------


def test_a_torn_kafka_batch_is_cut_where_the_whole_batches_end(tmp_path: Path) -> None:
    """The last batch of the active segment cut at any byte (a compressed one from a
    client, then one the log encoded): recovery cuts the store exactly where the batch
    before it ends, and the log goes on from there."""
    client = kafka_batch(
        [NewRecord(b"x" * 300, key=b"c%d" % i, timestamp=2000 + i) for i in range(20)],
        compression=Compression.GZIP,
    )
    for tail in ("client", "encoded"):
        d = tmp_path / tail
        with Log.open(d, LogConfig(segment_bytes=1 << 20)) as log:
            log.append_batch([ProducerRecord(b"a%d" % i, timestamp=1000 + i) for i in range(5)])
            log.append_batch([ProducerRecord(None, key=b"gone")])
            if tail == "client":
                log.append_batch(receive_batches(client, 1 << 20))
            else:
                log.append_batch([ProducerRecord(b"b%d" % i, key=b"k") for i in range(9)])
            nxt = log.next_offset
        store = store_files(d)[0]
        whole = store.read_bytes()
        headers = verify_batches(whole)
        last = headers[-1]
        assert last.end == len(whole) and last.next_offset == nxt
        cuts = sorted({*range(1, last.size, 7), last.size - 1, 61, 60, 62})
        for keep in cuts:
            store.write_bytes(whole[: last.position + keep])
            with Log.open(d, LogConfig(segment_bytes=1 << 20)) as log:
                assert log.recovery.truncated_bytes == keep, keep
                assert store.stat().st_size == last.position, keep
                assert log.next_offset == last.base_offset
                recs = read_all(log)
                assert [r.offset for r in recs] == list(range(6))
                assert recs[5].value is None and recs[5].key == b"gone"
        store.write_bytes(whole)
        with Log.open(d, LogConfig(segment_bytes=1 << 20)) as log:
            assert log.recovery.truncated_bytes == 0 and log.next_offset == nxt


# ---- leader epochs and LogAppendTime in the batch header -----------------------------------


def open_tiered(path: Path) -> TieredLog:
    return TieredLog(path, log_id="orders-0", config=SMALL, start_shipper=False, replicated=True)


def test_the_leader_stamps_its_epoch_into_every_batch_and_a_follower_keeps_it(
    tmp_path: Path,
) -> None:
    leader = open_tiered(tmp_path / "a")
    follower = open_tiered(tmp_path / "b")
    leader.append(b"before any epoch")
    assert leader.assign_leader_epoch(3) == 1
    leader.append_batch([ProducerRecord(b"r%d" % i) for i in range(4)])
    client = kafka_batch([NewRecord(b"c", timestamp=5)], partition_leader_epoch=99)
    leader.append_batch(receive_batches(client, 1 << 20))  # a client's epoch is replaced
    assert leader.assign_leader_epoch(7) == 6
    leader.append(None, key=b"k")
    leader.roll()
    leader.append_batch([ProducerRecord(b"r%d" % i) for i in range(3)])
    epochs = [(h.base_offset, h.partition_leader_epoch) for h in stored_headers(tmp_path / "a")]
    assert epochs == [(0, -1), (1, 3), (5, 3), (6, 7), (7, 7)]
    page = leader.read_batches(0, 100, 1 << 20)
    follower.assign_leader_epoch(1)  # a stale epoch of its own: the leader's bytes stay
    with pytest.raises(Exception, match="below this log's latest epoch"):
        follower.append_replica(page.data, [(0, 0)])
    follower.reset_replica(0)
    follower.append_replica(page.data, leader.leader_epoch_entries())
    assert [(h.base_offset, h.partition_leader_epoch) for h in stored_headers(tmp_path / "b")] == (
        epochs
    )
    a = b"".join(p.read_bytes() for p in store_files(tmp_path / "a"))
    b = b"".join(p.read_bytes() for p in store_files(tmp_path / "b"))
    assert a == b
    assert follower.leader_epoch_entries() == [EpochEntry(3, 1), EpochEntry(7, 6)]
    leader.close()
    follower.close()


def test_truncating_inside_a_batch_keeps_its_epoch(tmp_path: Path) -> None:
    log = open_tiered(tmp_path)
    log.assign_leader_epoch(4)
    log.append_batch([ProducerRecord(b"r%d" % i, timestamp=100 + i) for i in range(6)])
    log.truncate(3)
    log.close()
    (header,) = stored_headers(tmp_path)
    assert (header.base_offset, header.records_count, header.partition_leader_epoch) == (0, 3, 4)
    with Log.open(tmp_path, SMALL) as plain:
        assert [(r.offset, r.value, r.timestamp) for r in read_all(plain)] == [
            (i, b"r%d" % i, 100 + i) for i in range(3)
        ]


def test_log_append_time_writes_the_clock_into_the_batch(tmp_path: Path) -> None:
    cfg = LogConfig.of(TopicConfig.model_validate({"message_timestamp_type": "LogAppendTime"}))
    assert cfg.log_append_time and not LogConfig.of(TOPIC_DEFAULTS).log_append_time
    before = time.time_ns() // 1_000_000
    with Log.open(tmp_path, cfg) as log:
        log.append_batch([ProducerRecord(b"a", timestamp=5), ProducerRecord(b"b")])
        client = kafka_batch([NewRecord(b"c", timestamp=7), NewRecord(None, timestamp=9)])
        log.append_batch(receive_batches(client, 1 << 20))
        after = time.time_ns() // 1_000_000
        stamps = [r.timestamp for r in read_all(log)]
        assert len(stamps) == 4 and all(before <= t <= after for t in stamps)
        assert log.offset_for_timestamp(before) == 0 and log.offset_for_timestamp(after + 1) is None
    for h in stored_headers(tmp_path):
        assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert before <= h.max_timestamp <= after
    with Log.open(tmp_path, cfg) as log:  # the stored batches say so: no config needed
        assert [r.timestamp for r in read_all(log)] == stamps
    with Log.open(tmp_path / "create", LogConfig()) as log:
        log.append_batch([ProducerRecord(b"a", timestamp=5)])
        assert log.read(0).timestamp == 5
    assert stored_headers(tmp_path / "create")[0].timestamp_type == TimestampType.CREATE_TIME


# ---- the former format ----------------------------------------------------------------------


def legacy_record(o: int) -> legacy.LegacyRecord:
    return legacy.LegacyRecord(
        o,
        1_000_000 + 10 * o,
        None if o % 3 else b"key-%d" % o,
        b"value-%d-" % o + bytes(o % 40),
        (("h", b"%d" % o), ("null", None)) if o % 4 == 0 else (),
    )


def write_legacy_log(
    directory: Path, segments: list[list[int]], *, torn: bool = False
) -> list[legacy.LegacyRecord]:
    """A log directory as the former code wrote it: one store per entry of ``segments``
    (the sizes of its batches), index files for the sealed ones, a torn batch at the end
    of the last one when ``torn``. Returns the records, in order."""
    directory.mkdir(parents=True, exist_ok=True)
    out: list[legacy.LegacyRecord] = []
    o = 0
    for i, sizes in enumerate(segments):
        base = o
        data = b""
        idx = SegmentIndex()
        for n in sizes:
            recs = [legacy_record(x) for x in range(o, o + n)]
            if not data:
                idx.add_offset(0, 0)
                idx.add_time(recs[0].timestamp, 0)
            data += legacy.encode_legacy_batch(o, recs)
            out += recs
            o += n
        if i == len(segments) - 1:
            if torn:
                data += legacy.encode_legacy_batch(o, [legacy_record(o)])[:-5]
        else:
            idx.add_time(out[-1].timestamp, o - 1 - base)
            write_atomic(
                naming.segment_path(directory, base, naming.INDEX_SUFFIX), idx.encode_offsets()
            )
            write_atomic(
                naming.segment_path(directory, base, naming.TIMEINDEX_SUFFIX), idx.encode_times()
            )
        naming.segment_path(directory, base, naming.LOG_SUFFIX).write_bytes(data)
    return out


def test_a_directory_in_the_former_format_is_refused_at_open(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    log_dir = data_dir / naming.TOPICS_DIR / "orders" / "0"
    write_legacy_log(log_dir, [[3, 4], [5]], torn=True)
    single = tmp_path / "single"
    write_legacy_log(single, [[2]])  # only an active segment: must not be cut as torn
    before = {p: p.read_bytes() for d in (log_dir, single) for p in store_files(d)}
    for d, where in ((log_dir, data_dir), (single, single)):
        for opener in (Log.open, Log.open_read_only):
            with pytest.raises(LegacyFormatError) as err:
                opener(d)
            message = str(err.value)
            assert "\n" not in message and "old batch format ('TB'" in message
            assert f"tiered-log migrate {where}" in message
        with pytest.raises(CorruptRecordError, match="tiered-log migrate"):
            open_tiered(d)
    assert {p: p.read_bytes() for p in before} == before  # nothing cut, nothing rewritten


def test_migrate_rewrites_a_data_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    p0 = data_dir / naming.TOPICS_DIR / "orders" / "0"
    p1 = data_dir / naming.TOPICS_DIR / "orders" / "1"
    p2 = data_dir / naming.TOPICS_DIR / "empty" / "0"
    want0 = write_legacy_log(p0, [[3, 4, 1], [5, 2], [6, 1]], torn=True)
    want1 = write_legacy_log(p1, [[4, 3]])
    p2.mkdir(parents=True)
    # partition 1: a truncation inside its second batch that the former code left half
    # done (the store still whole, the cut saved): offsets 4 and 5 kept of 4..6
    cut_at = len(legacy.encode_legacy_batch(0, want1[:4]))
    head = legacy.encode_legacy_batch(4, want1[4:6])
    naming.segment_path(p1, 0, naming.CUT_SUFFIX).write_bytes(cut_at.to_bytes(8, "little") + head)
    want1 = want1[:6]
    LeaderEpochCache(p0).assign(0, 0)
    LeaderEpochCache(p0).assign(2, 10)
    epochs_file = (p0 / naming.LEADER_EPOCH_FILE).read_bytes()

    assert main(["migrate", str(data_dir)]) == 0
    out, err = capsys.readouterr()
    assert "topics/orders/0: 3 segments rewritten, 22 records" in out
    assert "torn tail" in out and "topics/orders/1: 1 segment rewritten, 6 records" in out
    assert "migrated 3 logs: 4 segments and 28 records rewritten" in out
    assert err == ""

    for d, want in ((p0, want0), (p1, want1)):
        assert not list(d.glob("*" + naming.CUT_SUFFIX)) and not list(d.glob("*.tmp"))
        with Log.open(d) as log:
            assert log.recovery.truncated_bytes == 0 and log.recovery.rebuilt_indexes == 0
            got = [content(r) for r in read_all(log)]
            assert got == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in want]
            assert log.offset_for_timestamp(want[3].timestamp) == 3
    headers = stored_headers(p0)
    assert [h.partition_leader_epoch for h in headers] == [0, 0, 0, 0, 2, 2, 2]
    assert [h.base_offset for h in headers] == [0, 3, 7, 8, 13, 15, 21]
    assert (p0 / naming.LEADER_EPOCH_FILE).read_bytes() == epochs_file
    assert {h.partition_leader_epoch for h in stored_headers(p1)} == {-1}

    assert main(["migrate", str(data_dir)]) == 0  # again: nothing left to do
    out, _ = capsys.readouterr()
    assert out.count("already in the Kafka format") == 3
    assert "0 segments and 0 records rewritten" in out


def test_migrate_refuses_a_running_service_and_a_stranger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    log_dir = data_dir / naming.TOPICS_DIR / "t" / "0"
    write_legacy_log(log_dir, [[2, 2]])
    before = store_files(log_dir)[0].read_bytes()
    fd = os.open(data_dir / naming.DATA_DIR_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running service holds it
        assert main(["migrate", str(data_dir)]) == 1
        _, err = capsys.readouterr()
        assert err.count("\n") == 1 and "stop the service" in err
    finally:
        os.close(fd)
    assert store_files(log_dir)[0].read_bytes() == before
    (tmp_path / "other").mkdir()
    for stranger in (tmp_path / "other", tmp_path / "missing"):
        assert main(["migrate", str(stranger)]) == 1
        _, err = capsys.readouterr()
        assert err.count("\n") == 1 and str(stranger) in err
    assert main(["migrate", str(log_dir)]) == 0  # one log directory works too
    with Log.open(log_dir) as log:
        assert [r.offset for r in read_all(log)] == [0, 1, 2, 3]


def test_migrate_stops_at_a_damaged_sealed_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir = tmp_path / "log"
    write_legacy_log(log_dir, [[2, 2], [3], [1]])
    stores = store_files(log_dir)
    data = bytearray(stores[1].read_bytes())
    data[-2] ^= 0x10
    stores[1].write_bytes(bytes(data))
    assert main(["migrate", str(log_dir)]) == 1
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and stores[1].name in err and "damaged" in err
    assert stores[1].read_bytes() == data  # left as it was
    assert is_legacy_batch(stores[2].read_bytes())
    assert not is_legacy_batch(stores[0].read_bytes())  # done before it
